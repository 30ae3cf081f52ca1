// The MLP gate (Google Benchmark; needs an sm_90 GPU and skips every case without one): is a
// llama-1b MLP block faster with down folded into gate/up's task than as today's two dependent
// ops? vm/device/mlp_gate.cuh's persistent kernel (kTasks blocks) runs kLayers MLP blocks back to
// back, each with its own random bf16 weights (kLayers x 96 MiB, so the L2 holds none of them):
//
//   mlp/split   gate/up tile b, signal; down tile b after every gate/up tile (h staged), signal
//   mlp/fused   gate/up tile b, then its h times W_down's column slice b added into the next
//               residual with red.global.add.v4.f32, signal: one dependency a layer
//   mlp/fused_b8  the same with 8 (not 16) 16-byte loads a lane in flight on the slice
//
// Each case first checks the last layer's output against an fp64 CPU reference of the whole chain
// (relative error max|y - ref| / max|ref| <= 1e-3; the outputs cleared before). Counters:
// us_per_layer (median launch time, CUDA events, over kLayers), TBps (weights streamed per second),
// pct_of_bw (of the measured streaming-read bandwidth, `doctor --measure`'s, else measured here),
// floor_us (a layer's weight bytes at that bandwidth), rel_err, regs and spill_bytes (ptxas).
// bench/device_check.sh runs it in the `mlp` stage. The prediction is dev/perf_log.md section 49.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/device.h"
#include "eval/timing.h"
#include "gate_common.h"
#include "schedule/config.h"
#include "vm/cuda_runtime.h"
#include "vm/device/mlp_gate.cuh"
#include "vm/embedded_sources.h"
#include "vm/nvrtc_build.h"
#if MS_HAVE_CUDA
#include "vm/cuda_check.h"
#include "vm/device_buffer.h"
#endif

namespace {

using namespace megasched;
using gate_common::bf16_bits;
using gate_common::bf16_value;
using gate_common::fmt;
using gate_common::relative_error;
using gate_common::uniform;
using ms_mlp::kFfn;
using ms_mlp::kHidden;

constexpr uint32_t kLayers = 16;
constexpr double kMaxRelErr = 1e-3;
constexpr uint64_t kSpinBoundNs = 2'000'000'000ull;        // a wait past 2 s is a broken kernel
constexpr uint64_t kLayerWeights = 3ull * kFfn * kHidden;  // bf16 elements: gate, up, down

/// The weights, the input and the fp64 reference of every layer's output.
struct HostMlp {
  std::vector<uint16_t> w_gu, w_down;  // kLayers x (2 kFfn x kHidden), kLayers x (kHidden x kFfn)
  std::vector<float> x0;
  std::vector<double> ref;  // the last layer's output
};

const HostMlp& host_mlp() {
  static HostMlp m;
  if (!m.x0.empty()) return m;
  uint64_t seed = 0x31337ull;
  // Scales that keep every layer's activations near unit size (uniform: variance 1/3).
  const float gu_scale = std::sqrt(3.0f / kHidden), down_scale = std::sqrt(3.0f / kFfn);
  m.w_gu.resize(uint64_t(kLayers) * 2 * kFfn * kHidden);
  for (uint16_t& v : m.w_gu) v = bf16_bits(gu_scale * uniform(&seed));
  m.w_down.resize(uint64_t(kLayers) * kHidden * kFfn);
  for (uint16_t& v : m.w_down) v = bf16_bits(down_scale * uniform(&seed));
  m.x0.resize(kHidden);
  for (float& v : m.x0) v = uniform(&seed);
  std::vector<double> x(m.x0.begin(), m.x0.end()), n(kHidden), h(kFfn);
  for (uint32_t l = 0; l < kLayers; ++l) {
    double ss = 0.0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / kHidden + double(ms_mlp::kRmsEps));
    for (uint32_t i = 0; i < kHidden; ++i) n[i] = x[i] * inv;
    const uint16_t* gu = m.w_gu.data() + uint64_t(l) * 2 * kFfn * kHidden;
    for (uint32_t p = 0; p < kFfn; ++p) {
      double g = 0.0, u = 0.0;
      const uint16_t* gr = gu + uint64_t(p) * kHidden;
      const uint16_t* ur = gu + uint64_t(kFfn + p) * kHidden;
      for (uint32_t k = 0; k < kHidden; ++k) {
        g += double(bf16_value(gr[k])) * n[k];
        u += double(bf16_value(ur[k])) * n[k];
      }
      h[p] = g / (1.0 + std::exp(-g)) * u;
    }
    const uint16_t* wd = m.w_down.data() + uint64_t(l) * kHidden * kFfn;
    for (uint32_t r = 0; r < kHidden; ++r) {
      double y = 0.0;
      const uint16_t* row = wd + uint64_t(r) * kFfn;
      for (uint32_t k = 0; k < kFfn; ++k) y += double(bf16_value(row[k])) * h[k];
      x[r] += y;
    }
  }
  m.ref = x;
  return m;
}

/// The live GPU's target; nullopt after marking `state` skipped unless it is an sm_90 part with
/// room for kTasks co-resident blocks.
std::optional<schedule::GpuTarget> live_target_or_skip(benchmark::State& state) {
  auto t = gate_common::live_sm90_target_or_skip(state, "red.global.add.v4.f32");
  if (t && t->num_sms < int(ms_mlp::kTasks)) {
    state.SkipWithError(("the MLP gate needs " + std::to_string(ms_mlp::kTasks) +
                         " co-resident blocks; this GPU has " + std::to_string(t->num_sms) + " SMs")
                            .c_str());
    return std::nullopt;
  }
  return t;
}

#if MS_HAVE_CUDA

/// One NVRTC build of mlp_gate.cuh: both kernels.
struct MlpCubin {
  std::string error;  // empty: ok
  std::vector<char> cubin;
  std::vector<vm::KernelResources> kernels;
  std::string key;
};

const MlpCubin& mlp_cubin() {
  static MlpCubin out;
  if (!out.cubin.empty() || !out.error.empty()) return out;
  std::vector<const char*> names, texts;
  std::string hash = "missing";
  for (const vm::EmbeddedSource& s : vm::embedded_sources()) {
    names.push_back(s.path);
    texts.push_back(s.text);
    if (std::string(s.path) == "vm/device/mlp_gate.cuh") hash = schedule::hash_hex(s.text);
  }
  nvrtcProgram prog = nullptr;
  MS_CHECK_CUDA(nvrtcCreateProgram(&prog, "#include \"vm/device/mlp_gate.cuh\"\n", "mlp.cu",
                                   static_cast<int>(names.size()), texts.data(), names.data()));
  std::vector<const char*> opts = {"--std=c++17", "-arch=sm_90a", "--ptxas-options=-v",
                                   "-default-device"};
  // Source lines for ncu (bench/device_check.sh's NCU_MLP sets it, as for the megakernel).
  if (const char* env = std::getenv("MEGASCHED_NVRTC_LINEINFO"); env && std::string(env) == "1")
    opts.push_back("-lineinfo");
  const nvrtcResult rc = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) nvrtcGetProgramLog(prog, log.data());
  if (rc != NVRTC_SUCCESS) {
    out.error = "NVRTC failed on vm/device/mlp_gate.cuh for sm_90a:\n" + log;
  } else {
    size_t size = 0;
    MS_CHECK_CUDA(nvrtcGetCUBINSize(prog, &size));
    out.cubin.resize(size);
    MS_CHECK_CUDA(nvrtcGetCUBIN(prog, out.cubin.data()));
    out.kernels = vm::parse_ptxas_log(log);
    out.key = "mlp-sm_90a-" + hash;
  }
  nvrtcDestroyProgram(&prog);
  return out;
}

uint64_t dptr(const std::unique_ptr<vm::DeviceBuffer>& b) {
  return reinterpret_cast<uint64_t>(b->ptr);
}

/// The device copies of the weights and the buffers every case shares.
struct DeviceMlp {
  std::unique_ptr<vm::DeviceBuffer> w_gu, w_down, x, gu, counters, error;
};

const DeviceMlp& device_mlp(const HostMlp& m) {
  static DeviceMlp d;
  if (d.w_gu) return d;
  d.w_gu = vm::upload(m.w_gu);
  d.w_down = vm::upload(m.w_down);
  d.x = std::make_unique<vm::DeviceBuffer>(uint64_t(kLayers + 1) * kHidden * 4);
  MS_CHECK_CUDA(cudaMemcpy(d.x->ptr, m.x0.data(), kHidden * 4, cudaMemcpyHostToDevice));
  d.gu = std::make_unique<vm::DeviceBuffer>(uint64_t(kLayers) * 2 * kFfn * 4);
  d.counters = std::make_unique<vm::DeviceBuffer>(2 * kLayers * 4);
  d.error = std::make_unique<vm::DeviceBuffer>(16);
  MS_CHECK_CUDA(cudaMemset(d.error->ptr, 0, 16));
  return d;
}

struct Events {
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  Events() {
    MS_CHECK_CUDA(cudaEventCreate(&e0));
    MS_CHECK_CUDA(cudaEventCreate(&e1));
  }
  ~Events() {
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
};

/// One launch: the counters and every layer's output cleared first (the fused design adds into
/// them), then the kernel between two events. Returns ms.
double run_ms(CUfunction fn, ms_mlp::MlpArgs args, const DeviceMlp& d, cudaStream_t stream,
              const Events& ev) {
  MS_CHECK_CUDA(cudaMemsetAsync(d.counters->ptr, 0, d.counters->bytes, stream));
  MS_CHECK_CUDA(cudaMemsetAsync(static_cast<char*>(d.x->ptr) + kHidden * 4, 0,
                                d.x->bytes - kHidden * 4, stream));
  void* params[] = {&args};
  MS_CHECK_CUDA(cudaEventRecord(ev.e0, stream));
  MS_CHECK_CUDA(cuLaunchKernel(fn, ms_mlp::kTasks, 1, 1, ms_mlp::kThreads, 1, 1, 0,
                               static_cast<CUstream>(stream), params, nullptr));
  MS_CHECK_CUDA(cudaEventRecord(ev.e1, stream));
  MS_CHECK_CUDA(cudaEventSynchronize(ev.e1));
  float ms = 0.0f;
  MS_CHECK_CUDA(cudaEventElapsedTime(&ms, ev.e0, ev.e1));
  return ms;
}

uint32_t error_bits(const DeviceMlp& d) {
  uint32_t e = 0;
  MS_CHECK_CUDA(cudaMemcpy(&e, d.error->ptr, 4, cudaMemcpyDeviceToHost));
  return e;
}

void mlp_case(benchmark::State& state, const std::string& kernel) {
  const auto t = live_target_or_skip(state);
  if (!t) return;
  const MlpCubin& build = mlp_cubin();
  if (!build.error.empty()) {
    state.SkipWithError(build.error.c_str());
    return;
  }
  const HostMlp& m = host_mlp();
  const DeviceMlp& d = device_mlp(m);
  const CUfunction fn =
      static_cast<CUfunction>(vm::load_functions(build.cubin, build.key, {kernel})[0]);
  int regs = 0, spills = 0;
  MS_CHECK_CUDA(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
  for (const vm::KernelResources& k : build.kernels)
    if (k.name == kernel)
      spills = std::max(0, k.spill_store_bytes) + std::max(0, k.spill_load_bytes);
  ms_mlp::MlpArgs args{};
  args.w_gu = dptr(d.w_gu);
  args.w_down = dptr(d.w_down);
  args.x = dptr(d.x);
  args.gu = dptr(d.gu);
  args.counters = dptr(d.counters);
  args.error = dptr(d.error);
  args.spin_bound_ns = kSpinBoundNs;
  args.layers = kLayers;
  cudaStream_t stream = static_cast<cudaStream_t>(vm::shared_stream());
  Events ev;
  run_ms(fn, args, d, stream, ev);
  if (const uint32_t e = error_bits(d)) {
    state.SkipWithError(("a wait timed out (error bits " + std::to_string(e) + ")").c_str());
    return;
  }
  std::vector<float> y(kHidden);
  MS_CHECK_CUDA(cudaMemcpy(y.data(), static_cast<char*>(d.x->ptr) + uint64_t(kLayers) * kHidden * 4,
                           kHidden * 4, cudaMemcpyDeviceToHost));
  const double rel_err = relative_error(y, m.ref);
  if (!(rel_err <= kMaxRelErr)) {
    state.SkipWithError(("the last layer's output is wrong: relative error " +
                         fmt("%.3g", rel_err) +
                         " > 1e-3 (max|y - ref| / max|ref| over an fp64 CPU reference)")
                            .c_str());
    return;
  }
  run_ms(fn, args, d, stream, ev);  // warm-up
  std::vector<double> ms;
  for (auto _ : state) {
    ms.push_back(run_ms(fn, args, d, stream, ev));
    state.SetIterationTime(ms.back() * 1e-3);
  }
  if (const uint32_t e = error_bits(d)) {
    state.SkipWithError(
        ("a wait timed out during the timed launches (error bits " + std::to_string(e) + ")")
            .c_str());
    return;
  }
  const double median_ms = eval::sample_stats(ms).median;
  const double bw = gate_common::measured_bw_gbs(*t, "mlp");
  const double layer_bytes = double(kLayerWeights) * 2;
  const double gbps = layer_bytes * kLayers / (median_ms * 1e6);
  state.counters["us_per_layer"] = median_ms * 1e3 / kLayers;
  state.counters["floor_us"] = layer_bytes / (bw * 1e3);
  state.counters["TBps"] = gbps / 1e3;
  state.counters["pct_of_bw"] = 100.0 * gbps / bw;
  state.counters["bw_GBps"] = bw;
  state.counters["rel_err"] = rel_err;
  state.counters["regs"] = regs;
  state.counters["spill_bytes"] = spills;
}

#else

void mlp_case(benchmark::State& state, const std::string&) {
  state.SkipWithError("built without the CUDA toolkit");
}

#endif

}  // namespace

int main(int argc, char** argv) {
  for (const char* design : {"split", "fused", "fused_b8"}) {
    const std::string name = std::string("mlp/") + design;
    benchmark::RegisterBenchmark(name.c_str(), mlp_case, std::string("ms_mlp_") + design)
        ->UseManualTime()
        ->Iterations(30)
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
