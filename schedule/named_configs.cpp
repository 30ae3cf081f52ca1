#include "schedule/named_configs.h"

namespace megasched::schedule {

const std::vector<NamedConfig>& named_configs() {
  static const std::vector<NamedConfig> table = {
      {"best:llama-1b:h200",
       "llama-1b",
       "h200",
       "bench/results/nvidia-h200.json, config 512thr_kv8 (BENCHMARKS.md, run of record)",
       "2648.0 us median at position 0, 2715.4 us at position 1024 (H200)",
       {{"launch", {{"threads_per_block", 512}}}, {"tiling", {{"attn_kv_partitions", 8}}}}},
  };
  return table;
}

std::optional<NamedConfig> find_named_config(const std::string& name, std::string* error) {
  std::string known;
  for (const NamedConfig& c : named_configs()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  if (error) *error = "no named config '" + name + "'; known: " + known;
  return std::nullopt;
}

bool is_config_name(const std::string& arg) { return arg.rfind("best:", 0) == 0; }

}  // namespace megasched::schedule
