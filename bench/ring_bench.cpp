// The megakernel's weight streams measured per SM, on the real VM (Google Benchmark; needs a GPU
// and skips every case without one). Each case lowers llama-1b with one config (`ring/...`: the
// whole-row ring of one ring shape; `stream/...`: the streamed GEMV of the named config
// bench/configs/stream_r2u4_pairs_am.json, which the tables of record run), then keeps only one
// op's GEMV tiles with their waits and signals removed: block b
// runs tile b mod T of that op in each of kLayers layers, back to back, and every other block is
// idle. A launch then times the loader, the consumer and the per-task cost (staging the input,
// the epilogue) of `blocks` blocks streaming at once, with no dependency in the way:
//   GBps_per_block = bytes one block streams / launch time, GBps_total = that x blocks.
// bench/device_check.sh runs it in the `ring` stage:
//   build-gpu/ring_bench --benchmark_min_time=0.05
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abi/abi.h"
#include "eval/device.h"
#include "schedule/config.h"
#include "schedule/lower.h"
#include "schedule/model.h"
#include "schedule/named_configs.h"
#include "vm/gpu_vm.h"

namespace {

using namespace megasched;

constexpr int kLayers = 8;  // tiles per block per launch (one per layer)

const schedule::Weights& llama_weights() {
  static const schedule::Weights w = schedule::generate_weights(*schedule::find_preset("llama-1b"));
  return w;
}

/// The whole-row ring config of one ring shape.
nlohmann::json ring_config(int threads, int pages, int page_bytes) {
  return {{"kernel", {{"weight_stream", "smem_ring"}}},
          {"smem", {{"pages", pages}, {"page_bytes", page_bytes}}},
          {"pipeline", {{"prefetch_depth", 0}}},
          {"launch", {{"threads_per_block", threads}}},
          {"tiling", {{"gemv_rows_per_task", 0}, {"lm_head_rows_per_task", 0}}}};
}

/// `best:llama-1b:h100` (bench/configs/stream_r2u4_pairs_am.json: the streamed GEMV of the named
/// position-0 config, the same on both GPUs).
nlohmann::json pairs_am_config() {
  return schedule::find_named_config("best:llama-1b:h100", nullptr).value().config;
}

/// The llama-1b program of `config_json`, cut down to `op`'s tiles on `*blocks` blocks (lowered to
/// the op's tile count when it has fewer tiles).
std::optional<schedule::Program> stream_program(const schedule::GpuTarget& target,
                                                const nlohmann::json& config_json,
                                                const std::string& op, int* blocks,
                                                uint64_t* bytes_per_block, std::string* error) {
  std::string err;
  const auto config = schedule::parse_config(config_json, &err);
  if (!config) {
    *error = err;
    return std::nullopt;
  }
  auto p = schedule::lower(*schedule::find_preset("llama-1b"), target, *config, &err);
  if (!p) {
    *error = err;
    return std::nullopt;
  }
  // The op's tiles per layer, in row order.
  std::vector<std::vector<uint32_t>> tiles(kLayers);
  for (uint32_t t = 0; t < p->tasks.size(); ++t) {
    const ms_abi::Instr& in = p->tasks[t];
    const int layer = static_cast<int>(in.layer);
    if (in.opcode == ms_abi::kGemv && layer < kLayers &&
        p->ops[in.op_id].name == "L" + std::to_string(layer) + "." + op)
      tiles[static_cast<size_t>(layer)].push_back(t);
  }
  if (tiles[0].empty()) {
    *error = "no GEMV op named L0." + op;
    return std::nullopt;
  }
  for (ms_abi::Instr& in : p->tasks) {
    in.wait_count = 0;
    in.signal_increment = 0;
  }
  for (auto& q : p->queues) q.clear();
  // No tile twice in a launch (a second read would come from L2): at most one block per tile.
  *blocks = std::min<int>(*blocks, static_cast<int>(tiles[0].size()));
  *bytes_per_block = 0;
  for (int b = 0; b < *blocks; ++b) {
    for (int l = 0; l < kLayers; ++l) {
      const uint32_t t = tiles[static_cast<size_t>(l)][static_cast<size_t>(b)];
      p->queues[static_cast<size_t>(b)].push_back(t);
      if (b == 0) {
        const ms_abi::Instr& in = p->tasks[t];
        *bytes_per_block += uint64_t(ms_abi::task_rows(in)) * in.ld * 2;  // RoPE pairs: 2 rows each
      }
    }
  }
  return p;
}

void stream(benchmark::State& state, nlohmann::json config, std::string op) {
  std::string why;
  if (!eval::gpu_available(&why)) {
    state.SkipWithError(("no GPU: " + why).c_str());
    return;
  }
  const auto target = eval::live_target(&why);
  int blocks = state.range(0) > 0 ? static_cast<int>(state.range(0)) : target->num_sms;
  uint64_t bytes = 0;
  const auto program = stream_program(*target, config, op, &blocks, &bytes, &why);
  if (!program) {
    state.SkipWithError(why.c_str());
    return;
  }
  vm::GpuVmOptions options;
  auto vm = vm::GpuVm::create(*program, llama_weights(), options, &why, nullptr);
  if (!vm) {
    state.SkipWithError(why.c_str());
    return;
  }
  for (int i = 0; i < 3; ++i) vm->time_step_us(1, 0, false);  // build, load, warm up
  double total_us = 0.0;
  for (auto _ : state) {
    const double us = vm->time_step_us(1, 0, false);
    state.SetIterationTime(us * 1e-6);
    total_us += us;
  }
  if (vm->hung()) {
    state.SkipWithError("the launch hit the spin bound");
    return;
  }
  const double us = total_us / static_cast<double>(state.iterations());
  const double per_block = static_cast<double>(bytes) / (us * 1e3);  // GB/s
  state.counters["blocks"] = blocks;
  state.counters["MiB_per_block"] = static_cast<double>(bytes) / (1 << 20);
  state.counters["GBps_per_block"] = per_block;
  state.counters["GBps_total"] = per_block * blocks;
}

void add(const std::string& name, const nlohmann::json& config, const std::string& op) {
  benchmark::RegisterBenchmark(name.c_str(), stream, config, op)
      ->ArgName("blocks")
      ->Arg(1)
      ->Arg(66)
      ->Arg(0)  // 0: every SM
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

void register_all() {
  const char* ops[] = {"gate_up", "down", "qkv", "o"};
  for (const char* op : ops) add(std::string("stream/") + op + "/pairs_am", pairs_am_config(), op);
  struct Shape {
    int threads, pages, page_bytes;
  };
  const std::vector<Shape> shapes = {
      {256, 4, 16384}, {256, 4, 32768}, {256, 2, 65536}, {160, 4, 32768}};
  for (const Shape& s : shapes) {
    for (const char* op : ops) {
      add(std::string("ring/") + op + "/" + std::to_string(s.threads) + "thr_" +
              std::to_string(s.pages) + "x" + std::to_string(s.page_bytes / 1024) + "k",
          ring_config(s.threads, s.pages, s.page_bytes), op);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
