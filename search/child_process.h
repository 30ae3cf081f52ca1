// Child processes the harness talks to over pipes: the GPU worker (long-lived, one JSON line in,
// one out) and an external proposer (one shot: context on stdin, candidates on stdout).
//
// The child runs `/bin/sh -c command` in its own process group, so a kill after a hang or a
// timeout takes its descendants too. Reads wait with a deadline (poll(2)); the child's stderr is
// drained alongside and its tail kept for the crash note. SIGPIPE is ignored process-wide once a
// child is started: a write to a dead child is an error return, not the end of the loop.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>

namespace megasched::search {

/// `text` as one word for /bin/sh (single-quoted).
std::string shell_quote(const std::string& text);

class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// Starts `/bin/sh -c command`. False (with *error) when fork or the pipes fail.
  bool start(const std::string& command, std::string* error);
  bool running() const { return pid_ > 0; }

  /// Writes `line` plus a newline to the child's stdin. False when the child is gone.
  bool write_line(const std::string& line);
  /// Closes the child's stdin (end of input).
  void close_stdin();

  enum class ReadStatus { kLine, kEof, kTimeout, kCancelled };
  /// Reads one line of the child's stdout (newline stripped), waiting at most `timeout_s`, and
  /// giving up (kCancelled) within kCancelPoll_s of `cancel` being set.
  ReadStatus read_line(double timeout_s, std::string* line,
                       const std::atomic<bool>* cancel = nullptr);
  /// Reads the child's stdout to end of file, waiting at most `timeout_s` in all (or until
  /// `cancel` is set).
  ReadStatus read_all(double timeout_s, std::string* text,
                      const std::atomic<bool>* cancel = nullptr);
  /// How often a read looks at its cancel flag.
  static constexpr double kCancelPoll_s = 0.05;

  /// Kills the process group (SIGKILL) and reaps the child. Safe to call twice.
  void kill();
  /// Waits up to `timeout_s` for the child to exit by itself, then kills it. Returns how it
  /// ended: "exit 0", "exit 3", "signal 11 (Segmentation fault)", "killed".
  std::string finish(double timeout_s);
  /// The exit code once finish() saw the child exit by itself; -1 otherwise (a signal, a kill).
  int exit_code() const { return exit_code_; }
  /// The last few KiB the child wrote to stderr.
  const std::string& stderr_tail() const { return stderr_tail_; }

 private:
  // Polls stdout and stderr until stdout has data or the deadline passes; false on timeout.
  bool pump(double deadline_s);
  // Pumps until stdout has data, the deadline passes (kTimeout) or `cancel` is set (kCancelled);
  // kLine when there is data to look at.
  ReadStatus wait_for_stdout(double deadline_s, const std::atomic<bool>* cancel);
  std::string describe_status(int status) const;

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  bool stdout_eof_ = false;
  std::string stdout_buffer_;
  std::string stderr_tail_;
  std::string exit_description_;
  int exit_code_ = -1;
};

/// Monotonic seconds (CLOCK_MONOTONIC).
double monotonic_seconds();

}  // namespace megasched::search
