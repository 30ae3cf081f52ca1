// Gzip-compressed line files: the shared corpus's archive (flywheel/corpus_archive.h). Lines are
// appended as a new gzip member each time (a gzip file of several members reads as one stream), so
// an append never rewrites what is there. Built with zlib when CMake finds it (zlib1g-dev); a
// build without it reads and writes none and says so (zlib_available()).
#pragma once

#include <string>
#include <vector>

#include "flywheel/locked_file.h"

namespace megasched::flywheel {

/// Whether this build reads and writes gzip files (it was built with zlib).
bool zlib_available();

/// The complete lines of the gzip file `path` (every member), read under a shared lock, as
/// read_lines_shared reads a plain file: a missing file reads as empty (exists false); a last line
/// without its newline is dropped and flagged; a file that is no gzip data or cut short sets
/// `error` (what was decoded before the damage is not returned). Without zlib: `error` says so.
LinesRead read_gz_lines(const std::string& path);

/// Appends `lines` (each without its newline) to the gzip file `path` as one new member, under an
/// exclusive lock, creating it and its folders if needed, fsync'd before the lock is released.
/// A failed write cuts the file back to its size before. False with *error on an I/O failure or
/// without zlib.
bool append_gz_lines(const std::string& path, const std::vector<std::string>& lines,
                     std::string* error);

}  // namespace megasched::flywheel
