// The bottleneck class of one trial: what kind of limit a correct config hits, so a search (or an
// agent) knows which knob axis to move next. Four classes (HARNESS.md section 14 writes the rule):
//   memory        the step streams near the floor's bandwidth: only fewer bytes would help
//   latency-sync  waits and signals (dependency hops) dominate the critical path
//   compute       consumer-bound: the ops' execution, not the bytes or the hops, sets the time
//                 (exec time per byte above the per-SM streaming rate)
//   launch        the launch is over a limit or under-occupied: rejected by the launch rule, a
//                 kernel that spills, or fewer co-resident blocks per SM than the config asks
// From a profile (eval/profile.h analysis) when one was taken, otherwise from the verdict's
// numbers. A trial with no latency (rejected for another rule, incorrect, crash, timeout) has no
// class (null).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"

namespace megasched::eval {

/// The four class names, in the order the report lists them.
const std::vector<std::string>& bottleneck_classes();

// The rule's thresholds (HARNESS.md section 14 quotes them).
constexpr double kMemoryPctOfFloor = 50.0;  // at or above this % of the floor: memory-bound
/// Cost of one dependency hop on the critical path (a counter signal crossing L2 to a spinning
/// waiter on another SM) the verdict-only rule charges per stage. A rule constant, not a
/// measurement: a profile replaces the estimate with the stamped wait and signal times.
constexpr double kDependencyHopUs = 1.0;

/// {"class": "memory", "source": "verdict" | "profile", "reason": "..."}: the class of a verdict,
/// or null when it has none. `critical_path_stages` is the program's longest chain of dependent
/// tasks (schedule::predict); `num_sms` the target's SM count (0: unknown).
nlohmann::json classify_verdict(const Verdict& verdict, double critical_path_stages, int num_sms);

/// The class of a profiled step: `analysis` is analyze_profile's document (its totals and
/// critical_path), `kernel_info` the launch's registers / spills / occupancy, `floor_us` the
/// step's floor at the profiled position. Null when the analysis has no span.
nlohmann::json classify_profile(const nlohmann::json& analysis, const nlohmann::json& kernel_info,
                                double floor_us, int grid_blocks, int num_sms);

/// The knob axis to move next for a class: the knob paths of one axis, in the order to try them,
/// and why. `propose --verdict` prints it.
struct AxisSuggestion {
  std::string axis;                // "kernel", "dependencies+fusion", "tiling", "launch"
  std::vector<std::string> knobs;  // knob paths (schedule/config.cpp knob_table)
  std::string why;
};
/// nullopt for a name that is not a class.
std::optional<AxisSuggestion> suggest_axis(const std::string& bottleneck_class);

}  // namespace megasched::eval
