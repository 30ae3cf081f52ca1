// The megakernel's NVRTC build per config (Google Benchmark; needs NVRTC, no GPU): compile time
// with the cubin cache off, and what ptxas reports per device function (registers, spill bytes,
// stack frame) as counters of the kernel and of the whole-row ring GEMV. A trial's first
// evaluate pays this compile; a register or spill change of a kernel edit shows here before any
// GPU time is spent. Configs: bench/configs/NAME.json for each NAME in MEGASCHED_NVRTC_BENCH
// (comma-separated; default "best_1b"), lowered for llama-1b on the h100 target;
// MEGASCHED_NVRTC_BENCH_DUMP=DIR also writes each cubin there.
//   MEGASCHED_NVRTC_BENCH=stream_r2u4,best_1b build/nvrtc_bench --benchmark_min_time=0.01
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/config.h"
#include "schedule/lower.h"
#include "schedule/model.h"
#include "schedule/target.h"
#include "vm/nvrtc_build.h"

namespace {

using namespace megasched;

void build(benchmark::State& state, const std::string& name) {
  std::ifstream f(std::string(MS_SOURCE_DIR) + "/bench/configs/" + name + ".json");
  if (!f) {
    state.SkipWithError(("no bench/configs/" + name + ".json").c_str());
    return;
  }
  std::string err;
  const auto config = schedule::parse_config(nlohmann::json::parse(f), &err);
  const auto target = schedule::find_target("h100");
  const auto program =
      config ? schedule::lower(*schedule::find_preset("llama-1b"), *target, *config, &err)
             : std::nullopt;
  if (!program) {
    state.SkipWithError(err.c_str());
    return;
  }
  vm::BuildRequest req;
  req.entry = "vm/device/megakernel.cuh";
  req.defines = vm::kernel_defines(*program);
  req.sm_arch = 90;
  vm::BuildResult result;
  for (auto _ : state) {
    result = vm::build_cubin(req);  // no cache_dir: every iteration compiles
    if (!result.ok) {
      state.SkipWithError(result.error.substr(0, 400).c_str());
      return;
    }
    state.SetIterationTime(result.compile_ms * 1e-3);
  }
  // MEGASCHED_NVRTC_BENCH_DUMP=DIR writes DIR/NAME.cubin: two trees whose cubins are identical
  // run the same machine code (a device-side refactor checked without a GPU).
  if (const char* dir = std::getenv("MEGASCHED_NVRTC_BENCH_DUMP"); dir && *dir) {
    std::ofstream out(std::string(dir) + "/" + name + ".cubin", std::ios::binary);
    out.write(result.cubin.data(), static_cast<std::streamsize>(result.cubin.size()));
    if (!out) state.SkipWithError(("cannot write the cubin into " + std::string(dir)).c_str());
  }
  for (const vm::KernelResources& k : result.kernels) {
    if (k.stack_bytes > 0 || k.spill_store_bytes > 0)  // where the frame and the spills are
      std::fprintf(stderr, "%s: %s stack %d B, spill stores %d B, loads %d B\n", name.c_str(),
                   k.name.c_str(), k.stack_bytes, k.spill_store_bytes, k.spill_load_bytes);
    const bool kernel = k.name == "ms_megakernel";
    if (!kernel && k.name.find("gemv_ring_seg") == std::string::npos) continue;
    const std::string p = kernel ? "kernel_" : "seg_";
    if (k.registers >= 0) state.counters[p + "regs"] = k.registers;
    state.counters[p + "spill_st_B"] = k.spill_store_bytes;
    state.counters[p + "spill_ld_B"] = k.spill_load_bytes;
    state.counters[p + "stack_B"] = k.stack_bytes;
  }
}

std::vector<std::string> names() {
  const char* env = std::getenv("MEGASCHED_NVRTC_BENCH");
  std::stringstream list(env && *env ? env : "best_1b");
  std::vector<std::string> out;
  for (std::string n; std::getline(list, n, ',');)
    if (!n.empty()) out.push_back(n);
  return out;
}

const bool registered = [] {
  for (const std::string& n : names()) {
    benchmark::RegisterBenchmark(("nvrtc/" + n).c_str(), build, n)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(1);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
