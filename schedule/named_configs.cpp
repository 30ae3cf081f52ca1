#include "schedule/named_configs.h"

namespace megasched::schedule {

const std::vector<NamedConfig>& named_configs() {
  static const std::vector<NamedConfig> table = {
      {"best:llama-1b:h200",
       "llama-1b",
       "h200",
       "bench/results/nvidia-h200-loop2-llama-1b.results.tsv (GPU hillclimb from the fastest ring "
       "config of the matrix, trial 7, schedule e86dbe49a19f02d7)",
       "1718.5 us median at position 0 on an H200 (32.0% of the measured-bandwidth floor)",
       {{"kernel", {{"weight_stream", "smem_ring"}}},
        {"smem", {{"pages", 5}, {"page_bytes", 32768}}},
        {"pipeline", {{"prefetch_depth", 0}}},
        {"launch", {{"threads_per_block", 384}}},
        {"tiling", {{"gemv_rows_per_task", 32}, {"attn_q_heads_per_task", 1}}}}},
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
