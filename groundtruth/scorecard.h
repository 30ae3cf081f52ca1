// The scorecard that holds validate() to the ground truth (groundtruth/ground_truth.h) on the
// fuzzer's programs (groundtruth/program_fuzz.h): run_scorecard generates n programs from a seed
// (half one-defect mutants of real lowerings or safe random DAGs, half random DAGs), asks the
// ground truth and validate() about each, and tallies per class: generated, unsafe by the ground
// truth, accepted-unsafe (must be 0), rejected-safe (each with its reason: worker occupancy, a
// documented rule, or unexplained) and inconclusive. `megasched fuzz-validator` prints it;
// dev/validator_notes.md ("Scorecard") holds its figures.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/program.h"

namespace megasched::groundtruth {

/// One scorecard row (a mutation class or a DAG recipe).
struct ScorecardRow {
  std::string name;
  uint64_t generated = 0;
  uint64_t unsafe = 0;           // unsafe by the ground truth
  uint64_t accepted_unsafe = 0;  // validate() accepted a program the ground truth calls unsafe
  uint64_t rejected_safe = 0;    // validate() rejected a program the ground truth calls safe
  uint64_t rejected_safe_occupancy =
      0;  // of those: safe only because busy dynamic-queue workers order tasks
  uint64_t rejected_safe_documented = 0;   // of those: by a documented rule
                                           // (dev/validator_notes.md)
  uint64_t rejected_safe_unexplained = 0;  // of those: neither (must be 0)
  uint64_t inconclusive = 0;  // the ground truth hit its state limit before finding a hazard
                              // (not counted above)
  std::vector<std::string>
      rejected_safe_reasons;  // validate()'s rules, "rule: first message", first few
  std::vector<std::string> accepted_unsafe_cases;  // ground-truth finding, first few
};

struct ScorecardOptions {
  uint64_t n = 10000;
  uint64_t seed = 1;
  /// Valid base programs to mutate (real lowerings); safe random DAGs are used as well.
  std::vector<schedule::Program> bases;
  /// Records a program's element accesses at a position for the ground truth (ground_truth.h
  /// record_accesses with the model's weights); the scorecard asks for every position of
  /// ground_truth_positions. When empty it uses element-wise kAdd semantics, which is exact for
  /// ProgramBuilder programs only, and skips bases.
  std::function<bool(const schedule::Program&, int32_t position,
                     std::vector<std::vector<uint64_t>>* reads,
                     std::vector<std::vector<uint64_t>>* writes)>
      record;
  std::function<void(uint64_t done)> progress;
  /// Called for every program validate() rejects although the ground truth calls it safe.
  std::function<void(uint64_t index, const std::string& name, const schedule::Program& program)>
      on_rejected_safe;
};

struct Scorecard {
  std::vector<ScorecardRow> rows;
  ScorecardRow total;
  double seconds = 0.0;
};

Scorecard run_scorecard(const ScorecardOptions& options);
nlohmann::json to_json(const Scorecard& scorecard);
/// The human-readable table (one line per class).
std::string format_scorecard(const Scorecard& scorecard);

}  // namespace megasched::groundtruth
