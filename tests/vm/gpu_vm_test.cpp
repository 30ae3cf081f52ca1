// The megakernel on a real GPU (every test GTEST_SKIP()s where there is no device): logits match
// the eager reference at several positions for fp32 and bf16 models and for a covering set of
// configs, a deadlocking program ends in a `hang` verdict with a per-block dump within seconds and
// the next trial still runs, a grid that is not co-resident is rejected without a launch, and the
// cuBLAS graph baseline and the bandwidth probe work.
#include "vm/gpu_vm.h"
#include "vm/cuda_runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "abi/ring.h"
#include "eval/baselines/baseline.h"
#include "eval/device.h"
#include "eval/eager.h"
#include "eval/evaluate.h"
#include "eval/gpu_trial.h"
#include "eval/oracle.h"
#include "schedule/config.h"
#include "schedule/lower.h"
#include "schedule/validate.h"

namespace megasched::vm {
namespace {

using eval::GpuTrialOptions;
using eval::GpuTrialResult;

#define MS_REQUIRE_GPU()                                   \
  do {                                                     \
    std::string why_;                                      \
    if (!eval::gpu_available(&why_)) GTEST_SKIP() << why_; \
  } while (0)

schedule::ModelShape toy_shape(schedule::DType dtype) {
  schedule::ModelShape s = *schedule::find_preset("toy");
  s.dtype = dtype;
  return s;
}

/// Eager references at `positions` (fed in order from 0).
struct Refs {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};
Refs eager_refs(const schedule::Weights& w, const std::vector<int>& positions) {
  Refs r;
  r.tokens = eval::trial_tokens(w.shape.vocab, positions.back() + 1, 7);
  eval::EagerModel eager(w);
  size_t next = 0;
  for (int p = 0; p <= positions.back(); ++p) {
    auto l = eager.step(r.tokens[static_cast<size_t>(p)], p);
    if (next < positions.size() && positions[next] == p) {
      r.logits.push_back(std::move(l));
      ++next;
    }
  }
  return r;
}

schedule::Program lower_or_die(const schedule::ModelShape& s, const schedule::ScheduleConfig& c) {
  std::string err;
  auto target = eval::live_target(&err);
  EXPECT_TRUE(target) << err;
  auto p = schedule::lower(s, *target, c, &err);
  EXPECT_TRUE(p) << err;
  return *p;
}

GpuTrialOptions quick() {
  GpuTrialOptions o;
  o.warmup = 2;
  o.iterations = 5;
  o.baselines.clear();
  o.hang_timeout_s = 2.0;
  return o;
}

TEST(GpuVm, MatchesEagerAtSeveralPositionsFp32AndBf16) {
  MS_REQUIRE_GPU();
  const std::vector<int> positions = {0, 5, 33};
  for (schedule::DType dtype : {schedule::DType::kF32, schedule::DType::kBF16}) {
    const schedule::Weights w = schedule::generate_weights(toy_shape(dtype), 3);
    const Refs refs = eager_refs(w, positions);
    const schedule::Program p = lower_or_die(w.shape, schedule::ScheduleConfig{});
    const GpuTrialResult r =
        eval::run_gpu_trial(p, w, refs.tokens, refs.logits, positions, quick());
    EXPECT_EQ(r.status, "ok") << schedule::dtype_name(dtype) << ": " << r.message << "\n"
                              << r.kernel.dump(1);
    EXPECT_TRUE(r.argmax_match);
    EXPECT_EQ(r.samples_us.size(), 5u);
    EXPECT_GT(r.kernel.value("registers", 0), 0);
  }
}

TEST(GpuVm, EveryKnobValueRunsCorrectly) {
  MS_REQUIRE_GPU();
  const schedule::Weights w = schedule::generate_weights(toy_shape(schedule::DType::kBF16), 5);
  const std::vector<int> positions = {0, 9};
  const Refs refs = eager_refs(w, positions);
  std::string err;
  const schedule::GpuTarget target = *eval::live_target(&err);
  // Variant i sets each knob to its (i mod n)-th choice, so every value of every knob appears.
  size_t n = 0;
  for (const auto& k : schedule::knob_specs()) n = std::max(n, k.choices.size());
  int ran = 0;
  // Lowers, validates and runs one variant; false when it does not lower, validate or launch.
  auto run = [&](const schedule::ScheduleConfig& c) {
    auto p = schedule::lower(w.shape, target, c, &err);
    if (!p) return false;
    if (!schedule::validate(*p, target).ok()) return false;
    const GpuTrialResult r =
        eval::run_gpu_trial(*p, w, refs.tokens, refs.logits, positions, quick());
    if (r.status == "rejected") return false;
    ++ran;
    EXPECT_EQ(r.status, "ok") << schedule::canonical_string(c) << "\n"
                              << r.message << "\n"
                              << r.kernel.dump(1);
    return true;
  };
  // kernel.stream_depth and kernel.stream_held act only with the registers stream: every value runs
  // with it (a value the rotation pairs only with variants that do not lower runs on the first
  // registers variant that ran; a held count with a depth that holds it).
  std::set<int> depths_ran, held_ran;
  std::optional<schedule::ScheduleConfig> registers_ran;
  for (size_t i = 0; i < n; ++i) {
    for (size_t shift = 0; shift < 2; ++shift) {  // a second pass pairs the values differently
      schedule::ScheduleConfig c;
      size_t knob_index = 0;
      for (const auto& k : schedule::knob_specs()) {
        const auto& v = k.choices[(i + shift * knob_index++) % k.choices.size()];
        std::string e;
        schedule::set_knob(&c, k.path, v, &e);
      }
      // Staged attention and the combine in O need the registers weight stream
      // (schedule::knob_conflict): a ring variant keeps the register path, so it still runs.
      if (c.kernel.weight_stream == schedule::WeightStream::kSmemRing) {
        c.kernel.attention = schedule::AttentionPath::kRegisters;
        c.fusion.combine_into_o = false;    // likewise
        c.fusion.attention_into_o = false;  // likewise
        c.kernel.stream_depth = 2;          // likewise (the ring keeps no chunks in registers)
        c.kernel.stream_held = 0;           // likewise
        c.kernel.stream_held_every = 2;     // likewise (the default)
      }
      // The chunks held back until after the wait are some of those in flight.
      c.kernel.stream_held = std::min(c.kernel.stream_held, c.kernel.stream_depth);
      if (c.kernel.stream_held == 0) c.kernel.stream_held_every = 2;  // it picks held blocks
      // The attention in O removes the attention tasks, so their knobs must be at their defaults
      // (schedule::knob_conflict): the second pass sets them so, the first turns the fusion off.
      if (c.fusion.attention_into_o && shift == 0) c.fusion.attention_into_o = false;
      if (c.fusion.attention_into_o) {
        c.tiling.attn_kv_partitions = 1;
        c.tiling.attn_q_heads_per_task = 0;
        c.tiling.gemv_k_split = 1;
        c.kernel.attention = schedule::AttentionPath::kRegisters;
        c.fusion.combine_into_o = false;
        c.dependencies.attention_to_o = schedule::Granularity::kPerOp;
      }
      // Pairings the rotation makes impossible (schedule::knob_conflict) drop the dependent knob,
      // so that most variants lower.
      if (c.fusion.combine_into_o &&
          (c.tiling.attn_kv_partitions <= 1 || c.tiling.gemv_k_split != 1 ||
           c.kernel.weight_stream != schedule::WeightStream::kRegisters))
        c.fusion.combine_into_o = false;
      if (c.tiling.qkv_rope_pairs && (c.tiling.gemv_k_split != 1 || !c.fusion.rope_kv_into_qkv ||
                                      c.kernel.weight_stream != schedule::WeightStream::kRegisters))
        c.tiling.qkv_rope_pairs = false;
      if (c.pipeline.tagged_inputs && !schedule::knob_conflict(c).empty())
        c.pipeline.tagged_inputs = false;
      if (c.kernel.silu_stage == schedule::SiluStage::kCopies &&
          !schedule::knob_conflict(c).empty())
        c.kernel.silu_stage = schedule::SiluStage::kRegisters;
      // The cap on the ring's pages in flight needs the ring and stays below its pages.
      if (c.kernel.weight_stream != schedule::WeightStream::kSmemRing) c.smem.inflight_pages = 0;
      if (c.smem.inflight_pages >= c.smem.pages) c.smem.inflight_pages = c.smem.pages - 1;
      if (!run(c) || c.kernel.weight_stream != schedule::WeightStream::kRegisters) continue;
      depths_ran.insert(c.kernel.stream_depth);
      held_ran.insert(c.kernel.stream_held);
      if (!registers_ran) registers_ran = c;
    }
  }
  ASSERT_TRUE(registers_ran.has_value());
  for (int depth : {2, 3, 4}) {
    if (depths_ran.count(depth)) continue;
    schedule::ScheduleConfig c = *registers_ran;
    c.kernel.stream_depth = depth;
    if (run(c)) depths_ran.insert(depth);
  }
  for (int held : {0, 1, 2, 3, 4}) {
    if (held_ran.count(held)) continue;
    schedule::ScheduleConfig c = *registers_ran;
    c.kernel.stream_depth = std::max(held, 2);
    c.kernel.stream_held = held;
    if (run(c)) held_ran.insert(held);
  }
  EXPECT_GE(ran, 3);
  EXPECT_EQ(depths_ran, (std::set<int>{2, 3, 4}));
  EXPECT_EQ(held_ran, (std::set<int>{0, 1, 2, 3, 4}));
  for (int every : {1, 2, 4}) {  // some or all blocks hold back: the same logits
    schedule::ScheduleConfig c = *registers_ran;
    c.kernel.stream_held = 1;
    c.kernel.stream_held_every = every;
    EXPECT_TRUE(run(c)) << every;
  }
  // The SiLU x up input copied into shared memory (the down GEMVs streamed, whole rows, untagged).
  for (auto stage : {schedule::SiluStage::kRegisters, schedule::SiluStage::kCopies}) {
    schedule::ScheduleConfig c = *registers_ran;
    c.fusion.silu_mul_into_down = true;
    c.tiling.gemv_k_split = 1;
    c.pipeline.tagged_inputs = false;
    c.kernel.silu_stage = stage;
    EXPECT_TRUE(run(c)) << schedule::canonical_string(c);
  }
}

/// A toy model with a wider head (heads x head_dim = hidden): a lane owns 2 or 4 head dims, and a
/// bf16 key row is 8 or 16 vector loads (2 for the toy's 16-dim head).
schedule::ModelShape wide_head_toy(int head_dim) {
  schedule::ModelShape s = toy_shape(schedule::DType::kBF16);
  s.name = "toy-hd" + std::to_string(head_dim);
  s.head_dim = head_dim;
  s.heads = 2;
  s.kv_heads = 1;
  s.hidden = 2 * head_dim;
  s.ffn = 2 * s.hidden;
  s.max_seq = 256;  // a partition of more than attn_short's 128 keys (registers builds)
  return s;
}

// The long-partition attention paths (more keys than attn_short takes: 32 in staged builds, 128
// in registers builds; positions 40, 100 and 200, in one partition or two, one query head per task
// or the whole group; kernel.attention registers and staged) match the eager reference at head
// dims 64 and 128, the llama-1b and `small` head widths the toy models do not cover. In registers
// builds positions 40 and 100 take attn_short with several rounds of keys a warp, and position 200
// in one partition the key-per-lane path. Staged with the default 2 x 16 KiB of pages, a round
// holds 96 keys at head dim 64 and 48 at 128: position 100 in one partition takes two and three
// rounds, the last one holding the step's own key (read after the wait, not copied); one page (16
// KiB) holds 32 keys at head dim 64 and too few at 128, where attn_short takes the partition. The
// last case runs staged partitions from the dynamic queue.
TEST(GpuVm, LongAttentionMatchesEagerAtWideHeads) {
  const std::vector<int> positions = {0, 40, 100, 200};
  struct Case {
    int q_heads, partitions;
    schedule::AttentionPath path;
    int pages;
    bool dynamic;
  };
  const Case cases[] = {{1, 1, schedule::AttentionPath::kRegisters, 2, false},
                        {0, 2, schedule::AttentionPath::kRegisters, 2, false},
                        {1, 1, schedule::AttentionPath::kStaged, 2, false},
                        {0, 2, schedule::AttentionPath::kStaged, 2, false},
                        {0, 1, schedule::AttentionPath::kStaged, 1, false},
                        {0, 2, schedule::AttentionPath::kStaged, 2, true}};
  for (int head_dim : {64, 128}) {
    const schedule::Weights w = schedule::generate_weights(wide_head_toy(head_dim), 7);
    for (const Case& k : cases) {
      const int q_heads = k.q_heads, partitions = k.partitions;
      schedule::ScheduleConfig c;
      c.tiling.attn_q_heads_per_task = q_heads;
      c.tiling.attn_kv_partitions = partitions;
      c.kernel.attention = k.path;
      c.smem.pages = k.pages;
      if (k.dynamic) c.assignment.policy = schedule::AssignPolicy::kDynamic;
      std::string err;
      const auto offline = schedule::lower(w.shape, *schedule::find_target("h100"), c, &err);
      ASSERT_TRUE(offline) << head_dim << ": " << err;  // the shape lowers, GPU or not
      std::string why;
      if (!eval::gpu_available(&why)) GTEST_SKIP() << why;
      const Refs refs = eager_refs(w, positions);
      const GpuTrialResult r = eval::run_gpu_trial(lower_or_die(w.shape, c), w, refs.tokens,
                                                   refs.logits, positions, quick());
      EXPECT_EQ(r.status, "ok") << w.shape.name << " q_heads " << q_heads << " partitions "
                                << partitions << " staged "
                                << (k.path == schedule::AttentionPath::kStaged) << " pages "
                                << k.pages << " dynamic " << k.dynamic << ": " << r.message << "\n"
                                << r.kernel.dump(1);
      EXPECT_TRUE(r.argmax_match) << w.shape.name;
    }
  }
}

// fusion.combine_into_o on the device: the streamed O GEMV merges the partitions' records in its
// input load (stream_stage_combine), at positions where every partition holds keys and where some
// are empty, at head dims 16, 64 and 128, in static and dynamic queues, beside both attention
// paths. With one 4 KiB page the records come in rounds (head dim 128, 4 partitions: two a
// round; head dim 64, 8 partitions: six, then a short round of two); otherwise all in one.
TEST(GpuVm, CombineInOMatchesEager) {
  MS_REQUIRE_GPU();
  const std::vector<int> positions = {0, 2, 9, 100};
  struct Case {
    int head_dim, partitions, pages, page_bytes;
    schedule::AttentionPath path;
    bool dynamic;
  };
  const Case cases[] = {{16, 4, 2, 16384, schedule::AttentionPath::kRegisters, false},
                        {16, 2, 2, 16384, schedule::AttentionPath::kRegisters, true},
                        {64, 4, 2, 16384, schedule::AttentionPath::kStaged, false},
                        {64, 8, 1, 4096, schedule::AttentionPath::kRegisters, false},
                        {128, 4, 1, 4096, schedule::AttentionPath::kRegisters, true},
                        {128, 2, 2, 16384, schedule::AttentionPath::kStaged, true}};
  for (const Case& k : cases) {
    const schedule::Weights w = schedule::generate_weights(
        k.head_dim == 16 ? toy_shape(schedule::DType::kBF16) : wide_head_toy(k.head_dim), 13);
    const Refs refs = eager_refs(w, positions);
    schedule::ScheduleConfig c;
    c.tiling.attn_kv_partitions = k.partitions;
    c.fusion.combine_into_o = true;
    c.kernel.attention = k.path;
    c.smem.pages = k.pages;
    c.smem.page_bytes = k.page_bytes;
    if (k.dynamic) c.assignment.policy = schedule::AssignPolicy::kDynamic;
    const schedule::Program p = lower_or_die(w.shape, c);
    const std::string name = w.shape.name + " partitions " + std::to_string(k.partitions) +
                             " smem " + std::to_string(k.pages * k.page_bytes) + " staged " +
                             std::to_string(k.path == schedule::AttentionPath::kStaged) +
                             " dynamic " + std::to_string(k.dynamic);
    int combining = 0;
    for (const auto& t : p.tasks) combining += (t.flags & ms_abi::kFlagCombinePrologue) != 0;
    ASSERT_GT(combining, 0) << name;
    const GpuTrialResult r =
        eval::run_gpu_trial(p, w, refs.tokens, refs.logits, positions, quick());
    EXPECT_EQ(r.status, "ok") << name << ": " << r.message << "\n" << r.kernel.dump(1);
    EXPECT_TRUE(r.argmax_match) << name;
  }
}

// fusion.attention_into_o on the device: every streamed O GEMV attends all heads in its input
// load (stream_stage_attention) at positions with one key, a short history and one past a key
// batch, at head dims 16, 64 and 128 (one and two dims per lane), in static and dynamic queues.
TEST(GpuVm, AttentionInOMatchesEager) {
  MS_REQUIRE_GPU();
  const std::vector<int> positions = {0, 1, 2, 9, 100};
  for (const int head_dim : {16, 64, 128}) {
    for (const bool dynamic : {false, true}) {
      const schedule::Weights w = schedule::generate_weights(
          head_dim == 16 ? toy_shape(schedule::DType::kBF16) : wide_head_toy(head_dim), 17);
      const Refs refs = eager_refs(w, positions);
      schedule::ScheduleConfig c;
      c.fusion.attention_into_o = true;
      if (dynamic) c.assignment.policy = schedule::AssignPolicy::kDynamic;
      const schedule::Program p = lower_or_die(w.shape, c);
      const std::string name = w.shape.name + " dynamic " + std::to_string(dynamic);
      int attending = 0;
      for (const auto& t : p.tasks) attending += (t.flags & ms_abi::kFlagAttentionPrologue) != 0;
      ASSERT_GT(attending, 0) << name;
      const GpuTrialResult r =
          eval::run_gpu_trial(p, w, refs.tokens, refs.logits, positions, quick());
      EXPECT_EQ(r.status, "ok") << name << ": " << r.message << "\n" << r.kernel.dump(1);
      EXPECT_TRUE(r.argmax_match) << name;
    }
  }
}

// kernel.rows_per_warp 3 (groups of three rows, so a tile whose rows are not a multiple of three
// ends in a short group that repeats its last row) on the streamed GEMV with RoPE pairs and the
// argmax records, at stream depths 2 and 3, head dims 16 and 64: logits match the eager reference.
TEST(GpuVm, ThreeRowsAWarpMatchEager) {
  MS_REQUIRE_GPU();
  const std::vector<int> positions = {0, 1, 9, 100};
  for (const int head_dim : {16, 64}) {
    const schedule::Weights w = schedule::generate_weights(
        head_dim == 16 ? toy_shape(schedule::DType::kBF16) : wide_head_toy(head_dim), 23);
    const Refs refs = eager_refs(w, positions);
    for (const int depth : {2, 3}) {
      schedule::ScheduleConfig c;
      c.kernel.rows_per_warp = 3;
      c.kernel.unroll = 4;
      c.kernel.stream_depth = depth;
      c.kernel.weight_load = schedule::WeightLoad::kLdgStream;
      c.pipeline.prefetch_depth = 0;
      c.tiling.gemv_rows_per_task = 0;
      c.tiling.lm_head_rows_per_task = 0;
      c.tiling.attn_q_heads_per_task = 1;
      c.tiling.qkv_rope_pairs = true;
      c.fusion.argmax_into_lm_head = true;
      const schedule::Program p = lower_or_die(w.shape, c);
      const std::string name = w.shape.name + " depth " + std::to_string(depth);
      bool short_group = false;
      for (const auto& t : p.tasks)
        short_group |= t.opcode == ms_abi::kGemv && ms_abi::task_rows(t) % 3 != 0;
      EXPECT_TRUE(short_group) << name;
      const GpuTrialResult r =
          eval::run_gpu_trial(p, w, refs.tokens, refs.logits, positions, quick());
      EXPECT_EQ(r.status, "ok") << name << ": " << r.message << "\n" << r.kernel.dump(1);
      EXPECT_TRUE(r.argmax_match) << name;
    }
  }
}

// pipeline.tagged_inputs on the device: gate/up, down, QKV past layer 0 and the LM head read
// tagged words (abi/abi.h, Tagged words) written by O, gate/up and down, start at 7/8 of their
// producers and acquire the rest before their writes; static and dynamic queues, with RoPE pairs
// and the argmax records, over several steps (each step's tag differs); logits match the eager
// reference and the argmax is the eager one.
TEST(GpuVm, TaggedInputsMatchEager) {
  MS_REQUIRE_GPU();
  const std::vector<int> positions = {0, 1, 9, 100};
  for (const int head_dim : {16, 64}) {
    const schedule::Weights w = schedule::generate_weights(
        head_dim == 16 ? toy_shape(schedule::DType::kBF16) : wide_head_toy(head_dim), 23);
    const Refs refs = eager_refs(w, positions);
    for (const char* patch : {R"({})", R"({"assignment": {"policy": "dynamic"}})",
                              R"({"tiling": {"qkv_rope_pairs": true},
                                  "fusion": {"argmax_into_lm_head": true},
                                  "smem": {"pages": 5, "page_bytes": 32768}})"}) {
      nlohmann::json j = nlohmann::json::parse(patch);
      j["pipeline"]["tagged_inputs"] = true;
      std::string err;
      const auto c = schedule::parse_config(j, &err);
      ASSERT_TRUE(c) << err;
      const schedule::Program p = lower_or_die(w.shape, *c);
      const std::string name = w.shape.name + " " + j.dump();
      int tagged = 0;
      for (const auto& t : p.tasks) tagged += (t.flags & ms_abi::kFlagTagIn) != 0;
      ASSERT_GT(tagged, 0) << name;
      const GpuTrialResult r =
          eval::run_gpu_trial(p, w, refs.tokens, refs.logits, positions, quick());
      EXPECT_EQ(r.status, "ok") << name << ": " << r.message << "\n" << r.kernel.dump(1);
      EXPECT_TRUE(r.argmax_match) << name;
    }
  }
}

// fusion.reduce_by_last_arriver on the device: the attention combines and the argmax run on the
// block whose signal completes their wait (signal_arrive, run_chained), in static and dynamic
// queues and in a weight-ring build, at positions where every partition holds keys and where some
// are empty; logits match the eager reference and the argmax is the eager one.
TEST(GpuVm, LastArriverReductionsMatchEager) {
  MS_REQUIRE_GPU();
  const schedule::Weights w = schedule::generate_weights(toy_shape(schedule::DType::kBF16), 11);
  const std::vector<int> positions = {0, 2, 9, 60};
  const Refs refs = eager_refs(w, positions);
  for (const char* patch : {R"({"tiling": {"attn_kv_partitions": 4, "attn_q_heads_per_task": 1}})",
                            R"({"tiling": {"attn_kv_partitions": 2},
                                "fusion": {"argmax_into_lm_head": true},
                                "assignment": {"policy": "dynamic"}})",
                            R"({"tiling": {"attn_kv_partitions": 4},
                                "kernel": {"weight_stream": "smem_ring"}})"}) {
    nlohmann::json j = nlohmann::json::parse(patch);
    j["fusion"]["reduce_by_last_arriver"] = true;
    std::string err;
    const auto c = schedule::parse_config(j, &err);
    ASSERT_TRUE(c) << err;
    const schedule::Program p = lower_or_die(w.shape, *c);
    size_t queued = 0;
    for (const auto& q : p.queues) queued += q.size();
    ASSERT_LT(queued, p.tasks.size()) << j.dump();  // some tasks are chained
    const GpuTrialResult r =
        eval::run_gpu_trial(p, w, refs.tokens, refs.logits, positions, quick());
    EXPECT_EQ(r.status, "ok") << j.dump() << ": " << r.message << "\n" << r.kernel.dump(1);
    EXPECT_TRUE(r.argmax_match) << j.dump();
  }
}

/// Each ring config patch of `patches` lowered for `w`'s model runs on the GPU and matches the
/// eager reference at positions 0 and 9, within the static shared-memory bound; with
/// `whole_rows`, the model's rows are whole ring segments (abi/ring.h).
void expect_ring_patches_match_eager(const schedule::Weights& w,
                                     const std::vector<nlohmann::json>& patches, bool whole_rows) {
  const std::vector<int> positions = {0, 9};
  const Refs refs = eager_refs(w, positions);
  for (nlohmann::json patch : patches) {
    patch["kernel"]["weight_stream"] = "smem_ring";
    std::string err;
    const auto c = schedule::parse_config(patch, &err);
    ASSERT_TRUE(c) << err;
    const schedule::Program p = lower_or_die(w.shape, *c);
    ASSERT_TRUE(p.build.weight_ring());
    if (whole_rows) {
      ASSERT_GT(ms_abi::ring_seg_vecs(p.model), 0u);
    }
    const GpuTrialResult r =
        eval::run_gpu_trial(p, w, refs.tokens, refs.logits, positions, quick());
    EXPECT_EQ(r.status, "ok") << w.shape.name << " " << schedule::dtype_name(w.shape.dtype) << " "
                              << patch.dump() << ": " << r.message << "\n"
                              << r.kernel.dump(1);
    EXPECT_TRUE(r.argmax_match) << patch.dump();
    EXPECT_LE(r.kernel.value("static_smem_bytes", 0),
              schedule::kernel_static_smem_bound(p.launch.threads_per_block,
                                                 static_cast<int>(p.model.head_dim)));
  }
}

TEST(GpuVm, WeightRingMatchesEager) {
  MS_REQUIRE_GPU();
  // Ring shapes at both ends: one compute warp per tiny page, many warps and column chunks, a
  // split-K tile, per-slice edges and several blocks per SM; the loader capped at one page in
  // flight and at 4 of 6 (smem.inflight_pages).
  const std::vector<nlohmann::json> patches = {
      {{"smem", {{"pages", 1}, {"page_bytes", 4096}}}, {"launch", {{"threads_per_block", 128}}}},
      {{"smem", {{"pages", 4}, {"page_bytes", 16384}}}, {"launch", {{"threads_per_block", 512}}}},
      {{"smem", {{"pages", 2}, {"page_bytes", 8192}}},
       {"tiling", {{"gemv_k_split", 2}, {"gemv_rows_per_task", 16}}},
       {"kernel", {{"vector_bytes", 8}}}},
      {{"smem", {{"pages", 6}, {"page_bytes", 4096}}},
       {"launch", {{"blocks_per_sm", 2}}},
       {"dependencies", {{"gate_up_to_down", "per_slice"}, {"residual", "per_slice"}}}},
      {{"smem", {{"pages", 2}, {"page_bytes", 4096}, {"inflight_pages", 1}}},
       {"launch", {{"threads_per_block", 160}}}},
      {{"smem", {{"pages", 6}, {"page_bytes", 8192}, {"inflight_pages", 4}}},
       {"tiling", {{"gemv_k_split", 2}}}},
  };
  for (schedule::DType dtype : {schedule::DType::kBF16, schedule::DType::kF32}) {
    for (const char* preset : {"toy", "toy-2L"}) {
      schedule::ModelShape shape = *schedule::find_preset(preset);
      shape.dtype = dtype;
      expect_ring_patches_match_eager(schedule::generate_weights(shape, 11), patches, false);
    }
  }
}

TEST(GpuVm, WholeRowRingMatchesEager) {
  MS_REQUIRE_GPU();
  // A shape whose rows are whole ring segments (abi/ring.h: 2 vectors per lane for bf16, 4 for
  // fp32), so every full-row tile takes the one-copy-per-page path: down has 3 column blocks per
  // row (partial sums added in order), the fused QKV tiles are whole heads, a split-K config
  // mixes in row-piece tiles, and the last caps the loader at 2 pages in flight.
  schedule::ModelShape shape = *schedule::find_preset("toy-2L");
  shape.name = "ring-rows";
  shape.hidden = 512;
  shape.heads = 8;
  shape.kv_heads = 2;
  shape.head_dim = 64;
  shape.ffn = 1536;
  shape.vocab = 1000;
  const std::vector<nlohmann::json> patches = {
      {{"smem", {{"pages", 4}, {"page_bytes", 32768}}},
       {"launch", {{"threads_per_block", 288}}},
       {"tiling", {{"gemv_rows_per_task", 0}, {"lm_head_rows_per_task", 0}}}},
      {{"smem", {{"pages", 2}, {"page_bytes", 4096}}}, {"launch", {{"threads_per_block", 384}}}},
      {{"smem", {{"pages", 2}, {"page_bytes", 65536}}},
       {"launch", {{"threads_per_block", 160}}},
       {"tiling", {{"gemv_rows_per_task", 16}}}},
      {{"smem", {{"pages", 5}, {"page_bytes", 16384}}},
       {"launch", {{"threads_per_block", 544}}},
       {"tiling", {{"gemv_k_split", 2}, {"gemv_rows_per_task", 0}}},
       {"dependencies", {{"gate_up_to_down", "per_slice"}}}},
      {{"smem", {{"pages", 4}, {"page_bytes", 16384}, {"inflight_pages", 2}}},
       {"tiling", {{"gemv_rows_per_task", 0}}}},
  };
  for (schedule::DType dtype : {schedule::DType::kBF16, schedule::DType::kF32}) {
    shape.dtype = dtype;
    expect_ring_patches_match_eager(schedule::generate_weights(shape, 13), patches, true);
  }
}

TEST(GpuVm, DeadlockingProgramEndsInHangWithDumpAndTheNextTrialRuns) {
  MS_REQUIRE_GPU();
  eval::EvaluatorOptions o;
  o.model = "toy";
  o.gpu = "auto";
  o.device = "gpu";
  o.positions = {0, 3};
  o.gpu_options = quick();
  o.gpu_options.hang_timeout_s = 1.0;
  o.skip_validation = true;  // test-only: the deadlock must reach the GPU
  std::string err;
  auto ev = eval::TrialEvaluator::create(o, &err);
  ASSERT_TRUE(ev) << err;
  schedule::Program bad = lower_or_die(ev->shape(), schedule::ScheduleConfig{});
  // The first task of queue 0 (the embedding) waits for the last task that signals anything (it
  // depends on the embedding through the whole step): a cycle.
  uint32_t last = 0;
  for (uint32_t t = 0; t < bad.tasks.size(); ++t) {
    if (bad.tasks[t].signal_increment != 0) last = t;
  }
  ASSERT_NE(bad.tasks[last].signal_increment, 0u);
  ms_abi::Instr& first = bad.tasks[bad.queues[0][0]];
  const uint32_t begin = static_cast<uint32_t>(bad.waits.size());
  for (uint32_t i = 0; i < first.wait_count; ++i)
    bad.waits.push_back(bad.waits[first.wait_begin + i]);
  bad.waits.push_back(
      {bad.tasks[last].signal_counter, bad.counter_totals[bad.tasks[last].signal_counter]});
  first.wait_begin = begin;
  first.wait_count += 1;

  const auto t0 = std::chrono::steady_clock::now();
  const eval::Verdict hung = ev->evaluate_program(bad, "deadlock");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(hung.status, "hang");
  EXPECT_FALSE(hung.correct);
  EXPECT_FALSE(hung.latency_us.has_value());
  EXPECT_LT(secs, 15.0);
  const std::string dump = hung.diagnostics.dump();
  EXPECT_NE(dump.find("timed_out"), std::string::npos) << dump;
  EXPECT_NE(dump.find("threshold"), std::string::npos) << dump;
  EXPECT_NE(dump.find("queue_index"), std::string::npos) << dump;

  const eval::Verdict next = ev->evaluate(schedule::ScheduleConfig{});
  EXPECT_EQ(next.status, "ok") << eval::to_json(next).dump(1);
  EXPECT_TRUE(next.correct);
  EXPECT_EQ(next.latency_kind, "measured-gpu");
}

TEST(GpuVm, GridThatIsNotCoResidentIsRejectedWithoutLaunch) {
  MS_REQUIRE_GPU();
  const schedule::Weights w = schedule::generate_weights(toy_shape(schedule::DType::kF32), 1);
  schedule::Program p = lower_or_die(w.shape, schedule::ScheduleConfig{});
  std::string err;
  const auto dev = device_info(&err);
  ASSERT_TRUE(dev) << err;
  p.launch.grid_blocks = dev->num_sms * 64;  // never co-resident at 256 threads
  bool rejected = false;
  auto vm = GpuVm::create(p, w, GpuVmOptions{}, &err, &rejected);
  EXPECT_FALSE(vm);
  EXPECT_TRUE(rejected);
  EXPECT_NE(err.find("not co-resident"), std::string::npos) << err;
}

TEST(GpuVm, SharingTheKvCacheOfAnotherLayoutIsRefused) {
  MS_REQUIRE_GPU();
  const schedule::Weights fp32 = schedule::generate_weights(toy_shape(schedule::DType::kF32), 1);
  const schedule::Weights bf16 = schedule::generate_weights(toy_shape(schedule::DType::kBF16), 1);
  const schedule::Program a = lower_or_die(fp32.shape, schedule::ScheduleConfig{});
  const schedule::Program b = lower_or_die(bf16.shape, schedule::ScheduleConfig{});
  std::string err;
  auto owner = GpuVm::create(a, fp32, GpuVmOptions{}, &err, nullptr);
  ASSERT_TRUE(owner) << err;
  bool rejected = true;
  auto other = GpuVm::create_sharing_kv(b, bf16, GpuVmOptions{}, *owner, &err, &rejected);
  EXPECT_FALSE(other);
  EXPECT_FALSE(rejected);
  EXPECT_NE(err.find("lays out the KV cache unlike"), std::string::npos) << err;
}

TEST(CublasBaseline, MatchesEagerWithinBf16ActivationRounding) {
  MS_REQUIRE_GPU();
  const schedule::Weights w = schedule::generate_weights(toy_shape(schedule::DType::kBF16), 2);
  const std::vector<int> positions = {0, 4};
  const Refs refs = eager_refs(w, positions);
  std::string err;
  auto base = eval::CublasBaseline::create(w, &err);
  ASSERT_TRUE(base) << err;
  size_t next = 0;
  for (int p = 0; p <= positions.back(); ++p) {
    const auto logits = base->step(refs.tokens[static_cast<size_t>(p)], p);
    if (positions[next] != p) continue;
    const eval::Comparison c = eval::compare_logits(logits, refs.logits[next], w.shape.dtype);
    EXPECT_TRUE(c.finite);
    EXPECT_LT(c.rel_err, 5e-2) << "position " << p;
    EXPECT_EQ(base->last_argmax(), eval::argmax(logits));
    ++next;
  }
  EXPECT_GT(base->time_step_us(refs.tokens[0], 0, true), 0.0);
}

/// The graph-pdl baseline against eager, filled step by step: positions under 32 keys use one
/// attention split, later ones several (the split-KV combine then merges partial softmaxes).
void expect_graph_pdl_matches_eager(const schedule::Weights& w, const std::vector<int>& positions) {
  const Refs refs = eager_refs(w, positions);
  std::string err;
  auto base = eval::GraphPdlBaseline::create(w, &err);
  ASSERT_TRUE(base) << err;
  EXPECT_EQ(base->info().value("kernels_per_step", 0), 2 + 5 * w.shape.layers) << base->info();
  size_t next = 0;
  for (int p = 0; p <= positions.back(); ++p) {
    const auto logits = base->step(refs.tokens[static_cast<size_t>(p)], p);
    if (positions[next] != p) continue;
    const eval::Comparison c = eval::compare_logits(logits, refs.logits[next], w.shape.dtype);
    EXPECT_TRUE(c.pass) << w.shape.name << " position " << p << ": rel_err " << c.rel_err
                        << ", max_abs_err " << c.max_abs_err << ", argmax " << c.argmax_match;
    EXPECT_EQ(base->last_argmax(), eval::argmax(logits)) << "position " << p;
    ++next;
  }
  EXPECT_GT(base->time_step_us(refs.tokens[0], positions.back(), true), 0.0);
  // The timeline: every launch stamped in order, and the plain graph back afterwards.
  const int last = positions.back();
  const auto tl = base->timeline(refs.tokens[static_cast<size_t>(last)], last);
  ASSERT_TRUE(tl);
  ASSERT_EQ((*tl)["kernels"].size(), static_cast<size_t>(2 + 5 * w.shape.layers));
  for (const auto& k : (*tl)["kernels"]) {
    EXPECT_LE(k["start_us"].get<double>(), k["first_wait_us"].get<double>()) << k;
    EXPECT_LE(k["first_wait_us"].get<double>(), k["last_wait_us"].get<double>()) << k;
    EXPECT_LE(k["last_wait_us"].get<double>(), k["end_us"].get<double>()) << k;
  }
  EXPECT_EQ((*tl)["by_kernel"]["ms_pdl_lm_head"]["launches"], 1);
  EXPECT_GT((*tl)["step_us"].get<double>(), 0.0);
  const auto again = base->step(refs.tokens[static_cast<size_t>(last)], last);
  EXPECT_TRUE(eval::compare_logits(again, refs.logits.back(), w.shape.dtype).pass);
}

TEST(GraphPdlBaseline, MatchesEagerOnToyInBothDtypes) {
  MS_REQUIRE_GPU();
  for (schedule::DType dtype : {schedule::DType::kF32, schedule::DType::kBF16}) {
    SCOPED_TRACE(schedule::dtype_name(dtype));
    // toy: 128 positions over 2 KV heads, so past position 1 every split holds a key or more.
    expect_graph_pdl_matches_eager(schedule::generate_weights(toy_shape(dtype), 2), {0, 1, 5, 70});
  }
  // An odd vocabulary: the LM head's last task holds a lone row.
  schedule::ModelShape odd = toy_shape(schedule::DType::kBF16);
  odd.vocab += 1;
  expect_graph_pdl_matches_eager(schedule::generate_weights(odd, 4), {0, 40});
}

TEST(GraphPdlBaseline, MatchesEagerOnSmall) {
  MS_REQUIRE_GPU();
  expect_graph_pdl_matches_eager(schedule::generate_weights(*schedule::find_preset("small"), 0),
                                 {0, 3, 200});
}

/// The default program of a toy bf16 model with the eager logits at positions 0 and 2: the inputs
/// of the trials below, which differ in their options alone.
struct ToyTrial {
  schedule::Weights w = schedule::generate_weights(toy_shape(schedule::DType::kBF16), 3);
  std::vector<int> positions = {0, 2};
  Refs refs = eager_refs(w, positions);
  schedule::Program p = lower_or_die(w.shape, schedule::ScheduleConfig{});

  GpuTrialResult run(const eval::GpuTrialOptions& o) const {
    return eval::run_gpu_trial(p, w, refs.tokens, refs.logits, positions, o);
  }
};

TEST(GraphPdlBaseline, TheTrialTimesEveryBaselineKind) {
  MS_REQUIRE_GPU();
  eval::GpuTrialOptions o = quick();
  o.baselines = eval::baseline_kinds();
  const GpuTrialResult r = ToyTrial{}.run(o);
  ASSERT_EQ(r.status, "ok") << r.message;
  ASSERT_EQ(r.baselines.size(), eval::baseline_kinds().size()) << r.kernel.dump(1);
  for (const auto& b : r.baselines) EXPECT_EQ(b.samples_us.size(), r.samples_us.size()) << b.kind;
  EXPECT_TRUE(r.kernel["baselines"].contains("graph-pdl"));
}

// `--baselines auto` (the loop's default): the trial times graph-pdl alone beside the megakernel
// on a shape graph-pdl runs, and cuBLAS is neither built nor timed.
TEST(GraphPdlBaseline, AutoTimesGraphPdlAlone) {
  MS_REQUIRE_GPU();
  const ToyTrial toy;
  ASSERT_EQ(eval::graph_pdl_misfit(toy.w.shape), "");
  eval::GpuTrialOptions o = quick();
  o.baselines = {"auto"};
  const GpuTrialResult r = toy.run(o);
  ASSERT_EQ(r.status, "ok") << r.message;
  ASSERT_EQ(r.baselines.size(), 1u) << r.kernel.dump(1);
  EXPECT_EQ(r.baselines[0].kind, "graph-pdl");
  EXPECT_EQ(r.baselines[0].samples_us.size(), r.samples_us.size());
  EXPECT_FALSE(r.kernel["baselines"].contains("cublas"));
  EXPECT_TRUE(r.baseline_samples_us.empty());  // the cuBLAS samples: not timed
}

// Trials that share a baseline cache (one evaluator's) build and check each baseline once: the
// second trial reuses them, still times them beside its kernel, and reports the first's checks.
TEST(GraphPdlBaseline, TrialsSharingACacheBuildTheBaselinesOnce) {
  MS_REQUIRE_GPU();
  const ToyTrial toy;
  eval::GpuTrialOptions o = quick();
  o.baselines = eval::baseline_kinds();
  o.baseline_cache = eval::make_baseline_cache();
  const GpuTrialResult first = toy.run(o);
  const GpuTrialResult second = toy.run(o);
  for (const GpuTrialResult* r : {&first, &second}) {
    ASSERT_EQ(r->status, "ok") << r->message;
    ASSERT_EQ(r->baselines.size(), eval::baseline_kinds().size()) << r->kernel.dump(1);
    for (const auto& b : r->baselines)
      EXPECT_EQ(b.samples_us.size(), r->samples_us.size()) << b.kind;
  }
  for (const std::string& kind : eval::baseline_kinds()) {
    EXPECT_FALSE(first.kernel["baselines"][kind]["reused"].get<bool>()) << kind;
    EXPECT_TRUE(second.kernel["baselines"][kind]["reused"].get<bool>()) << kind;
    EXPECT_EQ(second.kernel["baselines"][kind]["checks"],
              first.kernel["baselines"][kind]["checks"]);
  }
}

// GpuTrialOptions::stop_above_us: a trial whose first stop_check_iterations steps have a median
// above the bound stops timing there and says so; one below it times every iteration.
TEST(GpuVm, TimingStopsEarlyAboveTheBoundAndNotBelowIt) {
  MS_REQUIRE_GPU();
  const ToyTrial toy;
  eval::GpuTrialOptions o = quick();
  o.iterations = 40;
  o.baselines = {"graph-pdl"};
  o.stop_above_us = 0.001;  // every step is slower than a nanosecond
  const GpuTrialResult stopped = toy.run(o);
  ASSERT_EQ(stopped.status, "ok") << stopped.message;
  EXPECT_EQ(stopped.samples_us.size(), static_cast<size_t>(o.stop_check_iterations));
  EXPECT_EQ(stopped.baselines[0].samples_us.size(), stopped.samples_us.size());
  ASSERT_TRUE(stopped.kernel.contains("timing_stopped")) << stopped.kernel.dump(1);
  EXPECT_EQ(stopped.kernel["timing_stopped"]["after_iterations"], o.stop_check_iterations);
  EXPECT_EQ(stopped.kernel["iterations"], o.stop_check_iterations);
  o.stop_above_us = 1e9;  // no step is that slow
  const GpuTrialResult full = toy.run(o);
  ASSERT_EQ(full.status, "ok") << full.message;
  EXPECT_EQ(full.samples_us.size(), 40u);
  EXPECT_FALSE(full.kernel.contains("timing_stopped"));
}

TEST(Doctor, StreamReadBandwidthIsPlausible) {
  MS_REQUIRE_GPU();
  std::vector<double> samples;
  std::string err;
  const auto gbs = eval::measure_stream_bandwidth(int64_t{512} << 20, 5, &samples, &err);
  ASSERT_TRUE(gbs) << err;
  EXPECT_EQ(samples.size(), 5u);
  EXPECT_GT(*gbs, 100.0);
  EXPECT_LT(*gbs, 20000.0);
}

}  // namespace
}  // namespace megasched::vm
