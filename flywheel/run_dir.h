// The run directory: every `evaluate`, `loop`, `promote` and `profile` run leaves its artifacts in
// `<runs>/<run_id>/` (default `workspace/runs/`), so a trial can be inspected after the fact, not
// only read back as one log line. A run id is time-sortable: "r" + the UTC start time
// (YYYYMMDDTHHMMSSZ) + "-" + its microseconds (6 digits), each id of a process strictly above the
// last, so the names of a folder's runs sort in the order the runs were created (two runs of one
// second included). Files (each JSON one has a schema in schemas/):
//   run.json          the manifest: run_id, kind, started, finished, exit_code, command, files
//                     (schemas/run_manifest.schema.json)
//   command.txt       the exact command line, shell-quoted, one line
//   config.json       the canonical ScheduleConfig
//   program.json      the lowered program (when the config lowered)
//   verdict.json      the Verdict (schemas/verdict.schema.json)
//   correctness.json  each position checked, on which path, its errors, the first failure
//                     (schemas/correctness.schema.json)
//   performance.json  median and spread, achieved GB/s, % of the floor, registers, spills,
//                     shared memory, occupancy, speedup against each baseline measured
//                     (schemas/performance.schema.json)
//   timeline.json     the profile (profile runs)
// and per kind: summary.json (loop), promotion.json (promote). Runs are pruned only on request
// (`megasched runs gc --keep N`), never silently.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"

namespace megasched::flywheel {

/// A new time-sortable run id for a run started at `now_s` (seconds since the epoch), strictly
/// above every id this process made before (a later microsecond when `now_s` repeats).
std::string new_run_id(double now_s);
/// True when `name` has the run id's shape (what `runs gc` may delete).
bool is_run_id(const std::string& name);

/// One run's folder, created by open_run_dir.
struct RunDir {
  std::string run_id;
  std::string path;  // <root>/<run_id>
  std::string kind;  // evaluate | loop | promote | profile
  std::string command;
  double started_s = 0.0;
  std::vector<std::string> files;  // written so far, by name
};

/// Creates `<root>/<run_id>/` and writes command.txt; nullopt with *error when it cannot.
std::optional<RunDir> open_run_dir(const std::string& root, const std::string& run_id,
                                   const std::string& kind, const std::string& command,
                                   double now_s, std::string* error);

/// Writes `name` (JSON, indented) into the run's folder and records it in the manifest's list.
bool write_run_json(RunDir& run, const std::string& name, const nlohmann::json& doc,
                    std::string* error);

/// Writes config.json, program.json (unless null), verdict.json, correctness.json and
/// performance.json for one trial.
bool write_trial_files(RunDir& run, const nlohmann::json& config, const nlohmann::json& program,
                       const eval::Verdict& verdict, std::string* error);

/// Writes run.json (the manifest) with the exit code; call it last.
bool finish_run_dir(RunDir& run, int exit_code, double now_s, std::string* error);

/// correctness.json of a verdict: {schedule_id, status, valid, correct, positions_checked,
/// max_abs_err, rel_err, argmax_match, paths: [{path ("reference_vm" | "gpu"), positions,
/// max_abs_err, rel_err, pass}], checks (the verdict's, one per path and position, each with its
/// worst_logit), first_failure: null | {position, path, rel_err, max_abs_err, argmax_match,
/// logit_index, value, reference, what}}.
nlohmann::json correctness_report(const eval::Verdict& verdict);

/// performance.json of a verdict: {latency_kind, median_us, p90_us, spread_us, samples,
/// floor_us, pct_of_floor, achieved_gbs, bytes_min, registers, spill_bytes, smem_bytes,
/// occupancy_blocks_per_sm, speedup_vs_baselines: {name: x}, bottleneck}; GPU-only fields are
/// null on a CPU trial.
nlohmann::json performance_report(const eval::Verdict& verdict);

/// A run folder as `runs list` shows it.
struct RunListing {
  std::string run_id;
  std::string path;
  nlohmann::json manifest;  // run.json, null when the run did not finish (or has none)
};
/// The runs under `root`, oldest first (by id). Folders that are not run ids are not listed.
std::vector<RunListing> list_runs(const std::string& root, std::string* error);

/// Deletes all but the newest `keep` run folders under `root` (only folders named by a run id);
/// returns the ids removed, or nullopt with *error.
std::optional<std::vector<std::string>> gc_runs(const std::string& root, int keep,
                                                std::string* error);

}  // namespace megasched::flywheel
