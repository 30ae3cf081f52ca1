// The strategy benchmark (`megasched search-bench`): strategies replayed against a landscape
// (search/landscape_evaluator.h) through the real loop (run_loop with its keep rule, logs in a
// scratch folder), scored as in Kernel Tuner's strategy-comparison methodology:
//   - best found after n trials: the noise-free latency (the landscape's median) of the config the
//     loop holds as its incumbent after trial n (what a real search would hand back);
//   - the score at budget n: (R(n) - best(n)) / (R(n) - optimum), where optimum is the
//     landscape's fastest ok row and R(n) the expected best of n configs drawn uniformly without
//     replacement from the landscape's sampled rows (origin "sample"; every row when it has none),
//     the failures among them never the best: 0 is random search, 1 the optimum, below 0 worse
//     than random;
//   - the median and quartiles of the score over the seeds at each budget, and the trials a run
//     needed to come within `within` (2%) of the optimum (median over seeds; a run that never did
//     counts as needing more than the largest budget).
// Every seed runs the largest budget once and is read at each smaller budget: the strategies
// here do not plan by the budget, so a run of 200 trials is, up to trial 25, a run of 25.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/landscape.h"
#include "search/strategy.h"

namespace megasched::search {

/// One replayed run: the trajectory and the incumbent's true latency after every trial.
struct ReplayRun {
  std::string strategy;
  uint64_t seed = 0;
  std::vector<std::string> schedule_ids;            // trial order
  std::vector<std::string> statuses;                // the loop's status of each trial
  std::vector<std::optional<double>> measured;      // the latency the loop saw (with noise)
  std::vector<std::optional<double>> best_true_us;  // incumbent's noise-free latency after trial
  std::string stop_reason;
};

struct ReplayOptions {
  StrategyOptions strategy;  // name and seed set per run; the rest (restart_after ...) as given
  int budget = 200;
  std::string work_dir;  // scratch logs (a folder per run, removed after); "" picks a temp folder
  std::ostream* progress = nullptr;  // the loop's progress lines (one per trial), when given
};

/// Replays one strategy with one seed (the strategy's seed and the landscape noise's). nullopt
/// with *error when the loop cannot run (an unknown strategy, a model or target this build does
/// not know, logs that cannot be written).
std::optional<ReplayRun> replay_once(const Landscape& landscape, const ReplayOptions& options,
                                     std::string* error);

/// R(n): the expected best latency of n uniform draws without replacement from the sampled rows.
double random_expected_best_us(const Landscape& landscape, int n);

struct BenchOptions {
  std::vector<std::string> strategies = {"random", "hillclimb", "elite",
                                         "sweep",  "guided",    "bandit"};
  std::vector<int> budgets = {25, 50, 100, 200};
  int seeds = 20;
  uint64_t first_seed = 1;
  double within = 0.02;  // "reached": within this share of the optimum
  StrategyOptions strategy;
  std::string work_dir;
  int jobs = 1;                   // runs at once (threads)
  std::ostream* trace = nullptr;  // the progress lines of each strategy's first seed (jobs 1)
};

/// The benchmark's document: {"landscape": header, "optimum_us", "random_expected_us":
/// {budget: us}, "strategies": [{"name", "budgets": [{"budget", "score_median", "score_p25",
/// "score_p75", "best_median_us"}], "trials_to_within": {"median", "reached", "runs"}}], ...}.
/// nullopt with *error when a run fails.
std::optional<nlohmann::json> run_search_bench(const Landscape& landscape,
                                               const BenchOptions& options, std::string* error);

/// The document as a text table, one row per strategy.
std::string format_search_bench(const nlohmann::json& document);

}  // namespace megasched::search
