// `megasched prior`: the learned prior on its own.
//   --eval     held-out rank correlation (Spearman, k-fold) of the prior on the corpus, per target
//              and device found there
//   --compare  prior versus random on the predicted-latency landscape of a model: for each seed,
//              both strategies run `--budget` trials from scratch (cold: no corpus), and the
//              number of trials each needs to reach the target latency is reported
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>

#include "eval/evaluate.h"
#include "flywheel/corpus.h"
#include "flywheel/prior.h"
#include "flywheel/report.h"
#include "flywheel/results.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/loop.h"
#include "harness/strategy.h"

namespace megasched::harness {
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

}  // namespace

void add_prior_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    bool eval = false;
    bool compare = false;
    std::string corpus = "workspace/corpus.jsonl";
    std::string target;
    std::string device;
    int folds = 5;
    uint64_t seed = 0;
    eval::EvaluatorOptions ev;
    int seeds = 5;
    int budget = 60;
    double target_us = 0;
    std::string positions = "0";
    int jobs = 1;
    std::string work_dir;
  };
  auto opt = std::make_shared<Options>();
  opt->ev.model = "small";
  auto* cmd = app.add_subcommand("prior",
                                 "The learned prior: --eval its rank correlation on the corpus, "
                                 "--compare it with random search");
  cmd->add_flag("--eval", opt->eval, "Held-out Spearman rank correlation on the corpus");
  cmd->add_flag("--compare", opt->compare,
                "Trials to a target latency: prior vs random, averaged over seeds");
  cmd->add_option("--corpus", opt->corpus, "corpus.jsonl path (--eval)")->capture_default_str();
  cmd->add_option("--target", opt->target,
                  "--eval: only this target (default: each target in the corpus)");
  cmd->add_option("--device", opt->device, "--eval: only this device, cpu or gpu (default: each)");
  cmd->add_option("--folds", opt->folds, "--eval: cross-validation folds")->capture_default_str();
  cmd->add_option("--model", opt->ev.model, "--compare: model")->capture_default_str();
  cmd->add_option("--gpu", opt->ev.gpu, "--compare: GPU target")->capture_default_str();
  cmd->add_option("--seeds", opt->seeds, "--compare: seeds per strategy")->capture_default_str();
  cmd->add_option("--budget", opt->budget, "--compare: trials per run")->capture_default_str();
  cmd->add_option("--target-us", opt->target_us,
                  "--compare: latency to reach (default: the median over seeds of random search's "
                  "best after --budget trials)");
  cmd->add_option("--positions", opt->positions,
                  "--compare: positions whose logits each trial checks (the latency is predicted "
                  "at position 0 either way)")
      ->capture_default_str();
  cmd->add_option("--jobs", opt->jobs,
                  "--compare: runs at a time (forked processes sharing the loaded model)")
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed,
                  "Fold shuffle seed (--eval) / first strategy seed (--compare)")
      ->capture_default_str();
  cmd->add_option("--work-dir", opt->work_dir,
                  "--compare: where the per-run logs go (default: a temporary folder, removed)");
  cmd->callback([&ctx, opt] {
    if (opt->eval == opt->compare)
      return print_error("prior", "choose one of --eval or --compare"),
             void(ctx.exit_code = kExitUsage);
    if (opt->eval) {
      flywheel::CorpusRead corpus = flywheel::read_corpus(opt->corpus);
      if (!corpus.exists)
        return print_error("prior",
                           "no corpus at " + opt->corpus + " (run `megasched loop` first)"),
               void(ctx.exit_code = kExitEnvironment);
      std::vector<std::pair<std::string, std::string>> pairs;
      for (const auto& r : corpus.records) {
        if ((!opt->target.empty() && r.target != opt->target) ||
            (!opt->device.empty() && r.device != opt->device))
          continue;
        if (std::find(pairs.begin(), pairs.end(), std::make_pair(r.target, r.device)) ==
            pairs.end())
          pairs.emplace_back(r.target, r.device);
      }
      json out = {{"corpus", opt->corpus}, {"folds", opt->folds}, {"evaluations", json::array()}};
      for (const auto& [target, device] : pairs) {
        auto samples = flywheel::prior_samples(corpus.records, target, device);
        flywheel::PriorEvaluation e = flywheel::evaluate_prior(samples, opt->folds, opt->seed);
        out["evaluations"].push_back(
            {{"target", target},
             {"device", device},
             {"samples", e.samples},
             {"failures", static_cast<int>(samples.size()) - e.samples},
             {"spearman", e.samples >= 2 * opt->folds ? json(e.spearman) : json(nullptr)},
             {"per_model", e.per_model}});
      }
      print_json(out);
      ctx.exit_code = out["evaluations"].empty() ? kExitFailure : kExitOk;
      return;
    }

    std::string error;
    opt->ev.device = "cpu";
    auto positions = parse_int_list(opt->positions);
    if (!positions)
      return print_error("prior", "--positions '" + opt->positions +
                                      "' is not a comma-separated list of integers"),
             void(ctx.exit_code = kExitUsage);
    opt->ev.positions = *positions;
    auto trial = eval::TrialEvaluator::create(opt->ev, &error);
    if (!trial) return print_error("prior", error), void(ctx.exit_code = kExitUsage);
    const bool own_dir = opt->work_dir.empty();
    const std::filesystem::path dir = own_dir
                                          ? std::filesystem::temp_directory_path() /
                                                ("megasched_compare_" + std::to_string(::getpid()))
                                          : std::filesystem::path(opt->work_dir);
    std::filesystem::create_directories(dir);
    // One process per (strategy, seed) run, forked after the model is loaded, --jobs at a time.
    struct Run {
      std::string name;
      uint64_t seed;
      std::string results, corpus;
    };
    std::vector<Run> runs;
    for (const std::string name : {"random", "prior"})
      for (int s = 0; s < opt->seeds; ++s) {
        const uint64_t seed = opt->seed + static_cast<uint64_t>(s);
        const std::string stem = name + "_seed" + std::to_string(seed);
        runs.push_back(
            {name, seed, (dir / (stem + ".tsv")).string(), (dir / (stem + ".jsonl")).string()});
        std::filesystem::remove(runs.back().results);
        std::filesystem::remove(runs.back().corpus);
      }
    auto run_one = [&](const Run& run) {
      StrategyOptions so;
      so.name = run.name;
      so.seed = run.seed;
      so.shape = trial->shape();
      std::string why;
      auto strategy = make_strategy(so, &why);
      LoopOptions lo;
      lo.budget = opt->budget;
      lo.results_path = run.results;
      lo.corpus_path = run.corpus;
      SystemClock clock;
      LoopResult r = run_loop(*trial, trial->shape(), trial->target(), *strategy, clock, lo);
      std::cerr << "prior --compare: " << run.name << " seed " << run.seed << ": best "
                << (r.summary["best"].is_null() ? nlohmann::json(nullptr)
                                                : r.summary["best"]["latency_us"])
                       .dump()
                << " us after " << r.summary["trials"] << " trials\n";
      return r.ok;
    };
    if (opt->jobs <= 1) {
      for (const Run& run : runs)
        if (!run_one(run))
          return print_error("prior", "cannot write the run logs in " + dir.string()),
                 void(ctx.exit_code = kExitEnvironment);
    } else {
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
      for (const Run& run : runs) {
        while (running >= opt->jobs) reap();
        pid_t pid = ::fork();
        if (pid == 0) ::_exit(run_one(run) ? 0 : 1);
        if (pid < 0) {
          failed = true;
          break;
        }
        ++running;
      }
      while (running > 0) reap();
      if (failed)
        return print_error("prior", "a comparison run failed (logs in " + dir.string() + ")"),
               void(ctx.exit_code = kExitEnvironment);
    }
    std::map<std::string, std::vector<std::vector<double>>> curves;
    for (const Run& run : runs) curves[run.name].push_back(best_curve(run.results));
    std::vector<double> random_final;
    for (const auto& c : curves["random"]) random_final.push_back(c.empty() ? 1e300 : c.back());
    const double target_us = opt->target_us > 0 ? opt->target_us : flywheel::median(random_final);
    json out = {{"model", opt->ev.model},
                {"target", trial->target().name},
                {"latency_kind", "predicted"},
                {"budget", opt->budget},
                {"seeds", opt->seeds},
                {"first_seed", opt->seed},
                {"positions_checked", *positions},
                {"target_us", target_us},
                {"target_rule", opt->target_us > 0
                                    ? "given (--target-us)"
                                    : "median over seeds of random search's best after the budget"},
                {"censored_value", opt->budget + 1}};
    for (const std::string name : {"random", "prior"}) {
      std::vector<int> trials;
      std::vector<double> finals;
      for (const auto& c : curves[name]) {
        trials.push_back(trials_to(c, target_us, opt->budget));
        finals.push_back(c.empty() ? 1e300 : c.back());
      }
      out[name] = strategy_summary(trials, finals, opt->budget);
    }
    if (own_dir)
      std::filesystem::remove_all(dir);
    else
      out["work_dir"] = dir.string();
    print_json(out);
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
