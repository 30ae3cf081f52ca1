#include "search/prior_race.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>

#include "flywheel/report.h"
#include "flywheel/results.h"
#include "search/loop.h"
#include "search/strategy.h"

namespace megasched::search {
namespace {

using nlohmann::json;

// best_us after each trial of a finished run.
std::vector<double> best_curve(const std::string& results_path) {
  std::vector<double> curve;
  for (const auto& row : flywheel::read_results(results_path).rows)
    curve.push_back(row.best_us ? *row.best_us : 1e300);
  return curve;
}

// Trials until the best reaches `target_us` (budget + 1 when it never does: censored).
int trials_to(const std::vector<double>& curve, double target_us, int budget) {
  for (size_t i = 0; i < curve.size(); ++i)
    if (curve[i] <= target_us * (1 + 1e-12)) return static_cast<int>(i) + 1;
  return budget + 1;
}

json strategy_summary(const std::vector<int>& trials, const std::vector<double>& final_best,
                      int budget) {
  const int reached = static_cast<int>(
      std::count_if(trials.begin(), trials.end(), [&](int t) { return t <= budget; }));
  const double mean =
      std::accumulate(trials.begin(), trials.end(), 0.0) / static_cast<double>(trials.size());
  std::vector<double> as_double(trials.begin(), trials.end());
  return {{"trials_to_target", trials},
          {"mean_trials_to_target", mean},
          {"median_trials_to_target", flywheel::median(as_double)},
          {"reached", reached},
          {"final_best_us", final_best},
          {"mean_final_best_us", std::accumulate(final_best.begin(), final_best.end(), 0.0) /
                                     static_cast<double>(final_best.size())}};
}

/// One loop of the race: a strategy, a seed and its own log files.
struct Run {
  std::string name;
  uint64_t seed;
  std::string results, corpus;
};

/// The summary of the finished runs.
json summarise(const std::vector<Run>& runs, const PriorRaceOptions& options) {
  std::map<std::string, std::vector<std::vector<double>>> curves;
  for (const Run& run : runs) curves[run.name].push_back(best_curve(run.results));
  std::vector<double> random_final;
  for (const auto& c : curves["random"]) random_final.push_back(c.empty() ? 1e300 : c.back());
  const double target_us =
      options.target_us > 0 ? options.target_us : flywheel::median(random_final);
  json out = {{"budget", options.budget},
              {"seeds", options.seeds},
              {"first_seed", options.first_seed},
              {"target_us", target_us},
              {"target_rule", options.target_us > 0
                                  ? "given (--target-us)"
                                  : "median over seeds of random search's best after the budget"},
              {"censored_value", options.budget + 1}};
  for (const std::string name : {"random", "prior"}) {
    std::vector<int> trials;
    std::vector<double> finals;
    for (const auto& c : curves[name]) {
      trials.push_back(trials_to(c, target_us, options.budget));
      finals.push_back(c.empty() ? 1e300 : c.back());
    }
    out[name] = strategy_summary(trials, finals, options.budget);
  }
  return out;
}

}  // namespace

bool run_forked(size_t count, int jobs, const std::function<bool(size_t)>& task) {
  if (jobs <= 1) {
    for (size_t i = 0; i < count; ++i)
      if (!task(i)) return false;
    return true;
  }
  std::cout.flush();
  std::cerr.flush();
  int running = 0;
  bool failed = false;
  auto reap = [&] {
    int status = 0;
    if (::wait(&status) > 0) {
      --running;
      failed = failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
  };
  for (size_t i = 0; i < count; ++i) {
    while (running >= jobs) reap();
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(task(i) ? 0 : 1);
    if (pid < 0) {
      failed = true;
      break;
    }
    ++running;
  }
  while (running > 0) reap();
  return !failed;
}

PriorRace race_prior_against_random(eval::Evaluator& evaluator, const schedule::ModelShape& shape,
                                    const schedule::GpuTarget& target,
                                    const PriorRaceOptions& options, std::ostream& log) {
  PriorRace race;
  if (options.seeds < 1 || options.budget < 1) {
    race.error = "--seeds and --budget must be at least 1";
    return race;
  }
  const bool own_dir = options.work_dir.empty();
  std::error_code ec;
  const std::filesystem::path dir = own_dir
                                        ? std::filesystem::temp_directory_path(ec) /
                                              ("megasched_compare_" + std::to_string(::getpid()))
                                        : std::filesystem::path(options.work_dir);
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) {
    race.error = "cannot use " + dir.string() +
                 " as the work directory: " + (ec ? ec.message() : "it is not a directory");
    return race;
  }
  std::vector<Run> runs;
  for (const std::string name : {"random", "prior"})
    for (int s = 0; s < options.seeds; ++s) {
      const uint64_t seed = options.first_seed + static_cast<uint64_t>(s);
      const std::string stem = name + "_seed" + std::to_string(seed);
      runs.push_back(
          {name, seed, (dir / (stem + ".tsv")).string(), (dir / (stem + ".jsonl")).string()});
      std::filesystem::remove(runs.back().results, ec);
      std::filesystem::remove(runs.back().corpus, ec);
    }
  auto run_one = [&](size_t i) {
    const Run& run = runs[i];
    StrategyOptions so;
    so.name = run.name;
    so.seed = run.seed;
    so.shape = shape;
    std::string why;
    auto strategy = make_strategy(so, &why);
    LoopOptions lo;
    lo.budget = options.budget;
    lo.results_path = run.results;
    lo.corpus_path = run.corpus;
    SystemClock clock;
    LoopResult r = run_loop(evaluator, shape, target, *strategy, clock, lo);
    log << "prior --compare: " << run.name << " seed " << run.seed << ": best "
        << (r.summary["best"].is_null() ? json(nullptr) : r.summary["best"]["latency_us"]).dump()
        << " us after " << r.summary["trials"] << " trials\n";
    return r.ok;
  };
  if (!run_forked(runs.size(), options.jobs, run_one)) {
    race.error = options.jobs <= 1 ? "cannot write the run logs in " + dir.string()
                                   : "a comparison run failed (logs in " + dir.string() + ")";
    return race;
  }
  race.summary = summarise(runs, options);
  if (own_dir)
    std::filesystem::remove_all(dir, ec);
  else
    race.summary["work_dir"] = dir.string();
  race.ok = true;
  return race;
}

}  // namespace megasched::search
