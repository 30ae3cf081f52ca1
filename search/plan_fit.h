// A plan fitted to measurements (`bench --fit-plan`, HARNESS.md section "Plans"): given the
// checked, timed medians of several configs at several positions, the plan that runs at every
// position the config measured fastest there, its boundaries where the latencies cross.
//   winner    at each measured position, the fastest config; the config already running keeps its
//             place while it is within `tie_margin` (relative) of the fastest, so noise makes no
//             boundary
//   boundary  between measured positions p < q where the winner changes from A to B, the position
//             where A's and B's latencies cross on the straight lines through their medians at p
//             and q (a latency grows about linearly with the position between two measurements),
//             rounded up, so the bucket of B begins inside (p, q]
//   merge     adjacent buckets of one config are one bucket
// The measurements must include position 0 (a plan covers every position from 0); the last
// winner runs to the model's end.
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
  std::vector<double> median_us;  // one per PlanFitInput::positions, in that order
};

struct PlanFitInput {
  std::vector<int> positions;  // measured positions, strictly ascending, the first 0
  std::vector<MeasuredConfig> configs;
  double tie_margin = 0.01;  // a running config stays while within this share of the fastest
};

struct PlanFit {
  schedule::Plan plan;
  std::vector<std::string> labels;  // per bucket of plan: its config's label
  /// {"positions", "winners": [label per position], "buckets": [{"begin", "end", "config"
  /// (label), "crossover_between": [p, q] (buckets after the first)}], "tie_margin"}
  nlohmann::json explain;
};

/// The fitted plan, or nullopt with *error (and a hint) when the input cannot make one: no
/// config, positions not ascending from 0, a config without a median at every position, a median
/// that is not a positive finite number.
std::optional<PlanFit> fit_plan(const PlanFitInput& input, std::string* error);

}  // namespace megasched::search
