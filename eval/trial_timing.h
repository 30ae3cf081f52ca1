// Step 3 of a trial (eval/evaluate.h): the latency of a program that passed its checks, measured
// on the GPU (with the baselines it is compared against) or predicted by the cost model, at the
// timed position or over an objective, each through the test-only seam in front of the floor
// guard (EvaluatorOptions::latency_for_testing).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eval/baselines/baseline.h"
#include "eval/roofline.h"
#include "eval/trial_reference.h"
#include "eval/verdict.h"
#include "schedule/model.h"
#include "schedule/program.h"
#include "schedule/target.h"

namespace megasched::eval {

struct EvaluatorOptions;  // eval/evaluate.h

/// The smallest early-stop factor other than 0 (off): below it a trial as fast as the fastest
/// within the noise could be cut short.
constexpr double kStopSlowerMin = 1.05;
/// Why `stop_slower` is no early-stop factor ("" when it is: 0, or finite and >= kStopSlowerMin).
std::string stop_slower_error(double stop_slower);

/// The latency above which a GPU trial at `position` stops timing early
/// (GpuTrialOptions::stop_above_us): `stop_slower` x the fastest latency measured there so far;
/// 0 (time every iteration) when stop_slower is 0 or nothing was measured there yet.
double stop_bound_us(double stop_slower, const std::map<int, double>& fastest_us, int position);

class TrialTimer {
 public:
  /// `fastest_us` (per position, the evaluator's fastest correct latencies) sets each GPU trial's
  /// early stop with options.stop_slower; null: none.
  TrialTimer(const EvaluatorOptions& options, const schedule::Weights& weights,
             const schedule::GpuTarget& target, const TrialReference& reference,
             const std::map<int, double>* fastest_us = nullptr)
      : options_(options),
        weights_(weights),
        target_(target),
        reference_(reference),
        fastest_us_(fastest_us) {}

  /// The latency, measured or predicted, at the timed position or over the objective (nullopt: a
  /// failure status or a cost model that did not drain; the verdict says which).
  std::optional<double> time(const schedule::Program& program, const Floor& floor, Verdict* v);

 private:
  /// Over an objective: each position timed in turn, its figures into v->objective; the weighted
  /// mean latency (nullopt as soon as a position has none).
  std::optional<double> time_objective(const schedule::Program& program, Verdict* v);
  /// On a GPU at `position`: the kernel's correctness and its median latency (nullopt: a failure
  /// status). *medians (when given) gets each baseline kind's median.
  std::optional<double> measure_on_gpu(const schedule::Program& program, int position, Verdict* v,
                                       std::vector<BaselineMedian>* medians = nullptr);
  /// Without one: the cost model's latency at `position` (nullopt: its simulation did not drain).
  std::optional<double> predict_latency(const schedule::Program& program, int position,
                                        const Floor& floor, Verdict* v);

  const EvaluatorOptions& options_;
  const schedule::Weights& weights_;
  const schedule::GpuTarget& target_;
  const TrialReference& reference_;
  const std::map<int, double>* fastest_us_;
};

}  // namespace megasched::eval
