// Append-only line files shared by several processes: results.tsv and corpus.jsonl.
//
// Every append takes an exclusive flock(2) on the file for the whole write, so two loops writing
// one file never interleave or lose lines. The header (results.tsv) is written by whichever
// appender finds the file empty, under the same lock, so it appears exactly once. A process
// killed in the middle of a write leaves a last line without its newline; readers report it and
// skip it, and the next appender repairs the file under its lock: it moves the torn line into
// quarantine (`<path>.torn`, one line per fragment, nothing is deleted) and cuts the log back to
// its last complete line, so no reader ever takes the fragment, continued by a later write, for a
// record. Only regular files are logs: a directory, a device (/dev/zero) or a pipe is refused.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace megasched::flywheel {

/// An open descriptor holding a flock(2) until destruction. When the file was replaced while the
/// lock was awaited (rewrite_lines_locked renames a new file over the path while it holds the
/// lock), the lock would be on the old file, which no reader sees any more: it opens the path
/// again. fd() < 0 (errno set) when the file cannot be opened or locked.
class LockedFd {
 public:
  LockedFd(const std::string& path, int flags, int lock_op);
  ~LockedFd();
  LockedFd(const LockedFd&) = delete;
  LockedFd& operator=(const LockedFd&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

/// True when `a` and `b` name one file (the same path, or two paths to one existing file).
bool same_file(const std::string& a, const std::string& b);

/// Appends `lines` (each without its trailing newline) to `path` under an exclusive lock,
/// creating the file (and its parent folders) if needed and writing `header` first when the file
/// is empty (no header when `header` is empty). A torn last line is quarantined first (above).
/// Returns false with *error on an I/O failure or when `path` is not a regular file.
bool append_lines_locked(const std::string& path, const std::string& header,
                         const std::vector<std::string>& lines, std::string* error);

/// Makes the lines to append from the complete lines already in the file, under the append lock:
/// nullopt (with *error) appends nothing.
using LinesFromExisting = std::function<std::optional<std::vector<std::string>>(
    const std::vector<std::string>& existing, std::string* error)>;

/// The append of append_lines_locked (no header) whose lines are made under the same exclusive
/// lock from what the file holds then, so a number derived from the file (the registry's next
/// version) is never taken twice by two writers; the file is fsync'd before the lock is released.
bool append_lines_locked_after_read(const std::string& path, const LinesFromExisting& make_lines,
                                    std::string* error);

/// Replaces the lines of the existing file `path` by those `keep_lines` makes from them, under the
/// same exclusive lock as the appends (a torn last line is quarantined first): the new content is
/// written to `<path>.rewrite.tmp`, fsync'd and renamed over `path` before the lock is released,
/// so a reader sees the old file or the new one, a kill leaves the old one whole, and an appender
/// that was waiting for the lock opens the new file (LockedFd checks). nullopt from `keep_lines`
/// (with *error) and the same lines change nothing. False with *error when `path` is missing or not
/// a regular file.
bool rewrite_lines_locked(const std::string& path, const LinesFromExisting& keep_lines,
                          std::string* error);

/// The quarantine file of a log: where append_lines_locked moves its torn lines.
std::string quarantine_path(const std::string& path);

/// The same repair without an append (a loop does it when it takes its logs): moves a torn last
/// line of `path` to quarantine. True when the file is whole (or absent) afterwards; *repaired
/// says whether there was a torn line to move. False with *error when it cannot be done.
bool repair_torn_tail(const std::string& path, bool* repaired, std::string* error);

/// One writer per workload of a log, for as long as it runs. A loop holds this on each of its logs
/// for its whole run, keyed by its model, target and device: a second loop of the same workload on
/// the same file is refused at once (it would evaluate the same schedules again and, resuming the
/// same run, repeat its trial numbers), while loops of other workloads share the file as before.
/// It is an open-file-description lock on one byte far past the end of the file (a byte chosen by
/// the key), separate from the append locks; the kernel drops it when the holder exits, killed
/// included, so a --resume after a kill -9 finds it free.
class WorkloadLock {
 public:
  WorkloadLock() = default;
  ~WorkloadLock();
  WorkloadLock(const WorkloadLock&) = delete;
  WorkloadLock& operator=(const WorkloadLock&) = delete;

  /// Takes the lock on `path` (created if missing) for `key`. False with *error when another
  /// process holds it ("... is in use by another megasched loop of toy / h100 / cpu") or the file
  /// cannot be opened. On a file system without such locks it holds nothing and says so in
  /// *warning (the loop goes on, unguarded, rather than not at all).
  bool acquire(const std::string& path, const std::string& key, std::string* error,
               std::string* warning = nullptr);

 private:
  int fd_ = -1;
};

/// The complete lines of a file read under a shared lock.
struct LinesRead {
  std::vector<std::string> lines;      // complete lines, newline stripped, in file order
  std::vector<int> line_numbers;       // 1-based line number of each entry of `lines`
  bool exists = false;                 // the file was there
  bool truncated_tail = false;         // the file ended in a line without its newline (dropped)
  std::vector<int> torn_line_numbers;  // 1-based numbers of lines torn by a kill mid-write
  std::string error;                   // the file is there but cannot be read (or is no file)
};

/// Reads `path`. A final line without a newline is a write cut short: it is dropped and flagged.
/// A torn line in the middle (left by a version that continued after it) is kept in `lines`; the
/// record parsers reject it and report its number. A path that exists but is not a regular file
/// or cannot be read sets `error` and reads nothing.
LinesRead read_lines_shared(const std::string& path);

/// The records of a JSON-lines file read by read_lines_shared: each non-empty line parsed and
/// decoded by `decode(json, std::string* why) -> std::optional<T>`, in file order. A line that is
/// not JSON or does not decode, and each torn tail, becomes a problem "PATH:N: why (skipped)".
template <class T, class Decode>
std::vector<T> decode_json_lines(const std::string& path, const LinesRead& lines, Decode decode,
                                 std::vector<std::string>* problems) {
  std::vector<T> out;
  for (size_t i = 0; i < lines.lines.size(); ++i) {
    if (lines.lines[i].empty()) continue;
    const std::string where = path + ":" + std::to_string(lines.line_numbers[i]) + ": ";
    const nlohmann::json j = nlohmann::json::parse(lines.lines[i], nullptr, false);
    std::string why = "not JSON, a torn or corrupt line";
    std::optional<T> record;
    if (!j.is_discarded()) record = decode(j, &why);
    if (record)
      out.push_back(std::move(*record));
    else
      problems->push_back(where + why + " (skipped)");
  }
  for (int number : lines.torn_line_numbers)
    problems->push_back(path + ":" + std::to_string(number) +
                        ": truncated last line, a write cut short (skipped)");
  return out;
}

}  // namespace megasched::flywheel
