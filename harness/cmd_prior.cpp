// `megasched prior`: the learned prior on its own.
//   --eval     held-out rank correlation (Spearman, k-fold) of the prior on the corpus, per target
//              and device found there (flywheel::evaluate_prior_per_target)
//   --compare  prior versus random on the predicted-latency landscape of a model: for each seed,
//              both strategies run `--budget` trials from scratch (cold: no corpus), and the
//              number of trials each needs to reach the target latency is reported
//              (search/prior_race.h)
#include <filesystem>
#include <iostream>

#include "eval/evaluate.h"
#include "flywheel/corpus.h"
#include "flywheel/prior.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "schedule/lookup.h"
#include "search/prior_race.h"

namespace megasched::harness {

void add_prior_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    bool eval = false;
    bool compare = false;
    std::string corpus = "workspace/corpus.jsonl";
    std::string target;
    std::string device;
    int folds = 5;
    uint64_t seed = 0;
    TrialFlags trial;
    search::PriorRaceOptions race;
  };
  auto opt = std::make_shared<Options>();
  opt->trial.ev.model = "small";
  opt->trial.positions = "0";
  auto* cmd = app.add_subcommand("prior",
                                 "The learned prior: --eval its rank correlation on the corpus, "
                                 "--compare it with random search");
  cmd->add_flag("--eval", opt->eval, "Held-out Spearman rank correlation on the corpus");
  cmd->add_flag("--compare", opt->compare,
                "Trials to a target latency: prior vs random, averaged over seeds");
  cmd->add_option("--corpus", opt->corpus, "corpus.jsonl path (--eval)")->capture_default_str();
  cmd->add_option("--target", opt->target,
                  "--eval: only this target (default: each target in the corpus)");
  cmd->add_option("--device", opt->device, "--eval: only this device, cpu or gpu (default: each)")
      ->check(CLI::IsMember({"cpu", "gpu"}));
  cmd->add_option("--folds", opt->folds, "--eval: cross-validation folds")
      ->check(integer_in(2, 1000))
      ->capture_default_str();
  add_model_flag(cmd, &opt->trial.ev.model, "--compare: model");
  add_gpu_flag(cmd, &opt->trial.ev.gpu, "--compare: GPU target");
  cmd->add_option("--seeds", opt->race.seeds, "--compare: seeds per strategy")
      ->check(integer_in(1, 10000))
      ->capture_default_str();
  cmd->add_option("--budget", opt->race.budget, "--compare: trials per run")
      ->check(integer_in(1, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--target-us", opt->race.target_us,
                  "--compare: latency to reach (default: the median over seeds of random search's "
                  "best after --budget trials)")
      ->check(finite_number_in(0.0, std::numeric_limits<double>::max(), /*min_exclusive=*/true));
  add_positions_flag(cmd, &opt->trial.positions,
                     "--compare: positions whose logits each trial checks (the latency is "
                     "predicted at position 0 either way)");
  cmd->add_option("--jobs", opt->race.jobs,
                  "--compare: runs at a time (forked processes sharing the loaded model)")
      ->check(integer_in(1, 1024))
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed,
                  "Fold shuffle seed (--eval) / first strategy seed (--compare)")
      ->check(unsigned_integer())
      ->capture_default_str();
  cmd->add_option("--work-dir", opt->race.work_dir,
                  "--compare: where the per-run logs go (default: a temporary folder, removed)");
  cmd->callback([&ctx, opt] {
    if (opt->eval == opt->compare)
      return print_error("prior", "choose one of --eval or --compare"),
             void(ctx.exit_code = kExitUsage);
    if (opt->eval) {
      std::string error;
      if (!opt->target.empty() &&
          !schedule::find_target_named(opt->target, &error, /*auto_hint=*/false))
        return print_error("prior", "--target: " + error), void(ctx.exit_code = kExitUsage);
      flywheel::CorpusRead corpus = flywheel::read_corpus(opt->corpus);
      if (!corpus.error.empty())
        return print_error("prior", corpus.error), void(ctx.exit_code = kExitEnvironment);
      if (!corpus.exists)
        return print_error("prior",
                           "no corpus at " + opt->corpus + " (run `megasched loop` first)"),
               void(ctx.exit_code = kExitEnvironment);
      const nlohmann::json out = {
          {"corpus", opt->corpus},
          {"folds", opt->folds},
          {"evaluations", flywheel::evaluate_prior_per_target(corpus.records, opt->target,
                                                              opt->device, opt->folds, opt->seed)}};
      print_json(out);
      ctx.exit_code = out["evaluations"].empty() ? kExitFailure : kExitOk;
      if (out["evaluations"].empty())
        print_error("prior", "the corpus " + opt->corpus + " has no trials" +
                                 (opt->target.empty() ? "" : " on target " + opt->target) +
                                 (opt->device.empty() ? "" : " on device " + opt->device) +
                                 " (drop --target/--device to evaluate every pair it holds)");
      return;
    }

    std::string error;
    std::error_code ec;
    if (!opt->race.work_dir.empty() && std::filesystem::exists(opt->race.work_dir, ec) &&
        !std::filesystem::is_directory(opt->race.work_dir, ec))
      return print_error("prior",
                         "--work-dir " + opt->race.work_dir +
                             " is a file, not a directory (name a new or existing folder)"),
             void(ctx.exit_code = kExitUsage);
    opt->trial.ev.device = "cpu";
    if (!opt->trial.parse_positions(&error))
      return print_error("prior", error), void(ctx.exit_code = kExitUsage);
    bool environment = false;
    auto trial = eval::TrialEvaluator::create(opt->trial.ev, &error, &environment);
    if (!trial)
      return print_error("prior", error),
             void(ctx.exit_code = environment ? kExitEnvironment : kExitUsage);
    opt->race.first_seed = opt->seed;
    search::PriorRace race = search::race_prior_against_random(
        *trial, trial->shape(), trial->target(), opt->race, std::cerr);
    if (!race.ok) return print_error("prior", race.error), void(ctx.exit_code = kExitEnvironment);
    race.summary["model"] = opt->trial.ev.model;
    race.summary["target"] = trial->target().name;
    race.summary["latency_kind"] = "predicted";
    race.summary["positions_checked"] = opt->trial.ev.positions;
    print_json(race.summary);
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
