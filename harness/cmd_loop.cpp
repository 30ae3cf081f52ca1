// `megasched loop`: the keep/revert loop over a budget of trials (harness/loop.h). One progress
// line per trial on stderr, the summary JSON on stdout. GPU trials run in a `megasched worker`
// child (harness/worker_evaluator.h); CPU trials run in process unless --isolate.
// SIGINT / SIGTERM: the current trial finishes and is logged, then the summary prints; a second
// signal ends the process at once (the logs stay whole: every line is one locked append).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <iostream>
#include <memory>

#include "eval/device.h"
#include "eval/evaluate.h"
#include "flywheel/corpus.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/loop.h"
#include "harness/strategy.h"
#include "harness/trial_flags.h"
#include "harness/worker_evaluator.h"

namespace megasched::harness {
namespace {

std::atomic<bool> g_stop{false};

void on_stop_signal(int) {
  if (g_stop.exchange(true)) {
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::raise(SIGTERM);
  }
  static const char kMessage[] =
      "\nmegasched loop: stopping after the current trial (signal again to quit now)\n";
  ssize_t ignored = ::write(2, kMessage, sizeof kMessage - 1);
  (void)ignored;
}

// This executable, for the worker command line.
std::string self_path() {
  char buffer[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) return "megasched";
  buffer[n] = '\0';
  return buffer;
}

/// The flags of `megasched loop`.
struct LoopCommand {
  TrialFlags trial;
  LoopOptions loop;
  StrategyOptions strategy;
  std::string device = "auto";
  bool isolate = false;
  double trial_timeout_s = 300;
  std::string start;
};

/// Runs the loop the flags describe; returns the exit code.
int run_loop_command(LoopCommand& opt) {
  std::string error;
  if (!opt.trial.parse_positions(&error)) return print_error("loop", error), kExitUsage;
  eval::EvaluatorOptions& ev = opt.trial.ev;
  opt.loop.timed_position = ev.timed_position;
  if (ev.timed_position < 0)
    return print_error("loop", "--timed-position must be >= 0"), kExitUsage;
  if (!opt.start.empty()) {
    if (opt.loop.warm_start)
      return print_error("loop", "--start and --warm-start both choose trial 0; give one"),
             kExitUsage;
    int code = kExitUsage;
    auto start = read_config_arg(opt.start, &error, &code);
    if (!start) return print_error("loop", "--start: " + error), code;
    opt.loop.start = *start;
  }
  if (!opt.strategy.proposer_command.empty()) opt.strategy.name = "proposer";
  if (opt.loop.budget < 1) return print_error("loop", "--budget must be at least 1"), kExitUsage;
  if (!(opt.trial_timeout_s > 0))
    return print_error("loop", "--trial-timeout must be more than 0 seconds"), kExitUsage;
  if (const std::string why = check_log_paths(opt.loop.results_path, opt.loop.corpus_path);
      !why.empty())
    return print_error("loop", why), kExitUsage;
  std::string device = opt.device;
  if (device == "auto") device = eval::gpu_available(nullptr) ? "gpu" : "cpu";
  ev.device = device;

  auto shape = eval::resolve_shape(ev.model, &error);
  if (!shape) return print_error("loop", error), kExitUsage;
  auto target = eval::resolve_target(ev.gpu, &error);
  if (!target) {
    const bool env = ev.gpu == "auto";
    return print_error("loop", error), env ? kExitEnvironment : kExitUsage;
  }

  std::unique_ptr<eval::Evaluator> evaluator;
  if (device == "gpu" || opt.isolate) {
    WorkerOptions w;
    w.command = shell_quote(self_path()) + " worker " + opt.trial.worker_arguments();
    w.trial_timeout_s = opt.trial_timeout_s;
    auto worker = std::make_unique<WorkerEvaluator>(w);
    if (!worker->start(&error)) return print_error("loop", error), kExitEnvironment;
    evaluator = std::move(worker);
  } else {
    bool environment = false;
    auto trial = eval::TrialEvaluator::create(ev, &error, &environment);
    if (!trial) return print_error("loop", error), environment ? kExitEnvironment : kExitUsage;
    evaluator = std::move(trial);
  }

  opt.strategy.shape = *shape;
  if (opt.strategy.name == "prior") {
    // The prior learns from every model this workspace has tried on this target and device.
    const std::string target_name = evaluator->identity().value("target", target->name);
    for (flywheel::CorpusRecord& r : flywheel::read_corpus(opt.loop.corpus_path).records)
      if (r.target == target_name && r.device == device)
        opt.strategy.training.push_back(std::move(r));
  }
  auto strategy = make_strategy(opt.strategy, &error);
  if (!strategy) return print_error("loop", error), kExitUsage;

  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  opt.loop.stop = &g_stop;
  opt.loop.progress = &std::cerr;
  opt.loop.seed = opt.strategy.seed;
  SystemClock clock;
  LoopResult result = run_loop(*evaluator, *shape, *target, *strategy, clock, opt.loop);
  if (!result.ok) {
    print_error("loop", result.error);
    if (!result.summary.is_null()) print_json(result.summary);
    return result.bad_arguments ? kExitUsage : kExitEnvironment;
  }
  print_json(result.summary);
  // Loud failure when nothing was measured: trials ran and none had a correct latency.
  return result.summary["trials"].get<int>() > 0 && result.summary["best"].is_null() ? kExitFailure
                                                                                     : kExitOk;
}

}  // namespace

void add_loop_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<LoopCommand>();
  opt->strategy.name = "hillclimb";
  auto* cmd = app.add_subcommand(
      "loop", "Search schedules: propose, evaluate, keep or revert, log every trial");
  add_model_flag(cmd, &opt->trial.ev.model);
  add_gpu_flag(cmd, &opt->trial.ev.gpu,
               "GPU target (see `megasched targets`) or auto (the live device)");
  add_device_flag(cmd, &opt->device,
                  "cpu (predicted latency), gpu (measured), or auto (gpu when one is usable)",
                  {"cpu", "gpu", "auto"});
  cmd->add_option("--budget", opt->loop.budget, "Trials in the run (counted across --resume)")
      ->check(integer_in(1, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--minutes", opt->loop.minutes, "Wall-clock budget of this invocation (0: none)")
      ->check(finite_number_in(0.0))
      ->capture_default_str();
  cmd->add_option("--plateau", opt->loop.plateau,
                  "Stop after this many trials in a row without a keep (0: never)")
      ->check(integer_in(0, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--strategy", opt->strategy.name, "random | hillclimb | prior | proposer")
      ->check(CLI::IsMember(strategy_names()))
      ->capture_default_str();
  cmd->add_option("--proposer", opt->strategy.proposer_command,
                  "External proposer command (implies --strategy proposer): context JSON on its "
                  "stdin, candidate configs on its stdout");
  cmd->add_option("--seed", opt->strategy.seed, "Strategy seed")
      ->check(unsigned_integer())
      ->capture_default_str();
  cmd->add_option("--restart-after", opt->strategy.restart_after,
                  "hillclimb: restart after this many trials without a local gain")
      ->check(integer_in(1, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--exploration", opt->strategy.exploration, "prior: share of random trials")
      ->check(finite_number_in(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--pool", opt->strategy.pool_size, "prior: random candidates ranked per trial")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--resume", opt->loop.resume,
                "Continue the last run of this model, target and device");
  cmd->add_flag("--warm-start", opt->loop.warm_start,
                "Trial 0: the best config known for this model, target and device");
  cmd->add_option("--start", opt->start,
                  "Trial 0: this config (file, - for stdin, default, or a name such as "
                  "best:llama-1b:h100) "
                  "instead of the default");
  cmd->add_option("--results", opt->loop.results_path, "results.tsv path")->capture_default_str();
  cmd->add_option("--corpus", opt->loop.corpus_path, "corpus.jsonl path")->capture_default_str();
  add_positions_flag(cmd, &opt->trial.positions);
  add_seed_flag(cmd, &opt->trial.ev.seed, "--weight-seed");
  add_timed_position_flag(
      cmd, &opt->trial.ev.timed_position,
      "Position the trials are timed (and the floor taken) at; a search is judged at one position "
      "(long context favours other attention splits than position 0)");
  cmd->add_flag("--isolate", opt->isolate,
                "Run CPU trials in a worker process too (GPU trials always are)");
  cmd->add_option("--trial-timeout", opt->trial_timeout_s,
                  "Seconds a worker trial may take before it is killed (timeout)")
      ->check(finite_number_in(0.0, 7 * 24 * 3600.0, /*min_exclusive=*/true))
      ->capture_default_str();
  cmd->callback([&ctx, opt] { ctx.exit_code = run_loop_command(*opt); });
}

}  // namespace megasched::harness
