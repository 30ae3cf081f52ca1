// The shared corpus: the flywheel as data. Every GPU-measured trial the project runs (a loop's
// trials, `bench` config rows, `promote`'s verify gate, `landscape record` rows) is appended to one
// append-only file per GPU target in a folder kept in the repository, flywheel/data/
// (`<target>.corpus.jsonl`: h100.corpus.jsonl, h200.corpus.jsonl, ...), so the learned prior of
// every later loop starts from what every earlier run measured on that GPU.
//
// Each line is a CorpusRecord (flywheel/corpus.h, schemas/corpus_record.schema.json) with its
// `source` naming the writer: loop | bench | promote | landscape. CPU trials never enter it (a
// predicted latency is the cost model's, not the GPU's); failures do (the prior learns from what
// the GPU rejected as much as from what it timed). Each record carries the kernel build identity
// it ran (versions.build = vm::build_identity()): a row of another build is stale, since a change
// to the kernel's sources moves latencies, and readers leave stale rows out unless asked.
//
// The folder: $MEGASCHED_FLYWHEEL_DIR when set, else flywheel/data (relative to the working
// directory, as registry/verified.jsonl); the value "none" turns the shared corpus off. Appends go
// through flywheel/locked_file.h: one line per write under an exclusive lock, so two processes
// never interleave and a kill mid-write loses only that line (quarantined by the next append).
#pragma once

#include <string>
#include <vector>

#include "eval/objective.h"
#include "flywheel/corpus.h"

namespace megasched::flywheel {

inline constexpr const char* kFlywheelDirEnv = "MEGASCHED_FLYWHEEL_DIR";
inline constexpr const char* kDefaultFlywheelDir = "flywheel/data";
inline constexpr const char* kFlywheelOff = "none";  // the folder value that disables it

/// The writers, the values of a shared record's `source`.
inline constexpr const char* kSourceLoop = "loop";
inline constexpr const char* kSourceBench = "bench";
inline constexpr const char* kSourcePromote = "promote";
inline constexpr const char* kSourceLandscape = "landscape";

/// $MEGASCHED_FLYWHEEL_DIR when set and not empty, else flywheel/data ("none" passes through).
std::string default_flywheel_dir();
/// Whether `dir` names a shared corpus: not empty and not "none".
bool flywheel_enabled(const std::string& dir);

/// The file name's target part: the registry key of a known GPU ("NVIDIA H200" -> "h200",
/// "H100-SXM" -> "h100"), else the name in lower case with every run of other characters than
/// [a-z0-9] as one '-' ("unknown" for an empty name).
std::string target_file_key(const std::string& target);
/// `<dir>/<target_file_key(target)>.corpus.jsonl`.
std::string shared_corpus_path(const std::string& dir, const std::string& target);

/// Whether `record` was measured by a kernel build other than `build` (vm::build_identity() for
/// the current one): its versions.build differs or is missing.
bool is_stale(const CorpusRecord& record, const std::string& build);

/// The timed key of a record: its objective's canonical text ("obj0:1,1024:1") or, with none,
/// its timed position ("p1024").
std::string timed_key(const CorpusRecord& record);

/// What a shared row keeps of a trial record: everything but the detail a run's own corpus has for
/// its readers, which is most of a GPU verdict's bytes (~29 KB of a llama-1b row): the verdict's
/// per-position check entries (their worst is the verdict's rel_err / max_abs_err / argmax_match;
/// failing entries are kept) and, in its `kernel`, the kernel's own check entries and the
/// baselines' details (their latency is the verdict's baseline_us). The config, status, latency
/// with its samples, floor, notes and kernel resources stay.
CorpusRecord compact_for_sharing(CorpusRecord record);

/// Appends `record` (its `source` set to `source`, compact_for_sharing) to the file of its target
/// in `dir`, when it was measured on a GPU (record.device == "gpu"); a CPU record and a disabled
/// `dir` append nothing.
/// *appended says whether a line was written. False with *error on an I/O failure.
bool append_shared(const std::string& dir, CorpusRecord record, const std::string& source,
                   bool* appended, std::string* error);

/// append_shared of each record; the number appended, or -1 with *error at the first failure.
int append_shared_all(const std::string& dir, const std::vector<CorpusRecord>& records,
                      const std::string& source, std::string* error);

/// What importing a corpus.jsonl into the shared corpus did (`megasched corpus import`).
struct ImportResult {
  int read = 0;      // records in the file
  int imported = 0;  // GPU records appended (their versions, so their staleness, kept)
  int cpu = 0;       // CPU records left out
  int already = 0;   // records the shared corpus holds already (same run id, trial, schedule id)
  std::vector<std::string> problems;  // the file's torn or malformed lines (skipped)
  std::string error;  // the file or the folder cannot be read or written: nothing more imported
};
/// Appends the GPU records of the corpus.jsonl at `path` to the shared corpus of `dir`, each to its
/// target's file, as they are (a record without a source gets `loop`, or its strategy when that
/// is bench, promote or landscape). Importing a file twice appends nothing the second time.
ImportResult import_corpus(const std::string& dir, const std::string& path);

struct SharedCorpusFilter {
  std::string target;          // "": every file in the folder; else the file of this target
  std::string model;           // "": every model
  bool include_stale = false;  // keep rows of other kernel builds
  bool dedupe = true;          // one row per (schedule_id, build, timed key): the newest
  std::string build;           // the current build identity (vm::build_identity())
};

struct SharedCorpusRead {
  std::vector<CorpusRecord> records;  // in file order (files by name), after the filter
  std::vector<std::string> files;     // the files read
  std::vector<std::string> archives;  // the archive files read
  int stale = 0;         // rows of another build read and left out (kept with include_stale)
  int stale_unread = 0;  // archived lines not parsed: they do not name the build (any model)
  int archived = 0;      // of the records, those read from archives
  int duplicates = 0;    // older rows of a key dropped by dedupe
  std::vector<std::string> problems;  // torn or malformed lines (skipped)
  std::string error;                  // a file there but unreadable; the folder not a folder
};

/// Reads the shared corpus of `dir` through `filter`: each target file's archive (archive_path),
/// then the file itself, so older rows come first. A missing folder, file or archive reads as
/// empty. Without include_stale, an archived line that does not contain filter.build is
/// not parsed (it cannot be of that build) and counts in stale_unread.
SharedCorpusRead read_shared(const std::string& dir, const SharedCorpusFilter& filter);

/// The archive of a target's shared file: `<dir>/archive/<target_file_key>.corpus.jsonl.gz`,
/// where archive_rows moves rows out of the live file (flywheel/gzip_lines.h: gzip, one member
/// per move).
std::string archive_path(const std::string& dir, const std::string& target);

/// What moving rows of one shared file into its archive did.
struct ArchiveFileResult {
  std::string file;     // the live file
  std::string archive;  // its archive
  int kept = 0;         // rows left live (with kStale: the current build's, and lines that are no
                        // record)
  int moved = 0;        // rows removed from the live file
  int stale = 0;        // of those, rows of another build
  int written = 0;      // of those, appended to the archive (the others were there already)
};
struct ArchiveResult {
  std::vector<ArchiveFileResult> files;
  std::string error;  // the folder or a file cannot be read or written: that file is unchanged
};
/// Which rows archive_rows moves: the stale ones (is_stale against the build), or every record,
/// so that the live file starts empty and the whole corpus is kept compressed (readers read the
/// archive as they read the live file).
enum class ArchiveScope { kStale, kEveryRecord };
/// Moves rows of the shared files of `dir` (one target's, or all of them) into their archives:
/// the rows go to the archive first, fsync'd, then the live file is rewritten without them
/// (rewrite_lines_locked), under the appenders' lock. A kill in between leaves a row in both, and
/// the next move does not write it again (a row already in the archive, byte for byte, is not
/// appended twice). Lines that are no record stay live. With `dry_run` it counts and changes
/// nothing. Needs zlib unless nothing is moved (or dry_run).
ArchiveResult archive_rows(const std::string& dir, const std::string& target,
                           const std::string& build, ArchiveScope scope, bool dry_run);

/// One row per (schedule_id, versions.build, timed key): the newest by timestamp, the later line
/// on a tie. Keeps the survivors' order; *dropped (when given) counts the others.
std::vector<CorpusRecord> dedupe_records(std::vector<CorpusRecord> records, int* dropped);

/// What a prior-guided strategy trains on: the loop's own records `own` (same target name and
/// device, judged as the loop judges: `timed_position` / `objective_text`) and the shared rows
/// `shared` of the same target (by file key) and model, judged alike, that are not copies of a
/// record of `own` (same run id and trial). Shared rows join only a GPU loop: they are measured
/// latencies, a CPU loop's are the cost model's. *shared_used counts the shared rows taken.
struct TrainingRequest {
  std::string target;  // the loop's target name
  std::string model;   // the loop's model name (shared rows only)
  std::string device;  // the loop's device: "cpu" | "gpu"
  int timed_position = 0;
  eval::Objective objective;  // empty: judged at timed_position alone
};
std::vector<CorpusRecord> training_records(std::vector<CorpusRecord> own,
                                           std::vector<CorpusRecord> shared,
                                           const TrainingRequest& request, int* shared_used);

}  // namespace megasched::flywheel
