// One invocation of the loop (search/loop.h), as its parts see it: the inputs, the run it
// continues or starts, the counts and the outcome. LoopRun (search/loop.cpp) owns it; the logs
// (loop_logs.h), the keep rule (keep_rule.h) and the schedules (loop_schedule.h) read and update
// it. Private to search/.
#pragma once

#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/evaluator.h"
#include "schedule/model.h"
#include "schedule/target.h"
#include "search/loop.h"
#include "search/strategy.h"
#include "search/trial_pool.h"

namespace megasched::search {

struct LoopContext {
  LoopContext(eval::Evaluator& evaluator, const schedule::ModelShape& shape,
              const schedule::GpuTarget& target, Strategy& strategy, Clock& clock,
              const LoopOptions& options, TrialPool* pool)
      : pool(pool),
        evaluator(evaluator),
        shape(shape),
        target(target),
        strategy(strategy),
        clock(clock),
        options(options),
        start_s(clock.now_s()),
        identity(evaluator.identity()),
        model(identity.value("model", shape.name)),
        target_name(identity.value("target", target.name)),
        device(identity.value("device", "cpu")),
        primary_type(device_type(identity)) {}

  /// A problem the run goes on after: on the progress stream and in the summary's problems.
  void warn(const std::string& message) {
    problems.push_back(message);
    if (options.progress) *options.progress << "warning: " << message << "\n";
  }

  bool fail(const std::string& error) {
    result.ok = false;
    result.error = error;
    return false;
  }

  bool cancelled() const { return options.cancel && options.cancel->load(); }

  /// After a cancellation the trial in flight is dropped, not logged (its verdict is the
  /// evaluator's placeholder). True when that is the case.
  bool abandoned(int trial) {
    if (!cancelled()) return false;
    stop_reason = "cancelled";
    if (options.progress)
      *options.progress << "trial " << trial << " cancelled in flight: not logged\n";
    return true;
  }

  /// Why the loop stops before the next trial ("" to go on).
  std::string stop_condition() const {
    if (cancelled()) return "cancelled";
    if (next_trial >= options.budget) return "budget";
    if (options.stop && options.stop->load()) return "interrupted";
    if (options.minutes > 0 && clock.now_s() - start_s >= options.minutes * 60.0) return "minutes";
    if (options.plateau > 0 && since_keep >= options.plateau) return "plateau";
    return "";
  }

  // Inputs.
  TrialPool* pool;  // nullptr: one evaluator, one trial at a time
  eval::Evaluator& evaluator;
  const schedule::ModelShape& shape;
  const schedule::GpuTarget& target;
  Strategy& strategy;
  Clock& clock;
  const LoopOptions& options;
  const double start_s;
  const nlohmann::json identity;
  const std::string model, target_name, device;
  const std::string primary_type;  // device type of the evaluator (a pool's first slot)
  // This run.
  std::string run_id;
  bool resumed = false;
  std::vector<TrialOutcome> history;
  std::set<std::string> this_run_ids;
  std::map<std::string, int> counts;
  int next_trial = 0;
  int since_keep = 0;
  // This invocation.
  int evaluations = 0;
  int skipped_known = 0;
  int stale_proposals = 0;  // queued proposals dropped unrun: the incumbent changed (compile-ahead)
  int trials_this_invocation = 0;
  double trial_time_total = 0.0;
  std::string stop_reason;
  nlohmann::json problems = nlohmann::json::array();
  LoopResult result;
};

}  // namespace megasched::search
