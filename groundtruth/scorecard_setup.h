// What `megasched fuzz-validator` scores the validator on, in one place so that the CLI and the
// test that pins dev/validator_notes.md's figures (tests/groundtruth/validator_scorecard_test.cpp)
// score the same programs: the real lowerings to mutate (random configs of toy and toy-2L on the
// 4-SM fuzz target, small enough for exhaustive exploration) and the accesses of a program
// recorded by the ReferenceVm with its model's weights.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "groundtruth/scorecard.h"
#include "schedule/model.h"

namespace megasched::groundtruth {

struct ScorecardBases {
  std::vector<schedule::Program> programs;  // valid lowerings of at most 48 tasks
  /// Weights per model name (generated from the seed), for recording accesses and dynamic_check.
  std::shared_ptr<const std::map<std::string, schedule::Weights>> weights;
};

/// Up to 12 valid lowerings per model (toy, toy-2L): the default config, then random configs
/// drawn from `seed`.
ScorecardBases scorecard_bases(uint64_t seed);

/// The options of `fuzz-validator --n N --seed S`: `bases`, and `record` through the ReferenceVm
/// with the bases' weights (a hand-built program, whose model is no preset, reads none).
ScorecardOptions scorecard_options(const ScorecardBases& bases, uint64_t n, uint64_t seed);

}  // namespace megasched::groundtruth
