// One ReferenceVm decode step (single-threaded, queue order) for the default config on the
// `small` and `llama-1b` shapes. Weights are generated once, outside the timed loop; each
// iteration advances the position so the KV history grows as in real decoding.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "schedule/lower.h"
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

void vm_step(benchmark::State& state, const char* model) {
  const schedule::Weights& weights = weights_for(model);
  schedule::GpuTarget target;
  target.name = "h100-sxm";
  target.num_sms = 132;
  std::string error;
  std::optional<schedule::Program> program =
      schedule::lower(weights.shape, target, schedule::ScheduleConfig{}, &error);
  if (!program) {
    std::fprintf(stderr, "lowering failed: %s\n", error.c_str());
    std::abort();
  }
  vm::ReferenceVm vm(*program, weights);
  int32_t position = 0;
  for (auto _ : state) {
    const vm::ReferenceVm::StepResult r = vm.step(7, position % weights.shape.max_seq);
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

BENCHMARK_CAPTURE(vm_step, small, "small")->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(vm_step, llama_1b, "llama-1b")->Unit(benchmark::kMillisecond)->MinTime(4.0);

}  // namespace

BENCHMARK_MAIN();
