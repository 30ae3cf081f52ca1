// One trial, end to end (ARCHITECTURE.md, "One trial"): lower -> validate -> ReferenceVm vs
// reference -> (GPU: kernel vs reference, timing, baseline) or (CPU: cost-model prediction) ->
// floor -> Verdict.
// The checked positions are --positions and the timed position (with an objective,
// eval/objective.h: every objective position). For each, the reference window
// (eval/reference_cache.h: the reference KV cache before it and the logits of check_steps
// consecutive steps) comes from the disk cache or one pass of a reference engine
// (eval/reference_forward.h), so a check at position 4096 costs a few steps, not 4096. The
// TrialEvaluator holds the model's weights and the windows, so a worker pays for them once and each
// trial pays only for its own program.
// With an objective the trial is timed (or predicted) at each of its positions in turn; the
// verdict's latency_us, floor_us and floor_datasheet_us are the weighted means, its "objective"
// field holds the per-position figures, and it gets a latency only when every position has one
// (none below its floor).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/baselines/baseline.h"
#include "eval/device.h"
#include "eval/evaluator.h"
#include "eval/gpu_trial.h"
#include "eval/objective.h"
#include "eval/reference_cache.h"
#include "eval/roofline.h"
#include "eval/trial_reference.h"
#include "eval/trial_timing.h"
#include "eval/verdict.h"
#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/program.h"
#include "schedule/target.h"
#include "schedule/validate.h"
#include "vm/reference_vm.h"

namespace megasched::eval {

/// Models with at most this many weight elements get the ReferenceVm walk from position 0 over
/// every checked window (its own KV writes at every position); larger ones get the sampled check:
/// the timed position alone (with an objective, each of its positions), from the reference KV
/// cache (the verdict's reference.reference_vm).
constexpr int64_t kReferenceVmWalkElements = int64_t{1} << 24;
/// The most threads an automatic (reference_vm_threads 0) sampled ReferenceVm check takes: it runs
/// beside the GPU phases of a trial while compile-ahead threads build the next kernels.
constexpr int kReferenceVmAutoThreads = 8;

struct EvaluatorOptions {
  std::string model = "toy";               // preset name or checkpoint directory
  std::string gpu = "h100";                // registry target name, or "auto" (the live device)
  std::string device = "cpu";              // "cpu" (predicted latency) | "gpu" (measured)
  std::vector<int> positions = {0, 3, 7};  // positions whose logits are checked
  int timed_position = 0;                  // position the latency (and the floor) refer to
  Objective objective;  // positions timed and their weights (eval/objective.h); empty: the
                        // timed position alone. With one, timed_position must stay 0.
  uint64_t seed = 0;    // preset weight seed; also seeds the token sequence
  GpuTrialOptions gpu_options;
  bool skip_validation = false;     // test-only: run a program the validator rejected
  int check_steps = 3;              // consecutive steps checked from each checked position (>= 1)
  std::string reference = "auto";   // engine for windows not in the cache: auto (gpu with --device
                                    // gpu, else cpu) | cpu (eval/eager.h) | gpu (gpu_reference.h)
  std::string reference_cache_dir;  // empty: default_reference_cache_dir(); "none": no disk cache
  int64_t reference_vm_walk_elements = kReferenceVmWalkElements;  // see the constant
  /// The threads of the sampled ReferenceVm check (its step in waves, vm::RunOrder::kWaves: the
  /// same logits as in queue order); 0: auto, the hardware threads up to
  /// kReferenceVmAutoThreads. The walk of a small model stays in queue order on one thread.
  int reference_vm_threads = 0;
  /// GPU trials: a trial's timing stops after GpuTrialOptions::stop_check_iterations steps when
  /// their median is above this many times the fastest latency this evaluator has measured at that
  /// position in a correct trial (stop_bound_us); 0: every trial times all its iterations.
  double stop_slower = 0.0;
  /// Test-only seam in the timing path: when set, the latency the timing step gives at a position
  /// (measured or predicted, before the floor guard) is replaced by what it returns, so a test
  /// can put a sub-floor time in front of the guard. No config, flag or worker message sets it.
  std::function<double(int position, double latency_us)> latency_for_testing;
  /// Given a line (no newline) every few seconds of a step that can run long: the reference
  /// windows that are not in the cache. Empty: silent.
  std::function<void(const std::string&)> progress;
};

/// Resolves a target name: "auto" reads the live device, any other name the registry
/// (schedule::find_target_named; model names: schedule/lookup.h).
std::optional<schedule::GpuTarget> resolve_target(const std::string& gpu, std::string* error);

class TrialEvaluator : public Evaluator {
 public:
  /// Loads the model and target and computes the eager reference once. nullptr + *error on a bad
  /// model, target or device, or a model whose own eager forward is not finite (a checkpoint's
  /// constants or weights, never a schedule's fault). *environment (when given) says whether the
  /// failure is the machine's (no GPU for --device gpu or --gpu auto, not enough memory) rather
  /// than the arguments'.
  static std::unique_ptr<TrialEvaluator> create(const EvaluatorOptions& options, std::string* error,
                                                bool* environment = nullptr);

  Verdict evaluate(const schedule::ScheduleConfig& config) override;
  nlohmann::json identity() const override;
  std::string schedule_id(const schedule::ScheduleConfig& config) const override;

  /// Whether a ready-made program belongs to this evaluator's model and target
  /// (schedule::check_program_fits_model): false with *error naming the field that differs.
  bool check_program(const schedule::Program& program, std::string* error) const;
  /// Runs a ready-made program (`megasched evaluate --program`, tests that force a program past
  /// the validator). `schedule_id` labels the verdict. A program that fails check_program is
  /// rejected (rule "program") without running: its buffers would not be the model's.
  Verdict evaluate_program(const schedule::Program& program, const std::string& schedule_id);

  const schedule::ModelShape& shape() const { return weights_.shape; }
  const schedule::GpuTarget& target() const { return target_; }
  const EvaluatorOptions& options() const { return options_; }

 private:
  TrialEvaluator() = default;
  TrialEvaluator(const TrialEvaluator&) = delete;  // reference_ points into weights_
  TrialEvaluator& operator=(const TrialEvaluator&) = delete;
  static std::unique_ptr<TrialEvaluator> create_unguarded(const EvaluatorOptions& options,
                                                          std::string* error, bool* environment);
  /// The trial of a lowered program the validator has judged (steps 1-4 of the header).
  /// `breakdown` holds the phases timed before it (lower, validate); judge adds its own.
  Verdict judge(const schedule::Program& program, const schedule::ValidationReport& report,
                const std::string& schedule_id, nlohmann::json breakdown);
  /// Steps 2 and 3 of judge: the ReferenceVm check, then the latency (measured or predicted);
  /// on the GPU with a sampled check the two run at once. No latency unless both pass.
  std::optional<double> check_and_measure(const schedule::Program& program, bool valid,
                                          const Floor& floor, Verdict* v);
  /// The positions the trial is timed at, ascending: the objective's, else the timed position.
  std::vector<int> timed_positions() const;

  EvaluatorOptions options_;
  schedule::Weights weights_;
  schedule::GpuTarget target_;
  std::vector<int> checked_;                 // --positions and the timed position(s), ascending
  std::optional<TrialReference> reference_;  // the windows, the tokens fed, their origins
  std::map<int, double> fastest_us_;  // per timed position: the fastest correct measured latency
  std::string target_mismatch_;       // a GPU run whose --gpu names another GPU than the live one
};

/// Why timing on the live GPU named `live_name` under the registry target `named` (a named --gpu)
/// labels the timings with another GPU's name ("" when the live GPU is that target, or is no
/// registry target to compare with): one note every verdict of such a run carries.
std::string gpu_target_mismatch(const std::string& live_name, const schedule::GpuTarget& named);

/// The schedule id TrialEvaluator::schedule_id gives `config` for this model name, weight seed,
/// target name, device, timed position and objective: a pure function, so a coordinator that only
/// knows a worker's identity (search/trial_pool.h) computes the same ids the worker would. A
/// timed position other than 0 appends "|posP", an objective "|obj" + objective_text (its
/// canonical form); ids of position 0 without an objective are those of old.
std::string trial_schedule_id(const schedule::ScheduleConfig& config, const std::string& model,
                              uint64_t seed, const std::string& target, const std::string& device,
                              int timed_position, const Objective& objective = {});

/// The token fed at each position 0 .. count-1 (deterministic in the seed).
std::vector<int32_t> trial_tokens(int vocab, int count, uint64_t seed);

}  // namespace megasched::eval
