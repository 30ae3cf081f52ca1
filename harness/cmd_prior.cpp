// `megasched prior`: the learned prior on its own.
//   --eval     held-out rank correlation (Spearman, k-fold) of the prior on the corpus, per target
//              and device found there (flywheel::evaluate_prior_per_target); without --corpus, on
//              the shared corpus (flywheel/shared_corpus.h) of the current kernel build, with how
//              many rows were stale
//   --compare  prior versus random on the predicted-latency landscape of a model: for each seed,
//              both strategies run `--budget` trials from scratch (cold: no corpus), and the
//              number of trials each needs to reach the target latency is reported
//              (search/prior_race.h)
#include <filesystem>
#include <iostream>
#include <optional>

#include "eval/evaluate.h"
#include "flywheel/corpus.h"
#include "flywheel/prior.h"
#include "flywheel/shared_corpus.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "schedule/lookup.h"
#include "search/prior_race.h"
#include "vm/nvrtc_build.h"

namespace megasched::harness {

namespace {

struct Options {
  bool eval = false;
  bool compare = false;
  std::string corpus;  // "": the shared corpus (every target's file)
  std::string flywheel_dir = flywheel::default_flywheel_dir();
  bool corpus_stale = false;
  std::string target;
  std::string device;
  int folds = 5;
  uint64_t seed = 0;
  TrialFlags trial;
  search::PriorRaceOptions race;
};

/// The records --eval scores: --corpus's, else the shared corpus's of the current kernel build
/// (every build's with --corpus-stale include); *source describes where they came from. nullopt
/// with *error and *code when there are none to read.
std::optional<std::vector<flywheel::CorpusRecord>> eval_records(const Options& o,
                                                                nlohmann::json* source,
                                                                std::string* error, int* code) {
  *code = kExitEnvironment;
  if (!o.corpus.empty()) {
    flywheel::CorpusRead corpus = flywheel::read_corpus(o.corpus);
    *error = corpus.error;
    if (!corpus.exists && error->empty())
      *error = "no corpus at " + o.corpus + " (run `megasched loop` first)";
    *source = o.corpus;
    if (!error->empty()) return std::nullopt;
    return std::move(corpus.records);
  }
  if (!flywheel::flywheel_enabled(o.flywheel_dir)) {
    *code = kExitUsage;
    *error = "no --corpus, and the shared corpus is off (--flywheel none): name a corpus.jsonl";
    return std::nullopt;
  }
  flywheel::SharedCorpusFilter filter;
  filter.include_stale = o.corpus_stale;
  filter.build = vm::build_identity();
  flywheel::SharedCorpusRead shared = flywheel::read_shared(o.flywheel_dir, filter);
  *error = shared.error;
  if (shared.files.empty() && error->empty())
    *error = "no shared corpus in " + o.flywheel_dir +
             " (GPU runs of `megasched loop`, `bench`, `promote` or `landscape record` fill it; "
             "--corpus names a corpus.jsonl instead)";
  if (!error->empty()) return std::nullopt;
  for (const std::string& p : shared.problems) print_error("prior", "warning: " + p);
  *source = {{"shared", o.flywheel_dir},
             {"files", shared.files},
             {"build", filter.build},
             {"stale_rows", shared.stale},
             {"stale_rows_unread", shared.stale_unread},
             {"stale", o.corpus_stale ? "included" : "excluded"},
             {"duplicates_dropped", shared.duplicates}};
  return std::move(shared.records);
}

}  // namespace

void add_prior_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<Options>();
  opt->trial.ev.model = "small";
  opt->trial.positions = "0";
  auto* cmd = app.add_subcommand("prior",
                                 "The learned prior: --eval its rank correlation on the corpus, "
                                 "--compare it with random search");
  cmd->add_flag("--eval", opt->eval, "Held-out Spearman rank correlation on the corpus");
  cmd->add_flag("--compare", opt->compare,
                "Trials to a target latency: prior vs random, averaged over seeds");
  cmd->add_option("--corpus", opt->corpus,
                  "--eval: a corpus.jsonl (default: the shared corpus, every target's file, of "
                  "the current kernel build)");
  add_flywheel_flag(cmd, &opt->flywheel_dir);
  add_corpus_stale_flag(cmd, &opt->corpus_stale);
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
      nlohmann::json source;
      int code = kExitOk;
      const auto records = eval_records(*opt, &source, &error, &code);
      if (!records) return print_error("prior", error), void(ctx.exit_code = code);
      const nlohmann::json out = {
          {"corpus", source},
          {"folds", opt->folds},
          {"evaluations", flywheel::evaluate_prior_per_target(*records, opt->target, opt->device,
                                                              opt->folds, opt->seed)}};
      print_json(out);
      ctx.exit_code = out["evaluations"].empty() ? kExitFailure : kExitOk;
      if (out["evaluations"].empty())
        print_error("prior", "the corpus " +
                                 (opt->corpus.empty() ? opt->flywheel_dir : opt->corpus) +
                                 " has no trials" +
                                 (opt->target.empty() ? "" : " on target " + opt->target) +
                                 (opt->device.empty() ? "" : " on device " + opt->device) +
                                 (source.is_object() && source.value("stale", "") == "excluded"
                                      ? " of the current kernel build (" +
                                            std::to_string(source.value("stale_rows", 0)) +
                                            " stale rows left out: --corpus-stale include takes "
                                            "them)"
                                      : "") +
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
