// validate(): proves a Program safe to launch, or says exactly why not. It never throws and never
// crashes, however malformed the program. Rules (dev/validator_notes.md argues each):
// clang-format off
//   structure     operands in bounds, opcode, flags and arity agree, each task in exactly one queue
//   reachability  every wait threshold <= the increments its counter can ever receive in a step
//   deadlock      in-order per-queue execution with monotone counters drains every queue
//   race          every pair of tasks touching overlapping elements, one writing, is ordered by
//                 guaranteed happens-before (queue order + counter edges a wait truly implies)
//                 and every element a task reads as tagged words (kFlagTagIn) is written by
//                 tasks that write tagged words (kFlagTagOut)
//   coverage      every op's output written exactly once by its tiles; nothing reads elements no
//                 task writes (except inputs: weights, the rope table, the step cell, KV history)
//   launch        threads a multiple of 32 in [32, 1024], smem within the opt-in cap, the whole
//                 grid co-resident on the target
// clang-format on
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/program.h"
#include "schedule/target.h"

namespace megasched::schedule {

/// One violation.
struct Diagnostic {
  std::string rule;  // "structure" | "reachability" | "deadlock" | "race" | "coverage" | "launch"
  std::string message;               // one sentence a person understands
  std::vector<uint32_t> tasks;       // tasks involved
  std::vector<uint32_t> counters;    // counters involved
  std::vector<std::string> buffers;  // buffer ranges involved ("act[2048:4096]")
};

struct ValidationReport {
  std::vector<Diagnostic> diagnostics;  // empty: safe
  bool ok() const { return diagnostics.empty(); }
  /// Distinct rule names in first-seen order ("deadlock,race").
  std::string rules() const;
};

/// Checks every rule; no rule is skipped for size.
ValidationReport validate(const Program& program, const GpuTarget& target);

nlohmann::json to_json(const Diagnostic& diagnostic);
nlohmann::json to_json(const ValidationReport& report);

}  // namespace megasched::schedule
