// Append-only line files shared by several processes: results.tsv and corpus.jsonl.
//
// Every append takes an exclusive flock(2) on the file for the whole write, so two loops writing
// one file never interleave or lose lines. The header (results.tsv) is written by whichever
// appender finds the file empty, under the same lock, so it appears exactly once. A process
// killed in the middle of a write leaves a last line without its newline; the next appender
// starts a fresh line after it (the torn line stays, and readers report it and skip it).
#pragma once

#include <string>
#include <vector>

namespace megasched::flywheel {

/// Appends `lines` (each without its trailing newline) to `path` under an exclusive lock,
/// creating the file (and its parent folders) if needed and writing `header` first when the file
/// is empty (no header when `header` is empty). Returns false with *error on an I/O failure.
bool append_lines_locked(const std::string& path, const std::string& header,
                         const std::vector<std::string>& lines, std::string* error);

/// The complete lines of a file read under a shared lock.
struct LinesRead {
  std::vector<std::string> lines;      // complete lines, newline stripped, in file order
  std::vector<int> line_numbers;       // 1-based line number of each entry of `lines`
  bool exists = false;                 // the file was there
  bool truncated_tail = false;         // the file ended in a line without its newline (dropped)
  std::vector<int> torn_line_numbers;  // 1-based numbers of lines torn by a kill mid-write
};

/// Reads `path`. A final line without a newline is a write cut short: it is dropped and flagged.
/// A torn line in the middle (a cut-short write that a later append continued after) is kept in
/// `lines`; the record parsers reject it and report its number.
LinesRead read_lines_shared(const std::string& path);

}  // namespace megasched::flywheel
