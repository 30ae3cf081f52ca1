// Named configs: the record of a model on a device, a config or a plan over positions
// (schedule/plan.h), kept in the binary so anyone can re-evaluate it by name (`megasched evaluate
// --config best:llama-1b:h200`; a verb of one config at one position takes the bucket that holds
// it). Each entry names the run that measured it and the figure that run measured; the figure is a
// record of that run, not a promise: re-evaluating re-measures. A promoted registry entry of the
// same name comes first (flywheel/registry.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/config.h"

namespace megasched::schedule {

struct NamedConfig {
  std::string name;       // "best:<model>:<gpu>"
  std::string model;      // preset name
  std::string gpu;        // target name of the device it was measured on
  std::string source;     // where the measurement lives (results file, trial id)
  std::string measured;   // what that run measured, in words ("2648 us median at position 0")
  nlohmann::json config;  // a ScheduleConfig patch, or a plan document of such patches (parse_plan)
};

/// Every named config, in a fixed order.
const std::vector<NamedConfig>& named_configs();

/// The entry called `name`, or nullopt with *error naming the known ones.
std::optional<NamedConfig> find_named_config(const std::string& name, std::string* error);

/// The config entry `name` runs at `position`: its plan's bucket there (a plain config: itself).
/// nullopt with *error for an unknown name.
std::optional<ScheduleConfig> named_config_at(const std::string& name, int position,
                                              std::string* error);

/// True when `arg` is meant as a name ("best:..."), not a file path.
bool is_config_name(const std::string& arg);

}  // namespace megasched::schedule
