// The gate before megakernel v3 (Google Benchmark; needs an sm_90 GPU and skips every case without
// one): vm/device/gate.cuh's persistent kernel streams a pre-packed bf16 weight matrix through a
// ring of shared-memory pages filled by one cp.async.bulk each, and computes y = W x with one of
// three consumers: `copy` (pages released unread: the ceiling), `C` (CUDA cores, the input slice in
// registers) and `M` (mma.sync m16n8k16, weights as the A operand). Built with NVRTC for sm_90a.
//
//   gate/DESIGN/SHAPE/pPAGE_nN/b1    one block (one SM's rate; gate: >= 100 GB/s)
//   gate/DESIGN/SHAPE/pPAGE_nN/ball  one block per SM (gate: >= 95% of the measured bandwidth)
//   gate/hop/pPAGE_nN/bg             a chain of kHopLinks dependent links between blocks 0 and 1
//                                    (store 128 B, red.release, acquire poll, load) while every
//                                    other SM streams gate/up with C (gate: <= 1.5 us per link)
//   gate/hop/pPAGE_nN/bg_M           the same behind M
//   gate/hop/pPAGE_nN/bg[_M]_capKk   the same with each streaming SM's loader capped at K KiB
//                                    requested and not landed (16, 32 or 48 in whole pages,
//                                    below the ring's size)
//   gate/hop/p16_n4/idle             the same chain with nothing else running
//   gate/relay/p16_n4/MODE_ownNk     the chain between blocks 0 and 2 of a launch in clusters of
//                                    two, behind C: `direct` (each polls the global flag),
//                                    `flag` (its cluster peer polls and tells it through its
//                                    shared memory; it loads the link's bytes itself), `data`
//                                    (the peer also stores those bytes into its shared memory),
//                                    while N KiB of each waiting block's own loads are in flight
//                                    (0 or 56: the bytes a megakernel block puts in flight before
//                                    its wait; vm/device/gate.cuh, relay_main)
//
// SHAPE is a llama-1b GEMV: gate_up 16384 x 2048, down 2048 x 8192, qkv 3072 x 2048, o 2048 x
// 2048, lm_head 128256 x 2048. One timed launch streams `copies` distinct copies of the matrix one
// after the other (at least 2.5 x the L2 for one block, 1 GiB for all SMs), so the L2 never holds
// what is read. Every case first checks y against an fp64 CPU reference on random data (the output
// poisoned with NaN before): relative error max|y - ref| / max|ref| <= 1e-2, else the case fails.
// Counters: GBps (matrix bytes x copies / median launch time, CUDA events, warm-up first),
// GBps_per_SM, pct_of_bw (of the measured streaming-read bandwidth, `doctor --measure`'s, else
// measured here), rel_err, gate_pass (0/1), regs and spill_bytes (ptxas). The hop cases report
// us_per_link, bg_TBps (what the other SMs streamed) and bg_covered (1 when the chain ended before
// the first streaming block did). A summary of every verdict is printed after the run.
// bench/device_check.sh runs it in the `gate` stage.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/device.h"
#include "eval/timing.h"
#include "gate_common.h"
#include "schedule/config.h"
#include "vm/cuda_runtime.h"
#include "vm/device/gate.cuh"
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
using ms_gate::GateArgs;

struct Shape {
  const char* name;
  uint32_t rows, cols;
};
constexpr Shape kShapes[] = {{"gate_up", 16384, 2048},
                             {"down", 2048, 8192},
                             {"qkv", 3072, 2048},
                             {"o", 2048, 2048},
                             {"lm_head", 128256, 2048}};

struct Geometry {
  uint32_t page_bytes, pages;
};
constexpr Geometry kGeometries[] = {{16384, 4}, {16384, 8}, {32768, 4}, {32768, 6}};

constexpr double kOneSmGateGBps = 100.0;
constexpr double kAllSmGateFraction = 0.95;
constexpr double kHopGateUs = 1.5;
constexpr uint32_t kHopLinks = 256;
constexpr double kMaxRelErr = 1e-2;
constexpr uint64_t kSpinBoundNs = 2'000'000'000ull;  // a wait past 2 s is a broken kernel

std::string geometry_tag(const Geometry& g) {
  return "p" + std::to_string(g.page_bytes / 1024) + "_n" + std::to_string(g.pages);
}

const char* design_tag(uint32_t design) {
  return design == ms_gate::kCopy ? "copy" : design == ms_gate::kCuda ? "C" : "M";
}

/// A hop case: the chain between blocks 0 and 1, behind the other SMs streaming gate/up with
/// `design` (background) or alone (idle), the loader capped at `inflight_pages` (0: the ring's).
struct HopCase {
  Geometry geo;
  uint32_t design;
  uint32_t inflight_pages;
  bool background;
  uint32_t in_flight_pages() const { return inflight_pages > 0 ? inflight_pages : geo.pages; }
};

/// gate/hop/pPAGE_nN/bg (C behind, the whole ring in flight), .../bg_M, .../bg_capKk (K KiB in
/// flight per SM), .../bg_M_capKk, .../idle.
std::string hop_case_name(const HopCase& hc) {
  std::string tail = hc.background ? "bg" : "idle";
  if (hc.background && hc.design == ms_gate::kMma) tail += "_M";
  if (hc.background && hc.inflight_pages > 0)
    tail += "_cap" + std::to_string(hc.inflight_pages * hc.geo.page_bytes / 1024) + "k";
  return "gate/hop/" + geometry_tag(hc.geo) + "/" + tail;
}

/// A relay case (vm/device/gate.cuh, relay_main): the chain between blocks 0 and 2 of a launch in
/// clusters of two, each told of the link before its own by `mode`, with `self_warps` warps of its
/// own loads in flight, behind every other SM streaming gate/up with C.
struct RelayCase {
  uint32_t mode;        // ms_gate::kHopDirect, kHopRelayFlag, kHopRelayData
  uint32_t self_warps;  // 0 .. ms_gate::kSelfWarpsMax
  /// KiB of its own loads a waiting block keeps in flight (two batches a lane, 16 bytes a load).
  uint32_t own_kib() const { return self_warps * 2 * ms_gate::kSelfLoads * 16 * 32 / 1024; }
};

std::string relay_case_name(const RelayCase& rc) {
  const char* mode = rc.mode == ms_gate::kHopDirect      ? "direct"
                     : rc.mode == ms_gate::kHopRelayFlag ? "flag"
                                                         : "data";
  return std::string("gate/relay/p16_n4/") + mode + "_own" + std::to_string(rc.own_kib()) + "k";
}

/// Verdict lines by case name (the last run of a case wins), printed after the run.
std::map<std::string, std::string>& verdicts() {
  static std::map<std::string, std::string> v;
  return v;
}

/// The live GPU's target; nullopt after marking `state` skipped when there is none.
std::optional<schedule::GpuTarget> live_target_or_skip(benchmark::State& state) {
  return gate_common::live_sm90_target_or_skip(state, "cp.async.bulk");
}

#if MS_HAVE_CUDA

std::string kernel_name(uint32_t design, uint32_t cols) {
  const char* d = design == ms_gate::kCopy ? "copy" : design == ms_gate::kCuda ? "c" : "m";
  return std::string("ms_gate_") + d + "_k" + std::to_string(cols);
}

void record_verdict(benchmark::State& state, const std::string& name, bool pass,
                    const std::string& what) {
  state.counters["gate_pass"] = pass ? 1 : 0;
  verdicts()[name] = std::string(pass ? "PASS " : "FAIL ") + what;
}

/// The streaming-read bandwidth the all-SM gate is relative to.
double measured_bw_gbs(const schedule::GpuTarget& t) {
  return gate_common::measured_bw_gbs(t, "gate");
}

/// One shape's random weights (bf16, row-major), input and fp64 reference output.
struct HostMatrix {
  std::string name;
  uint32_t rows = 0, cols = 0;
  std::vector<uint16_t> w;
  std::vector<float> x;
  std::vector<double> ref;
  uint64_t bytes() const { return uint64_t(rows) * cols * 2; }
};

/// The host data of `s`; only the last shape asked for is kept (the LM head is 525 MB).
const HostMatrix& host_matrix(const Shape& s) {
  static HostMatrix m;
  if (m.name == s.name) return m;
  m = HostMatrix{};
  m.name = s.name;
  m.rows = s.rows;
  m.cols = s.cols;
  uint64_t seed = 0x6a7e5eedull + s.rows * 31ull + s.cols;
  m.w.resize(uint64_t(s.rows) * s.cols);
  for (uint16_t& v : m.w) v = bf16_bits(uniform(&seed));
  m.x.resize(s.cols);
  for (float& v : m.x) v = uniform(&seed);
  m.ref.assign(s.rows, 0.0);
  for (uint32_t r = 0; r < s.rows; ++r) {
    const uint16_t* row = m.w.data() + uint64_t(r) * s.cols;
    double acc = 0.0;
    for (uint32_t k = 0; k < s.cols; ++k) acc += double(bf16_value(row[k])) * double(m.x[k]);
    m.ref[r] = acc;
  }
  return m;
}

/// The weights in a design's layout: row-major for copy and C, mma_packed_index's for M.
std::vector<uint16_t> packed_weights(const HostMatrix& m, uint32_t design) {
  if (design != ms_gate::kMma) return m.w;
  std::vector<uint16_t> p(m.w.size());
  for (uint32_t r = 0; r < m.rows; ++r)
    for (uint32_t k = 0; k < m.cols; ++k)
      p[ms_gate::mma_packed_index(m.cols, r, k)] = m.w[uint64_t(r) * m.cols + k];
  return p;
}

/// Copies of the matrix one timed launch streams: 2.5 x the L2 for one block, 1 GiB for all SMs,
/// 2 GiB behind the hop chain (so it outlasts the chain).
uint32_t copies_for(uint64_t bytes, uint64_t target_bytes) {
  return static_cast<uint32_t>(std::max<uint64_t>(1, (target_bytes + bytes - 1) / bytes));
}
constexpr uint64_t kAllSmBytes = 1ull << 30;
constexpr uint64_t kHopBackgroundBytes = 2ull << 30;
/// Behind the relay chains, whose links can take 2 us and more each: 8 GiB (about 1.8 ms).
constexpr uint64_t kRelayBackgroundBytes = 8ull << 30;

/// One NVRTC build of gate.cuh for a ring geometry: every kernel of the file.
struct GateCubin {
  std::string error;  // empty: ok
  std::string log;
  std::vector<char> cubin;
  std::vector<vm::KernelResources> kernels;
  std::string key;
};

/// A hash of vm/device/gate.cuh's embedded text: the gate is outside vm::build_identity().
std::string gate_source_hash() {
  for (const vm::EmbeddedSource& s : vm::embedded_sources())
    if (std::string(s.path) == "vm/device/gate.cuh") return schedule::hash_hex(s.text);
  return "missing";
}

GateCubin compile_gate(const std::string& arch, const Geometry& geo) {
  GateCubin out;
  std::vector<const char*> names, texts;
  for (const vm::EmbeddedSource& s : vm::embedded_sources()) {
    names.push_back(s.path);
    texts.push_back(s.text);
  }
  const char* src = "#include \"vm/device/gate.cuh\"\n";
  nvrtcProgram prog = nullptr;
  MS_CHECK_CUDA(nvrtcCreateProgram(&prog, src, "gate.cu", static_cast<int>(names.size()),
                                   texts.data(), names.data()));
  const std::vector<std::string> opts = {"--std=c++17",
                                         "-arch=" + arch,
                                         "--ptxas-options=-v",
                                         "-default-device",
                                         "-DMS_GATE_PAGE_BYTES=" + std::to_string(geo.page_bytes),
                                         "-DMS_GATE_PAGES=" + std::to_string(geo.pages)};
  std::vector<const char*> copts;
  for (const std::string& o : opts) copts.push_back(o.c_str());
  const nvrtcResult rc = nvrtcCompileProgram(prog, static_cast<int>(copts.size()), copts.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  out.log.assign(log_size, '\0');
  if (log_size > 0) nvrtcGetProgramLog(prog, out.log.data());
  if (rc != NVRTC_SUCCESS) {
    out.error = "NVRTC failed on vm/device/gate.cuh for " + arch + " " + geometry_tag(geo) + ":\n" +
                out.log;
  } else {
    size_t size = 0;
    MS_CHECK_CUDA(nvrtcGetCUBINSize(prog, &size));
    out.cubin.resize(size);
    MS_CHECK_CUDA(nvrtcGetCUBIN(prog, out.cubin.data()));
    out.kernels = vm::parse_ptxas_log(out.log);
    out.key = "gate-" + arch + "-" + geometry_tag(geo) + "-" + gate_source_hash();
  }
  nvrtcDestroyProgram(&prog);
  return out;
}

const GateCubin& gate_cubin(const Geometry& geo) {
  static std::map<std::pair<uint32_t, uint32_t>, GateCubin> cache;
  const auto key = std::make_pair(geo.page_bytes, geo.pages);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, compile_gate("sm_90a", geo)).first;
  return it->second;
}

/// `copies` copies of one matrix in one design's layout on the device; the last one asked for is
/// kept.
struct DeviceWeights {
  std::string key;
  std::unique_ptr<vm::DeviceBuffer> buf;
  uint64_t bytes = 0;  // one copy
  uint32_t copies = 0;
};

const DeviceWeights& device_weights(const HostMatrix& m, uint32_t design, uint32_t copies) {
  static DeviceWeights d;
  const std::string key = m.name + (design == ms_gate::kMma ? "/mma" : "/rows");
  if (d.key == key && d.copies >= copies) return d;
  d.buf.reset();
  d.key = key;
  d.bytes = m.bytes();
  d.copies = copies;
  d.buf = std::make_unique<vm::DeviceBuffer>(d.bytes * copies);
  const std::vector<uint16_t> host = packed_weights(m, design);
  char* base = static_cast<char*>(d.buf->ptr);
  MS_CHECK_CUDA(cudaMemcpy(base, host.data(), d.bytes, cudaMemcpyHostToDevice));
  for (uint32_t c = 1; c < copies; ++c)
    MS_CHECK_CUDA(cudaMemcpy(base + c * d.bytes, base, d.bytes, cudaMemcpyDeviceToDevice));
  return d;
}

uint64_t dptr(const std::unique_ptr<vm::DeviceBuffer>& b) {
  return reinterpret_cast<uint64_t>(b->ptr);
}

/// One configured launch of a gate kernel and the buffers around it.
struct GateLaunch {
  CUfunction fn = nullptr;
  unsigned grid = 0;
  unsigned smem = 0;
  GateArgs args{};
  std::unique_ptr<vm::DeviceBuffer> x, y, hop, times, error;
  int registers = 0;
  int spill_bytes = 0;
  unsigned cluster = 1;  // blocks a cluster (the relay kernel's launches: 2)

  /// Launches once and returns the kernel time in ms (CUDA events).
  double run_ms(cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1) {
    if (args.hop_links > 0) {
      MS_CHECK_CUDA(cudaMemsetAsync(hop->ptr, 0, hop->bytes, stream));
      MS_CHECK_CUDA(cudaMemsetAsync(times->ptr, 0, times->bytes, stream));
    }
    void* params[] = {&args};
    MS_CHECK_CUDA(cudaEventRecord(e0, stream));
    if (cluster > 1) {
      CUlaunchAttribute attr{};
      CUlaunchConfig cfg = config(static_cast<CUstream>(stream), &attr);
      MS_CHECK_CUDA(cuLaunchKernelEx(&cfg, fn, params, nullptr));
    } else {
      MS_CHECK_CUDA(cuLaunchKernel(fn, grid, 1, 1, ms_gate::kThreads, 1, 1, smem,
                                   static_cast<CUstream>(stream), params, nullptr));
    }
    MS_CHECK_CUDA(cudaEventRecord(e1, stream));
    MS_CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0.0f;
    MS_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
  }

  /// The launch in clusters of `cluster` blocks (`attr` holds the cluster's shape).
  CUlaunchConfig config(CUstream stream, CUlaunchAttribute* attr) const {
    attr->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr->value.clusterDim.x = cluster;
    attr->value.clusterDim.y = 1;
    attr->value.clusterDim.z = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = grid;
    cfg.gridDimY = 1;
    cfg.gridDimZ = 1;
    cfg.blockDimX = ms_gate::kThreads;
    cfg.blockDimY = 1;
    cfg.blockDimZ = 1;
    cfg.sharedMemBytes = smem;
    cfg.hStream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
  }

  uint32_t error_bits() const {
    uint32_t e = 0;
    MS_CHECK_CUDA(cudaMemcpy(&e, error->ptr, 4, cudaMemcpyDeviceToHost));
    return e;
  }
};

/// The launch of `kernel` from the geometry's build, `grid` blocks of one per SM (dynamic shared
/// memory raised to more than half an SM's, so two blocks never share one). nullopt after marking
/// `state` failed.
std::optional<GateLaunch> make_launch(benchmark::State& state, const schedule::GpuTarget& t,
                                      const Geometry& geo, const std::string& kernel, unsigned grid,
                                      const HostMatrix& m) {
  const GateCubin& build = gate_cubin(geo);
  if (!build.error.empty()) {
    state.SkipWithError(build.error.c_str());
    return std::nullopt;
  }
  GateLaunch l;
  l.fn = static_cast<CUfunction>(vm::load_functions(build.cubin, build.key, {kernel})[0]);
  for (const vm::KernelResources& k : build.kernels)
    if (k.name == kernel)
      l.spill_bytes = std::max(0, k.spill_store_bytes) + std::max(0, k.spill_load_bytes);
  MS_CHECK_CUDA(cuFuncGetAttribute(&l.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, l.fn));
  const uint64_t need = ms_gate::smem_bytes(geo.pages, geo.page_bytes);
  l.smem = static_cast<unsigned>(std::max<uint64_t>(need, uint64_t(t.smem_per_sm) / 2 + 1024));
  if (l.smem > static_cast<unsigned>(t.smem_per_block_optin)) {
    state.SkipWithError(("the ring needs " + std::to_string(l.smem) +
                         " B of shared memory, over "
                         "the block limit")
                            .c_str());
    return std::nullopt;
  }
  MS_CHECK_CUDA(cuFuncSetAttribute(l.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   static_cast<int>(l.smem)));
  MS_CHECK_CUDA(cuFuncSetAttribute(l.fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100));
  int per_sm = 0;
  MS_CHECK_CUDA(
      cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, l.fn, ms_gate::kThreads, l.smem));
  if (per_sm != 1) {
    state.SkipWithError(
        ("expected one resident block per SM, the occupancy is " + std::to_string(per_sm)).c_str());
    return std::nullopt;
  }
  l.grid = grid;
  l.x = vm::upload(m.x);
  l.y = std::make_unique<vm::DeviceBuffer>(uint64_t(m.rows) * 4);
  l.hop = std::make_unique<vm::DeviceBuffer>(4 * (32 * uint64_t(kHopLinks) + 32));
  l.times = std::make_unique<vm::DeviceBuffer>(8 * (2 + uint64_t(grid)));
  l.error = std::make_unique<vm::DeviceBuffer>(16);
  MS_CHECK_CUDA(cudaMemset(l.error->ptr, 0, 16));
  l.args.x = dptr(l.x);
  l.args.y = dptr(l.y);
  l.args.hop_flag = dptr(l.hop);
  l.args.hop_data = dptr(l.hop) + 128;
  l.args.times = dptr(l.times);
  l.args.error = dptr(l.error);
  l.args.spin_bound_ns = kSpinBoundNs;
  l.args.rows = m.rows;
  return l;
}

/// The check run: y poisoned with NaN, one launch, y against the reference. False after marking
/// `state` failed.
bool check_output(benchmark::State& state, GateLaunch& l, const HostMatrix& m, uint32_t design,
                  cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1, double* rel_err) {
  MS_CHECK_CUDA(cudaMemset(l.y->ptr, 0xff, l.y->bytes));
  l.run_ms(stream, e0, e1);
  if (const uint32_t e = l.error_bits()) {
    state.SkipWithError(("the gate kernel reported error bits " + std::to_string(e) +
                         " (1: a ring wait timed out, 2: a hop link read wrong bytes)")
                            .c_str());
    return false;
  }
  *rel_err = 0.0;
  if (design == ms_gate::kCopy) return true;
  std::vector<float> y(m.rows);
  MS_CHECK_CUDA(cudaMemcpy(y.data(), l.y->ptr, l.y->bytes, cudaMemcpyDeviceToHost));
  *rel_err = relative_error(y, m.ref);
  if (!(*rel_err <= kMaxRelErr)) {
    state.SkipWithError(("y = W x is wrong: relative error " + fmt("%.3g", *rel_err) +
                         " > 1e-2 (max|y - ref| / max|ref| over an fp64 CPU reference)")
                            .c_str());
    return false;
  }
  return true;
}

/// Events around the shared stream's launches.
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

void run_stream(benchmark::State& state, const std::string& name, const schedule::GpuTarget& t,
                uint32_t design, const Shape& shape, const Geometry& geo, bool all_sms) {
  const HostMatrix& m = host_matrix(shape);
  const unsigned grid = all_sms ? static_cast<unsigned>(t.num_sms) : 1u;
  const uint32_t copies =
      copies_for(m.bytes(), all_sms ? kAllSmBytes : uint64_t(2.5 * double(t.l2_bytes)));
  const DeviceWeights& w =
      device_weights(m, design, std::max(copies, copies_for(m.bytes(), kHopBackgroundBytes)));
  auto l = make_launch(state, t, geo, kernel_name(design, shape.cols), grid, m);
  if (!l) return;
  l->args.w = dptr(w.buf);
  l->args.copy_stride = w.bytes;
  l->args.copies = copies;
  cudaStream_t stream = static_cast<cudaStream_t>(vm::shared_stream());
  Events ev;
  double rel_err = 0.0;
  if (!check_output(state, *l, m, design, stream, ev.e0, ev.e1, &rel_err)) return;
  for (int i = 0; i < 2; ++i) l->run_ms(stream, ev.e0, ev.e1);  // warm-up
  std::vector<double> ms;
  for (auto _ : state) {
    ms.push_back(l->run_ms(stream, ev.e0, ev.e1));
    state.SetIterationTime(ms.back() * 1e-3);
  }
  if (const uint32_t e = l->error_bits()) {
    state.SkipWithError(
        ("a ring wait timed out during the timed launches (error bits " + std::to_string(e) + ")")
            .c_str());
    return;
  }
  const double gbps = double(m.bytes()) * copies / (eval::sample_stats(ms).median * 1e6);
  const double bw = measured_bw_gbs(t);
  state.counters["GBps"] = gbps;
  state.counters["GBps_per_SM"] = gbps / grid;
  state.counters["pct_of_bw"] = 100.0 * gbps / bw;
  state.counters["bw_GBps"] = bw;
  state.counters["rel_err"] = rel_err;
  state.counters["blocks"] = grid;
  state.counters["copies"] = copies;
  state.counters["in_flight_KiB"] = geo.pages * geo.page_bytes / 1024.0;
  state.counters["regs"] = l->registers;
  state.counters["spill_bytes"] = l->spill_bytes;
  if (all_sms) {
    record_verdict(state, name, gbps >= kAllSmGateFraction * bw,
                   fmt("%.0f GB/s", gbps) + fmt(" = %.1f%%", 100 * gbps / bw) +
                       fmt(" of %.0f GB/s (gate >= 95%%)", bw));
  } else {
    record_verdict(state, name, gbps >= kOneSmGateGBps,
                   fmt("%.1f GB/s on one SM (gate >= 100)", gbps));
  }
}

/// A chain's timings over the benchmark's iterations: the median us per link, the background's
/// median TB/s and whether it streamed throughout every chain (blocks from first_block on).
struct ChainTimes {
  double us_per_link = 0.0;
  double bg_tbps = 0.0;
  bool all_covered = true;
};

/// Times `l`'s chain (after two warm-up launches) for the benchmark's iterations; nullopt after
/// marking `state` failed when the kernel reported an error (`what` names the chain).
std::optional<ChainTimes> time_chain(benchmark::State& state, GateLaunch& l, const HostMatrix& m,
                                     uint32_t copies, bool background, const char* what) {
  cudaStream_t stream = static_cast<cudaStream_t>(vm::shared_stream());
  Events ev;
  for (int i = 0; i < 2; ++i) l.run_ms(stream, ev.e0, ev.e1);  // warm-up
  std::vector<double> link_us, bg_tbps;
  bool all_covered = true;
  std::vector<uint64_t> times(2 + l.grid);
  for (auto _ : state) {
    const double ms = l.run_ms(stream, ev.e0, ev.e1);
    state.SetIterationTime(ms * 1e-3);
    MS_CHECK_CUDA(cudaMemcpy(times.data(), l.times->ptr, l.times->bytes, cudaMemcpyDeviceToHost));
    link_us.push_back(double(times[1] - times[0]) * 1e-3 / kHopLinks);
    if (background) {
      const uint64_t first_done =
          *std::min_element(times.begin() + 2 + l.args.first_block, times.end());
      all_covered = all_covered && times[1] <= first_done;
      bg_tbps.push_back(double(m.bytes()) * copies / (ms * 1e9));
    }
  }
  if (const uint32_t e = l.error_bits()) {
    state.SkipWithError((std::string("the ") + what + " or the ring reported error bits " +
                         std::to_string(e) + " (1: a wait timed out, 2: a link read wrong bytes)")
                            .c_str());
    return std::nullopt;
  }
  ChainTimes out;
  out.us_per_link = eval::sample_stats(link_us).median;
  out.bg_tbps = background ? eval::sample_stats(bg_tbps).median : 0.0;
  out.all_covered = all_covered;
  return out;
}

void run_hop(benchmark::State& state, const std::string& name, const schedule::GpuTarget& t,
             const HopCase& hc) {
  const Geometry& geo = hc.geo;
  const bool background = hc.background;
  const HostMatrix& m = host_matrix(kShapes[0]);  // gate/up behind the chain
  const unsigned grid = background ? static_cast<unsigned>(t.num_sms) : 2u;
  const uint32_t copies = copies_for(m.bytes(), kHopBackgroundBytes);
  const DeviceWeights& w = device_weights(m, hc.design, copies);
  auto l = make_launch(state, t, geo, kernel_name(hc.design, m.cols), grid, m);
  if (!l) return;
  l->args.w = dptr(w.buf);
  l->args.copy_stride = w.bytes;
  l->args.copies = copies;
  l->args.first_block = 2;
  l->args.hop_links = kHopLinks;
  l->args.inflight_pages = hc.inflight_pages;
  cudaStream_t stream = static_cast<cudaStream_t>(vm::shared_stream());
  Events ev;
  double rel_err = 0.0;
  if (background && !check_output(state, *l, m, hc.design, stream, ev.e0, ev.e1, &rel_err)) return;
  const auto chain = time_chain(state, *l, m, copies, background, "hop chain");
  if (!chain) return;
  const double us = chain->us_per_link;
  const bool all_covered = chain->all_covered;
  state.counters["us_per_link"] = us;
  state.counters["links"] = kHopLinks;
  state.counters["blocks"] = grid;
  state.counters["in_flight_KiB"] = hc.in_flight_pages() * geo.page_bytes / 1024.0;
  if (background) {
    state.counters["bg_TBps"] = chain->bg_tbps;
    state.counters["bg_covered"] = all_covered ? 1 : 0;
    state.counters["rel_err"] = rel_err;
  }
  record_verdict(state, name, us <= kHopGateUs && (!background || all_covered),
                 fmt("%.2f us per link (gate <= 1.5)", us) +
                     (background ? std::string(all_covered ? ", background streaming throughout"
                                                           : ", the background ended first")
                                 : std::string(", idle")));
}

void run_relay(benchmark::State& state, const std::string& name, const schedule::GpuTarget& t,
               const RelayCase& rc) {
  const Geometry& geo = kGeometries[0];
  const HostMatrix& m = host_matrix(kShapes[0]);  // gate/up behind the chain
  const uint32_t copies = copies_for(m.bytes(), kRelayBackgroundBytes);
  const DeviceWeights& w = device_weights(m, ms_gate::kCuda, copies);
  auto l = make_launch(state, t, geo, "ms_gate_c_k2048_relay", static_cast<unsigned>(t.num_sms), m);
  if (!l) return;
  // As many clusters of two as can be resident at once (an SM count a GPC cannot pair leaves one
  // SM out): every block runs from the start, as in the megakernel.
  l->cluster = 2;
  CUlaunchAttribute attr{};
  CUlaunchConfig cfg = l->config(nullptr, &attr);
  int clusters = 0;
  MS_CHECK_CUDA(cuOccupancyMaxActiveClusters(&clusters, l->fn, &cfg));
  if (clusters < 3) {
    state.SkipWithError(("only " + std::to_string(clusters) +
                         " clusters of two blocks fit at once; the relay needs 3")
                            .c_str());
    return;
  }
  l->grid = std::min<unsigned>(l->grid / 2, static_cast<unsigned>(clusters)) * 2;
  l->args.w = dptr(w.buf);
  l->args.copy_stride = w.bytes;
  l->args.copies = copies;
  l->args.first_block = 4;
  l->args.hop_links = kHopLinks;
  l->args.hop_mode = rc.mode;
  l->args.hop_self_warps = rc.self_warps;
  cudaStream_t stream = static_cast<cudaStream_t>(vm::shared_stream());
  Events ev;
  double rel_err = 0.0;
  if (!check_output(state, *l, m, ms_gate::kCuda, stream, ev.e0, ev.e1, &rel_err)) return;
  const auto chain = time_chain(state, *l, m, copies, true, "relay chain");
  if (!chain) return;
  const double us = chain->us_per_link;
  const bool all_covered = chain->all_covered;
  state.counters["us_per_link"] = us;
  state.counters["links"] = kHopLinks;
  state.counters["blocks"] = l->grid;
  state.counters["own_in_flight_KiB"] = rc.own_kib();
  state.counters["bg_TBps"] = chain->bg_tbps;
  state.counters["bg_covered"] = all_covered ? 1 : 0;
  state.counters["rel_err"] = rel_err;
  record_verdict(
      state, name, us <= kHopGateUs && all_covered,
      fmt("%.2f us per link (gate <= 1.5)", us) +
          (all_covered ? ", background streaming throughout" : ", the background ended first"));
}

#endif  // MS_HAVE_CUDA

void stream_case(benchmark::State& state, std::string name, uint32_t design, Shape shape,
                 Geometry geo, bool all_sms) {
  const auto target = live_target_or_skip(state);
  if (!target) return;
#if MS_HAVE_CUDA
  try {
    run_stream(state, name, *target, design, shape, geo, all_sms);
  } catch (const vm::GpuError& e) {
    state.SkipWithError(e.what());
  }
#else
  (void)name, (void)design, (void)shape, (void)geo, (void)all_sms;
  state.SkipWithError("built without the CUDA toolkit");
#endif
}

void hop_case(benchmark::State& state, std::string name, HopCase hc) {
  const auto target = live_target_or_skip(state);
  if (!target) return;
#if MS_HAVE_CUDA
  try {
    run_hop(state, name, *target, hc);
  } catch (const vm::GpuError& e) {
    state.SkipWithError(e.what());
  }
#else
  (void)name, (void)hc;
  state.SkipWithError("built without the CUDA toolkit");
#endif
}

void relay_case(benchmark::State& state, std::string name, RelayCase rc) {
  const auto target = live_target_or_skip(state);
  if (!target) return;
#if MS_HAVE_CUDA
  try {
    run_relay(state, name, *target, rc);
  } catch (const vm::GpuError& e) {
    state.SkipWithError(e.what());
  }
#else
  (void)name, (void)rc;
  state.SkipWithError("built without the CUDA toolkit");
#endif
}

void register_all() {
  const uint32_t designs[] = {ms_gate::kCuda, ms_gate::kMma, ms_gate::kCopy};
  // Shape, then design outermost: the host data and the device copies change only between them.
  for (const Shape& s : kShapes) {
    for (uint32_t d : designs) {
      for (const Geometry& g : kGeometries) {
        for (bool all : {false, true}) {
          const std::string name = std::string("gate/") + design_tag(d) + "/" + s.name + "/" +
                                   geometry_tag(g) + (all ? "/ball" : "/b1");
          benchmark::RegisterBenchmark(name.c_str(), stream_case, name, d, s, g, all)
              ->UseManualTime()
              ->Iterations(all ? 30 : 10)
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  auto add_hop = [](const HopCase& hc) {
    const std::string name = hop_case_name(hc);
    benchmark::RegisterBenchmark(name.c_str(), hop_case, name, hc)
        ->UseManualTime()
        ->Iterations(20)
        ->Unit(benchmark::kMicrosecond);
  };
  // Every geometry behind C with its whole ring in flight, then the caps: 16, 32 or 48 KiB per SM
  // in flight (whole pages, below the ring's size) behind C and M (the bytes-in-flight cap apart
  // from the ring's capacity).
  for (const Geometry& g : kGeometries) add_hop({g, ms_gate::kCuda, 0, true});
  for (const Geometry& g : kGeometries) {
    for (uint32_t design : {ms_gate::kCuda, ms_gate::kMma}) {
      for (uint32_t cap_kib : {16u, 32u, 48u}) {
        const uint32_t pages = cap_kib * 1024 / g.page_bytes;
        if (pages == 0 || pages >= g.pages || cap_kib * 1024 % g.page_bytes != 0) continue;
        add_hop({g, design, pages, true});
      }
    }
  }
  add_hop({kGeometries[0], ms_gate::kCuda, 0, false});
  // The relay chains: how a waiting block learns of the link before its own, with and without its
  // own loads in flight.
  for (uint32_t self_warps : {0u, ms_gate::kSelfWarpsMax}) {
    for (uint32_t mode : {ms_gate::kHopDirect, ms_gate::kHopRelayFlag, ms_gate::kHopRelayData}) {
      const RelayCase rc{mode, self_warps};
      const std::string name = relay_case_name(rc);
      benchmark::RegisterBenchmark(name.c_str(), relay_case, name, rc)
          ->UseManualTime()
          ->Iterations(20)
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

void print_summary() {
  if (verdicts().empty()) return;
  int pass = 0;
  std::printf("\ngate summary (%zu cases):\n", verdicts().size());
  for (const auto& [name, line] : verdicts()) {
    std::printf("  %-40s %s\n", name.c_str(), line.c_str());
    pass += line.rfind("PASS", 0) == 0 ? 1 : 0;
  }
  std::printf("gate: %d of %zu cases pass\n", pass, verdicts().size());
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_summary();
  return 0;
}
