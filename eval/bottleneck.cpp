#include "eval/bottleneck.h"

#include <algorithm>

#include "schedule/format.h"

namespace megasched::eval {
namespace {

using nlohmann::json;
using schedule::fmt;

json make_class(const std::string& name, const std::string& source, const std::string& reason) {
  return {{"class", name}, {"source", source}, {"reason", reason}};
}

// The launch half of the rule, shared by both sources: "" when the launch is within its limits.
std::string launch_misfit(const json& kernel, int grid_blocks, int num_sms) {
  if (!kernel.is_object()) return "";
  const int64_t spills =
      kernel.value("spill_store_bytes", int64_t{0}) + kernel.value("spill_load_bytes", int64_t{0});
  if (spills > 0) return "the kernel spills " + std::to_string(spills) + " bytes to local memory";
  if (kernel.contains("occupancy_blocks_per_sm") && grid_blocks > 0 && num_sms > 0) {
    const int per_sm = kernel.value("occupancy_blocks_per_sm", 0);
    const int asked = (grid_blocks + num_sms - 1) / num_sms;
    if (per_sm < asked)
      return "the occupancy API allows " + std::to_string(per_sm) +
             " block(s) per SM, the grid asks " + std::to_string(asked);
  }
  return "";
}

}  // namespace

const std::vector<std::string>& bottleneck_classes() {
  static const std::vector<std::string> classes = {"memory", "latency-sync", "compute", "launch"};
  return classes;
}

json classify_verdict(const Verdict& v, double stages, int num_sms) {
  if (!v.valid && v.rejected_reason.find("launch") != std::string::npos)
    return make_class("launch", "verdict", "rejected by the launch rule: " + v.rejected_reason);
  if (!v.correct || !v.latency_us || *v.latency_us <= 0) return nullptr;
  const std::string misfit = launch_misfit(v.kernel, v.kernel.value("grid_blocks", 0), num_sms);
  if (!misfit.empty()) return make_class("launch", "verdict", misfit);
  const double latency = *v.latency_us;
  const double pct = 100.0 * v.floor_us / latency;
  if (pct >= kMemoryPctOfFloor)
    return make_class(
        "memory", "verdict",
        fmt("%.1f", pct) + "% of the floor >= " + fmt("%.0f", kMemoryPctOfFloor) + "%");
  const double excess = latency - v.floor_us;
  const double sync = stages * kDependencyHopUs;
  if (sync >= 0.5 * excess)
    return make_class("latency-sync", "verdict",
                      fmt("%.0f", stages) + " dependent stages x " + fmt("%.1f", kDependencyHopUs) +
                          " us = " + fmt("%.1f", sync) + " us >= half of the " +
                          fmt("%.1f", excess) + " us above the floor");
  return make_class("compute", "verdict",
                    fmt("%.1f", pct) + "% of the floor, and " + fmt("%.0f", stages) +
                        " dependent stages x " + fmt("%.1f", kDependencyHopUs) +
                        " us = " + fmt("%.1f", sync) + " us < half of the " + fmt("%.1f", excess) +
                        " us above the floor: the ops' execution sets the time");
}

json classify_profile(const json& analysis, const json& kernel_info, double floor_us,
                      int grid_blocks, int num_sms) {
  const json path = analysis.value("critical_path", json::object());
  const json totals = analysis.value("totals", json::object());
  const double span = path.value("span_us", 0.0);
  const double wall = totals.value("wall_us", 0.0) > 0 ? totals.value("wall_us", 0.0) : span;
  if (span <= 0 || wall <= 0) return nullptr;
  const std::string misfit = launch_misfit(kernel_info, grid_blocks, num_sms);
  if (!misfit.empty()) return make_class("launch", "profile", misfit);
  const double pct = 100.0 * floor_us / wall;
  if (pct >= kMemoryPctOfFloor)
    return make_class("memory", "profile",
                      "the stamped step takes " + fmt("%.1f", wall) + " us, " + fmt("%.1f", pct) +
                          "% of the floor >= " + fmt("%.0f", kMemoryPctOfFloor) + "%");
  const double exec = path.value("exec_us", 0.0);
  const double sync =
      path.value("wait_us", 0.0) + path.value("signal_us", 0.0) + path.value("gap_us", 0.0);
  const std::string split = "critical path " + fmt("%.1f", span) + " us: wait + signal + gap " +
                            fmt("%.1f", sync) + " us, exec " + fmt("%.1f", exec) + " us";
  if (sync >= exec) return make_class("latency-sync", "profile", split);
  return make_class("compute", "profile", split + " (exec dominates)");
}

std::optional<AxisSuggestion> suggest_axis(const std::string& c) {
  if (c == "memory")
    return AxisSuggestion{"kernel",
                          {"kernel.weight_stream", "kernel.vector_bytes", "kernel.unroll",
                           "kernel.stream_depth", "kernel.weight_load", "pipeline.prefetch_depth",
                           "smem.pages", "smem.page_bytes", "smem.inflight_pages"},
                          "the step streams near the floor: only the weight stream's shape "
                          "(ring, vector width, loads in flight) moves it closer"};
  if (c == "latency-sync")
    return AxisSuggestion{
        "dependencies+fusion",
        {"dependencies.qkv_to_attention", "dependencies.attention_to_o",
         "dependencies.gate_up_to_down", "dependencies.residual", "fusion.qkv_single_gemv",
         "fusion.gate_up_single_gemv", "fusion.norm_into_gemv", "fusion.residual_into_gemv",
         "fusion.silu_mul_into_down", "fusion.rope_kv_into_qkv", "fusion.argmax_into_lm_head",
         "fusion.reduce_by_last_arriver", "fusion.combine_into_o", "fusion.attention_into_o",
         "assignment.policy"},
        "waits and signals dominate: fewer or finer-grained dependency hops "
        "(per_slice dependencies, more fusion, another assignment)"};
  if (c == "compute")
    return AxisSuggestion{"tiling",
                          {"tiling.gemv_rows_per_task", "tiling.gemv_k_split",
                           "kernel.rows_per_warp", "tiling.attn_kv_partitions",
                           "tiling.attn_q_heads_per_task", "tiling.lm_head_rows_per_task"},
                          "the ops' execution sets the time: spread each op over more SMs or "
                          "warps (smaller tiles, k-split, more KV partitions)"};
  if (c == "launch")
    return AxisSuggestion{
        "launch",
        {"launch.threads_per_block", "launch.blocks_per_sm", "smem.pages", "smem.page_bytes"},
        "the launch is over a limit or under-occupied: fewer threads, blocks or "
        "shared-memory pages per block"};
  return std::nullopt;
}

}  // namespace megasched::eval
