#include "schedule/named_configs.h"

namespace megasched::schedule {

const std::vector<NamedConfig>& named_configs() {
  // The streamed GEMV of registers builds (vm/device/stream.cuh) with QKV in tiles of RoPE pairs
  // over every block and the argmax folded into the LM-head tiles
  // (bench/configs/stream_r2u4_pairs_am.json): no ring, each warp's first weight chunks loaded
  // before its dependency wait; the fastest row at position 0 on both GPUs (measured 2026-11-26
  // 09:26-09:56 UTC, dev/benchmarks_history.md). (At position 4096 the fastest row is the same with
  // the whole KV group per attention task, 16 history partitions, the KV history staged in 5 x 16
  // KiB of shared memory: bench/configs/stream_r2u4_g4p16_pairs_am_st.json; at 1024 the same with 8
  // partitions, stream_r2u4_g4p8_pairs_am_st.json; H100, 2026-11-26 14:17-15:20 UTC.)
  static const nlohmann::json stream = {{"kernel",
                                         {{"weight_stream", "registers"},
                                          {"vector_bytes", 16},
                                          {"rows_per_warp", 2},
                                          {"unroll", 4},
                                          {"weight_load", "ldg_stream"}}},
                                        {"pipeline", {{"prefetch_depth", 0}}},
                                        {"launch", {{"threads_per_block", 256}}},
                                        {"tiling",
                                         {{"gemv_rows_per_task", 0},
                                          {"lm_head_rows_per_task", 0},
                                          {"attn_q_heads_per_task", 1},
                                          {"qkv_rope_pairs", true}}},
                                        {"fusion", {{"argmax_into_lm_head", true}}}};
  static const std::vector<NamedConfig> table = {
      {"best:llama-1b:h100", "llama-1b", "h100",
       "bench/results/h100-2026-11-26-0926-llama-1b.json (config stream_r2u4_pairs_am)",
       "1113.9 us median at position 0 on an H100, where the previous best (stream_r2u4_pairs, "
       "the same with the argmax in its own task) measured 1123.8 us in the same call",
       stream},
      {"best:llama-1b:h200", "llama-1b", "h200",
       "bench/results/h200-2026-11-26-0926-table.json (config stream_r2u4_pairs_am)",
       "925.8 us median at position 0 on an H200, where the previous best (stream_r2u4_pairs, the "
       "same with the argmax in its own task) measured 936.1 us in the same call",
       stream},
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
