// The keep/revert loop (ARCHITECTURE.md, "One trial"). Trial 0 is the default config (or, with
// warm_start, the best config this workspace knows for the model, target and device); then the
// strategy proposes, the evaluator judges, and the keep rule decides:
//   1. correct first: rejected, incorrect, crash and timeout are never kept;
//   2. a candidate replaces the incumbent when it is faster by more than
//      max(min_gain x incumbent, sigmas x sigma), sigma = sqrt(sigma_cand^2 + sigma_inc^2) from
//      the timing samples (latency_sigma_us: read off their quantiles, deaf to a few outliers; a
//      prediction has sigma 0, so only the 1% applies);
//   3. on measured latencies the incumbent is re-measured back to back first and the rule is
//      applied again against that fresh time;
//   3b. with confirm rounds (--confirm R), a measured difference of at least min_gain x
//      incumbent inside the noise margin is settled by timing both again back to back R times
//      (the order alternating round by round): a candidate faster by it is kept when it was the
//      faster of the two in every round and the median of its relative gains, the first timing's
//      included, is at least min_gain; a simpler candidate slower by it, which rule 4 would trade
//      for, is refused when the incumbent passes the same test (a sign test: equal configs pass R
//      rounds with odds 2^-R at most);
//   4. a near-tie (the difference within the margin either way) goes to the config with fewer
//      knobs off the default, unless the candidate is slower than the fastest latency this run has
//      kept by more than the margin (chained trades to simpler configs cannot carry the incumbent
//      more than one margin from the fastest config the run found) or slower than the incumbent
//      by more than kMaxTradeShare (5%), however wide the noise.
// Every trial becomes a corpus record and then a results row (flywheel/). No schedule is
// evaluated twice: candidates whose schedule id any run already logged are skipped before they
// run, and --resume continues the last run of this model, target and device where it stopped.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "eval/evaluator.h"
#include "eval/objective.h"
#include "eval/verdict.h"
#include "schedule/model.h"
#include "schedule/target.h"
#include "search/strategy.h"
#include "search/trial_pool.h"

namespace megasched::search {

class CompileAhead;

/// Wall time for timestamps, elapsed time, budgets and ETA; tests script it.
class Clock {
 public:
  virtual ~Clock() = default;
  /// Seconds since the Unix epoch.
  virtual double now_s() = 0;
};

class SystemClock : public Clock {
 public:
  double now_s() override;
};

struct LoopOptions {
  int budget = 24;          // trials in the run, counted across --resume
  double minutes = 0.0;     // wall-clock budget of this invocation; 0: none
  int plateau = 0;          // stop after this many trials in a row without a keep; 0: never
  bool resume = false;      // continue the last run of this model / target / device
  bool warm_start = false;  // trial 0: the best known config instead of the default
  std::optional<schedule::ScheduleConfig> start;  // trial 0: this config; with warm_start, when
                                                  // nothing is known at the position (the plan
                                                  // search, search/plan_search.h; the CLI refuses
                                                  // --start with --warm-start)
  int timed_position = 0;     // the evaluator's timed position: warm-start adopts only such records
  eval::Objective objective;  // the evaluator's objective: warm-start adopts only its records
  std::string results_path = "workspace/results.tsv";
  std::string corpus_path = "workspace/corpus.jsonl";
  /// The shared corpus folder (flywheel/shared_corpus.h) each GPU trial is also appended to; ""
  /// or "none": none (the CLI passes flywheel::default_flywheel_dir()).
  std::string flywheel_dir;
  // The keep rule. These are the library's and a CPU loop's defaults; `megasched loop` on a GPU
  // takes half a percent with three confirm rounds (harness/verbs.h kGpuMinGain).
  double min_gain = 0.01;  // relative gain floor (1%)
  double sigmas = 2.0;     // noise multiple
  int confirm = 0;         // rule 3b: back-to-back rounds for a gain inside the noise; 0: none
  std::ostream* progress = nullptr;         // one line per trial (stderr in the CLI)
  const std::atomic<bool>* stop = nullptr;  // set by SIGINT / SIGTERM: stop after this trial
  /// Set to abandon the loop now (the MCP server, on notifications/cancelled): the trial in flight
  /// is dropped, not logged (its evaluator, watching the same flag, returns at once), and the
  /// loop stops with stop_reason "cancelled". The logs keep every trial that finished.
  const std::atomic<bool>* cancel = nullptr;
  /// Called after each logged trial: trials done (its trial number + 1), the budget, and the
  /// progress line (the MCP server's progress notifications).
  std::function<void(int done, int budget, const std::string& line)> on_trial;
  uint64_t seed = 0;  // run id suffix
  /// Compile-ahead (search/compile_ahead.h; the caller's, nullptr: none): the serial loop keeps
  /// `compile_ahead` proposals queued behind the trial in flight and their kernels building here,
  /// drops a queued proposal made against an earlier incumbent (stale) before it runs and
  /// proposes afresh; a pool keeps compile_ahead more batches queued (that many tickets per slot)
  /// and builds every queued ticket's kernel. 0 or no compile_pool: one proposal at a time, as
  /// without it.
  int compile_ahead = 0;
  CompileAhead* compile_pool = nullptr;
};

/// The keep rule applied to one candidate (inputs and outcome, recorded in the corpus).
struct KeepDecision {
  bool keep = false;
  double margin_us = 0.0;  // improvement needed to count as faster
  double gain_us = 0.0;    // incumbent - candidate (positive: the candidate is faster)
  std::string reason;      // "faster by 12.1 us (2.4%) > margin 5.0 us" ...
};

/// Samples from which a latency's sigma is read off its quantiles.
constexpr size_t kRobustSigmaSamples = 10;
/// The most of the incumbent's latency a near-tie trade to a simpler config gives up: a candidate
/// slower than this is not kept for its fewer knobs, however noisy the measurements.
constexpr double kMaxTradeShare = 0.05;

/// sigma of a verdict's latency: with >= kRobustSigmaSamples samples (p90 - p10) / 2.563 of them
/// (one sigma of a normal, deaf to a few outliers); with 2 or more their standard deviation; else
/// spread / 2.563 (the verdict's p90 - p10); else 0 (a prediction).
double latency_sigma_us(const eval::Verdict& verdict);

/// The keep rule for a correct candidate with a latency against an incumbent with one.
/// `fastest_us`: the fastest latency kept so far in this run (none: no bound on near-ties).
KeepDecision decide_keep(const eval::Verdict& candidate, int candidate_complexity,
                         const eval::Verdict& incumbent, int incumbent_complexity, double min_gain,
                         double sigmas, std::optional<double> fastest_us = std::nullopt);

struct LoopResult {
  bool ok = true;  // false: the loop could not start or could not write its logs
  std::string error;
  bool bad_arguments = false;  // with !ok: the log paths given are wrong (exit 2, not 3)
  nlohmann::json summary;      // best verdict + config, counts, stop reason, paths
};

/// Why `results` and `corpus` cannot be this loop's logs, or "" when they can: one file for both,
/// something that is not a regular file (a directory, /dev/zero), or an existing file that is not
/// such a log (a README, or the two swapped): a results file whose first line is not the header,
/// a corpus none of whose lines is a trial record. A file holding only a torn first write passes.
std::string check_log_paths(const std::string& results, const std::string& corpus);

/// Runs the loop until the budget, the minutes, a plateau, a stop request, or an exhausted
/// strategy. `shape` and `target` are the evaluator's (strategies draw configs for them). The
/// logs are checked first (check_log_paths) and held for the run (flywheel::WorkloadLock): a
/// second loop of the same model, target and device on them is refused. A trial whose evaluator
/// reports a harness failure (eval::Evaluator::harness_failure) is not logged: the loop stops
/// with the error.
LoopResult run_loop(eval::Evaluator& evaluator, const schedule::ModelShape& shape,
                    const schedule::GpuTarget& target, Strategy& strategy, Clock& clock,
                    const LoopOptions& options);

/// The same loop over a pool of evaluators (`loop --gpus`, `--workers`, `--mpi`): one trial per
/// slot at a time, the strategy proposing a batch per live slot, verdicts decided in proposal
/// order as they arrive (deterministic for a seed), each record naming the slot that timed it
/// (timed_on) and judged against the incumbent of that slot's device type (device_type()), a
/// measured winner re-measured against it on the same slot. A slot that stops answering is
/// reported and its trial requeued once (a second loss logs it as a timeout). The summary gains
/// "workers" (trials and trials/min per slot) and "other_device_types" (their incumbents).
LoopResult run_loop_on_pool(TrialPool& pool, const schedule::ModelShape& shape,
                            const schedule::GpuTarget& target, Strategy& strategy, Clock& clock,
                            const LoopOptions& options);

/// "1:05:09" / "4:07".
std::string format_duration(double seconds);

}  // namespace megasched::search
