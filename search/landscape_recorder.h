// Recording a landscape (search/landscape.h): which configs (a space-filling sample of valid
// configs plus named configs and every one-knob neighbour of them) and judging them through the
// normal evaluator, one evaluator or a pool of workers (`loop --gpus all`'s), appending a row per
// config so a killed recording resumes (configs whose schedule id the file holds are skipped).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "eval/evaluator.h"
#include "eval/verdict.h"
#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/target.h"
#include "search/compile_ahead.h"
#include "search/landscape.h"
#include "search/trial_pool.h"

namespace megasched::search {

struct PlannedConfig {
  schedule::ScheduleConfig config;
  std::string origin;  // sample | named:<name> | neighbour:<name>
};

/// `count` distinct configs that fit (schedule::config_fits), spread like a Latin hypercube: each
/// knob's column cycles through its fitting choices the same number of times (±1), columns
/// shuffled independently; a row that does not fit is repaired by redrawing knobs one at a time
/// (or replaced by schedule::random_config).
std::vector<PlannedConfig> space_filling_sample(const schedule::ModelShape& shape,
                                                const schedule::GpuTarget& target, int count,
                                                uint64_t seed);

/// Each named config, then its one-knob neighbours (schedule::neighbours), then the sample; a
/// config planned twice keeps its first origin.
std::vector<PlannedConfig> plan_landscape(
    const schedule::ModelShape& shape, const schedule::GpuTarget& target, int sample_count,
    const std::vector<std::pair<std::string, schedule::ScheduleConfig>>& named, uint64_t seed);

/// The row a verdict makes (status ok only for a correct verdict with a latency).
LandscapeRow landscape_row(const PlannedConfig& planned, const eval::Verdict& verdict);

struct RecordOptions {
  std::string path;        // the landscape file (created with `header` when absent)
  LandscapeHeader header;  // a resumed file's must agree on model, target, device, position, build
  std::ostream* progress = nullptr;         // one line per config
  const std::atomic<bool>* stop = nullptr;  // stop after the configs in flight
  /// Builds the kernels of the configs next in line while the current ones run (the caller's,
  /// search/compile_ahead.h; nullptr: none): up to its capacity ahead.
  CompileAhead* compile_pool = nullptr;
  /// The shared corpus folder (flywheel/shared_corpus.h) each GPU row is also appended to, as a
  /// `landscape` record of a model of `shape`; "" or "none": none.
  std::string flywheel_dir;
  schedule::ModelShape shape;
};

struct RecordResult {
  bool ok = true;
  std::string error;
  bool bad_arguments = false;  // with !ok: the file is another landscape or not one (exit 2)
  int planned = 0;
  int already = 0;   // rows the file held before
  int recorded = 0;  // rows this call appended
  int lost = 0;      // configs whose worker stopped answering twice (not recorded)
};

/// Judges every planned config the file does not hold yet, one at a time.
RecordResult record_landscape(eval::Evaluator& evaluator, const std::vector<PlannedConfig>& plan,
                              const RecordOptions& options);
/// The same on a pool: one config per live slot at a time.
RecordResult record_landscape_on_pool(TrialPool& pool, const std::vector<PlannedConfig>& plan,
                                      const RecordOptions& options);

}  // namespace megasched::search
