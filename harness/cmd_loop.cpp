// `megasched loop`: the keep/revert loop over a budget of trials (search/loop.h). One progress
// line per trial on stderr, the summary JSON on stdout (the loop itself: run_loop_command in
// harness/verbs.h). GPU trials run in a `megasched worker` child (search/worker_evaluator.h); CPU
// trials run in process unless --isolate. --gpus / --workers run one worker per GPU or CPU slot,
// --mpi one per MPI rank (search/trial_pool.h, search/mpi_pool.h).
// --plan-buckets / --plan: a plan searched bucket by bucket, one loop each (harness/plan_loop.h).
// SIGINT / SIGTERM: the current trial finishes and is logged, then the summary prints; a second
// signal ends the process at once (the logs stay whole: every line is one locked append).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "eval/evaluate.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/plan_loop.h"
#include "harness/run_record.h"
#include "harness/trial_flags.h"
#include "harness/verbs.h"
#include "schedule/format.h"
#include "schedule/lookup.h"
#include "schedule/lower.h"
#include "search/strategy.h"

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

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

/// The keep rule's flags (search/loop.h states the rule; harness/verbs.h kGpuMinGain the defaults).
void add_keep_rule_flags(CLI::App* cmd, LoopCommand* opt) {
  cmd->add_option("--min-gain", opt->min_gain,
                  "Keep rule: a candidate replaces the incumbent when faster by more than this "
                  "share of it and by more than 2 sigma of the two timings' noise. Default " +
                      schedule::fmt("%g", kGpuMinGain) + " on a GPU device (with --confirm), " +
                      schedule::fmt("%g", search::LoopOptions{}.min_gain) +
                      " on the CPU (predicted latencies)")
      ->check(finite_number_in(0.0, 0.5));
  cmd->add_option("--confirm", opt->confirm,
                  "Keep rule: a measured difference of --min-gain or more inside the noise is "
                  "settled by timing both configs again back to back this many rounds: a faster "
                  "candidate is kept, and a simpler slower one (a near-tie trade) refused, when "
                  "the faster side won every round by --min-gain in the median (0: never). "
                  "Default " +
                      std::to_string(kGpuConfirm) +
                      " on a GPU device; the CPU's predicted latencies take no rounds")
      ->check(integer_in(0, 10));
}

}  // namespace

void add_loop_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<LoopCommand>();
  opt->strategy.name = search::StrategyOptions{}.name;  // sweep: BENCHMARKS.md, the GPU searches
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
  add_keep_rule_flags(cmd, opt.get());
  cmd->add_option("--strategy", opt->strategy.name,
                  "random | hillclimb | elite | sweep | guided | prior | bandit | proposer")
      ->check(CLI::IsMember(search::strategy_names()))
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
  cmd->add_option("--elite", opt->strategy.elite_size,
                  "elite, sweep, guided: the fastest configs kept to restart or breed from")
      ->check(integer_in(1, 4096))
      ->capture_default_str();
  cmd->add_option("--candidates", opt->strategy.candidates,
                  "guided: candidates the model ranks per proposal")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--guard", opt->strategy.guard,
                  "guided: a candidate predicted slower than this x the incumbent is measured "
                  "only as exploration")
      ->check(finite_number_in(1.0))
      ->capture_default_str();
  cmd->add_option("--exploration", opt->strategy.exploration,
                  "prior, guided: share of random trials")
      ->check(finite_number_in(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--pool", opt->strategy.pool_size, "prior: random candidates ranked per trial")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  add_bandit_flags(cmd, &opt->strategy);
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
  add_flywheel_flag(cmd, &opt->flywheel_dir);
  add_corpus_stale_flag(cmd, &opt->corpus_stale);
  add_positions_flag(cmd, &opt->trial.positions);
  add_seed_flag(cmd, &opt->trial.ev.seed, "--weight-seed");
  add_timed_position_flag(
      cmd, &opt->trial.ev.timed_position,
      "Position the trials are timed (and the floor taken) at; a search is judged at one position "
      "(long context favours other attention splits than position 0), or with --objective over "
      "several");
  add_objective_flag(
      cmd, &opt->trial.objective,
      "Judge every trial by its weighted mean latency over several positions: "
      "POS:WEIGHT,POS:WEIGHT,... (e.g. 0:1,1024:1,4096:2; a bare POS weighs 1), each timed (or "
      "predicted) in turn; the keep rule compares these means, and --warm-start adopts only "
      "records of the same objective. Instead of --timed-position");
  add_baselines_flag(cmd, &opt->trial.ev.gpu_options.baselines, "auto");
  add_stop_slower_flag(cmd, &opt->trial.ev.stop_slower, opt->trial.ev.stop_slower);
  cmd->add_flag("--isolate", opt->isolate,
                "Run CPU trials in a worker process too (GPU trials always are)");
  cmd->add_option("--gpus", opt->gpus,
                  "One worker per GPU: all, or GPU indexes (0,1,...); trials run on all at once")
      ->type_name("all|LIST");
  cmd->add_option("--workers", opt->workers,
                  "CPU trials in this many worker processes at once (--device cpu)")
      ->check(integer_in(1, 4096));
  cmd->add_flag("--mpi", opt->mpi,
                "Under mpirun: rank 0 runs the loop, every other rank one GPU or CPU trial slot "
                "(a build with -DMEGASCHED_MPI=ON)");
  cmd->add_option("--rank-timeout", opt->rank_timeout_s,
                  "--mpi: seconds an MPI rank may stay silent past the trial and worker start "
                  "timeouts before it counts as lost (its trial is requeued once)")
      ->check(finite_number_in(0.0, 7 * 24 * 3600.0, /*min_exclusive=*/true))
      ->capture_default_str();
  cmd->add_option("--trial-timeout", opt->trial_timeout_s,
                  "Seconds a worker trial may take before it is killed (timeout)")
      ->check(finite_number_in(0.0, 7 * 24 * 3600.0, /*min_exclusive=*/true))
      ->capture_default_str();
  add_compile_threads_flag(cmd, &opt->compile_threads);
  cmd->add_option("--compile-ahead", opt->compile_ahead,
                  "GPU trials: proposals kept queued behind the trial in flight, their kernels "
                  "built meanwhile by --compile-threads CPU threads into the cubin cache (a "
                  "queued proposal made against an earlier incumbent is dropped unrun); with "
                  "--gpus/--mpi, that many more tickets queued per worker. Default " +
                      std::to_string(kDefaultCompileAhead) +
                      " with --device gpu (per worker with --gpus/--mpi); 0: off; not for "
                      "--device cpu")
      ->check(integer_in(0, 1024));
  auto runs = std::make_shared<std::pair<std::string, bool>>("", false);
  cmd->add_option("--runs-dir", runs->first,
                  "Folder of run directories (default: runs/ beside --results); the loop writes "
                  "<runs-dir>/<run id>/ when it ends");
  cmd->add_flag("--no-run-dir", runs->second, "Write no run directory for this run");
  auto plan = std::make_shared<PlanLoopFlags>();
  cmd->add_option("--plan-buckets", plan->buckets,
                  "Search a plan: each bucket's first position, ascending from 0 (0,512,2048: "
                  "[0,512) [512,2048) [2048,max)); each bucket is a loop timed at its midpoint, "
                  "checked at its ends, --budget split evenly (HARNESS.md section 15)");
  cmd->add_option("--plan", plan->plan,
                  "Search a plan starting from this one (file, -, or best:MODEL:GPU): its buckets, "
                  "each seeded with its config unless a config is known at the bucket's timed "
                  "position");
  cmd->callback([&ctx, opt, runs, plan] {
    opt->on_start = install_stop_handlers;
    opt->loop.stop = &g_stop;
    opt->loop.progress = &std::cerr;
    if (plan->given()) {
      plan->runs_dir = runs->first;
      plan->no_run_dir = runs->second;
      ctx.exit_code = finish_verb("loop", run_plan_loop_command(*opt, *plan));
      return;
    }
    if (!runs->second)
      opt->on_end = [runs, command = opt.get()](const VerbResult& result) {
        write_loop_run_dir(runs->first, *command, result);  // opt owns this hook: no cycle
      };
    ctx.exit_code = finish_verb("loop", run_loop_command(*opt));
  });
}

}  // namespace megasched::harness
