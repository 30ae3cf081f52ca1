// validate() at scale: llama-8b lowered with the smallest tiles (20,000+ tasks), every rule on.
// The acceptance bar is under 1 s per validation on a 2-core machine.
#include <benchmark/benchmark.h>

#include <cstdio>

#include "schedule/lower.h"
#include "schedule/validate.h"

namespace megasched::schedule {
namespace {

Program smallest_tiles(const std::string& model, AssignPolicy policy, Granularity deps) {
  ScheduleConfig cfg;
  cfg.tiling.gemv_rows_per_task = 8;
  cfg.tiling.lm_head_rows_per_task = 128;
  cfg.tiling.attn_q_heads_per_task = 1;
  cfg.tiling.attn_kv_partitions = 16;
  cfg.tiling.gemv_k_split = 2;
  cfg.assignment.policy = policy;
  cfg.dependencies.qkv_to_attention = deps;
  cfg.dependencies.attention_to_o = deps;
  cfg.dependencies.gate_up_to_down = deps;
  cfg.dependencies.residual = deps;
  std::string error;
  std::optional<Program> p = lower(*find_preset(model), *find_target("h100"), cfg, &error);
  if (!p) {
    std::fprintf(stderr, "validate_bench: %s does not lower: %s\n", model.c_str(), error.c_str());
    std::abort();
  }
  return *p;
}

void run(benchmark::State& state, const Program& program) {
  const GpuTarget target = *find_target("h100");
  bool ok = true;
  for (auto _ : state) {
    const ValidationReport r = validate(program, target);
    ok = r.ok();
    benchmark::DoNotOptimize(ok);
  }
  state.counters["tasks"] = static_cast<double>(program.tasks.size());
  state.counters["waits"] = static_cast<double>(program.waits.size());
  state.counters["accepted"] = ok ? 1 : 0;
}

void BM_ValidateLlama8bSmallestTilesPerOp(benchmark::State& state) {
  static const Program p =
      smallest_tiles("llama-8b", AssignPolicy::kRoundRobin, Granularity::kPerOp);
  run(state, p);
}
BENCHMARK(BM_ValidateLlama8bSmallestTilesPerOp)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_ValidateLlama8bSmallestTilesPerSlice(benchmark::State& state) {
  static const Program p =
      smallest_tiles("llama-8b", AssignPolicy::kRoundRobin, Granularity::kPerSlice);
  run(state, p);
}
BENCHMARK(BM_ValidateLlama8bSmallestTilesPerSlice)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_ValidateLlama8bSmallestTilesDynamic(benchmark::State& state) {
  static const Program p =
      smallest_tiles("llama-8b", AssignPolicy::kDynamic, Granularity::kPerSlice);
  run(state, p);
}
BENCHMARK(BM_ValidateLlama8bSmallestTilesDynamic)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace megasched::schedule

BENCHMARK_MAIN();
