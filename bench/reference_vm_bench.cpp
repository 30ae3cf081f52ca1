// One ReferenceVm decode step (single-threaded, queue order) for the default config on the
// `small` and `llama-1b` shapes, and llama-1b's step in waves (vm::RunOrder::kWaves, the sampled
// trial check's order) on 1-8 threads for the default config and `best:llama-1b:h100`. Weights are
// generated once, outside the timed loop; each iteration advances the position so the KV history
// grows as in real decoding.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "schedule/lower.h"
#include "schedule/named_configs.h"
#include "vm/reference_vm.h"

namespace {

using namespace megasched;

const schedule::Weights& weights_for(const std::string& model) {
  static std::map<std::string, std::unique_ptr<schedule::Weights>> cache;
  std::unique_ptr<schedule::Weights>& slot = cache[model];
  if (!slot)
    slot = std::make_unique<schedule::Weights>(
        schedule::generate_weights(*schedule::find_preset(model), 0, 0));
  return *slot;
}

/// `name`'s config ("" for the default; a named plan gives its position-0 bucket's).
schedule::ScheduleConfig config_named(const std::string& name) {
  if (name.empty()) return schedule::ScheduleConfig{};
  std::string error;
  const auto config = schedule::named_config_at(name, 0, &error);
  if (!config) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), error.c_str());
    std::abort();
  }
  return *config;
}

void vm_step_in(benchmark::State& state, const char* model, const std::string& config,
                vm::RunOrder order, int threads) {
  const schedule::Weights& weights = weights_for(model);
  schedule::GpuTarget target;
  target.name = "h100-sxm";
  target.num_sms = 132;
  std::string error;
  std::optional<schedule::Program> program =
      schedule::lower(weights.shape, target, config_named(config), &error);
  if (!program) {
    std::fprintf(stderr, "lowering failed: %s\n", error.c_str());
    std::abort();
  }
  vm::ReferenceVm vm(*program, weights);
  vm.set_threads(threads);
  int32_t position = 0;
  for (auto _ : state) {
    const vm::ReferenceVm::StepResult r = vm.step(7, position % weights.shape.max_seq, order);
    if (!r.completed) {
      std::fprintf(stderr, "step did not complete: %s\n", r.stuck.c_str());
      std::abort();
    }
    benchmark::DoNotOptimize(r.argmax);
    ++position;
  }
  state.counters["weight_GBps"] = benchmark::Counter(
      static_cast<double>(weights.bytes()) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void vm_step(benchmark::State& state, const char* model) {
  vm_step_in(state, model, "", vm::RunOrder::kQueueOrder, 1);
}

void vm_step_waves(benchmark::State& state, const char* config) {
  vm_step_in(state, "llama-1b", config, vm::RunOrder::kWaves, static_cast<int>(state.range(0)));
}

BENCHMARK_CAPTURE(vm_step, small, "small")->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(vm_step, llama_1b, "llama-1b")->Unit(benchmark::kMillisecond)->MinTime(4.0);
/// llama-1b in waves on 1, 2, 4 and 8 threads, for `config` ("" for the default).
void register_waves(const char* name, const char* config) {
  benchmark::RegisterBenchmark(name, vm_step_waves, config)
      ->Unit(benchmark::kMillisecond)
      ->MinTime(4.0)
      ->Arg(1)
      ->Arg(2)
      ->Arg(4)
      ->Arg(8)
      ->UseRealTime();
}

const bool kWavesRegistered = [] {
  register_waves("vm_step_waves/llama_1b_default", "");
  register_waves("vm_step_waves/llama_1b_best_h100", "best:llama-1b:h100");
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
