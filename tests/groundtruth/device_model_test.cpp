// The ground truth's model of the kernel (groundtruth/device_model.h) held to the compiler and to
// the host formulas the validator uses: the static shared memory against NVRTC's ptxas report (no
// GPU needed), the weight ring's staging, page geometry and path against abi/ring.h, and the
// footprints against everything the device reads (the ReferenceVm's accesses and the ring paths'
// staging reads).
#include "groundtruth/device_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "abi/ring.h"
#include "groundtruth/ground_truth.h"
#include "groundtruth/program_fuzz.h"
#include "schedule/build_fit.h"
#include "schedule/footprint.h"
#include "schedule/lower.h"
#include "schedule/search.h"
#include "schedule/target.h"
#include "vm/nvrtc_build.h"

namespace megasched::groundtruth {
namespace {

using namespace schedule;

Program build_only(int threads, int head_dim, bool ring) {
  Program p;
  p.model.head_dim = static_cast<uint32_t>(head_dim);
  p.model.weight_dtype = ms_abi::kDTypeBF16;
  p.model.kv_dtype = ms_abi::kDTypeBF16;
  p.model.hidden = 2048;
  p.model.heads = 2048 / static_cast<uint32_t>(head_dim);
  p.model.ffn = 8192;
  p.launch.threads_per_block = threads;
  p.build.knobs = kernel_knob_defines(ScheduleConfig{});
  if (ring) {
    p.build.knobs["MS_WEIGHT_RING"] = 1;
    p.launch.smem_pages = 2;
    p.launch.smem_page_bytes = 16384;
    p.build.x_floats = 8192;
  }
  return p;
}

// ptxas's static shared memory of the megakernel is the model's figure, and within the bound the
// validator and the search use (kernel_static_smem_bound).
TEST(DeviceModel, StaticSharedMemoryIsWhatPtxasReports) {
  if (vm::nvrtc_version() == "none") GTEST_SKIP() << "built without the CUDA toolkit";
  struct Case {
    int threads, head_dim;
    bool ring;
    uint32_t attention_heads = 0;  // > 0: one attention task of this many query heads
  };
  int reports = 0;
  const std::vector<Case> cases = {{128, 16, false},     {256, 256, false},   {1024, 64, true},
                                   {160, 128, true},     {288, 64, false},    {160, 64, false},
                                   {256, 128, false, 4}, {160, 128, true, 4}, {256, 64, false, 8}};
  for (const Case& c : cases) {
    Program p = build_only(c.threads, c.head_dim, c.ring);
    if (c.attention_heads > 0) {  // its build carries MS_ATTN_HEAD_BATCH (4 or 8 heads a warp)
      ms_abi::Instr t{};
      t.opcode = ms_abi::kAttnPartial;
      t.row_end = c.attention_heads;
      p.tasks.push_back(t);
    }
    vm::BuildRequest req{"vm/device/megakernel.cuh", vm::kernel_defines(p), 90, ""};
    const vm::BuildResult r = vm::build_cubin(req);
    ASSERT_TRUE(r.ok) << r.error;
    const int64_t model = device_static_smem_bytes(device_build(p));
    EXPECT_LE(model, kernel_static_smem_bound(c.threads, c.head_dim));
    if (r.kernels.empty() || r.kernels[0].smem_static_bytes < 0) continue;  // no ptxas report
    ++reports;
    EXPECT_EQ(r.kernels[0].smem_static_bytes, model)
        << c.threads << " threads, head_dim " << c.head_dim << (c.ring ? ", ring" : "") << ", "
        << c.attention_heads << " attention heads";
  }
  std::printf("ptxas reported static shared memory for %d of %zu builds\n", reports, cases.size());
}

// The cap on the ring's pages in flight (MS_RING_INFLIGHT) builds below the ring's pages and in a
// registers build (where it is inert), and nowhere else: the model's static_assert, the validator's
// build rule and NVRTC agree.
TEST(DeviceModel, TheInflightCapBuildsExactlyWhereTheModelSaysItDoes) {
  struct Case {
    bool ring;
    int pages, inflight;
    bool builds;
  };
  const bool nvrtc = vm::nvrtc_version() != "none";
  for (const Case& c :
       {Case{true, 2, 1, true}, Case{true, 2, 2, false}, Case{true, 4, 3, true},
        Case{true, 4, 4, false}, Case{true, 1, 1, false}, Case{false, 2, 4, true}}) {
    Program p = build_only(256, 64, c.ring);
    p.build.knobs["MS_RING_INFLIGHT"] = c.inflight;
    if (c.ring) p.launch.smem_pages = c.pages;
    const std::string what =
        (c.ring ? "ring of " + std::to_string(c.pages) : std::string("registers")) + ", cap " +
        std::to_string(c.inflight);
    const std::vector<std::string> errors = device_build_errors(device_build(p));
    EXPECT_EQ(errors.empty(), c.builds) << what;
    size_t more = 0;
    bool refused = false;
    for (const BuildMisfit& m : build_misfits(p, 8, &more))
      refused |= m.message.find("MS_RING_INFLIGHT") != std::string::npos;
    EXPECT_EQ(refused, !c.builds) << what;
    if (!nvrtc || c.builds) continue;  // the builds that compile: NvrtcBuild.CompilesTheWeightRing*
    const vm::BuildResult r =
        vm::build_cubin({"vm/device/megakernel.cuh", vm::kernel_defines(p), 90, ""});
    EXPECT_FALSE(r.ok) << what;
    EXPECT_NE(r.error.find("MS_RING_INFLIGHT"), std::string::npos) << what << ": " << r.error;
  }
}

// One kernel build knob at one value, the others at `others`' values over a default build:
// `field` of the model's DeviceBuild reads it back, and the model's static_asserts, the
// validator's build rule and NVRTC agree on whether it builds (`builds`).
void expect_builds_where_the_model_says(const std::string& define, int value, bool builds,
                                        const std::map<std::string, int>& others,
                                        int DeviceBuild::*field) {
  Program p = build_only(256, 64, false);
  for (const auto& [name, v] : others) p.build.knobs[name] = v;
  p.build.knobs[define] = value;
  const std::string what = define + "=" + std::to_string(value);
  EXPECT_EQ(device_build(p).*field, value) << what;
  EXPECT_EQ(device_build_errors(device_build(p)).empty(), builds) << what;
  size_t more = 0;
  bool refused = false;
  for (const BuildMisfit& m : build_misfits(p, 8, &more))
    refused |= m.message.find(define) != std::string::npos;
  EXPECT_EQ(refused, !builds) << what;
  // The builds that compile: NvrtcBuild.CompilesEveryBuild*.
  if (vm::nvrtc_version() == "none" || builds) return;
  const vm::BuildResult r =
      vm::build_cubin({"vm/device/megakernel.cuh", vm::kernel_defines(p), 90, ""});
  EXPECT_FALSE(r.ok) << what;
  EXPECT_NE(r.error.find(define), std::string::npos) << what << ": " << r.error;
}

// The streamed GEMV's chunks in flight (MS_STREAM_DEPTH) build from 2 to 4 and nowhere else.
TEST(DeviceModel, TheStreamDepthBuildsExactlyWhereTheModelSaysItDoes) {
  for (int depth : {1, 2, 3, 4, 5})
    expect_builds_where_the_model_says("MS_STREAM_DEPTH", depth, depth >= 2 && depth <= 4, {},
                                       &DeviceBuild::stream_depth);
}

// The chunks held back until after the wait (MS_STREAM_HELD) build from 0 to MS_STREAM_DEPTH and
// nowhere else.
TEST(DeviceModel, TheStreamHeldBuildsExactlyWhereTheModelSaysItDoes) {
  for (int held : {-1, 0, 1, 2, 3})
    expect_builds_where_the_model_says("MS_STREAM_HELD", held, held >= 0 && held <= 2,
                                       {{"MS_STREAM_DEPTH", 2}}, &DeviceBuild::stream_held);
}

// The blocks that hold chunks back (MS_STREAM_HELD_EVERY): every 1st, 2nd or 4th, nothing else.
TEST(DeviceModel, TheHeldEveryBuildsExactlyWhereTheModelSaysItDoes) {
  for (int every : {0, 1, 2, 3, 4, 8})
    expect_builds_where_the_model_says("MS_STREAM_HELD_EVERY", every,
                                       every == 1 || every == 2 || every == 4,
                                       {{"MS_STREAM_HELD", 1}}, &DeviceBuild::stream_held_every);
}

TEST(DeviceModel, StagingExtentFormulaIsTheLargestStagedSlot) {
  for (uint32_t vec_elems : {1u, 2u, 4u, 8u}) {
    uint32_t largest = 0;
    for (uint32_t cols = 1; cols <= 4 * 32 * vec_elems + 3; ++cols) {
      largest = std::max(largest, ms_abi::ring_x_slot(cols - 1, vec_elems) + 1);
      ASSERT_EQ(ms_abi::ring_x_extent(cols, vec_elems), largest)
          << "cols " << cols << ", " << vec_elems << " weights per vector";
    }
  }
}

// abi/ring.h (what the validator checks) against the transcription of the device code (what the
// ground truth judges by), over tiles of every shape around the block and page edges.
TEST(DeviceModel, RingFormulasAgreeWithTheDeviceTranscription) {
  std::mt19937_64 rng(4);
  int pieces = 0, segments = 0, hangs = 0, overflows = 0;
  for (int i = 0; i < 4000; ++i) {
    Program p = build_only(32 * static_cast<int>(2 + rng() % 31), 64, true);
    const bool bf16 = rng() % 2 == 0;
    p.model.weight_dtype = bf16 ? ms_abi::kDTypeBF16 : ms_abi::kDTypeF32;
    p.build.knobs["MS_VECTOR_BYTES"] = std::vector<int>{4, 8, 16}[rng() % 3];
    p.launch.smem_page_bytes = 16 * static_cast<int>(1 + rng() % 1200);
    p.build.x_floats = 4 * static_cast<int>(1 + rng() % 1200);
    p.model.hidden = 512;
    p.model.heads = 8;
    p.model.ffn = 1536;
    ms_abi::Instr in{};
    in.opcode = ms_abi::kGemv;
    in.ld = 8 * static_cast<uint32_t>(1 + rng() % 700);
    in.col_begin = rng() % 3 == 0 ? 0 : 8 * static_cast<uint32_t>(rng() % (in.ld / 8));
    in.col_end =
        rng() % 3 == 0
            ? in.ld
            : in.col_begin + 8 * static_cast<uint32_t>(1 + rng() % ((in.ld - in.col_begin) / 8));
    if (rng() % 4 == 0) {  // whole rows of whole segments (512 weights for this model)
      in.ld = 512 * static_cast<uint32_t>(1 + rng() % 8);
      in.col_begin = 0;
      in.col_end = in.ld;
      p.launch.smem_page_bytes = 2048 * static_cast<int>(1 + rng() % 32);
    }
    in.row_begin = 0;
    in.row_end = 1 + rng() % 64;
    in.flags = rng() % 2 == 0 ? ms_abi::kFlagNormPrologue : 0;
    const RingTaskModel m = ring_task_model(device_build(p), p, in);
    const GemvPath path = ring_path(p, in);
    ASSERT_EQ(path == GemvPath::kRegisters, m.path == RingTaskModel::Path::kNone) << i;
    ASSERT_EQ(path == GemvPath::kRingSegments, m.path == RingTaskModel::Path::kSegments) << i;
    if (path != GemvPath::kRingPieces) {
      segments += path == GemvPath::kRingSegments;
      continue;
    }
    ++pieces;
    const uint32_t wb = bf16 ? 2 : 4, vec = static_cast<uint32_t>(p.build.knob("MS_VECTOR_BYTES"));
    EXPECT_EQ(ms_abi::ring_x_extent(in.col_end - in.col_begin, vec / wb), m.staged_floats) << i;
    const ms_abi::RingPieces g = ms_abi::ring_pieces(
        in.col_end - in.col_begin, p.launch.smem_page_bytes / wb,
        static_cast<uint32_t>(p.launch.threads_per_block / 32 - 1), ms_abi::ring_x_block(vec, wb));
    EXPECT_EQ(g.pr > 0, m.loader_ends) << i;
    hangs += !m.loader_ends;
    overflows += m.staged_floats > static_cast<uint64_t>(p.build.x_floats);
  }
  EXPECT_GT(pieces, 500);
  EXPECT_GT(segments, 20);
  EXPECT_GT(hangs, 10);
  EXPECT_GT(overflows, 10);
}

// Every task's footprint holds everything the device reads and writes: the ReferenceVm's accesses
// at each position that matters, plus the weight ring's staging reads (the norm gamma over the
// whole row), over random toy configs with and without the ring (every fourth registers build with
// tiles of RoPE pairs, every eighth with the combine in O, every eighth another with the attention
// in O, every eighth a third with tagged inputs, every third draw with the LM head's argmax
// records).
TEST(DeviceModel, FootprintsHoldEveryDeviceAccess) {
  const ModelShape shape = *find_preset("toy-2L");
  const Weights weights = generate_weights(shape, 1, 1);
  const GpuTarget target = fuzz_target(4);
  std::mt19937_64 rng(12);
  int ring_programs = 0, pair_programs = 0, record_programs = 0, combine_programs = 0;
  int attend_programs = 0, tagged_programs = 0, capped_programs = 0;
  int wide_gamma = 0;  // ring tasks reading the gamma beyond their columns
  for (int i = 0; i < 40; ++i) {
    ScheduleConfig cfg = random_config(shape, target, rng);
    if (i % 4 == 1) {  // a registers build: pairs need fused RoPE and one split
      cfg.tiling.qkv_rope_pairs = true;
      cfg.fusion.rope_kv_into_qkv = true;
      cfg.tiling.gemv_k_split = 1;
      cfg.kernel.weight_stream = WeightStream::kRegisters;
      cfg.kernel.attention = AttentionPath::kStaged;  // the same KV rows, staged
      cfg.fusion.attention_into_o = false;            // staged attention tasks
      cfg.smem.inflight_pages = 0;                    // only the ring's loader has a cap
      if (i % 8 == 1) {  // and the combine in the O projection's input load
        cfg.fusion.combine_into_o = true;
        cfg.tiling.attn_kv_partitions = std::max(cfg.tiling.attn_kv_partitions, 2);
      }
    }
    if (i % 8 == 3) {  // the attention in the O projection's input load: no attention tasks
      cfg.fusion.attention_into_o = true;
      cfg.kernel.weight_stream = WeightStream::kRegisters;
      cfg.kernel.attention = AttentionPath::kRegisters;
      cfg.tiling.gemv_k_split = 1;
      cfg.tiling.attn_kv_partitions = 1;
      cfg.tiling.attn_q_heads_per_task = 0;
      cfg.fusion.combine_into_o = false;
      cfg.dependencies.attention_to_o = Granularity::kPerOp;
      cfg.smem.inflight_pages = 0;
    }
    if (i % 8 == 5) {  // tagged inputs on the GEMV joins: the same elements, read as words
      cfg.pipeline.tagged_inputs = true;
      cfg.kernel.weight_stream = WeightStream::kRegisters;
      cfg.tiling.gemv_k_split = 1;
      cfg.fusion.silu_mul_into_down = true;
      cfg.smem.inflight_pages = 0;
    }
    if (i % 3 == 0) cfg.fusion.argmax_into_lm_head = true;
    if (i % 2 == 0) {
      cfg.kernel.weight_stream = WeightStream::kSmemRing;
      cfg.kernel.attention = AttentionPath::kRegisters;  // the ring owns the shared memory
      cfg.tiling.qkv_rope_pairs = false;    // only the registers build runs tiles of RoPE pairs
      cfg.fusion.combine_into_o = false;    // and the combine in O
      cfg.fusion.attention_into_o = false;  // and the attention in O
      cfg.pipeline.tagged_inputs = false;   // and tagged words
      cfg.kernel.stream_depth = 2;          // and weight chunks in flight in registers
      cfg.kernel.stream_held = 0;           // and the ones of them held back
      cfg.kernel.stream_held_every = 2;
      cfg.assignment.policy = AssignPolicy::kRoundRobin;
      cfg.launch.threads_per_block = std::max(cfg.launch.threads_per_block, 128);
      cfg.launch.blocks_per_sm = 1;
      // A cap on the pages in flight (random_config draws it only with the ring).
      if (i % 4 == 0 && cfg.smem.pages > 1)
        cfg.smem.inflight_pages = 1 + (i / 4) % std::min(cfg.smem.pages - 1, 4);
    }
    // Down's input copied into shared memory reads the same elements (kernel.silu_stage): kept
    // where the edits above leave it allowed.
    if (cfg.kernel.silu_stage == SiluStage::kCopies &&
        (!knob_conflict(cfg).empty() || !silu_copies_misfit(cfg, shape).empty()))
      cfg.kernel.silu_stage = SiluStage::kRegisters;
    std::string error;
    const std::optional<Program> p = lower(shape, target, cfg, &error);
    ASSERT_TRUE(p) << error;
    ring_programs += p->build.weight_ring();
    capped_programs += p->build.weight_ring() && p->build.knob("MS_RING_INFLIGHT") > 0;
    pair_programs += cfg.tiling.qkv_rope_pairs;
    record_programs += cfg.fusion.argmax_into_lm_head;
    combine_programs += cfg.fusion.combine_into_o && cfg.tiling.attn_kv_partitions > 1;
    attend_programs += cfg.fusion.attention_into_o;
    tagged_programs += std::any_of(p->tasks.begin(), p->tasks.end(), [](const ms_abi::Instr& t) {
      return (t.flags & ms_abi::kFlagTagIn) != 0;
    });
    const DeviceBuild build = device_build(*p);
    for (int32_t position : ground_truth_positions(*p)) {
      TaskAccesses acc;
      ASSERT_TRUE(record_accesses(*p, weights, position, &acc, &error)) << error;
      for (uint32_t t = 0; t < p->tasks.size(); ++t) {
        std::vector<Access> fp;
        ASSERT_TRUE(task_footprint(*p, t, &fp, &error)) << error;
        auto covered = [&](uint32_t buffer, uint64_t index, bool write) {
          for (const Access& a : fp)
            if (a.buffer == buffer && a.begin <= index && index < a.end && (a.write || !write))
              return true;
          return false;
        };
        // KV elements in the footprints' dimension-major coordinates (schedule/footprint.h).
        auto index_of = [&](uint64_t key) {
          const uint64_t index = key & ((uint64_t{1} << 56) - 1);
          return (key >> 56) == ms_abi::kBufKv ? kv_footprint_index(p->model, index) : index;
        };
        for (const auto* set : {&acc.reads[t], &acc.writes[t]})
          for (uint64_t key : *set)
            ASSERT_TRUE(
                covered(static_cast<uint32_t>(key >> 56), index_of(key), set == &acc.writes[t]))
                << p->task_label(t) << " key " << key << "\n"
                << canonical_string(cfg);
        for (const DeviceRange& r : ring_task_model(build, *p, p->tasks[t]).reads) {
          const ms_abi::Instr& in = p->tasks[t];
          wide_gamma +=
              r.buffer == ms_abi::kBufWeights && r.end - r.begin > in.col_end - in.col_begin;
          for (uint64_t i = r.begin; i < r.end; ++i)
            ASSERT_TRUE(covered(r.buffer, i, false))
                << p->task_label(t) << " ring staging reads element " << i << " of buffer "
                << r.buffer;
        }
      }
    }
  }
  EXPECT_GE(ring_programs, 15);
  EXPECT_GT(capped_programs, 0) << "no weight ring with a cap on its pages in flight was drawn";
  EXPECT_GT(pair_programs, 0) << "no registers build with tiles of RoPE pairs was drawn";
  EXPECT_GT(record_programs, 0) << "no program with argmax records was drawn";
  EXPECT_GT(combine_programs, 0) << "no program with the combine in O was drawn";
  EXPECT_GT(attend_programs, 0) << "no program with the attention in O was drawn";
  EXPECT_GT(tagged_programs, 0) << "no program with tagged inputs was drawn";
  EXPECT_GT(wide_gamma, 0) << "no split ring GEMV with the norm prologue was drawn";
}

}  // namespace
}  // namespace megasched::groundtruth
