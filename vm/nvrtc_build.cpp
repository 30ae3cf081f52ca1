// The parts of the NVRTC build that need no toolkit: the -D options of each kernel family, the
// cache folder and the ptxas log parser (see vm/nvrtc_build.h).
#include "vm/nvrtc_build.h"

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

#include "abi/ring.h"
#include "schedule/build_fit.h"
#include "schedule/config.h"
#include "vm/embedded_sources.h"

namespace megasched::vm {

std::vector<std::string> kernel_defines(const schedule::Program& program, bool profile) {
  const schedule::LaunchShape& launch = program.launch;
  const schedule::KernelBuild& build = program.build;
  std::vector<std::string> d;
  auto define = [&d](const std::string& name, int64_t value) {
    d.push_back(name + "=" + std::to_string(value));
  };
  for (const auto& [name, value] : build.knobs) define(name, value);
  define("MS_THREADS", launch.threads_per_block);
  if (build.weight_ring()) {
    define("MS_RING_PAGES", launch.smem_pages);
    define("MS_RING_PAGE_BYTES", launch.smem_page_bytes);
    define("MS_X_FLOATS", build.x_floats);
    // The whole-row path is specialised on the model's segment width (abi/ring.h).
    define("MS_SEG_VECS", ms_abi::ring_seg_vecs(program.model));
  }
  define("MS_HEAD_DIM", program.model.head_dim);
  // __launch_bounds__' minimum blocks per SM; never more than 2048 threads' worth (the validator
  // rejects such a launch, and ptxas would reject the bound).
  const int threads = std::max(launch.threads_per_block, 32);
  define("MS_MIN_BLOCKS", std::clamp(launch.blocks_per_sm, 1, std::max(1, 2048 / threads)));
  define("MS_KV_BF16", program.model.kv_dtype == ms_abi::kDTypeBF16 ? 1 : 0);
  define("MS_WEIGHT_BF16", program.model.weight_dtype == ms_abi::kDTypeBF16 ? 1 : 0);
  if (profile) define("MS_PROFILE", 1);
  // Task kinds only some programs have are compiled only into their builds: code a build never
  // runs still costs every other task (measured: the attention prologue's code in the streamed
  // GEMV cost a program without it 12 us a step on an H100; ARCHITECTURE.md, "Build defines derived
  // from the program's tasks").
  bool combine_in_o = false, attention_in_o = false, combine_tasks = false, tagged = false;
  bool gemv_fallback = build.weight_ring(), chains = false;
  uint32_t opcodes = 0, attention_heads = 0;
  for (const ms_abi::Instr& t : program.tasks) {
    if (t.opcode == ms_abi::kAttnPartial)
      attention_heads = std::max(attention_heads, t.row_end - t.row_begin);
    combine_in_o |= t.opcode == ms_abi::kGemv && (t.flags & ms_abi::kFlagCombinePrologue) != 0;
    attention_in_o |= t.opcode == ms_abi::kGemv && (t.flags & ms_abi::kFlagAttentionPrologue) != 0;
    combine_tasks |= t.opcode == ms_abi::kAttnCombine;
    tagged |= (t.flags & (ms_abi::kFlagTagIn | ms_abi::kFlagTagOut)) != 0;
    if (t.opcode < 32) opcodes |= 1u << t.opcode;
    chains |= t.chain != 0;
    // ops.cuh's gemv runs every GEMV task the streamed GEMV does not take.
    gemv_fallback |= t.opcode == ms_abi::kGemv && !schedule::stream_takes(program, t);
  }
  if (combine_in_o) define("MS_COMBINE_IN_O", 1);
  if (attention_in_o) define("MS_ATTENTION_IN_O", 1);
  if (combine_tasks) define("MS_COMBINE_TASKS", 1);
  if (tagged) define("MS_TAGGED", 1);
  // An attention warp carries four query heads when no task has more (a llama GQA group): eight
  // heads' arrays at head_dim 128 made ptxas spill the streamed GEMV (dev/perf_log.md section 53).
  if (attention_heads > 0) define("MS_ATTN_HEAD_BATCH", attention_heads <= 4 ? 4 : 8);
  // A program with tasks compiles only the opcodes it has, the fallback GEMV only when some GEMV
  // task needs it, the last arrivers' path only with chains and the L2 prefetch only with a
  // prefetch depth (without tasks, as for the NVRTC tests' bare builds, everything is compiled).
  if (!program.tasks.empty()) {
    define("MS_OPCODES", opcodes);
    define("MS_GEMV_FALLBACK", gemv_fallback ? 1 : 0);
    define("MS_CHAINS", chains ? 1 : 0);
    define("MS_PREFETCH", launch.prefetch_depth > 0 ? 1 : 0);
  }
  std::sort(d.begin(), d.end());
  return d;
}

std::vector<std::string> baseline_defines(const schedule::ModelShape& shape) {
  const int bf16 = shape.dtype == schedule::DType::kBF16 ? 1 : 0;
  std::vector<std::string> d = {"MS_HEAD_DIM=" + std::to_string(shape.head_dim),
                                "MS_KV_BF16=" + std::to_string(bf16), "MS_THREADS=256",
                                "MS_WEIGHT_BF16=" + std::to_string(bf16)};
  std::sort(d.begin(), d.end());
  return d;
}

std::vector<std::string> pdl_baseline_defines(const schedule::ModelShape& shape) {
  return baseline_defines(shape);  // the graph-pdl kernels also run 256 threads per block
}

bool bench_only_source(const std::string& path) {
  return path == "vm/device/gate.cuh" || path == "vm/device/mlp_gate.cuh";
}

std::string build_identity() {
  // Hashed once: a build key is asked for every prebuilt and every loaded program.
  static const std::string identity = [] {
    std::string sources;
    for (const EmbeddedSource& source : embedded_sources()) {
      if (bench_only_source(source.path)) continue;
      sources += source.path;
      sources += '\n';
      sources += source.text;
    }
    return "kernel-sources-" + schedule::hash_hex(sources);
  }();
  return identity;
}

std::string arch_name(int sm_arch) {
  // Hopper builds for its architecture-specific target: setmaxnreg and wgmma exist only there,
  // and a 9.0 device is the only one either cubin loads on.
  return "sm_" + std::to_string(sm_arch) + (sm_arch == 90 ? "a" : "");
}

std::string ptxas_refusal(const std::string& log) {
  // ptxas says it ignored a register-count change as info, not as an error: a kernel whose roles
  // were sized by setmaxnreg would silently run with the entry count, so the build fails.
  const size_t at = log.find("(C7508)");
  if (at == std::string::npos) return "";
  const size_t begin = log.rfind('\n', at);
  const size_t end = log.find('\n', at);
  const std::string line =
      log.substr(begin == std::string::npos ? 0 : begin + 1,
                 end == std::string::npos ? std::string::npos : end - (begin + 1));
  return "ptxas ignored a setmaxnreg: " + line +
         " (hint: a kernel that resizes its warps' registers needs __launch_bounds__ with its "
         "thread count, so ptxas knows the count at entry)";
}

std::vector<std::string> compile_options(const BuildRequest& request) {
  std::vector<std::string> opts = {"--std=c++17", "-arch=" + arch_name(request.sm_arch),
                                   "--ptxas-options=-v", "-default-device"};
  for (const std::string& d : request.defines) opts.push_back("-D" + d);
  // For profiling only (ncu source counters map SASS back to the device sources); the option is
  // part of the cache key like every other, so such builds never mix with plain ones.
  if (const char* env = std::getenv("MEGASCHED_NVRTC_LINEINFO"); env && std::string(env) == "1")
    opts.push_back("-lineinfo");
  return opts;
}

std::string entry_source(const BuildRequest& request) {
  return "#include \"" + request.entry + "\"\n";
}

std::string build_key(const BuildRequest& request) {
  std::string all = "nvrtc " + nvrtc_version() + "\n" + entry_source(request);
  for (const std::string& o : compile_options(request)) all += o + "\n";
  return schedule::hash_hex(all + build_identity());
}

BuildRequest megakernel_request(const schedule::Program& program, int sm_arch,
                                const std::string& cache_dir, bool profile,
                                const std::vector<std::string>& test_defines) {
  BuildRequest request;
  request.entry = "vm/device/megakernel.cuh";
  request.defines = kernel_defines(program, profile);
  request.defines.insert(request.defines.end(), test_defines.begin(), test_defines.end());
  request.sm_arch = sm_arch;
  request.cache_dir = cache_dir.empty() ? default_cache_dir() : cache_dir;
  return request;
}

BuildResult prebuild_megakernel(const schedule::Program& program, int sm_arch,
                                const std::string& cache_dir) {
  if (!nvrtc_available()) {
    BuildResult result;
    result.error =
        "cannot prebuild kernels: this megasched was built without the CUDA toolkit "
        "(no NVRTC); rebuild with -DMEGASCHED_CUDA=ON";
    return result;
  }
  return build_cubin(megakernel_request(program, sm_arch, cache_dir));
}

namespace {
std::atomic<uint64_t> g_cubin_hits{0};
std::atomic<uint64_t> g_cubin_compiles{0};
}  // namespace

CubinCacheStats cubin_cache_stats() { return {g_cubin_hits.load(), g_cubin_compiles.load()}; }

void record_cubin_lookup(bool hit) { (hit ? g_cubin_hits : g_cubin_compiles).fetch_add(1); }

std::string default_cache_dir() {
  if (const char* env = std::getenv("MEGASCHED_KERNEL_CACHE"); env && *env) return env;
  const char* ws = std::getenv("MEGASCHED_WORKSPACE");
  return (std::filesystem::path(ws && *ws ? ws : "workspace") / "kernel_cache").string();
}

std::vector<KernelResources> parse_ptxas_log(const std::string& log) {
  std::vector<KernelResources> out;
  static const std::regex fn_re(R"(Compiling entry function '([^']+)')");
  static const std::regex props_re(R"(Function properties for ([^\s]+))");
  static const std::regex stack_re(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex regs_re(R"(Used (\d+) registers)");
  static const std::regex smem_re(R"((\d+) bytes smem)");
  std::istringstream in(log);
  std::string line;
  // Indices, not pointers: out grows. `entry` takes the register line, `props` the stack line
  // (a non-inlined device function gets an entry of its own, registers -1).
  int entry = -1, props = -1;
  std::smatch m;
  auto find_or_add = [&out](const std::string& name) {
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i].name == name) return static_cast<int>(i);
    out.push_back(KernelResources{});
    out.back().name = name;
    return static_cast<int>(out.size()) - 1;
  };
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, fn_re)) {
      entry = props = find_or_add(m[1]);
      continue;
    }
    if (std::regex_search(line, m, props_re)) {
      props = find_or_add(m[1]);
      continue;
    }
    if (props >= 0 && std::regex_search(line, m, stack_re)) {
      KernelResources& k = out[static_cast<size_t>(props)];
      k.stack_bytes = std::stoi(m[1]);
      k.spill_store_bytes = std::stoi(m[2]);
      k.spill_load_bytes = std::stoi(m[3]);
    }
    if (entry >= 0 && std::regex_search(line, m, regs_re)) {
      KernelResources& k = out[static_cast<size_t>(entry)];
      k.registers = std::stoi(m[1]);
      k.smem_static_bytes = std::regex_search(line, m, smem_re) ? std::stoi(m[1]) : 0;
    }
  }
  return out;
}

KernelResources megakernel_resources(const std::vector<KernelResources>& kernels) {
  KernelResources total;
  for (const KernelResources& k : kernels)
    if (k.name == "ms_megakernel") total = k;
  if (total.name.empty()) return total;
  auto add = [](int* into, int bytes) {
    if (bytes > 0) *into = std::max(*into, 0) + bytes;
  };
  for (const KernelResources& k : kernels) {
    if (k.registers >= 0) continue;  // an entry (ms_megakernel, another kernel of the module)
    add(&total.spill_store_bytes, k.spill_store_bytes);
    add(&total.spill_load_bytes, k.spill_load_bytes);
  }
  return total;
}

namespace {

/// A ptxas function name as its C++ qualified name without the parameters (ms_dev::gemv_stream);
/// the name itself when it is not a mangled one.
std::string readable_name(const std::string& name) {
  int status = -1;
  char* plain = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !plain) return name;
  std::string out(plain);
  std::free(plain);
  return out.substr(0, out.find('('));
}

}  // namespace

nlohmann::json spills_json(const std::vector<KernelResources>& kernels) {
  nlohmann::json out = nlohmann::json::array();
  for (const KernelResources& k : kernels)
    if (k.spill_store_bytes > 0 || k.spill_load_bytes > 0)
      out.push_back({{"name", readable_name(k.name)},
                     {"spill_store_bytes", k.spill_store_bytes},
                     {"spill_load_bytes", k.spill_load_bytes}});
  return out;
}

}  // namespace megasched::vm
