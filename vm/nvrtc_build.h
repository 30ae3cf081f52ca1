// The NVRTC build of the device code: the embedded sources (vm/embedded_sources.h) compiled for one
// arch with the kernel build knobs as -D options, into a cubin, with an on-disk cache keyed by a
// hash of sources, options, arch and NVRTC version so a warm loop never recompiles. The NVRTC log
// is always kept, and is the whole message of a failed build. Implemented in
// vm/nvrtc_build_cuda.cpp; vm/nvrtc_build_nocuda.cpp reports that NVRTC is absent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/model.h"
#include "schedule/program.h"

namespace megasched::vm {

/// What to compile: a translation unit that includes one embedded device header.
struct BuildRequest {
  std::string entry;  // embedded header that holds the kernels ("vm/device/megakernel.cuh")
  std::vector<std::string> defines;  // "NAME=VALUE", sorted (see kernel_defines)
  int sm_arch = 90;                  // compute capability x 10
  std::string cache_dir;             // cubin cache folder; empty: no cache
};

/// Per-kernel resource use read from ptxas (-v) in the log; registers also come from
/// cuFuncGetAttribute once loaded (vm/gpu_vm).
struct KernelResources {
  std::string name;
  int registers = -1;
  int spill_store_bytes = -1;
  int spill_load_bytes = -1;
  int stack_bytes = -1;
  int smem_static_bytes = -1;
};

struct BuildResult {
  bool ok = false;
  std::string error;  // one line + the full NVRTC log when !ok
  std::string log;    // the NVRTC log (ptxas -v output included)
  std::vector<char> cubin;
  std::string key;  // cache key (16 hex digits)
  bool cache_hit = false;
  double compile_ms = 0.0;               // 0 on a cache hit
  std::vector<KernelResources> kernels;  // parsed from the log (empty on a cache hit unless stored)
};

/// The -arch target of a compute capability: "sm_90a" for Hopper (its architecture-specific
/// instructions, setmaxnreg and wgmma, need it), else "sm_NN". Part of every build key through
/// compile_options.
std::string arch_name(int sm_arch);

/// Why a successful build must still fail, from its ptxas log: "" or a message with a hint when
/// ptxas ignored a setmaxnreg (info C7508: the kernel would run every warp at its entry register
/// count).
std::string ptxas_refusal(const std::string& log);

/// The whole -D option list of the megakernel for a program, sorted: its kernel build knobs
/// (program.build.knobs, by macro), the launch shape the kernel is specialised for (threads per
/// block; the weight ring's pages and page bytes; the blocks per SM the registers must allow, as
/// __launch_bounds__' minimum), the ring's staging floats, the model constants the device code
/// specialises on (head dim, weight and KV dtype) and, with `profile`, MS_PROFILE=1 (every task
/// stamps its times). The one place the option list is assembled.
std::vector<std::string> kernel_defines(const schedule::Program& program, bool profile = false);

/// The -D options of the baseline kernels for a model (dtype, head dim; 256 threads).
std::vector<std::string> baseline_defines(const schedule::ModelShape& shape);

/// The -D options of the graph-pdl baseline kernels (eval/baselines/pdl_baseline.cuh): the
/// baseline's (256 threads per block).
std::vector<std::string> pdl_baseline_defines(const schedule::ModelShape& shape);

/// The NVRTC options of a request: the language, the arch, ptxas -v, and its defines as -D.
std::vector<std::string> compile_options(const BuildRequest& request);

/// The source NVRTC compiles for a request: one #include of its entry.
std::string entry_source(const BuildRequest& request);

/// The cubin cache key of a request (16 hex digits): a hash of the NVRTC version, the entry, the
/// options (arch included) and the build identity. build_cubin files the cubin under it.
std::string build_key(const BuildRequest& request);

/// The megakernel's build request for a program on an arch (`cache_dir` empty:
/// default_cache_dir()): its kernel_defines, then the test-only defines. The one place it is
/// formed: GpuVm::create and prebuild_megakernel both take it from here, so a prebuilt program is
/// a cache hit for the GpuVm that later loads it.
BuildRequest megakernel_request(const schedule::Program& program, int sm_arch,
                                const std::string& cache_dir, bool profile = false,
                                const std::vector<std::string>& test_defines = {});

/// Builds a program's megakernel for `sm_arch` into the cubin cache without a CUDA context or a
/// GPU (NVRTC only), as GpuVm::create would with default options and the same cache folder: a
/// later GpuVm::create of that program is a cache hit. Without NVRTC (a build without the CUDA
/// toolkit) the result is !ok and says so.
BuildResult prebuild_megakernel(const schedule::Program& program, int sm_arch,
                                const std::string& cache_dir = "");

/// Whether this binary can compile kernels (NVRTC is linked in).
bool nvrtc_available();

/// Compiles (or loads from the cache) one cubin. Concurrent builds of one key through the same
/// cache folder, from threads or processes, compile once: the others wait on the key's lock file
/// and read the cubin the first one wrote. Never throws for a compile error: it is in
/// BuildResult::error with the whole log.
BuildResult build_cubin(const BuildRequest& request);

/// The cubin lookups of this process: builds served by the on-disk cache and NVRTC compiles (the
/// warm path's hit rate; the verdict reports it).
struct CubinCacheStats {
  uint64_t hits = 0;
  uint64_t compiles = 0;
};
CubinCacheStats cubin_cache_stats();
/// Counts one lookup (build_cubin calls it).
void record_cubin_lookup(bool hit);

/// The identity of every kernel a schedule runs on (the megakernel and the baselines):
/// "kernel-sources-" and a hash of the embedded device sources (vm/embedded_sources.h) but the
/// bench-only ones. A build's cache key adds its options, arch and NVRTC. Landscapes, corpus rows
/// and registry entries are keyed by it, so a change to a bench-only kernel stales none of them.
std::string build_identity();
/// Whether an embedded device source is compiled only by a benchmark (vm/device/gate.cuh, the gate
/// before megakernel v3, built by bench/gate_bench.cpp; vm/device/mlp_gate.cuh, the MLP gate, built
/// by bench/mlp_bench.cpp): outside build_identity().
bool bench_only_source(const std::string& path);

/// "13.0" (the NVRTC version), or "none" without the toolkit.
std::string nvrtc_version();

/// The default cache folder: $MEGASCHED_KERNEL_CACHE, else <workspace>/kernel_cache.
std::string default_cache_dir();

/// Parses ptxas -v lines ("Used 40 registers", "N bytes spill stores") per function.
std::vector<KernelResources> parse_ptxas_log(const std::string& log);

/// The megakernel as one kernel, from parse_ptxas_log's list: the entry ms_megakernel's registers,
/// stack and static shared memory, and the spill bytes of the entry and of every non-inlined
/// device function ptxas reported (those without a register line of their own: gemv_stream, the
/// streamed GEMV, is one, and a count of the entry's alone misses its spills). name "" when ptxas
/// reported no entry.
KernelResources megakernel_resources(const std::vector<KernelResources>& kernels);

/// Each reported function that spills, as a JSON array of {"name" (demangled, without its
/// parameters: ms_dev::gemv_stream), "spill_store_bytes", "spill_load_bytes"} in the log's order
/// (empty when none does).
nlohmann::json spills_json(const std::vector<KernelResources>& kernels);

}  // namespace megasched::vm
