// Lowering time for the default config and a fine-grained one (split-K, per-slice edges, split
// attention, load-balanced queues) on the `small` and `llama-1b` shapes.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "schedule/lower.h"

namespace {

using namespace megasched::schedule;

GpuTarget h100_shape() {
  GpuTarget t;
  t.name = "h100-sxm";
  t.num_sms = 132;
  return t;
}

ScheduleConfig fine_config() {
  ScheduleConfig c;
  c.tiling.gemv_rows_per_task = 16;
  c.tiling.gemv_k_split = 2;
  c.tiling.attn_kv_partitions = 4;
  c.tiling.attn_q_heads_per_task = 1;
  c.dependencies.residual = Granularity::kPerSlice;
  c.dependencies.gate_up_to_down = Granularity::kPerSlice;
  c.assignment.policy = AssignPolicy::kLoadBalance;
  return c;
}

void lower_model(benchmark::State& state, const char* model, const ScheduleConfig& config) {
  const ModelShape shape = *find_preset(model);
  const GpuTarget target = h100_shape();
  size_t tasks = 0;
  for (auto _ : state) {
    std::string error;
    std::optional<Program> p = lower(shape, target, config, &error);
    if (!p) {
      std::fprintf(stderr, "lowering failed: %s\n", error.c_str());
      std::abort();
    }
    tasks = p->tasks.size();
    benchmark::DoNotOptimize(p->tasks.data());
  }
  state.counters["tasks"] = static_cast<double>(tasks);
}

BENCHMARK_CAPTURE(lower_model, small_default, "small", ScheduleConfig{})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(lower_model, small_fine, "small", fine_config())->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(lower_model, llama_1b_default, "llama-1b", ScheduleConfig{})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(lower_model, llama_1b_fine, "llama-1b", fine_config())
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
