// `megasched prior --compare`: the learned prior races random search on one evaluator's latency
// landscape. For each seed, each strategy runs `budget` trials from scratch (cold: its own fresh
// results and corpus files, no shared history); the number of trials each needs to reach the
// target latency is reported per strategy (a run that never reaches it counts budget + 1).
// The runs are independent, so they can run `jobs` at a time in forked processes that share the
// evaluator's loaded model.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "eval/evaluator.h"
#include "schedule/model.h"
#include "schedule/target.h"

namespace megasched::search {

struct PriorRaceOptions {
  int seeds = 5;  // runs per strategy, seeds first_seed, first_seed + 1, ...
  uint64_t first_seed = 0;
  int budget = 60;       // trials per run
  double target_us = 0;  // latency to reach; 0: the median of random search's final bests
  int jobs = 1;          // runs at a time (forked processes)
  std::string work_dir;  // the runs' logs; empty: a temporary folder, removed afterwards
};

struct PriorRace {
  bool ok = false;
  std::string error;       // why a run could not write its logs
  nlohmann::json summary;  // target_us, target_rule, budget, seeds, first_seed, censored_value,
                           // and per strategy ("random", "prior") trials_to_target,
                           // mean/median_trials_to_target, reached, final_best_us,
                           // mean_final_best_us; work_dir when one was given
};

/// Runs every (strategy, seed) loop and summarises them. Each run's final line goes to `log`.
PriorRace race_prior_against_random(eval::Evaluator& evaluator, const schedule::ModelShape& shape,
                                    const schedule::GpuTarget& target,
                                    const PriorRaceOptions& options, std::ostream& log);

/// Runs task(0) .. task(count - 1), each in a forked child, at most `jobs` at a time; true when
/// every child exited 0. With jobs <= 1 the tasks run in this process, stopping at the first
/// failure.
bool run_forked(size_t count, int jobs, const std::function<bool(size_t)>& task);

}  // namespace megasched::search
