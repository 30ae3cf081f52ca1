// Benchmarks of the model layer on the CPU: preset weight generation and the eager decode step.
//   ./build/model_bench --benchmark_filter='Toy|Small'    (seconds)
//   ./build/model_bench --benchmark_filter=Llama1b        (llama-1b: 2.47 GB of weights, ~1 min)
#include <benchmark/benchmark.h>

#include "eval/eager.h"
#include "schedule/model.h"

namespace {

using megasched::eval::EagerModel;
using megasched::schedule::find_preset;
using megasched::schedule::generate_weights;
using megasched::schedule::Weights;

void generate(benchmark::State& state, const char* preset) {
  const auto shape = *find_preset(preset);
  for (auto _ : state) {
    Weights w = generate_weights(shape, 0, static_cast<int>(state.range(0)));
    benchmark::DoNotOptimize(w.data());
  }
  state.SetBytesProcessed(state.iterations() * shape.weight_bytes());
}

void eager_step(benchmark::State& state, const char* preset) {
  static Weights weights;  // generated once per preset, outside the timed loop
  if (weights.shape.name != preset) weights = generate_weights(*find_preset(preset), 0);
  EagerModel model(weights);
  int32_t position = 0;
  for (auto _ : state) {
    if (position == weights.shape.max_seq) {
      model.reset();
      position = 0;
    }
    std::vector<float> logits = model.step((position * 31 + 7) % weights.shape.vocab, position);
    benchmark::DoNotOptimize(logits.data());
    ++position;
  }
  state.SetBytesProcessed(state.iterations() * weights.shape.weight_bytes());
}

void BM_GenerateWeightsToy(benchmark::State& state) { generate(state, "toy"); }
void BM_GenerateWeightsSmall(benchmark::State& state) { generate(state, "small"); }
void BM_GenerateWeightsLlama1b(benchmark::State& state) { generate(state, "llama-1b"); }
void BM_EagerStepToy(benchmark::State& state) { eager_step(state, "toy"); }
void BM_EagerStepSmall(benchmark::State& state) { eager_step(state, "small"); }
void BM_EagerStepLlama1b(benchmark::State& state) { eager_step(state, "llama-1b"); }

BENCHMARK(BM_GenerateWeightsToy)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GenerateWeightsSmall)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GenerateWeightsLlama1b)
    ->Arg(0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
BENCHMARK(BM_EagerStepToy)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_EagerStepSmall)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EagerStepLlama1b)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
