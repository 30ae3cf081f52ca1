// The corpus records of GPU measurements made outside a loop, for the shared corpus
// (flywheel/shared_corpus.h): a `bench` config row, `promote`'s verify gate, a `landscape record`
// row. Each is trial 0 of a run of its own (`run_id`, time-sortable), with the same fields as a
// loop's trial: the canonical config, the verdict, the model shape, the evaluator's identity as its
// fingerprint and the versions (eval::trial_versions: the kernel build identity that decides
// whether the row is stale). Nothing outside a loop decides a keep, so a correct measurement has
// status "discarded" (a point for the prior, never an incumbent); a failure has the loop's failure
// status (rejected, incorrect, crash, timeout).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/bench.h"
#include "eval/verdict.h"
#include "flywheel/corpus.h"
#include "schedule/config.h"
#include "schedule/model.h"

namespace megasched::flywheel {

/// One measurement outside a loop.
struct MeasuredTrial {
  std::string run_id;       // flywheel::new_run_id of the command's start
  int trial = 0;            // its index within the command (a bench's rows count up)
  std::string strategy;     // the command: bench | promote | landscape
  std::string description;  // what was measured ("bench row pairs_am at position 1024")
  schedule::ScheduleConfig config;
  eval::Verdict verdict;  // device "gpu" for a GPU measurement
  schedule::ModelShape shape;
  nlohmann::json identity = nlohmann::json::object();  // {"model","target","device",...}
};

/// The loop's status word for a verdict judged outside a loop: its failure status, else discarded.
std::string measured_status(const eval::Verdict& verdict);

/// The record of `trial`, timestamped `now_s` (seconds since the epoch).
CorpusRecord measured_record(const MeasuredTrial& trial, double now_s);

/// The verdict a `bench` config row stands for (eval/bench.h): valid unless rejected or not
/// lowered, correct with status ok, the median as its latency ("measured-gpu"), p90, the row's
/// errors and kernel, timed at the row's position on `target`.
eval::Verdict bench_row_verdict(const eval::BenchRow& row, const std::string& model,
                                const std::string& target);

/// The records of a `bench` result's config rows (floor, baseline and peer rows are no configs):
/// `configs` are the labelled configs it measured (eval::BenchOptions::configs), `seed` the weight
/// and token seed (part of the schedule id, as a loop's). One record per config row.
std::vector<CorpusRecord> bench_records(
    const eval::BenchResult& result,
    const std::vector<std::pair<std::string, schedule::ScheduleConfig>>& configs,
    const schedule::ModelShape& shape, uint64_t seed, const std::string& run_id, double now_s);

}  // namespace megasched::flywheel
