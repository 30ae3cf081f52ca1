// results.tsv: one human-readable row per trial, for people and spreadsheets. Tab-separated,
// header written once, appended under a lock (flywheel/locked_file.h), a torn last line
// tolerated. Rows are made from corpus records (row_from_record), so the two logs cannot
// disagree. An empty cell means "none" (no latency for a failed trial, no parent for trial 0).
//
// Columns, in order (schemas/results_row.schema.json):
//   trial               0-based trial number within the run (trial 0: the default or warm start)
//   timestamp           ISO-8601 UTC time the trial finished
//   run_id              one loop invocation (kept across --resume)
//   model               model preset or checkpoint
//   target              GPU target (registry name or the live device)
//   device              cpu (predicted latency) | gpu (measured latency)
//   strategy            default | warm-start | random | hillclimb | prior | proposer
//   status              kept | discarded | rejected | incorrect | crash | timeout
//   correct             1 | 0: the program (and on a GPU the kernel) matched the eager forward
//   latency_us          median step latency, µs; empty unless correct
//   latency_kind        measured-gpu | predicted (a prediction is never called a measurement)
//   spread_us           p90 - p10 of the timing samples (0 for predictions)
//   floor_us            bytes_min / bandwidth: the physical floor of one step
//   pct_of_floor        100 * floor_us / latency_us (100 = at the floor)
//   speedup_vs_default  default config's latency / this latency (same run)
//   best_us             incumbent latency after this trial
//   schedule_id         hash of canonical config + model + target + build identity
//   parent_id           schedule_id this candidate was derived from
//   changed_knobs       knob=value pairs that differ from the parent, comma-separated
//   complexity          knobs away from the default (near-ties go to the simpler config)
//   description         what was tried and why the loop kept or discarded it
//   timed_on            the worker that timed it, with --gpus / --workers / --mpi ("gpu1@host",
//                       "rank2:cpu@host"); empty for a loop with one in-process or worker evaluator
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flywheel/corpus.h"

namespace megasched::flywheel {

struct ResultRow {
  int trial = 0;
  std::string timestamp;
  std::string run_id;
  std::string model;
  std::string target;
  std::string device;
  std::string strategy;
  std::string status;
  bool correct = false;
  std::optional<double> latency_us;
  std::string latency_kind;
  double spread_us = 0.0;
  double floor_us = 0.0;
  std::optional<double> pct_of_floor;
  std::optional<double> speedup_vs_default;
  std::optional<double> best_us;
  std::string schedule_id;
  std::string parent_id;
  std::string changed_knobs;
  int complexity = 0;
  std::string description;
  std::string timed_on;
};

/// The column names, in file order.
const std::vector<std::string>& results_columns();
/// The header line (column names joined by tabs).
std::string results_header();

/// The row a corpus record makes (changed knobs with their new values from record.config).
ResultRow row_from_record(const CorpusRecord& record);

/// One line (no newline). Tabs and newlines inside text cells become spaces.
std::string format_row(const ResultRow& row);

/// Appends one row under the file lock, writing the header first if the file is new. A file
/// whose header is an older column list gets the row in its own columns.
bool append_result(const std::string& path, const ResultRow& row, std::string* error);

struct ResultsRead {
  std::vector<ResultRow> rows;
  bool exists = false;
  std::vector<std::string> problems;  // torn / malformed lines, missing header, ...
  std::string error;                  // there but unreadable, or not a regular file: no rows
};
/// Reads rows by header name (extra columns ignored, missing ones left empty); torn or malformed
/// lines are skipped and listed in `problems`.
ResultsRead read_results(const std::string& path);

}  // namespace megasched::flywheel
