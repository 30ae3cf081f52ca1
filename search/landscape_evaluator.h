// An evaluator that answers from a recorded landscape (search/landscape.h) instead of a GPU, so a
// search strategy can be replayed through the real loop (run_loop and its keep rule) on a machine
// without one, as Kernel Tuner's simulation mode replays its cache.
//
// A config in the landscape gets its row's status; with status ok, `repeats` timing samples (at
// least 3, none for a predicted landscape) drawn from a normal distribution around the row's
// median with the row's sigma, and their median as the latency, as a GPU trial reports them. The
// draws come from one generator seeded at construction, so a replay of a fixed seed is identical.
//
// A config not in the landscape (a sampled landscape covers a small part of the space) is answered
// by its nearest row: the fewest knob steps away, where a step is one place along a numeric knob's
// ordered choices or any change of a named or boolean knob; ties go to the earlier row. The
// verdict's notes say which row answered. So the replay searches the landscape's nearest-neighbour
// surface: every config has a value, and strategies that jump anywhere in the space are judged
// on what the closest measurement says, never rewarded for leaving the measured region.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "search/landscape.h"

namespace megasched::search {

class LandscapeEvaluator : public eval::Evaluator {
 public:
  /// `landscape` must outlive the evaluator.
  LandscapeEvaluator(const Landscape& landscape, uint64_t noise_seed);

  eval::Verdict evaluate(const schedule::ScheduleConfig& config) override;
  /// {"model", "target", "device", "build", "landscape": true}.
  nlohmann::json identity() const override;
  std::string schedule_id(const schedule::ScheduleConfig& config) const override;

  struct Answer {
    const LandscapeRow* row = nullptr;  // the row that answers (null: empty landscape)
    int steps = 0;                      // knob steps from the config to the row (0: its own)
  };
  /// The row that answers `config`.
  Answer answer(const schedule::ScheduleConfig& config) const;
  /// The noise-free latency the replay gives `config` (its answering row's median); nullopt when
  /// that row is not ok.
  std::optional<double> true_latency_us(const schedule::ScheduleConfig& config) const;
  /// Calls to evaluate() so far (trials and the loop's re-measurements).
  int evaluations() const { return evaluations_; }

 private:
  std::vector<int> choice_indexes(const schedule::ScheduleConfig& config) const;

  const Landscape& landscape_;
  std::vector<bool> ordinal_;                // per knob: numeric choices (steps count places)
  std::vector<std::vector<int>> row_index_;  // per row: choice index per knob
  std::mt19937_64 rng_;
  int evaluations_ = 0;
};

}  // namespace megasched::search
