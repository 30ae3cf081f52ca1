#include "flywheel/gzip_lines.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#ifndef MS_HAVE_ZLIB
#define MS_HAVE_ZLIB 0
#endif
#if MS_HAVE_ZLIB
#include <zlib.h>
#endif

namespace megasched::flywheel {
namespace {

constexpr const char* kNoZlib =
    "this megasched was built without zlib, so it cannot read or write the gzip files of the "
    "corpus archive (install zlib1g-dev and configure the build again)";

}  // namespace

bool zlib_available() { return MS_HAVE_ZLIB != 0; }

LinesRead read_gz_lines(const std::string& path) {
  LinesRead out;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) out.error = "cannot read " + path + ": " + std::strerror(errno);
    out.exists = errno != ENOENT;
    return out;
  }
  out.exists = true;
  if (!S_ISREG(st.st_mode)) {
    out.error = "cannot read " + path + ": not a regular file";
    return out;
  }
#if MS_HAVE_ZLIB
  LockedFd file(path, O_RDONLY, LOCK_SH);
  if (file.fd() < 0) {
    out.error = "cannot read " + path + ": " + std::strerror(errno);
    return out;
  }
  // gzdopen owns a descriptor of its own; the lock stays on `file`'s.
  const int fd = ::dup(file.fd());
  gzFile gz = fd < 0 ? nullptr : gzdopen(fd, "rb");
  if (gz == nullptr) {
    if (fd >= 0) ::close(fd);
    out.error = "cannot read " + path + ": " + std::strerror(errno);
    return out;
  }
  gzbuffer(gz, 1 << 17);
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(gz, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  if (!text.empty() && gzdirect(gz) == 1) {  // zlib reads plain bytes through as they are
    out.error = "cannot read " + path + ": not gzip data";
    gzclose(gz);
    return out;
  }
  int code = Z_OK;
  const char* message = gzerror(gz, &code);
  if (n < 0 || code != Z_OK) {  // Z_BUF_ERROR: the data ends inside a member
    out.error = "cannot read " + path + ": " + (message ? message : "damaged gzip data") +
                " (a gzip file cut short or not gzip data)";
    gzclose(gz);
    return out;
  }
  gzclose(gz);
  int number = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    ++number;
    if (end == std::string::npos) {
      out.truncated_tail = true;
      break;
    }
    out.lines.push_back(text.substr(start, end - start));
    out.line_numbers.push_back(number);
    start = end + 1;
  }
#else
  out.error = std::string("cannot read ") + path + ": " + kNoZlib;
#endif
  return out;
}

bool append_gz_lines(const std::string& path, const std::vector<std::string>& lines,
                     std::string* error) {
#if MS_HAVE_ZLIB
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (error) *error = "cannot append to " + path + ": not a regular file";
    return false;
  }
  LockedFd file(path, O_RDWR | O_CREAT | O_APPEND, LOCK_EX);
  if (file.fd() < 0 || ::fstat(file.fd(), &st) != 0) {
    if (error) *error = "cannot open " + path + " for appending: " + std::strerror(errno);
    return false;
  }
  if (lines.empty()) return true;
  const off_t size = st.st_size;
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  const int fd = ::dup(file.fd());
  gzFile gz = fd < 0 ? nullptr : gzdopen(fd, "ab9");
  bool ok = gz != nullptr;
  if (!ok && fd >= 0) ::close(fd);
  for (size_t done = 0; ok && done < text.size();) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(text.size() - done, 1u << 20));
    ok = gzwrite(gz, text.data() + done, chunk) == static_cast<int>(chunk);
    done += chunk;
  }
  if (gz != nullptr && gzclose(gz) != Z_OK) ok = false;
  if (!ok || ::fsync(file.fd()) != 0) {
    if (error) *error = "cannot write " + path + ": " + std::strerror(errno);
    if (::ftruncate(file.fd(), size) != 0) { /* a damaged tail: the reader reports it */
    }
    return false;
  }
  return true;
#else
  (void)lines;
  if (error) *error = "cannot write " + path + ": " + kNoZlib;
  return false;
#endif
}

}  // namespace megasched::flywheel
