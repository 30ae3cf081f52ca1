// The megakernel's weight streams measured per SM, on the real VM (Google Benchmark; needs a GPU
// and skips every case without one). Each case lowers llama-1b with one config (`ring/...`: the
// whole-row ring of one ring shape; `stream/OP/pairs_am`: the streamed GEMV of the position-0
// config of `best:llama-1b:h100`; `stream/OP/h200_r3[_rowsN]`: that of `best:llama-1b:h200`,
// with gate/up tiles of N rows), then keeps only one op's GEMV tiles with their waits and
// signals removed: block b runs tile b mod T of that op in each of kLayers layers (the LM head:
// its one tile), back to back, and every other block is idle. A launch then times the loader, the
// consumer and the per-task cost (staging the input, the epilogue) of `blocks` blocks streaming
// at once, with no dependency in the way:
//   GBps_per_block = bytes one block streams / launch time, GBps_total = that x blocks.
// `hop/o_chain/pairs_am` measures the dependency hop under load instead: 32 O tiles of the named
// config form a chain that alternates between blocks 0 and 1 (link i waits for link i - 1's
// signal on a counter of its own), while `background` other blocks stream gate/up tiles of every
// layer with no dependency; the launch is stamped (MS_PROFILE), and
//   hop_us = median over the links of (ready - the previous link's signal), link_us the median
//   time from one link's ready to the next's, bg_TBps what the background streams meanwhile.
// bench/device_check.sh runs it in the `ring` stage:
//   build-gpu/ring_bench --benchmark_min_time=0.05
// `ring_bench --lower-only` lowers every case's program for the registry's H100 and H200 instead,
// with no GPU (a CTest).
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
#include "eval/timing.h"
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

/// The position-0 config of named plan `name` (`best:llama-1b:h100`: the streamed GEMV of
/// bench/configs/stream_r2u4_pairs_am.json at three chunks in flight), with `patch` merged in.
nlohmann::json position0_config(const std::string& name, const nlohmann::json& patch = {}) {
  nlohmann::json config = schedule::to_json(schedule::named_config_at(name, 0, nullptr).value());
  if (!patch.is_null()) config.merge_patch(patch);
  return config;
}

nlohmann::json pairs_am_config() { return position0_config("best:llama-1b:h100"); }

/// llama-1b lowered with `config_json`, every task's waits and signal removed and every queue
/// emptied: the cases below queue the tasks they time.
std::optional<schedule::Program> stripped_program(const schedule::GpuTarget& target,
                                                  const nlohmann::json& config_json,
                                                  std::string* error) {
  const auto config = schedule::parse_config(config_json, error);
  if (!config) return std::nullopt;
  auto p = schedule::lower(*schedule::find_preset("llama-1b"), target, *config, error);
  if (!p) return std::nullopt;
  for (ms_abi::Instr& in : p->tasks) {
    in.wait_count = 0;
    in.signal_increment = 0;
  }
  for (auto& q : p->queues) q.clear();
  return p;
}

/// The GEMV tiles of op `op` (e.g. "gate_up") in each of the first `layers` layers, in row order;
/// for "lm_head" (one op, no layer) its tiles in the first list, the others empty.
std::vector<std::vector<uint32_t>> op_tiles(const schedule::Program& p, const std::string& op,
                                            int layers) {
  std::vector<std::vector<uint32_t>> tiles(static_cast<size_t>(layers));
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const ms_abi::Instr& in = p.tasks[t];
    if (in.opcode != ms_abi::kGemv) continue;
    const std::string& name = p.ops[in.op_id].name;
    const int layer = static_cast<int>(in.layer);
    if (op == "lm_head" ? name == op
                        : layer < layers && name == "L" + std::to_string(layer) + "." + op)
      tiles[op == "lm_head" ? 0 : static_cast<size_t>(layer)].push_back(t);
  }
  return tiles;
}

/// The weight bytes a GEMV task streams (bf16; RoPE-pair tiles have two rows a pair).
uint64_t weight_bytes(const ms_abi::Instr& in) {
  return uint64_t(ms_abi::task_rows(in)) * in.ld * 2;
}

/// The llama-1b program of `config_json`, cut down to `op`'s tiles on `*blocks` blocks (lowered to
/// the op's tile count when it has fewer tiles).
std::optional<schedule::Program> stream_program(const schedule::GpuTarget& target,
                                                const nlohmann::json& config_json,
                                                const std::string& op, int* blocks,
                                                uint64_t* bytes_per_block, std::string* error) {
  auto p = stripped_program(target, config_json, error);
  if (!p) return std::nullopt;
  const auto tiles = op_tiles(*p, op, kLayers);
  if (tiles[0].empty()) {
    *error = "no GEMV op named " + (op == "lm_head" ? op : "L0." + op);
    return std::nullopt;
  }
  // No tile twice in a launch (a second read would come from L2): at most one block per tile.
  *blocks = std::min<int>(*blocks, static_cast<int>(tiles[0].size()));
  *bytes_per_block = 0;
  const int layers = op == "lm_head" ? 1 : kLayers;  // the LM head: one tile a block
  for (int b = 0; b < *blocks; ++b) {
    for (int l = 0; l < layers; ++l) {
      const uint32_t t = tiles[static_cast<size_t>(l)][static_cast<size_t>(b)];
      p->queues[static_cast<size_t>(b)].push_back(t);
      if (b == 0) *bytes_per_block += weight_bytes(p->tasks[t]);
    }
  }
  return p;
}

/// The VM of `program` on the live GPU (stamping every task with `profile`); nullptr after marking
/// `state` skipped with the reason (`why` when there is no program).
std::unique_ptr<vm::GpuVm> bench_vm(benchmark::State& state,
                                    const std::optional<schedule::Program>& program,
                                    std::string why, bool profile) {
  if (!program) {
    state.SkipWithError(why.c_str());
    return nullptr;
  }
  vm::GpuVmOptions options;
  options.profile = profile;
  auto vm = vm::GpuVm::create(*program, llama_weights(), options, &why, nullptr);
  if (!vm) state.SkipWithError(why.c_str());
  return vm;
}

/// The live GPU's target; nullopt after marking `state` skipped when there is none.
std::optional<schedule::GpuTarget> live_target_or_skip(benchmark::State& state) {
  std::string why;
  if (!eval::gpu_available(&why)) {
    state.SkipWithError(("no GPU: " + why).c_str());
    return std::nullopt;
  }
  return eval::live_target(&why);
}

void stream(benchmark::State& state, nlohmann::json config, std::string op) {
  const auto target = live_target_or_skip(state);
  if (!target) return;
  int blocks = state.range(0) > 0 ? static_cast<int>(state.range(0)) : target->num_sms;
  uint64_t bytes = 0;
  std::string why;
  const auto program = stream_program(*target, config, op, &blocks, &bytes, &why);
  const auto vm = bench_vm(state, program, why, false);
  if (!vm) return;
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

constexpr int kHopLinks = 32;  // links of the chain (two O tiles of each of 16 layers)

/// The named config's llama-1b program cut down to a chain of kHopLinks O tiles on blocks 0 and 1
/// (see the top of the file) and gate/up tiles of every layer on `*background` blocks from 2 on
/// (lowered to what the chip and the op's tiles allow). `chain` gets the links' task ids in
/// order, `*background_bytes` the weight bytes the background streams.
std::optional<schedule::Program> hop_program(const schedule::GpuTarget& target, int* background,
                                             std::vector<uint32_t>* chain,
                                             uint64_t* background_bytes, std::string* error) {
  auto p = stripped_program(target, pairs_am_config(), error);
  if (!p) return std::nullopt;
  const int layers = static_cast<int>(p->model.layers);
  const auto o = op_tiles(*p, "o", layers);
  const auto gate_up = op_tiles(*p, "gate_up", layers);
  if (o[0].size() < 2 || gate_up[0].empty() || kHopLinks > 2 * layers) {
    *error = "the program has too few O or gate/up tiles for the hop chain";
    return std::nullopt;
  }
  const uint32_t counter = static_cast<uint32_t>(p->counter_totals.size());
  p->counter_totals.push_back(kHopLinks);
  p->counter_names.push_back("hop.chain");
  chain->clear();
  for (int i = 0; i < kHopLinks; ++i) {
    const uint32_t t = o[static_cast<size_t>(i / 2)][static_cast<size_t>(i % 2)];
    ms_abi::Instr& in = p->tasks[t];
    in.signal_counter = counter;
    in.signal_increment = 1;
    if (i > 0) {  // the counter holds i once links 0 .. i-1 have signalled
      in.wait_begin = static_cast<uint32_t>(p->waits.size());
      in.wait_count = 1;
      p->waits.push_back({counter, static_cast<uint32_t>(i)});
    }
    p->queues[static_cast<size_t>(i % 2)].push_back(t);
    chain->push_back(t);
  }
  *background = std::clamp(
      *background, 0,
      std::min(static_cast<int>(p->queues.size()) - 2, static_cast<int>(gate_up[0].size())));
  *background_bytes = 0;
  for (int b = 0; b < *background; ++b) {
    for (int l = 0; l < layers; ++l) {
      const uint32_t t = gate_up[static_cast<size_t>(l)][static_cast<size_t>(b)];
      p->queues[static_cast<size_t>(2 + b)].push_back(t);
      *background_bytes += weight_bytes(p->tasks[t]);
    }
  }
  return p;
}

void hop(benchmark::State& state) {
  const auto target = live_target_or_skip(state);
  if (!target) return;
  int background = static_cast<int>(state.range(0));
  std::vector<uint32_t> chain;
  uint64_t bg_bytes = 0;
  std::string why;
  const auto program = hop_program(*target, &background, &chain, &bg_bytes, &why);
  const auto vm = bench_vm(state, program, why, true);
  if (!vm) return;
  for (int i = 0; i < 3; ++i) vm->profile_step(1, 0);  // build, load, warm up
  std::vector<double> hops, links, bg_tbps;
  for (auto _ : state) {
    const vm::ProfileOutput out = vm->profile_step(1, 0);
    if (out.step.status != "ok") {
      state.SkipWithError(("the chain did not finish: " + out.step.status).c_str());
      return;
    }
    state.SetIterationTime(out.wall_us * 1e-6);
    for (size_t i = 1; i < chain.size(); ++i) {
      const vm::TaskStamp& prev = out.stamps[chain[i - 1]];
      const vm::TaskStamp& cur = out.stamps[chain[i]];
      hops.push_back((double(cur.ready_ns) - double(prev.signal_ns)) * 1e-3);
      links.push_back((double(cur.ready_ns) - double(prev.ready_ns)) * 1e-3);
    }
    uint64_t bg_end = 0;
    for (size_t b = 2; b < 2 + static_cast<size_t>(background); ++b)
      for (uint32_t t : program->queues[b]) bg_end = std::max(bg_end, out.stamps[t].done_ns);
    if (background > 0 && bg_end > 0) bg_tbps.push_back(double(bg_bytes) / double(bg_end) * 1e-3);
  }
  state.counters["background"] = background;
  state.counters["hop_us"] = eval::sample_stats(hops).median;
  state.counters["link_us"] = eval::sample_stats(links).median;
  state.counters["bg_TBps"] = eval::sample_stats(bg_tbps).median;
}

/// A stream or ring case as registered (for --lower-only).
struct StreamCase {
  std::string name;
  nlohmann::json config;
  std::string op;
};
std::vector<StreamCase>& stream_cases() {
  static std::vector<StreamCase> cases;
  return cases;
}

void add(const std::string& name, const nlohmann::json& config, const std::string& op) {
  stream_cases().push_back({name, config, op});
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
  // The H200's position-0 config (three rows a warp): its gate/up in tiles of 64, 128 (its own)
  // and 256 rows, and its LM head (1024-row tiles, one a block): one stream at four task sizes,
  // what a task's own start and end cost the stream when no dependency is in the way.
  for (int rows : {0, 64, 256})
    add("stream/gate_up/h200_r3" + (rows ? "_rows" + std::to_string(rows) : std::string()),
        position0_config("best:llama-1b:h200", {{"tiling", {{"gemv_rows_per_task", rows}}}}),
        "gate_up");
  add("stream/lm_head/h200_r3", position0_config("best:llama-1b:h200"), "lm_head");
  benchmark::RegisterBenchmark("hop/o_chain/pairs_am", hop)
      ->ArgName("background")
      ->Arg(0)
      ->Arg(64)
      ->Arg(128)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
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

/// --lower-only: every case's program lowered for the registry's H100 and H200 on all their SMs,
/// no GPU needed (CTest RingBench.EveryCaseLowersWithoutAGpu): a case whose config stops lowering
/// (as the records' did when they became plans) fails here instead of being skipped on the GPU.
int lower_only() {
  int failed = 0, lowered = 0;
  for (const char* gpu : {"h100", "h200"}) {
    const schedule::GpuTarget target = *schedule::find_target(gpu);
    for (const StreamCase& c : stream_cases()) {
      int blocks = target.num_sms;
      uint64_t bytes = 0;
      std::string why;
      const auto p = stream_program(target, c.config, c.op, &blocks, &bytes, &why);
      const bool ok = p.has_value() && bytes > 0;
      std::printf("%s %s: %s\n", gpu, c.name.c_str(), ok ? "lowers" : ("FAILS: " + why).c_str());
      failed += !ok;
      ++lowered;
    }
    int background = target.num_sms - 2;
    std::vector<uint32_t> chain;
    uint64_t bg_bytes = 0;
    std::string why;
    const bool ok = hop_program(target, &background, &chain, &bg_bytes, &why).has_value() &&
                    static_cast<int>(chain.size()) == kHopLinks;
    std::printf("%s hop/o_chain/pairs_am: %s\n", gpu, ok ? "lowers" : ("FAILS: " + why).c_str());
    failed += !ok;
    ++lowered;
  }
  std::printf("ring_bench --lower-only: %d of %d cases lower\n", lowered - failed, lowered);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--lower-only") {
      register_all();
      return lower_only();
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Every case runs on the GPU. Google Benchmark 1.7 (Debian 12) has no SkipWithMessage, and a
  // SkipWithError per case prints "ERROR OCCURRED" 63 times: without a GPU, one line instead.
  std::string why;
  if (!eval::gpu_available(&why)) {
    std::printf("ring_bench: every case needs a GPU; skipped (%s)\n", why.c_str());
    return 0;
  }
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
