// The NVRTC build of the device code, on the CPU (no GPU needed; runs in CI wherever the CUDA
// toolkit is installed): every value of every kernel build knob compiles for sm_90a (Hopper's
// architecture-specific target) and sm_80, the cache returns the same cubin without compiling, a
// failed build carries the whole log, and a setmaxnreg ptxas ignores fails the build.
#include "vm/nvrtc_build.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "abi/ring.h"
#include "schedule/build_fit.h"
#include "schedule/config.h"
#include "schedule/lower.h"
#include "schedule/model.h"
#include "schedule/named_configs.h"
#include "schedule/plan.h"
#include "schedule/target.h"
#include "vm/embedded_sources.h"
#if MS_HAVE_CUDA
#include <nvrtc.h>
#endif

namespace megasched::vm {
namespace {

std::vector<int> int_choices(const std::string& path) {
  for (const schedule::KnobSpec& k : schedule::knob_specs()) {
    if (k.path != path) continue;
    std::vector<int> out;
    for (const auto& c : k.choices) out.push_back(c.get<int>());
    return out;
  }
  ADD_FAILURE() << "no knob " << path;
  return {};
}

/// A program carrying only what the build reads: model constants, launch and kernel knobs.
schedule::Program program_for(int vector_bytes, int rows_per_warp, int unroll, int weight_load,
                              int threads, bool bf16, int head_dim, int blocks_per_sm = 1) {
  schedule::Program p;
  p.launch.blocks_per_sm = blocks_per_sm;
  p.model.head_dim = static_cast<uint32_t>(head_dim);
  p.model.weight_dtype = bf16 ? ms_abi::kDTypeBF16 : ms_abi::kDTypeF32;
  p.model.kv_dtype = p.model.weight_dtype;
  p.launch.threads_per_block = threads;
  p.build.knobs = {{"MS_VECTOR_BYTES", vector_bytes},
                   {"MS_ROWS_PER_WARP", rows_per_warp},
                   {"MS_UNROLL", unroll},
                   {"MS_WEIGHT_LOAD", weight_load},
                   {"MS_WEIGHT_RING", 0}};
  return p;
}

bool have_nvrtc() { return nvrtc_version() != "none"; }

TEST(NvrtcBuild, ParsesPtxasResourceLines) {
  const std::string log =
      "ptxas info    : Compiling entry function 'ms_megakernel' for 'sm_90'\n"
      "ptxas info    : Function properties for ms_megakernel\n"
      "    32 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 128 registers, used 1 barriers, 32 bytes cumulative stack size, 4256 "
      "bytes smem\n"
      "ptxas info    : Compiling entry function 'ms_bl_embed' for 'sm_90'\n"
      "ptxas info    : Function properties for ms_bl_embed\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 12 registers, used 0 barriers\n";
  const auto ks = parse_ptxas_log(log);
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].name, "ms_megakernel");
  EXPECT_EQ(ks[0].registers, 128);
  EXPECT_EQ(ks[0].spill_store_bytes, 8);
  EXPECT_EQ(ks[0].spill_load_bytes, 12);
  EXPECT_EQ(ks[0].stack_bytes, 32);
  EXPECT_EQ(ks[0].smem_static_bytes, 4256);
  EXPECT_EQ(ks[1].name, "ms_bl_embed");
  EXPECT_EQ(ks[1].registers, 12);
  EXPECT_EQ(ks[1].smem_static_bytes, 0);
}

// A non-inlined device function's properties (ptxas prints them inside the entry's block) get an
// entry of their own and never overwrite the kernel's spill figures.
TEST(NvrtcBuild, ParsesDeviceFunctionPropertiesApartFromTheKernel) {
  const std::string log =
      "ptxas info    : Compiling entry function 'ms_megakernel' for 'sm_90'\n"
      "ptxas info    : Function properties for _ZN6ms_dev13gemv_ring_segEv\n"
      "    48 bytes stack frame, 40 bytes spill stores, 44 bytes spill loads\n"
      "ptxas info    : Function properties for ms_megakernel\n"
      "    32 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 4256 bytes smem\n";
  const auto ks = parse_ptxas_log(log);
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].name, "ms_megakernel");
  EXPECT_EQ(ks[0].registers, 255);
  EXPECT_EQ(ks[0].spill_store_bytes, 8);
  EXPECT_EQ(ks[0].stack_bytes, 32);
  EXPECT_EQ(ks[1].name, "_ZN6ms_dev13gemv_ring_segEv");
  EXPECT_EQ(ks[1].registers, -1);
  EXPECT_EQ(ks[1].spill_store_bytes, 40);
  EXPECT_EQ(ks[1].spill_load_bytes, 44);
}

// The megakernel's spills are its entry's and its non-inlined device functions' (the streamed
// GEMV's are its own); another entry of the module is not counted; each spilling function is
// named as C++ reads it.
TEST(NvrtcBuild, TheMegakernelsSpillsIncludeItsDeviceFunctions) {
  const std::string log =
      "ptxas info    : Compiling entry function 'ms_megakernel' for 'sm_90'\n"
      "ptxas info    : Function properties for "
      "_ZN6ms_dev11gemv_streamERKN6ms_abi10KernelArgsERKNS0_5InstrERNS_6SharedEjRKNS0_8WaitHeadE\n"
      "    0 bytes stack frame, 416 bytes spill stores, 228 bytes spill loads\n"
      "ptxas info    : Function properties for ms_megakernel\n"
      "    584 bytes stack frame, 148 bytes spill stores, 212 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 8672 bytes smem\n"
      "ptxas info    : Compiling entry function 'ms_bl_embed' for 'sm_90'\n"
      "ptxas info    : Function properties for ms_bl_embed\n"
      "    0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Used 12 registers, used 0 barriers\n";
  const auto ks = parse_ptxas_log(log);
  const KernelResources k = megakernel_resources(ks);
  EXPECT_EQ(k.name, "ms_megakernel");
  EXPECT_EQ(k.registers, 255);
  EXPECT_EQ(k.stack_bytes, 584);
  EXPECT_EQ(k.smem_static_bytes, 8672);
  EXPECT_EQ(k.spill_store_bytes, 148 + 416);
  EXPECT_EQ(k.spill_load_bytes, 212 + 228);
  const nlohmann::json spills = spills_json(ks);
  ASSERT_EQ(spills.size(), 3u) << spills.dump();
  EXPECT_EQ(spills[0]["name"], "ms_megakernel");
  EXPECT_EQ(spills[1]["name"], "ms_dev::gemv_stream");
  EXPECT_EQ(spills[1]["spill_store_bytes"], 416);
  EXPECT_EQ(spills[2]["name"], "ms_bl_embed");
  // Only a device function spills: the entry's -1 (not reported) does not lower the sum.
  std::vector<KernelResources> only_callee = ks;
  ASSERT_EQ(only_callee[0].name, "ms_megakernel");
  only_callee[0].spill_store_bytes = only_callee[0].spill_load_bytes = -1;
  EXPECT_EQ(megakernel_resources(only_callee).spill_store_bytes, 416);
  EXPECT_EQ(megakernel_resources({}).name, "");
  EXPECT_TRUE(spills_json({}).empty());
}

TEST(NvrtcBuild, KernelDefinesExtendTheProgramsBuildKnobs) {
  const schedule::Program p = program_for(8, 4, 2, 1, 384, false, 128);
  const std::vector<std::string> d = kernel_defines(p);
  for (const auto& [name, value] : p.build.knobs) {
    const std::string knob = name + "=" + std::to_string(value);
    EXPECT_NE(std::find(d.begin(), d.end(), knob), d.end()) << knob;
  }
  EXPECT_NE(std::find(d.begin(), d.end(), "MS_THREADS=384"), d.end());
  EXPECT_NE(std::find(d.begin(), d.end(), "MS_WEIGHT_BF16=0"), d.end());
  EXPECT_NE(std::find(d.begin(), d.end(), "MS_HEAD_DIM=128"), d.end());
  EXPECT_TRUE(std::is_sorted(d.begin(), d.end()));
}

// Task kinds only some programs have are compiled only into the builds of those programs
// (vm/nvrtc_build.cpp): without such a task no define, so the build is that of a tree without the
// code (on the H100 the prologues' code cost a program without them 12-18 us a step, the staged
// combine's the default config 13%: dev/benchmarks_history.md, 2026-11-26 19:35-20:50 UTC).
TEST(NvrtcBuild, KernelDefinesCompileInOnlyTheTaskKindsTheProgramHas) {
  auto defines_with = [](uint16_t opcode, uint16_t flags) {
    schedule::Program p = program_for(16, 2, 4, 1, 256, true, 64);
    ms_abi::Instr t{};
    t.opcode = opcode;
    t.flags = flags;
    p.tasks.push_back(t);
    const std::vector<std::string> d = kernel_defines(p);
    std::set<std::string> gated;
    for (const std::string& x : d)
      if (x.rfind("MS_COMBINE_IN_O", 0) == 0 || x.rfind("MS_ATTENTION_IN_O", 0) == 0 ||
          x.rfind("MS_COMBINE_TASKS", 0) == 0)
        gated.insert(x);
    return gated;
  };
  EXPECT_EQ(defines_with(ms_abi::kGemv, ms_abi::kFlagNormPrologue), std::set<std::string>{});
  EXPECT_EQ(defines_with(ms_abi::kAttnPartial, 0), std::set<std::string>{});
  EXPECT_EQ(defines_with(ms_abi::kGemv, ms_abi::kFlagCombinePrologue),
            std::set<std::string>{"MS_COMBINE_IN_O=1"});
  EXPECT_EQ(defines_with(ms_abi::kGemv, ms_abi::kFlagAttentionPrologue),
            std::set<std::string>{"MS_ATTENTION_IN_O=1"});
  EXPECT_EQ(defines_with(ms_abi::kAttnCombine, 0), std::set<std::string>{"MS_COMBINE_TASKS=1"});
}

/// The value of define `name` in `d` (-1: absent).
int64_t define_value(const std::vector<std::string>& d, const std::string& name) {
  for (const std::string& x : d)
    if (x.rfind(name + "=", 0) == 0) return std::stoll(x.substr(name.size() + 1));
  return -1;
}

/// llama-1b lowered with the named position-0 config's knobs (bench/configs/stream_r2u4_pairs_am).
schedule::Program pairs_am_program(bool tagged = false, int rows_per_warp = 2) {
  schedule::ScheduleConfig c;
  c.pipeline.tagged_inputs = tagged;
  c.kernel.rows_per_warp = rows_per_warp;
  c.kernel.unroll = 4;
  c.kernel.weight_load = schedule::WeightLoad::kLdgStream;
  c.pipeline.prefetch_depth = 0;
  c.tiling.gemv_rows_per_task = 0;
  c.tiling.lm_head_rows_per_task = 0;
  c.tiling.attn_q_heads_per_task = 1;
  c.tiling.qkv_rope_pairs = true;
  c.fusion.argmax_into_lm_head = true;
  std::string error;
  const auto p = schedule::lower(*schedule::find_preset("llama-1b"), *schedule::find_target("h100"),
                                 c, &error);
  EXPECT_TRUE(p.has_value()) << error;
  return p ? *p : schedule::Program{};
}

// A program's build compiles only its opcodes, the fallback GEMV only when a GEMV task needs it,
// the last arrivers' path only with chains, the L2 prefetch only with a depth; a build without
// tasks (the tests' bare builds) compiles everything (no define).
TEST(NvrtcBuild, KernelDefinesCompileOnlyTheProgramsOpcodesAndPaths) {
  EXPECT_EQ(define_value(kernel_defines(program_for(16, 2, 4, 1, 256, true, 64)), "MS_OPCODES"),
            -1);
  const schedule::Program p = pairs_am_program();
  ASSERT_FALSE(p.tasks.empty());
  uint32_t mask = 0;
  bool fallback = false;
  for (const auto& t : p.tasks) {
    mask |= 1u << t.opcode;
    fallback |= t.opcode == ms_abi::kGemv && !schedule::stream_takes(p, t);
  }
  const std::vector<std::string> d = kernel_defines(p);
  EXPECT_EQ(define_value(d, "MS_OPCODES"), mask);
  EXPECT_EQ(mask, (1u << ms_abi::kEmbed) | (1u << ms_abi::kGemv) | (1u << ms_abi::kAttnPartial) |
                      (1u << ms_abi::kArgmax));
  EXPECT_FALSE(fallback);  // every GEMV tile of this config is streamed, the LM head's too
  EXPECT_EQ(define_value(d, "MS_GEMV_FALLBACK"), 0);
  EXPECT_EQ(define_value(d, "MS_CHAINS"), 0);
  EXPECT_EQ(define_value(d, "MS_PREFETCH"), 0);
  // The weight ring runs ops.cuh's gemv for the GEMV tasks its ring paths do not take.
  schedule::ScheduleConfig ring;
  ring.kernel.weight_stream = schedule::WeightStream::kSmemRing;
  ring.fusion.reduce_by_last_arriver = true;
  ring.tiling.attn_kv_partitions = 2;
  ring.pipeline.prefetch_depth = 2;
  std::string error;
  const auto r =
      schedule::lower(*schedule::find_preset("toy"), *schedule::find_target("h100"), ring, &error);
  ASSERT_TRUE(r.has_value()) << error;
  const std::vector<std::string> rd = kernel_defines(*r);
  EXPECT_EQ(define_value(rd, "MS_GEMV_FALLBACK"), 1);
  EXPECT_EQ(define_value(rd, "MS_CHAINS"), 1);
  EXPECT_EQ(define_value(rd, "MS_PREFETCH"), 1);
  EXPECT_NE(define_value(rd, "MS_OPCODES") & (1 << ms_abi::kAttnCombine), 0);
}

// The named position-0 config's own build: with only its opcodes and paths compiled in, neither
// the kernel nor the streamed GEMV spills (the bare build, everything compiled, spills 20 B at
// unroll 4; the gated one measured 1.6% faster on the H100: dev/benchmarks_history.md,
// 2026-11-26 19:35-20:50 UTC).
TEST(NvrtcBuild, ThePairsAmBuildDoesNotSpill) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  const schedule::Program p = pairs_am_program();
  ASSERT_FALSE(p.tasks.empty());
  const BuildResult r = build_cubin({"vm/device/megakernel.cuh", kernel_defines(p), 90, ""});
  ASSERT_TRUE(r.ok) << r.error;
  int checked = 0;
  for (const auto& k : r.kernels) {
    if (k.name != "ms_megakernel" && k.name.find("gemv_stream") == std::string::npos) continue;
    EXPECT_EQ(k.spill_store_bytes, 0) << k.name << "\n" << r.log;
    ++checked;
  }
  EXPECT_EQ(checked, 2) << r.log;
}

// kernel.rows_per_warp 3 on the pairs_am config: three chunks of 2 KiB rows a warp (96 registers
// of weights at kernel.stream_depth 2, as depth 3 at two rows) with the input staged in batches of
// 4 (kStreamStageBatch, vm/device/stream.cuh): neither the kernel nor the streamed GEMV spills.
TEST(NvrtcBuild, ThePairsAmBuildAtThreeRowsAWarpDoesNotSpill) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  const schedule::Program p = pairs_am_program(false, 3);
  ASSERT_FALSE(p.tasks.empty());
  const std::vector<std::string> defines = kernel_defines(p);
  EXPECT_EQ(define_value(defines, "MS_ROWS_PER_WARP"), 3);
  const BuildResult r = build_cubin({"vm/device/megakernel.cuh", defines, 90, ""});
  ASSERT_TRUE(r.ok) << r.error;
  int checked = 0;
  for (const auto& k : r.kernels) {
    if (k.name != "ms_megakernel" && k.name.find("gemv_stream") == std::string::npos) continue;
    EXPECT_EQ(k.spill_store_bytes, 0) << k.name << "\n" << r.log;
    ++checked;
  }
  EXPECT_EQ(checked, 2) << r.log;
}

// pipeline.tagged_inputs on the pairs_am config: the tagged build (MS_TAGGED, set only for a
// program with tagged tasks) compiles, the streamed GEMV does not spill and the kernel spills at
// most 128 B (80 B when written; the untagged build, ThePairsAmBuildDoesNotSpill, has none).
TEST(NvrtcBuild, TheTaggedBuildKeepsTheStreamedGemvFreeOfSpills) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  schedule::Program p = pairs_am_program(true);
  ASSERT_FALSE(p.tasks.empty());
  const std::vector<std::string> defines = kernel_defines(p);
  EXPECT_NE(std::find(defines.begin(), defines.end(), "MS_TAGGED=1"), defines.end());
  const std::vector<std::string> untagged = kernel_defines(pairs_am_program());
  EXPECT_EQ(std::find(untagged.begin(), untagged.end(), "MS_TAGGED=1"), untagged.end());
  const BuildResult r = build_cubin({"vm/device/megakernel.cuh", defines, 90, ""});
  ASSERT_TRUE(r.ok) << r.error;
  int checked = 0;
  for (const auto& k : r.kernels) {
    if (k.name != "ms_megakernel" && k.name.find("gemv_stream") == std::string::npos) continue;
    EXPECT_LE(k.spill_store_bytes, k.name == "ms_megakernel" ? 128 : 0) << k.name << "\n" << r.log;
    ++checked;
  }
  EXPECT_EQ(checked, 2) << r.log;
}

/// The -D values of every choice of a kernel build knob (the integer, or a named choice's index).
std::vector<int> define_values(const schedule::KnobSpec& k) {
  std::vector<int> out;
  for (size_t i = 0; i < k.choices.size(); ++i)
    out.push_back(k.choices[i].is_number_integer() ? k.choices[i].get<int>() : static_cast<int>(i));
  return out;
}

TEST(NvrtcBuild, CompilesEveryBuildKnobValueForSm90AndSm80) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  // Every kernel build knob of the knob table (the weight ring has its own test below), cycled
  // through its values together with the launch shape, the dtype and the head dimension.
  std::map<std::string, std::vector<int>> knob_values;
  for (const schedule::KnobSpec& k : schedule::knob_specs())
    if (!k.define.empty() && k.define != "MS_WEIGHT_RING") knob_values[k.define] = define_values(k);
  const auto threads = int_choices("launch.threads_per_block");
  const auto blocks = int_choices("launch.blocks_per_sm");
  const std::vector<int> head_dims = {64, 128, 16};
  size_t n = std::max({threads.size(), head_dims.size(), blocks.size()});
  for (const auto& [define, values] : knob_values) n = std::max(n, values.size());
  std::set<std::string> seen;
  int reports = 0;
  std::printf("%-6s %-80s %5s %6s %6s %6s\n", "arch", "defines", "regs", "spillS", "spillL",
              "smem");
  for (int arch : {90, 80}) {
    for (size_t i = 0; i < n; ++i) {
      schedule::Program p =
          program_for(16, 2, 2, 0, threads[i % threads.size()], i % 2 == 0,
                      head_dims[i % head_dims.size()], blocks[(i + 1) % blocks.size()]);
      p.build.knobs = schedule::kernel_knob_defines(schedule::ScheduleConfig{});
      for (const auto& [define, values] : knob_values)
        p.build.knobs[define] = values[i % values.size()];
      // The chunks held back are some of the chunks in flight: a held count the cycle pairs with
      // a shallower depth builds with that depth raised to it (every depth still comes round).
      int& depth = p.build.knobs["MS_STREAM_DEPTH"];
      depth = std::max(depth, p.build.knobs["MS_STREAM_HELD"]);
      BuildRequest req;
      req.entry = "vm/device/megakernel.cuh";
      req.defines = kernel_defines(p);
      req.sm_arch = arch;
      const BuildResult r = build_cubin(req);
      ASSERT_TRUE(r.ok) << r.error;
      EXPECT_FALSE(r.cubin.empty());
      // ptxas -v resources, when NVRTC returned its report (it did not always on the GPU machine);
      // the loader reads registers with cuFuncGetAttribute regardless.
      const KernelResources k =
          r.kernels.empty() ? KernelResources{"(no ptxas report)"} : r.kernels[0];
      if (!r.kernels.empty()) {
        EXPECT_EQ(k.name, "ms_megakernel");
        EXPECT_GT(k.registers, 0);
        ++reports;
      }
      std::string joined;
      for (const auto& d : req.defines) joined += d + " ";
      std::printf("sm_%-3d %-80s %5d %6d %6d %6d\n", arch, joined.c_str(), k.registers,
                  k.spill_store_bytes, k.spill_load_bytes, k.smem_static_bytes);
      for (const auto& d : req.defines) seen.insert(d);
    }
    for (bool bf16 : {true, false}) {
      schedule::ModelShape shape;
      shape.head_dim = 64;
      shape.dtype = bf16 ? schedule::DType::kBF16 : schedule::DType::kF32;
      BuildRequest req{"eval/baselines/baseline.cuh", baseline_defines(shape), arch, ""};
      const BuildResult r = build_cubin(req);
      ASSERT_TRUE(r.ok) << r.error;
      EXPECT_TRUE(r.kernels.empty() || r.kernels.size() == 7u) << r.log;
    }
  }
  EXPECT_GT(reports, 0);
  // Every value of every build knob was compiled at least once.
  for (const auto& [define, values] : knob_values)
    for (int v : values) EXPECT_TRUE(seen.count(define + "=" + std::to_string(v))) << define << v;
  for (int v : threads) EXPECT_TRUE(seen.count("MS_THREADS=" + std::to_string(v))) << v;
  // blocks_per_sm is clamped to 2048 threads' worth, so only the values that fit some thread count.
  for (int v : blocks) {
    if (v * threads.front() <= 2048) {
      EXPECT_TRUE(seen.count("MS_MIN_BLOCKS=" + std::to_string(v))) << v;
    }
  }
}

TEST(NvrtcBuild, CompilesTheGraphPdlBaselineForAmpereAndHopper) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  // The dtype and head dim of every preset (toy fp32 16; llama-1b bf16 64; small, llama-8b bf16
  // 128), for sm_80 (no griddepcontrol) and sm_90.
  const std::pair<bool, int> variants[] = {{false, 16}, {true, 64}, {true, 128}};  // bf16, hd
  for (int arch : {80, 90}) {
    for (const auto& [bf16, head_dim] : variants) {
      schedule::ModelShape shape;
      shape.head_dim = head_dim;
      shape.dtype = bf16 ? schedule::DType::kBF16 : schedule::DType::kF32;
      const std::vector<std::string> defines = pdl_baseline_defines(shape);
      EXPECT_NE(std::find(defines.begin(), defines.end(), "MS_THREADS=256"), defines.end());
      const BuildResult r = build_cubin({"eval/baselines/pdl_baseline.cuh", defines, arch, ""});
      ASSERT_TRUE(r.ok) << "sm_" << arch << " bf16 " << bf16 << " hd " << head_dim << "\n"
                        << r.error;
      EXPECT_FALSE(r.cubin.empty());
      // Seven kernels; in bf16 (the dtype the timings are about) none spills: the GEMV chunks
      // live in registers (two blocks of 256 threads per SM, at most 128 registers each).
      EXPECT_TRUE(r.kernels.empty() || r.kernels.size() == 7u) << r.log;
      if (!bf16) continue;
      for (const KernelResources& k : r.kernels) {
        EXPECT_EQ(k.spill_store_bytes, 0) << k.name << " sm_" << arch << " hd " << head_dim << "\n"
                                          << r.log;
        EXPECT_LE(k.registers, 128) << k.name;
      }
    }
  }
}

TEST(NvrtcBuild, CompilesTheWeightRingAndProfileVariants) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  struct Variant {
    int vector_bytes, threads, pages, page_bytes, head_dim;
    bool bf16, profile;
    uint32_t hidden, ffn;  // the whole-row segment width follows from these (abi/ring.h)
    int seg_vecs;          // what it must come to
    int inflight = 0;      // smem.inflight_pages (MS_RING_INFLIGHT), below pages
  };
  // Every ring page size with the thread counts at both ends, fp32 and bf16, profiled and not,
  // every segment width of the whole-row path (0: rows too short, row pieces only), and every cap
  // on the pages in flight (smem.inflight_pages).
  const std::vector<Variant> variants = {{16, 128, 2, 4096, 64, true, false, 2048, 8192, 8, 1},
                                         {16, 1024, 8, 32768, 64, true, true, 2048, 8192, 8, 4},
                                         {8, 256, 4, 8192, 128, false, false, 512, 1536, 4, 3},
                                         {4, 512, 1, 16384, 64, true, false, 64, 128, 0},
                                         {16, 384, 2, 16384, 128, false, true, 2048, 8192, 8},
                                         {16, 256, 2, 16384, 64, true, true, 512, 1536, 2},
                                         {16, 288, 4, 32768, 64, true, false, 2048, 5632, 2, 2},
                                         {16, 544, 2, 65536, 64, true, false, 4096, 14336, 8},
                                         {16, 160, 2, 4096, 64, true, true, 256, 768, 1}};
  for (int arch : {90, 80}) {
    for (const Variant& v : variants) {
      schedule::Program p = program_for(v.vector_bytes, 2, 2, 0, v.threads, v.bf16, v.head_dim, 1);
      p.model.hidden = v.hidden;
      p.model.ffn = v.ffn;
      p.model.heads = v.hidden / static_cast<uint32_t>(v.head_dim);
      p.build.knobs["MS_WEIGHT_RING"] = 1;
      p.build.knobs["MS_RING_INFLIGHT"] = v.inflight;
      p.launch.smem_pages = v.pages;
      p.launch.smem_page_bytes = v.page_bytes;
      p.build.x_floats = 8192;
      BuildRequest req{"vm/device/megakernel.cuh", kernel_defines(p, v.profile), arch, ""};
      EXPECT_NE(std::find(req.defines.begin(), req.defines.end(), "MS_WEIGHT_RING=1"),
                req.defines.end());
      EXPECT_NE(std::find(req.defines.begin(), req.defines.end(),
                          "MS_SEG_VECS=" + std::to_string(v.seg_vecs)),
                req.defines.end())
          << "hidden " << v.hidden << ", ffn " << v.ffn;
      const BuildResult r = build_cubin(req);
      ASSERT_TRUE(r.ok) << "sm_" << arch << " threads " << v.threads << " seg " << v.seg_vecs
                        << ": " << r.error;
      EXPECT_FALSE(r.cubin.empty());
    }
  }
}

TEST(NvrtcBuild, CacheReturnsTheSameCubinWithoutCompiling) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("ms_cubin_cache_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::remove_all(dir);
  BuildRequest req{"vm/device/megakernel.cuh",
                   kernel_defines(program_for(16, 2, 2, 0, 256, true, 64)), 90, dir.string()};
  const BuildResult cold = build_cubin(req);
  ASSERT_TRUE(cold.ok) << cold.error;
  EXPECT_FALSE(cold.cache_hit);
  EXPECT_GT(cold.compile_ms, 0.0);
  const BuildResult warm = build_cubin(req);
  ASSERT_TRUE(warm.ok) << warm.error;
  EXPECT_TRUE(warm.cache_hit);
  EXPECT_EQ(warm.compile_ms, 0.0);
  EXPECT_EQ(warm.cubin, cold.cubin);
  EXPECT_EQ(warm.key, cold.key);
  // The kernel and its non-inlined device functions (a registers build: gemv_stream).
  ASSERT_EQ(warm.kernels.size(), cold.kernels.size());
  ASSERT_GE(warm.kernels.size(), 1u);
  for (size_t i = 0; i < warm.kernels.size(); ++i) {
    EXPECT_EQ(warm.kernels[i].name, cold.kernels[i].name);
    EXPECT_EQ(warm.kernels[i].registers, cold.kernels[i].registers);
  }
  // A different knob is a different key.
  req.defines = kernel_defines(program_for(16, 2, 4, 0, 256, true, 64));
  EXPECT_NE(build_cubin(req).key, cold.key);
  std::filesystem::remove_all(dir);
}

/// Spill stores (ptxas) of a registers build's kernel and of its gemv_stream (-1: not found).
struct BuildSpills {
  int kernel = -1, stream = -1;
  std::string log;
};

BuildSpills registers_build_spills(const schedule::Program& p) {
  const BuildResult r = build_cubin({"vm/device/megakernel.cuh", kernel_defines(p), 90, ""});
  EXPECT_TRUE(r.ok) << r.error;
  BuildSpills out;
  out.log = r.log;
  for (const auto& k : r.kernels) {
    if (k.name == "ms_megakernel") out.kernel = k.spill_store_bytes;
    if (k.name.find("gemv_stream") != std::string::npos) out.stream = k.spill_store_bytes;
  }
  return out;
}

// A registers build runs its whole-row GEMV tasks through the streamed path of
// vm/device/stream.cuh, which is not inlined: its ptxas line is how a build shows it has it.
TEST(NvrtcBuild, RegistersBuildHasTheStreamedGemvAndNeitherItNorTheKernelSpillsMore) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  for (int unroll : {2, 4}) {
    const BuildSpills b = registers_build_spills(program_for(16, 2, unroll, 1, 256, true, 64));
    EXPECT_EQ(b.stream, 0) << "unroll " << unroll << "\n" << b.log;
    // The kernel itself sits at the 255-register cap: code added anywhere in its call graph moves
    // spills into every path (dev/perf_log.md section 11: a change that raised them by 88 B slowed
    // every config by 11-27% on the H100). These are the spill stores of the tree measured in
    // dev/benchmarks_history.md, 2026-11-25 13:57-15:05 UTC (the task loop's look-ahead in shared
    // memory took them from 204 B to 28 B at unroll 4); a change that raises them is measured on
    // the GPU before this bound moves.
    EXPECT_GE(b.kernel, 0) << b.log;
    EXPECT_LE(b.kernel, unroll == 2 ? 0 : 28) << "unroll " << unroll;
  }
  // The builds with the combine or the attention prologue compiled in (kernel_defines): the same
  // bounds at unroll 4 (measured 20 B and 0 B; a four-key attention batch raised them to 108 / 4).
  for (const uint16_t flag :
       {uint16_t{ms_abi::kFlagCombinePrologue}, uint16_t{ms_abi::kFlagAttentionPrologue}}) {
    schedule::Program p = program_for(16, 2, 4, 1, 256, true, 64);
    ms_abi::Instr t{};
    t.opcode = ms_abi::kGemv;
    t.flags = flag;
    p.tasks.push_back(t);
    const BuildSpills b = registers_build_spills(p);
    EXPECT_EQ(b.stream, 0) << "flag " << flag << "\n" << b.log;
    EXPECT_GE(b.kernel, 0) << b.log;
    EXPECT_LE(b.kernel, 28) << "flag " << flag;
  }
}

// kernel.attention = staged (vm/device/attention.cuh, inlined into attn_partial): the same bound
// for its own spill stores, as measured on 2026-11-26 14:17-15:20 UTC (dev/benchmarks_history.md;
// 36 B at unroll 4 against the registers build's 20, which position 0 pays: +25-28 us on the H100).
TEST(NvrtcBuild, StagedAttentionBuildSpillsNoMoreThanMeasured) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  for (int unroll : {2, 4}) {
    schedule::Program p = program_for(16, 2, unroll, 1, 256, true, 64);
    p.build.knobs["MS_ATTN_STAGED"] = 1;
    const BuildSpills b = registers_build_spills(p);
    EXPECT_EQ(b.stream, 0) << "unroll " << unroll << "\n" << b.log;
    EXPECT_GE(b.kernel, 0) << b.log;
    EXPECT_LE(b.kernel, unroll == 2 ? 0 : 36) << "unroll " << unroll;
  }
}

/// The llama-1b H100 record's config at `position` (the built-in plan `best:llama-1b:h100`) with
/// kernel.stream_depth `depth`, lowered.
schedule::Program record_program(int position, int depth) {
  std::string error;
  auto c = schedule::named_config_at("best:llama-1b:h100", position, &error);
  EXPECT_TRUE(c.has_value()) << error;
  if (!c) return {};
  c->kernel.stream_depth = depth;
  const auto p = schedule::lower(*schedule::find_preset("llama-1b"), *schedule::find_target("h100"),
                                 *c, &error);
  EXPECT_TRUE(p.has_value()) << error;
  return p ? *p : schedule::Program{};
}

// kernel.stream_depth on the position-0 record (255 registers a thread at 256 threads): the input
// staging's batch shrinks with the depth (vm/device/stream.cuh kStreamStageBatch), so at depth 3
// neither the kernel nor the streamed GEMV spills, and at depth 4 the streamed GEMV does not and
// the kernel spills at most the 116 B it spilled when written (a staging batch of 8 spilled at
// depth 3); a change that raises them is measured on the GPU before these bounds move.
TEST(NvrtcBuild, ADeeperStreamOnThePositionZeroRecordKeepsTheStreamedGemvFreeOfSpills) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  for (int depth : {3, 4}) {
    const schedule::Program p = record_program(0, depth);
    ASSERT_FALSE(p.tasks.empty());
    const std::vector<std::string> d = kernel_defines(p);
    EXPECT_EQ(define_value(d, "MS_STREAM_DEPTH"), depth);
    const BuildSpills b = registers_build_spills(p);
    EXPECT_EQ(b.stream, 0) << "depth " << depth << "\n" << b.log;
    EXPECT_GE(b.kernel, 0) << b.log;
    EXPECT_LE(b.kernel, depth == 3 ? 0 : 116) << "depth " << depth << "\n" << b.log;
  }
}

// An attention warp carries four query heads when no attention task has more (a llama GQA group),
// else eight: the arrays of eight heads at head_dim 128 made ptxas spill the streamed GEMV's weight
// chunks, though that is a function of its own (dev/perf_log.md section 53).
TEST(NvrtcBuild, AttentionWarpsCarryTheProgramsWidestTaskOfQueryHeads) {
  auto batch_with = [](std::vector<uint32_t> heads) {
    schedule::Program p = program_for(16, 2, 4, 1, 256, true, 128);
    for (uint32_t h : heads) {
      ms_abi::Instr t{};
      t.opcode = ms_abi::kAttnPartial;
      t.row_begin = 4;
      t.row_end = 4 + h;
      p.tasks.push_back(t);
    }
    return define_value(kernel_defines(p), "MS_ATTN_HEAD_BATCH");
  };
  EXPECT_EQ(batch_with({}), -1);  // no attention task: the device default, 8
  EXPECT_EQ(batch_with({1, 4}), 4);
  EXPECT_EQ(batch_with({4, 5}), 8);
  EXPECT_EQ(batch_with({8}), 8);
  EXPECT_EQ(batch_with({16}), 8);  // a task of more heads takes them eight at a time
}

// llama-8b (head_dim 128) with the H200 record's staged-attention config of its middle positions:
// the streamed GEMV spilled 416 B of stores with eight heads an attention warp, on the weight
// chunks' loads and FMAs; with four, one 4-byte store, once a task at its staging call (SASS by
// source line: dev/sass_spills.py). The kernel itself spilled 140 B, and 96 B when this was
// written.
TEST(NvrtcBuild, TheLlama8bStagedAttentionBuildKeepsSpillsOutOfTheStreamedGemvsLoop) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  std::string error;
  auto c = schedule::named_config_at("best:llama-1b:h200", 192, &error);
  ASSERT_TRUE(c.has_value()) << error;
  ASSERT_EQ(c->kernel.attention, schedule::AttentionPath::kStaged);
  const auto p = schedule::lower(*schedule::find_preset("llama-8b"), *schedule::find_target("h200"),
                                 *c, &error);
  ASSERT_TRUE(p.has_value()) << error;
  const std::vector<std::string> d = kernel_defines(*p);
  EXPECT_EQ(define_value(d, "MS_HEAD_DIM"), 128);
  EXPECT_EQ(define_value(d, "MS_ATTN_HEAD_BATCH"), 4);
  const BuildSpills b = registers_build_spills(*p);
  EXPECT_GE(b.stream, 0) << b.log;
  EXPECT_LE(b.stream, 4) << b.log;
  EXPECT_GE(b.kernel, 0) << b.log;
  EXPECT_LE(b.kernel, 96) << b.log;
}

// Every bucket of the llama-1b records (the named plans of each GPU) builds with no spill in the
// streamed GEMV and at most 4 B in the kernel: a device change anywhere in the kernel can take the
// streamed GEMV's registers (dev/perf_log.md sections 53 and 54: the attention's arrays, the
// fallback GEMV's batches), and on llama-8b such a spill cost 23% of the step.
TEST(NvrtcBuild, EveryBucketOfTheLlama1bRecordsKeepsTheStreamedGemvFreeOfSpills) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  int builds = 0;
  for (const schedule::NamedConfig& named : schedule::named_configs()) {
    if (named.model != "llama-1b") continue;
    std::string error;
    const auto plan = schedule::is_plan_document(named.config)
                          ? schedule::parse_plan(named.config, &error)
                          : std::optional<schedule::Plan>();
    const std::vector<int> positions = [&] {
      std::vector<int> out;
      if (!plan) return std::vector<int>{0};
      for (const schedule::PlanBucket& b : plan->buckets) out.push_back(b.begin);
      return out;
    }();
    for (const int position : positions) {
      auto c = schedule::named_config_at(named.name, position, &error);
      ASSERT_TRUE(c.has_value()) << error;
      const auto p = schedule::lower(*schedule::find_preset("llama-1b"),
                                     *schedule::find_target(named.gpu), *c, &error);
      ASSERT_TRUE(p.has_value()) << named.name << " at " << position << ": " << error;
      const BuildSpills b = registers_build_spills(*p);
      const std::string where = named.name + " at " + std::to_string(position);
      EXPECT_EQ(b.stream, 0) << where << "\n" << b.log;
      EXPECT_GE(b.kernel, 0) << where << "\n" << b.log;
      EXPECT_LE(b.kernel, 4) << where << "\n" << b.log;
      ++builds;
    }
  }
  EXPECT_GE(builds, 6);  // two GPUs' records, the H200's in several buckets
}

// The H200 position-0 record with one shared-memory page and down's input in registers: that
// input does not fit, so its tasks take the fallback GEMV (ops.cuh gemv), compiled into the kernel
// beside the streamed one. The fallback's batches of the streamed GEMV's unroll made ptxas spill
// the streamed GEMV's chunks (544 B of stores at llama-1b and llama-8b); a quarter of it
// (kFallbackUnroll) leaves llama-1b's streamed GEMV free of spills and llama-8b's at 44 B, and on
// an H200 made both steps 20-23% faster (dev/perf_log.md section 54).
TEST(NvrtcBuild, TheFallbackGemvLeavesTheStreamedGemvItsRegisters) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  for (const char* model : {"llama-1b", "llama-8b"}) {
    std::string error;
    auto c = schedule::named_config_at("best:llama-1b:h200", 0, &error);
    ASSERT_TRUE(c.has_value()) << error;
    c->smem.pages = 1;
    c->kernel.silu_stage = schedule::SiluStage::kRegisters;  // copies need 8 x ffn bytes of pages
    const auto p =
        schedule::lower(*schedule::find_preset(model), *schedule::find_target("h200"), *c, &error);
    ASSERT_TRUE(p.has_value()) << model << ": " << error;
    EXPECT_EQ(define_value(kernel_defines(*p), "MS_GEMV_FALLBACK"), 1) << model;
    const BuildSpills b = registers_build_spills(*p);
    EXPECT_GE(b.stream, 0) << model << "\n" << b.log;
    EXPECT_LE(b.stream, std::string(model) == "llama-1b" ? 0 : 48) << model << "\n" << b.log;
  }
}

// kernel.silu_stage = copies on the H200 position-0 record with the four pages it needs at llama-1b
// (8 x ffn bytes; the record's own since 2026-11-29, BENCHMARKS.md [Q]): the build compiles the
// copied staging in (MS_SILU_COPIES 1), every down task takes it (abi/ring.h stream_silu_copies),
// and neither the streamed GEMV nor the kernel spills more than the registers build (nvcc 13.0 on
// the record's defines: 0 B and 4 B both ways).
TEST(NvrtcBuild, SiluCopiesOnThePositionZeroRecordSpillNoMore) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  std::string error;
  auto c = schedule::named_config_at("best:llama-1b:h200", 0, &error);
  ASSERT_TRUE(c.has_value()) << error;
  c->smem.pages = 4;
  const schedule::ModelShape shape = *schedule::find_preset("llama-1b");
  const schedule::GpuTarget h200 = *schedule::find_target("h200");
  int spills[2][2] = {};
  for (int copies : {0, 1}) {
    c->kernel.silu_stage = copies ? schedule::SiluStage::kCopies : schedule::SiluStage::kRegisters;
    const auto p = schedule::lower(shape, h200, *c, &error);
    ASSERT_TRUE(p.has_value()) << error;
    EXPECT_EQ(define_value(kernel_defines(*p), "MS_SILU_COPIES"), copies);
    size_t taking = 0;
    for (const ms_abi::Instr& t : p->tasks)
      taking += schedule::stream_takes(*p, t) &&
                ms_abi::stream_silu_copies(t, uint64_t(p->launch.smem_bytes));
    EXPECT_EQ(taking, size_t{16 * 128});  // down: 128 tiles a layer
    const BuildSpills b = registers_build_spills(*p);
    spills[copies][0] = b.stream;
    spills[copies][1] = b.kernel;
  }
  EXPECT_EQ(spills[1][0], spills[0][0]);
  EXPECT_LE(spills[1][1], spills[0][1]);
}

TEST(NvrtcBuild, CompilesTheGpuReferenceKernelsAndTheFaultSwitch) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  for (int arch : {90, 80}) {
    const BuildResult ref = build_cubin({"vm/device/reference_forward.cuh", {}, arch, ""});
    ASSERT_TRUE(ref.ok) << ref.error;
    EXPECT_TRUE(ref.kernels.empty() || ref.kernels.size() >= 6u) << ref.log;
    // The test-only fault switch compiles, and changes the machine code.
    BuildRequest req{"vm/device/megakernel.cuh",
                     kernel_defines(program_for(16, 2, 2, 0, 256, true, 64)), arch, ""};
    const BuildResult plain = build_cubin(req);
    req.defines.push_back("MS_TEST_FAULT_KV_FROM=2048");
    req.defines.push_back("MS_TEST_FAULT_KV_UNTIL=8192");
    const BuildResult faulty = build_cubin(req);
    ASSERT_TRUE(plain.ok && faulty.ok) << plain.error << faulty.error;
    EXPECT_NE(plain.cubin, faulty.cubin);
    EXPECT_NE(plain.key, faulty.key);
  }
}

// The fault switches are reachable from tests only: no knob sets them, and the option list of a
// program (profiled or not) never carries them.
TEST(NvrtcBuild, NoConfigReachesTheTestFaultSwitches) {
  for (const schedule::KnobSpec& k : schedule::knob_specs())
    EXPECT_EQ(k.define.rfind("MS_TEST_", 0), std::string::npos) << k.path;
  for (bool profile : {false, true})
    for (const std::string& d : kernel_defines(program_for(16, 2, 2, 0, 256, true, 64), profile))
      EXPECT_EQ(d.rfind("MS_TEST_", 0), std::string::npos) << d;
}

TEST(NvrtcBuild, CountsCacheHitsAndCompilesForTheHitRate) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("ms_cubin_stats_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::remove_all(dir);
  const CubinCacheStats before = cubin_cache_stats();
  const BuildRequest req{"vm/device/reference_forward.cuh", {}, 90, dir.string()};
  ASSERT_TRUE(build_cubin(req).ok);
  ASSERT_TRUE(build_cubin(req).ok);
  ASSERT_TRUE(build_cubin(req).ok);
  const CubinCacheStats after = cubin_cache_stats();
  EXPECT_EQ(after.compiles - before.compiles, 1u);
  EXPECT_EQ(after.hits - before.hits, 2u);
  std::filesystem::remove_all(dir);
}

TEST(NvrtcBuild, FailedBuildCarriesTheWholeLog) {
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  BuildRequest req{"vm/device/megakernel.cuh", {"MS_VECTOR_BYTES=3"}, 90, ""};
  const BuildResult r = build_cubin(req);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("NVRTC failed"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("MS_VECTOR_BYTES"), std::string::npos)
      << r.error;  // the static_assert text
  EXPECT_NE(r.error.find(r.log), std::string::npos);
  EXPECT_FALSE(r.log.empty());
}

TEST(NvrtcBuild, HopperBuildsForItsArchitectureSpecificTarget) {
  EXPECT_EQ(arch_name(90), "sm_90a");
  EXPECT_EQ(arch_name(80), "sm_80");
  BuildRequest hopper{"vm/device/megakernel.cuh", {}, 90, ""};
  const std::vector<std::string> opts = compile_options(hopper);
  EXPECT_NE(std::find(opts.begin(), opts.end(), "-arch=sm_90a"), opts.end());
  BuildRequest ampere = hopper;
  ampere.sm_arch = 80;
  EXPECT_NE(build_key(hopper), build_key(ampere));
}

/// NVRTC's log of `source` built with compile_options' arch and ptxas flags for sm_90a.
std::string hopper_log(const std::string& source) {
#if MS_HAVE_CUDA
  nvrtcProgram prog = nullptr;
  EXPECT_EQ(nvrtcCreateProgram(&prog, source.c_str(), "setmaxnreg.cu", 0, nullptr, nullptr),
            NVRTC_SUCCESS);
  const std::string arch = "-arch=" + arch_name(90);
  const char* opts[] = {arch.c_str(), "--ptxas-options=-v"};
  EXPECT_EQ(nvrtcCompileProgram(prog, 2, opts), NVRTC_SUCCESS);
  size_t size = 0;
  nvrtcGetProgramLogSize(prog, &size);
  std::string log(size, '\0');
  nvrtcGetProgramLog(prog, log.data());
  nvrtcDestroyProgram(&prog);
  return log;
#else
  (void)source;
  return "";
#endif
}

TEST(NvrtcBuild, ASetmaxnregPtxasIgnoresFailsTheBuild) {
  EXPECT_EQ(ptxas_refusal("ptxas info    : Used 10 registers, used 0 barriers\n"), "");
  const std::string refusal = ptxas_refusal(
      "ptxas info    : 0 bytes gmem\nptxas info    : (C7508) Potential Performance Loss: "
      "'setmaxnreg' ignored; unable to determine register count at entry.\nptxas info    : x\n");
  EXPECT_NE(refusal.find("ptxas ignored a setmaxnreg: ptxas info    : (C7508) Potential"),
            std::string::npos)
      << refusal;
  EXPECT_EQ(refusal.find("ptxas info    : x"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("hint: a kernel that resizes its warps' registers needs "
                         "__launch_bounds__"),
            std::string::npos);
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  // The producer / consumer split of megakernel v3: with its thread count as a launch bound
  // ptxas honours the register changes; without one it ignores them (C7508) and the build fails.
  const std::string roles = R"(
extern "C" __global__ void BOUNDS roles(float* out) {
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    out[threadIdx.x] = 1.0f;
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    out[threadIdx.x] = 2.0f;
  }
})";
  auto with = [&](const std::string& bounds) {
    std::string src = roles;
    src.replace(src.find("BOUNDS"), 6, bounds);
    return src;
  };
  const std::string bounded = hopper_log(with("__launch_bounds__(384, 1)"));
  EXPECT_NE(bounded.find("roles"), std::string::npos) << bounded;
  EXPECT_EQ(ptxas_refusal(bounded), "") << bounded;
  const std::string unbounded = hopper_log(with(""));
  EXPECT_NE(ptxas_refusal(unbounded).find("C7508"), std::string::npos) << unbounded;
}

TEST(NvrtcBuild, ProfileBuildWithoutTheRingCompilesUnderItsOwnKey) {
  // kernel_defines(program, /*profile=*/true) adds MS_PROFILE=1 (GpuVmOptions::profile, megasched
  // profile); the ring variants are compiled profiled above, this is the default (no ring) build.
  if (!have_nvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  for (const auto& [arch, bf16] : {std::pair{90, true}, std::pair{80, false}}) {
    BuildRequest req;
    req.entry = "vm/device/megakernel.cuh";
    req.defines = kernel_defines(program_for(16, 2, 2, 0, 256, bf16, 64));
    req.sm_arch = arch;
    const std::string plain_key = build_cubin(req).key;
    std::vector<std::string> plain = req.defines;
    req.defines = kernel_defines(program_for(16, 2, 2, 0, 256, bf16, 64), /*profile=*/true);
    plain.push_back("MS_PROFILE=1");
    std::sort(plain.begin(), plain.end());
    EXPECT_EQ(req.defines, plain) << "profiling adds exactly MS_PROFILE=1";
    const BuildResult r = build_cubin(req);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_FALSE(r.cubin.empty());
    EXPECT_NE(r.key, plain_key);
  }
}

}  // namespace
}  // namespace megasched::vm

// The identity keys landscapes, corpus rows and registry entries: it covers every embedded source
// a schedule's kernels compile (abi/abi.h among them) and not the bench-only gate, so a change to
// the gate stales none of those records.
namespace megasched::vm {
namespace {

TEST(NvrtcBuild, TheBuildIdentityLeavesOutTheBenchOnlyGate) {
  std::string with_gate, without_gate;
  bool gate_embedded = false, abi_embedded = false;
  for (const EmbeddedSource& s : embedded_sources()) {
    const std::string piece = std::string(s.path) + "\n" + s.text;
    with_gate += piece;
    gate_embedded = gate_embedded || std::string(s.path) == "vm/device/gate.cuh";
    abi_embedded = abi_embedded || std::string(s.path) == "abi/abi.h";
    if (!bench_only_source(s.path)) without_gate += piece;
  }
  ASSERT_TRUE(gate_embedded) << "bench/gate_bench.cpp compiles the embedded gate";
  ASSERT_TRUE(abi_embedded);
  EXPECT_TRUE(bench_only_source("vm/device/gate.cuh"));
  EXPECT_FALSE(bench_only_source("vm/device/megakernel.cuh"));
  EXPECT_FALSE(bench_only_source("abi/abi.h"));
  EXPECT_EQ(build_identity(), "kernel-sources-" + schedule::hash_hex(without_gate));
  EXPECT_NE(build_identity(), "kernel-sources-" + schedule::hash_hex(with_gate));
}

}  // namespace
}  // namespace megasched::vm
