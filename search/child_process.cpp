#include "search/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace megasched::search {

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
namespace {

constexpr size_t kStderrTailBytes = 4096;

void close_fd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

}  // namespace

double monotonic_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

ChildProcess::~ChildProcess() { kill(); }

bool ChildProcess::start(const std::string& command, std::string* error) {
  kill();
  ::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) {
    if (error) *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    if (error) *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    for (int fd : {in[0], in[1], out[0], out[1]}) ::close(fd);
    if (error) *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
    if (error) *error = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also in the parent, so a kill right away cannot miss the group
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  pid_ = pid;
  stdin_fd_ = in[1];
  stdout_fd_ = out[0];
  stderr_fd_ = err[0];
  stdout_eof_ = false;
  stdout_buffer_.clear();
  stderr_tail_.clear();
  exit_description_.clear();
  exit_code_ = -1;
  return true;
}

bool ChildProcess::write_line(const std::string& line) {
  if (stdin_fd_ < 0) return false;
  std::string bytes = line + "\n";
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(stdin_fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void ChildProcess::close_stdin() { close_fd(&stdin_fd_); }

bool ChildProcess::pump(double deadline_s) {
  for (;;) {
    double left = deadline_s - monotonic_seconds();
    if (left <= 0) return false;
    pollfd fds[2];
    nfds_t count = 0;
    if (stdout_fd_ >= 0 && !stdout_eof_) fds[count++] = {stdout_fd_, POLLIN, 0};
    if (stderr_fd_ >= 0) fds[count++] = {stderr_fd_, POLLIN, 0};
    if (count == 0) return true;
    int timeout_ms = static_cast<int>(left * 1000.0) + 1;
    int ready = ::poll(fds, count, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (ready == 0) continue;
    bool got_stdout = false;
    char buffer[65536];
    for (nfds_t i = 0; i < count; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (fds[i].fd == stdout_fd_) {
        got_stdout = true;
        if (n <= 0) {
          stdout_eof_ = true;
        } else {
          stdout_buffer_.append(buffer, static_cast<size_t>(n));
        }
      } else if (n <= 0) {
        close_fd(&stderr_fd_);
      } else {
        stderr_tail_.append(buffer, static_cast<size_t>(n));
        if (stderr_tail_.size() > kStderrTailBytes)
          stderr_tail_.erase(0, stderr_tail_.size() - kStderrTailBytes);
      }
    }
    if (got_stdout) return true;
  }
}

ChildProcess::ReadStatus ChildProcess::wait_for_stdout(double deadline_s,
                                                       const std::atomic<bool>* cancel) {
  for (;;) {
    if (cancel && cancel->load()) return ReadStatus::kCancelled;
    const double now = monotonic_seconds();
    if (now >= deadline_s) return ReadStatus::kTimeout;
    if (pump(cancel ? std::min(deadline_s, now + kCancelPoll_s) : deadline_s))
      return ReadStatus::kLine;
  }
}

ChildProcess::ReadStatus ChildProcess::read_line(double timeout_s, std::string* line,
                                                 const std::atomic<bool>* cancel) {
  const double deadline = monotonic_seconds() + timeout_s;
  for (;;) {
    size_t newline = stdout_buffer_.find('\n');
    if (newline != std::string::npos) {
      *line = stdout_buffer_.substr(0, newline);
      stdout_buffer_.erase(0, newline + 1);
      return ReadStatus::kLine;
    }
    if (stdout_eof_ || stdout_fd_ < 0) return ReadStatus::kEof;
    const ReadStatus waited = wait_for_stdout(deadline, cancel);
    if (waited != ReadStatus::kLine) return waited;
  }
}

ChildProcess::ReadStatus ChildProcess::read_all(double timeout_s, std::string* text,
                                                const std::atomic<bool>* cancel) {
  const double deadline = monotonic_seconds() + timeout_s;
  while (!stdout_eof_ && stdout_fd_ >= 0) {
    const ReadStatus waited = wait_for_stdout(deadline, cancel);
    if (waited != ReadStatus::kLine) return waited;
  }
  *text = stdout_buffer_;
  stdout_buffer_.clear();
  return ReadStatus::kEof;
}

std::string ChildProcess::describe_status(int status) const {
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    // A shell reports a child killed by signal N as exit 128 + N.
    if (code > 128 && code < 128 + 65)
      return "exit " + std::to_string(code) + " (signal " + std::to_string(code - 128) + ", " +
             ::strsignal(code - 128) + ")";
    return "exit " + std::to_string(code);
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  return "ended";
}

void ChildProcess::kill() {
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    if (exit_description_.empty()) exit_description_ = "killed";
    pid_ = -1;
  }
  close_fd(&stdin_fd_);
  close_fd(&stdout_fd_);
  close_fd(&stderr_fd_);
}

std::string ChildProcess::finish(double timeout_s) {
  if (pid_ <= 0) return exit_description_.empty() ? "not running" : exit_description_;
  close_stdin();
  const double deadline = monotonic_seconds() + timeout_s;
  for (;;) {
    int status = 0;
    pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      exit_description_ = describe_status(status);
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      // Reap any stragglers of the group; the leader is gone.
      ::kill(-pid_, SIGKILL);
      pid_ = -1;
      // Drain what is left of stderr for the crash note.
      pump(monotonic_seconds() + 0.05);
      close_fd(&stdout_fd_);
      close_fd(&stderr_fd_);
      return exit_description_;
    }
    if (monotonic_seconds() >= deadline) {
      exit_description_ = "killed after " + std::to_string(timeout_s) + " s";
      kill();
      return exit_description_;
    }
    ::usleep(5000);
  }
}

}  // namespace megasched::search
