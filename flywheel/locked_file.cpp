#include "flywheel/locked_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace megasched::flywheel {
namespace {

// Holds an open descriptor and its flock until destruction.
class LockedFd {
 public:
  LockedFd(const std::string& path, int flags, int lock_op) {
    fd_ = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    while (::flock(fd_, lock_op) != 0) {
      if (errno != EINTR) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
    }
  }
  ~LockedFd() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  LockedFd(const LockedFd&) = delete;
  LockedFd& operator=(const LockedFd&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool append_lines_locked(const std::string& path, const std::string& header,
                         const std::vector<std::string>& lines, std::string* error) {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  LockedFd file(path, O_RDWR | O_CREAT | O_APPEND, LOCK_EX);
  if (file.fd() < 0) {
    if (error) *error = "cannot open " + path + " for appending: " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(file.fd(), &st) != 0) {
    if (error) *error = "cannot stat " + path + ": " + std::strerror(errno);
    return false;
  }
  std::string out;
  if (st.st_size == 0) {
    if (!header.empty()) out += header + "\n";
  } else {
    // A previous writer killed mid-line left no newline: start our lines on a fresh one.
    char last = '\n';
    if (::pread(file.fd(), &last, 1, st.st_size - 1) == 1 && last != '\n') out += "\n";
  }
  for (const std::string& line : lines) out += line + "\n";
  if (!write_all(file.fd(), out)) {
    if (error) *error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

LinesRead read_lines_shared(const std::string& path) {
  LinesRead result;
  LockedFd file(path, O_RDONLY, LOCK_SH);
  if (file.fd() < 0) return result;
  result.exists = true;
  std::string content;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(file.fd(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    content.append(buffer, static_cast<size_t>(n));
  }
  size_t start = 0;
  int number = 0;
  while (start < content.size()) {
    size_t end = content.find('\n', start);
    ++number;
    if (end == std::string::npos) {
      result.truncated_tail = true;
      result.torn_line_numbers.push_back(number);
      break;
    }
    result.lines.push_back(content.substr(start, end - start));
    result.line_numbers.push_back(number);
    start = end + 1;
  }
  return result;
}

}  // namespace megasched::flywheel
