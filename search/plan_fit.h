// A plan fitted to measurements (`bench --fit-plan`, HARNESS.md section "Plans"): given the
// checked, timed medians of several configs at several positions, the plan that runs at every
// position the config whose latency is lowest there, its boundaries where the latencies cross.
//   lines     between two positions p < q a config was measured at, its latency is the straight
//             line through its medians at p and q (a latency grows about linearly with the
//             position between two measurements); a config competes from its first measured
//             position to its last; after the last measured position the config in force there
//             runs on
//   envelope  at every position the config on the lowest line; a config that is fastest at no
//             measured position still gets the positions where its line is the lowest (between
//             a config fast early and one fast late, a third can be lowest in the middle), and
//             each boundary is where two lines cross, rounded up (a tie goes to the config whose
//             line falls faster, the one ahead just after)
//   margin    the config already running keeps its place over a stretch of the envelope where
//             another is lowest by no more than `tie_margin` (relative) anywhere, so noise makes
//             no boundary; where a config does beat the running one by more, its bucket begins
//             where its line last crossed below the running config's
//   merge     adjacent buckets of one config (two labels of the same JSON) are one bucket
// The measurements must include position 0 (a plan covers every position from 0); the last
// bucket runs to the model's end.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/config.h"
#include "schedule/plan.h"

namespace megasched::search {

struct MeasuredConfig {
  std::string label;
  schedule::ScheduleConfig config;
  /// One per position of `positions`, in that order (empty `positions`: one per
  /// PlanFitInput::positions).
  std::vector<double> median_us;
  /// The positions this config was measured at, strictly ascending, each one of
  /// PlanFitInput::positions; empty: all of them. Its lines span its first to its last: a config
  /// measured from 0 to 4096 competes everywhere, one measured at 8-100 only between them.
  std::vector<int> positions = {};
};

struct PlanFitInput {
  std::vector<int> positions;  // measured positions, strictly ascending, the first 0
  std::vector<MeasuredConfig> configs;
  double tie_margin = 0.01;  // a running config stays while within this share of the fastest
};

struct PlanFit {
  schedule::Plan plan;
  std::vector<std::string> labels;  // per bucket of plan: its config's label
  /// {"positions", "winners": [label per measured position: the config the plan runs there],
  /// "buckets": [{"begin", "end", "config" (label), "crossover_between": [p, q] (buckets after
  /// the first: the measured positions around its begin), "fastest_at": [the measured positions
  /// in the bucket where its config measured fastest; empty: chosen between measurements]}],
  /// "tie_margin"}
  nlohmann::json explain;
};

/// The fitted plan, or nullopt with *error (and a hint) when the input cannot make one: no
/// config, positions not ascending from 0, no config measured at 0, a config whose medians do not
/// match its positions or whose positions are not measured ones, a median that is not a positive
/// finite number.
std::optional<PlanFit> fit_plan(const PlanFitInput& input, std::string* error);

}  // namespace megasched::search
