#include "flywheel/locked_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace megasched::flywheel {
namespace {

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

// "not a regular file" for an existing path that is a directory, a device or a pipe.
std::string not_a_log(const std::string& path, const struct stat& st) {
  const char* what = S_ISDIR(st.st_mode)                          ? "a directory"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISFIFO(st.st_mode)                       ? "a pipe"
                                                                  : "not a regular file";
  return path + " is " + what + ", not a log file";
}

// Moves the torn last line of the locked log `fd` (size `size`, not ending in a newline) to the
// quarantine file and cuts the log back to its last complete line. Returns the new size, or -1
// with *error (the log is then left as it was).
off_t quarantine_torn_tail(int fd, const std::string& path, off_t size, std::string* error) {
  off_t start = size;
  char buffer[4096];
  while (start > 0) {
    const off_t from = std::max<off_t>(0, start - static_cast<off_t>(sizeof buffer));
    const ssize_t n = ::pread(fd, buffer, static_cast<size_t>(start - from), from);
    if (n != start - from) {
      if (error) *error = "cannot read " + path + ": " + std::strerror(errno);
      return -1;
    }
    const void* nl = ::memrchr(buffer, '\n', static_cast<size_t>(n));
    if (nl != nullptr) {
      start = from + (static_cast<const char*>(nl) - buffer) + 1;
      break;
    }
    start = from;
  }
  std::string fragment(static_cast<size_t>(size - start), '\0');
  if (::pread(fd, fragment.data(), fragment.size(), start) !=
      static_cast<ssize_t>(fragment.size())) {
    if (error) *error = "cannot read " + path + ": " + std::strerror(errno);
    return -1;
  }
  const std::string quarantine = quarantine_path(path);
  const int q = ::open(quarantine.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (q < 0 || !write_all(q, fragment + "\n") || ::fsync(q) != 0) {
    if (error)
      *error = "cannot quarantine the torn last line of " + path + " in " + quarantine + ": " +
               std::strerror(errno);
    if (q >= 0) ::close(q);
    return -1;
  }
  ::close(q);
  if (::ftruncate(fd, start) != 0) {
    if (error) *error = "cannot cut the torn last line off " + path + ": " + std::strerror(errno);
    return -1;
  }
  return start;
}

}  // namespace

LockedFd::LockedFd(const std::string& path, int flags, int lock_op) {
  // Each retry follows a replacement, which is another writer's progress: no bound is needed.
  for (;;) {
    fd_ = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    while (::flock(fd_, lock_op) != 0) {
      if (errno != EINTR) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
    }
    struct stat held {
    }, now{};
    if (::fstat(fd_, &held) != 0 || ::stat(path.c_str(), &now) != 0 ||
        (held.st_dev == now.st_dev && held.st_ino == now.st_ino))
      return;
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
    fd_ = -1;
  }
}

LockedFd::~LockedFd() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::weakly_canonical(a, ec) == std::filesystem::weakly_canonical(b, ec) && !ec)
    return true;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

std::string quarantine_path(const std::string& path) { return path + ".torn"; }

bool repair_torn_tail(const std::string& path, bool* repaired, std::string* error) {
  if (repaired) *repaired = false;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return true;  // nothing to repair
  if (!S_ISREG(st.st_mode)) {
    if (error) *error = "cannot repair " + not_a_log(path, st);
    return false;
  }
  LockedFd file(path, O_RDWR, LOCK_EX);
  if (file.fd() < 0 || ::fstat(file.fd(), &st) != 0) {
    if (error) *error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  char last = '\n';
  if (st.st_size == 0 || ::pread(file.fd(), &last, 1, st.st_size - 1) != 1 || last == '\n')
    return true;
  if (quarantine_torn_tail(file.fd(), path, st.st_size, error) < 0) return false;
  if (repaired) *repaired = true;
  return true;
}

WorkloadLock::~WorkloadLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

bool WorkloadLock::acquire(const std::string& path, const std::string& key, std::string* error,
                           std::string* warning) {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (error) *error = "cannot use " + not_a_log(path, st);
    return false;
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (error) *error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  uint64_t h = 14695981039346656037ull;  // FNV-1a of the key picks the byte
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = static_cast<off_t>((uint64_t{1} << 62) + (h & ((uint64_t{1} << 40) - 1)));
  lock.l_len = 1;
  while (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    if (errno == EINTR) continue;
    const int code = errno;
    ::close(fd);
    if (code == EINVAL || code == ENOLCK || code == ENOSYS || code == EOPNOTSUPP) {
      if (warning)
        *warning = path + ": this file system cannot lock it (" + std::strerror(code) +
                   "): nothing stops a second loop of " + key + " on it";
      return true;
    }
    if (error)
      *error = code == EAGAIN || code == EACCES
                   ? path + " is in use by another megasched loop of " + key +
                         " (wait for it to finish, or give this one other --results and --corpus)"
                   : "cannot lock " + path + ": " + std::strerror(code);
    return false;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  return true;
}

bool append_lines_locked(const std::string& path, const std::string& header,
                         const std::vector<std::string>& lines, std::string* error) {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  struct stat st {};
  // Checked before open(): opening a pipe for writing would wait for a reader.
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (error) *error = "cannot append to " + not_a_log(path, st);
    return false;
  }
  LockedFd file(path, O_RDWR | O_CREAT | O_APPEND, LOCK_EX);
  if (file.fd() < 0) {
    if (error) *error = "cannot open " + path + " for appending: " + std::strerror(errno);
    return false;
  }
  if (::fstat(file.fd(), &st) != 0) {
    if (error) *error = "cannot stat " + path + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    if (error) *error = "cannot append to " + not_a_log(path, st);
    return false;
  }
  off_t size = st.st_size;
  char last = '\n';
  if (size > 0 && ::pread(file.fd(), &last, 1, size - 1) == 1 && last != '\n') {
    // A previous writer killed mid-line: its fragment goes to quarantine before we append.
    size = quarantine_torn_tail(file.fd(), path, size, error);
    if (size < 0) return false;
  }
  std::string out;
  if (size == 0 && !header.empty()) out += header + "\n";
  for (const std::string& line : lines) out += line + "\n";
  if (!write_all(file.fd(), out)) {
    if (error) *error = "cannot write " + path + ": " + std::strerror(errno);
    // Leave no torn line behind a failed write (a full disk): cut back what did get written.
    if (::ftruncate(file.fd(), size) != 0) { /* the next append quarantines it */
    }
    return false;
  }
  return true;
}

namespace {

/// The complete lines of the file open as `fd` (held under an exclusive lock) of *size bytes, its
/// torn last line quarantined first (*size is then the whole lines' size). False with *error.
bool read_whole_locked(int fd, const std::string& path, off_t* size,
                       std::vector<std::string>* lines, std::string* error) {
  char last = '\n';
  if (*size > 0 && ::pread(fd, &last, 1, *size - 1) == 1 && last != '\n') {
    *size = quarantine_torn_tail(fd, path, *size, error);
    if (*size < 0) return false;
  }
  std::string content(static_cast<size_t>(*size), '\0');
  if (*size > 0 && ::pread(fd, content.data(), content.size(), 0) != *size) {
    if (error) *error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  for (size_t start = 0; start < content.size();) {
    const size_t end = content.find('\n', start);
    lines->push_back(content.substr(start, end - start));
    start = end + 1;
  }
  return true;
}

}  // namespace

bool append_lines_locked_after_read(const std::string& path, const LinesFromExisting& make_lines,
                                    std::string* error) {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (error) *error = "cannot append to " + not_a_log(path, st);
    return false;
  }
  LockedFd file(path, O_RDWR | O_CREAT | O_APPEND, LOCK_EX);
  if (file.fd() < 0 || ::fstat(file.fd(), &st) != 0) {
    if (error) *error = "cannot open " + path + " for appending: " + std::strerror(errno);
    return false;
  }
  off_t size = st.st_size;
  std::vector<std::string> existing;
  if (!read_whole_locked(file.fd(), path, &size, &existing, error)) return false;
  const std::optional<std::vector<std::string>> lines = make_lines(existing, error);
  if (!lines) return false;
  std::string out;
  for (const std::string& line : *lines) out += line + "\n";
  if (!write_all(file.fd(), out) || ::fsync(file.fd()) != 0) {
    if (error) *error = "cannot write " + path + ": " + std::strerror(errno);
    if (::ftruncate(file.fd(), size) != 0) { /* the next append quarantines it */
    }
    return false;
  }
  return true;
}

bool rewrite_lines_locked(const std::string& path, const LinesFromExisting& keep_lines,
                          std::string* error) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (error) *error = "cannot rewrite " + path + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    if (error) *error = "cannot rewrite " + not_a_log(path, st);
    return false;
  }
  LockedFd file(path, O_RDWR, LOCK_EX);
  if (file.fd() < 0 || ::fstat(file.fd(), &st) != 0) {
    if (error) *error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  off_t size = st.st_size;
  std::vector<std::string> existing;
  if (!read_whole_locked(file.fd(), path, &size, &existing, error)) return false;
  const std::optional<std::vector<std::string>> lines = keep_lines(existing, error);
  if (!lines) return false;
  if (*lines == existing) return true;  // nothing to replace
  std::string out;
  for (const std::string& line : *lines) out += line + "\n";
  const std::string temp = path + ".rewrite.tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st.st_mode & 0777);
  if (fd < 0) {
    if (error) *error = "cannot create " + temp + ": " + std::strerror(errno);
    return false;
  }
  const bool written = write_all(fd, out) && ::fsync(fd) == 0;
  const int code = errno;
  ::close(fd);
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    if (error) *error = "cannot replace " + path + ": " + std::strerror(written ? errno : code);
    ::unlink(temp.c_str());
    return false;
  }
  // The rename itself reaches the disk with the folder's entry.
  const std::string parent = std::filesystem::path(path).parent_path().string();
  const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return true;
}

LinesRead read_lines_shared(const std::string& path) {
  LinesRead result;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) result.error = "cannot read " + path + ": " + std::strerror(errno);
    result.exists = errno != ENOENT;
    return result;
  }
  result.exists = true;
  if (!S_ISREG(st.st_mode)) {  // /dev/zero would be read forever, a pipe consumed
    result.error = "cannot read " + not_a_log(path, st);
    return result;
  }
  LockedFd file(path, O_RDONLY, LOCK_SH);
  if (file.fd() < 0) {
    result.error = "cannot read " + path + ": " + std::strerror(errno);
    return result;
  }
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
