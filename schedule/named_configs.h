// Named configs: the best config a GPU search found for a model on a device, kept in the binary so
// anyone can re-evaluate it by name (`megasched evaluate --config best:llama-1b:h200`). Each entry
// names the run that found it (results file and trial) and the figure that run measured; the
// figure is a record of that run, not a promise: re-evaluating re-measures.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace megasched::schedule {

struct NamedConfig {
  std::string name;       // "best:<model>:<gpu>"
  std::string model;      // preset name
  std::string gpu;        // target name of the device it was measured on
  std::string source;     // where the measurement lives (results file, trial id)
  std::string measured;   // what that run measured, in words ("2648 us median at position 0")
  nlohmann::json config;  // the ScheduleConfig patch (parse_config accepts it)
};

/// Every named config, in a fixed order.
const std::vector<NamedConfig>& named_configs();

/// The entry called `name`, or nullopt with *error naming the known ones.
std::optional<NamedConfig> find_named_config(const std::string& name, std::string* error);

/// True when `arg` is meant as a name ("best:..."), not a file path.
bool is_config_name(const std::string& arg);

}  // namespace megasched::schedule
