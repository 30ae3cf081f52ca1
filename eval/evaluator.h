// The evaluator seam: the loop, the strategies and the CLI ask one interface for a Verdict, so the
// CPU evaluator (predicted latency), the GPU evaluator (measured latency, in a worker process) and
// the fakes in tests all plug in the same way.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"
#include "schedule/config.h"

namespace megasched::eval {

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  /// One trial of `config`. Never throws for an expected failure (bad lowering, rejected program,
  /// wrong output, crash, hang): those are verdicts.
  virtual Verdict evaluate(const schedule::ScheduleConfig& config) = 0;
  /// Model, target and device this evaluator serves, for logs:
  /// {"model":..,"target":..,"device":..}.
  virtual nlohmann::json identity() const = 0;
  /// The schedule id this evaluator would give `config` (hash of canonical config + model +
  /// target + build identity), without evaluating it: the loop dedups on it before a trial.
  virtual std::string schedule_id(const schedule::ScheduleConfig& config) const = 0;
  /// Why the last evaluate() could not judge its schedule at all, "" when it did: a failure on the
  /// harness's side (a worker that cannot start, dies between trials, or breaks the protocol).
  /// Its verdict is then no verdict on the schedule, and the loop must not log it as one (a later
  /// run would take the schedule as tried and never try it again).
  virtual std::string harness_failure() const { return {}; }
};

/// The versions every trial record carries: {"abi", "ir", "build"}. The program's binary form is
/// the ABI, so the IR version is the ABI version unless the identity names one ("ir_version"); the
/// build is the identity's "build", else vm::build_identity() of this binary.
nlohmann::json trial_versions(const nlohmann::json& identity);

}  // namespace megasched::eval
