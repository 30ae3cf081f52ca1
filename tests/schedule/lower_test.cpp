#include "schedule/lower.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "schedule/search.h"
#include "schedule/validate.h"
#include "tests/h100_target.h"

namespace megasched::schedule {
namespace {

GpuTarget test_target(int num_sms = 132) {
  return testing_support::h100_target(num_sms, "test-gpu");
}

// A shape on which every choice of every knob makes a difference: a KV group of 16 query heads
// (so attn_q_heads_per_task = 8 is not the whole group), GEMVs taller than 256 rows, a vocabulary
// above 2048 rows, and reduction widths divisible by 64 (gemv_k_split = 8 fits).
ModelShape every_knob_shape() {
  ModelShape s;
  s.name = "every-knob";
  s.hidden = 128;
  s.layers = 2;
  s.heads = 32;
  s.kv_heads = 2;
  s.head_dim = 8;
  s.ffn = 256;
  s.vocab = 4096;
  s.max_seq = 64;
  return s;
}

Program lower_ok(const ModelShape& shape, const ScheduleConfig& config,
                 const GpuTarget& target = test_target()) {
  std::string error;
  std::optional<Program> p = lower(shape, target, config, &error);
  EXPECT_TRUE(p.has_value()) << error;
  return p ? *p : Program{};
}

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// Tasks of the default config: embed, per layer (QKV, attention per KV group, O, gate_up, down),
// LM head, argmax.
uint32_t default_task_count(const ModelShape& s) {
  const uint32_t qkv = ceil_div(static_cast<uint32_t>(s.q_dim() + 2 * s.kv_dim()),
                                ceil_div(64, s.head_dim) * s.head_dim);
  const uint32_t per_layer =
      qkv + s.kv_heads + ceil_div(s.hidden, 64) + ceil_div(2 * s.ffn, 64) + ceil_div(s.hidden, 64);
  return 1 + s.layers * per_layer + ceil_div(s.vocab, 512) + 1;
}

TEST(Lowering, DefaultTaskCountsFollowTheTiling) {
  for (const char* name : {"toy", "toy-2L", "small", "llama-1b"}) {
    const ModelShape shape = *find_preset(name);
    const Program p = lower_ok(shape, ScheduleConfig{});
    EXPECT_EQ(p.tasks.size(), default_task_count(shape)) << name;
  }
  EXPECT_EQ(lower_ok(*find_preset("toy"), ScheduleConfig{}).tasks.size(), 13u);
  EXPECT_EQ(lower_ok(*find_preset("llama-1b"), ScheduleConfig{}).tasks.size(), 6269u);
}

TEST(Lowering, EveryKnobChangesProgramOrBuild) {
  const ModelShape shape = every_knob_shape();
  const GpuTarget target = test_target(4);  // fewer blocks than tasks: the policies differ
  const Program base = lower_ok(shape, ScheduleConfig{}, target);
  const std::string base_json = to_json(base).dump();
  int checked = 0;
  for (const KnobSpec& spec : knob_specs()) {
    for (const nlohmann::json& choice : spec.choices) {
      if (choice == spec.default_value || !knob_value_fits(spec.path, choice, shape)) continue;
      ScheduleConfig config;
      // fusion.combine_into_o acts on the combine of KV partitions: compare with partitions on.
      const bool partitioned = spec.path == "fusion.combine_into_o";
      if (partitioned) config.tiling.attn_kv_partitions = 2;
      // smem.inflight_pages caps the weight ring's loader: compare with a ring of more pages than
      // any cap.
      const bool ringed = spec.path == "smem.inflight_pages";
      if (ringed) {
        config.kernel.weight_stream = WeightStream::kSmemRing;
        config.smem.pages = 5;
      }
      // kernel.stream_held holds back some of the chunks in flight, and stream_held_every picks
      // the blocks that hold one back: compare with the deepest stream and one chunk held.
      const bool deep = spec.path == "kernel.stream_held";
      const bool held = spec.path == "kernel.stream_held_every";
      if (deep) config.kernel.stream_depth = 4;
      if (held) config.kernel.stream_held = 1;
      std::string error;
      ASSERT_TRUE(set_knob(&config, spec.path, choice, &error)) << error;
      std::optional<Program> p = lower(shape, target, config, &error);
      ASSERT_TRUE(p.has_value()) << spec.path << "=" << choice.dump() << ": " << error;
      ScheduleConfig reference;
      if (partitioned) reference.tiling.attn_kv_partitions = 2;
      if (deep) reference.kernel.stream_depth = 4;
      if (held) reference.kernel.stream_held = 1;
      if (ringed) {
        reference.kernel.weight_stream = WeightStream::kSmemRing;
        reference.smem.pages = 5;
      }
      const bool differs =
          to_json(*p).dump() != (partitioned || ringed || deep || held
                                     ? to_json(lower_ok(shape, reference, target)).dump()
                                     : base_json);
      EXPECT_TRUE(differs) << spec.path << "=" << choice.dump() << " lowers like the default";
      ++checked;
    }
  }
  EXPECT_GE(checked, 50);
}

TEST(Lowering, RejectsQHeadsThatDoNotDivideTheGroup) {
  ScheduleConfig config;
  config.tiling.attn_q_heads_per_task = 4;  // toy: 2 query heads per KV head
  std::string error;
  EXPECT_FALSE(lower(*find_preset("toy"), test_target(), config, &error).has_value());
  EXPECT_NE(error.find("tiling.attn_q_heads_per_task"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

TEST(Lowering, RejectsKSplitThatBreaksMultiplesOfEight) {
  ScheduleConfig config;
  config.tiling.gemv_k_split = 16;  // toy hidden 64: 4 columns per split
  std::string error;
  EXPECT_FALSE(lower(*find_preset("toy"), test_target(), config, &error).has_value());
  EXPECT_NE(error.find("tiling.gemv_k_split"), std::string::npos) << error;
}

// Structural invariants over many random configs: queues partition the tasks, each queue is in
// topological (ascending id) order, every wait names an earlier op's counter with a reachable
// threshold, counter totals equal the increments, and only the argmax signals nothing.
TEST(Lowering, RandomConfigsGiveWellFormedPrograms) {
  std::mt19937_64 rng(7);
  const GpuTarget target = test_target(4);
  for (const char* name : {"toy", "toy-2L"}) {
    const ModelShape shape = *find_preset(name);
    for (int i = 0; i < 60; ++i) {
      const ScheduleConfig config = random_config(shape, target, rng);
      const Program p = lower_ok(shape, config, target);
      std::vector<int> seen(p.tasks.size(), 0);
      for (const auto& q : p.queues) {
        EXPECT_TRUE(std::is_sorted(q.begin(), q.end()));
        for (uint32_t t : q) ++seen[t];
      }
      std::set<uint32_t> chained;  // a chained task runs on its last arriver's block, unqueued
      for (const ms_abi::Instr& t : p.tasks)
        if (t.chain != 0) chained.insert(t.chain - 1);
      for (uint32_t k : chained) ++seen[k];
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
      std::vector<uint32_t> increments(p.num_counters(), 0);
      std::vector<uint32_t> first_signal(p.num_counters(), UINT32_MAX);
      for (uint32_t t = 0; t < p.tasks.size(); ++t) {
        const ms_abi::Instr& task = p.tasks[t];
        for (uint32_t w = 0; w < task.wait_count; ++w) {
          const ms_abi::Wait& wait = p.waits[task.wait_begin + w];
          ASSERT_LT(wait.counter, p.num_counters());
          EXPECT_LT(first_signal[wait.counter], t) << p.task_label(t);
          EXPECT_LE(wait.threshold, p.counter_totals[wait.counter]);
          EXPECT_GT(wait.threshold, 0u);
        }
        if (task.opcode == ms_abi::kArgmax) {
          EXPECT_EQ(task.signal_increment, 0u);
        } else {
          EXPECT_EQ(task.signal_increment, 1u) << p.task_label(t);
          increments[task.signal_counter] += 1;
          first_signal[task.signal_counter] = std::min(first_signal[task.signal_counter], t);
        }
      }
      EXPECT_EQ(increments, p.counter_totals);
    }
  }
}

TEST(Lowering, RandomConfigsPassTheValidator) {
  std::mt19937_64 rng(11);
  const GpuTarget target = test_target();
  for (const char* name : {"toy", "toy-2L"}) {
    const ModelShape shape = *find_preset(name);
    for (int i = 0; i < 60; ++i) {
      const ScheduleConfig config = i == 0 ? ScheduleConfig{} : random_config(shape, target, rng);
      const ValidationReport report = validate(lower_ok(shape, config, target), target);
      EXPECT_TRUE(report.ok()) << name << " " << canonical_string(config) << ": "
                               << (report.ok() ? "" : report.diagnostics[0].message);
    }
  }
}

// Per attention task: its KV group, how many waits it has and the names of the counters they name,
// each wait for one task (a per-slice QKV tile).
struct AttentionWaits {
  uint32_t group;
  uint32_t waits;
  std::set<std::string> names;
};
std::vector<AttentionWaits> attention_waits(const Program& p) {
  std::vector<AttentionWaits> out;
  for (const ms_abi::Instr& t : p.tasks) {
    if (t.opcode != ms_abi::kAttnPartial) continue;
    AttentionWaits a{t.param0, t.wait_count, {}};
    for (uint32_t w = 0; w < t.wait_count; ++w) {
      EXPECT_EQ(p.waits[t.wait_begin + w].threshold, 1u);
      a.names.insert(p.counter_names[p.waits[t.wait_begin + w].counter]);
    }
    out.push_back(std::move(a));
  }
  return out;
}

TEST(Lowering, PerSliceAttentionWaitsOnlyForTheHeadsItReads) {
  ScheduleConfig config;
  config.tiling.gemv_rows_per_task = 16;  // toy head_dim 16: one QKV tile per head
  config.dependencies.qkv_to_attention = Granularity::kPerSlice;
  const std::vector<AttentionWaits> attention =
      attention_waits(lower_ok(*find_preset("toy"), config));
  ASSERT_EQ(attention.size(), 2u);
  for (const AttentionWaits& a : attention) {
    // Two query heads, the group's K head and its V head: four one-task slices.
    ASSERT_EQ(a.waits, 4u);
    const uint32_t g = a.group;  // QKV tiles: q heads 0-3, k heads 4-5, v heads 6-7
    EXPECT_EQ(a.names, (std::set<std::string>{"L0.qkv[" + std::to_string(2 * g) + "]",
                                              "L0.qkv[" + std::to_string(2 * g + 1) + "]",
                                              "L0.qkv[" + std::to_string(4 + g) + "]",
                                              "L0.qkv[" + std::to_string(6 + g) + "]"}));
  }
}

TEST(Lowering, PerOpWaitIsOneAllJoin) {
  const Program p = lower_ok(*find_preset("toy"), ScheduleConfig{});
  for (const ms_abi::Instr& t : p.tasks) {
    if (t.opcode != ms_abi::kAttnPartial) continue;
    ASSERT_EQ(t.wait_count, 1u);
    const ms_abi::Wait& w = p.waits[t.wait_begin];
    EXPECT_EQ(p.counter_names[w.counter], "L0.qkv");
    EXPECT_EQ(w.threshold, 2u);  // both QKV tiles
  }
}

TEST(Lowering, SplitKAddsPartialsAndOneReducePerTile) {
  ScheduleConfig config;
  config.tiling.gemv_k_split = 4;
  config.dependencies.gate_up_to_down = Granularity::kPerSlice;
  const ModelShape shape = *find_preset("toy");
  const Program p = lower_ok(shape, config);
  int partial_down = 0, reduce_down = 0;
  for (const ms_abi::Instr& t : p.tasks) {
    const OpInfo& op = p.ops[t.op_id];
    if (op.name == "L0.down") {
      ++partial_down;
      EXPECT_TRUE(t.flags & ms_abi::kFlagPartial);
      EXPECT_TRUE(t.flags & ms_abi::kFlagSiluMulPrologue);
      EXPECT_EQ(t.col_end - t.col_begin, 32u);  // ffn 128 / 4
      // Columns [c0, c0 + 32) of gate and of up: one 64-row gate_up tile each.
      EXPECT_EQ(t.wait_count, 2u);
    }
    if (op.name == "L0.down.reduce") {
      ++reduce_down;
      EXPECT_EQ(t.opcode, ms_abi::kGemvReduce);
      EXPECT_EQ(t.param0, 4u);
      EXPECT_TRUE(t.flags & ms_abi::kFlagResidual);
      ASSERT_EQ(t.wait_count, 2u);  // its own four partials, and the residual input
    }
  }
  EXPECT_EQ(partial_down, 4);
  EXPECT_EQ(reduce_down, 1);
}

// fusion.argmax_into_lm_head: every LM-head tile (or, with a k-split, every reduce tile) writes its
// own two-element record after the logits of its rows, and the argmax reads the records, one per
// tile, after the whole LM head.
TEST(Lowering, ArgmaxIntoLmHeadGivesOneRecordPerTile) {
  const ModelShape shape = *find_preset("small");
  for (const int split : {1, 2}) {
    ScheduleConfig config;
    config.fusion.argmax_into_lm_head = true;
    config.tiling.gemv_k_split = split;
    config.tiling.lm_head_rows_per_task = 3000;  // small's 32000 rows: a short last tile
    const Program p = lower_ok(shape, config);
    const uint32_t tiles = ceil_div(static_cast<uint32_t>(shape.vocab), 3000);
    std::set<uint32_t> records;
    uint32_t first = UINT32_MAX, logits = UINT32_MAX;
    for (const ms_abi::Instr& t : p.tasks) {
      const std::string& op = p.ops[t.op_id].name;
      const bool last = split == 1 ? op == "lm_head" : op == "lm_head.reduce";
      if (op.rfind("lm_head", 0) == 0 && !last) {  // the k-split partials carry no record
        EXPECT_FALSE(t.flags & ms_abi::kFlagArgmaxPartial) << op;
        continue;
      }
      if (last) {
        ASSERT_TRUE(t.flags & ms_abi::kFlagArgmaxPartial) << op;
        EXPECT_EQ(t.row_end - t.row_begin,
                  std::min(3000u, static_cast<uint32_t>(shape.vocab) - t.row_begin));
        first = std::min(first, t.aux - 2 * (t.row_begin / 3000));
        EXPECT_TRUE(records.insert(t.aux).second) << "two tiles share a record";
        logits = t.out;
      }
      if (t.opcode == ms_abi::kArgmax) {
        EXPECT_EQ(t.flags, ms_abi::kFlagArgmaxPartial);
        EXPECT_EQ(t.col_end, tiles);
        EXPECT_EQ(t.in, first);
        ASSERT_EQ(t.wait_count, 1u);  // the whole LM head (one per-op counter)
      }
    }
    EXPECT_EQ(records.size(), tiles) << "split " << split;
    EXPECT_EQ(*records.begin(), first);
    EXPECT_EQ(*records.rbegin(), first + 2 * (tiles - 1));
    EXPECT_GE(first, logits + static_cast<uint32_t>(shape.vocab));  // beside the logits
    const ValidationReport report = validate(p, test_target());
    EXPECT_TRUE(report.ok()) << (report.ok() ? "" : report.diagnostics[0].message);
  }
  // Without it the argmax scans the logits.
  const Program plain = lower_ok(shape, ScheduleConfig{});
  EXPECT_EQ(plain.tasks.back().opcode, ms_abi::kArgmax);
  EXPECT_EQ(plain.tasks.back().flags, 0);
  EXPECT_EQ(plain.tasks.back().col_end, static_cast<uint32_t>(shape.vocab));
}

// fusion.reduce_by_last_arriver: every KV partition of a head chunk chains the chunk's combine,
// every LM-head tile chains the argmax; the chained tasks wait once, for all of their chainers, and
// are in no queue. The attention's slice counters are not merged even past 16 chunks (a merged
// counter would let one chunk's last arriver miss another chunk's combine).
TEST(Lowering, LastArriverChainsTheCombinesAndTheArgmax) {
  const ModelShape shape = *find_preset("llama-1b");  // 32 heads: 32 chunks of one head
  for (const int partitions : {1, 4}) {
    ScheduleConfig config;
    config.tiling.attn_kv_partitions = partitions;
    config.tiling.attn_q_heads_per_task = 1;
    config.fusion.reduce_by_last_arriver = true;
    const Program p = lower_ok(shape, config);
    std::vector<uint32_t> chained_by(p.tasks.size(), 0);
    for (const ms_abi::Instr& t : p.tasks)
      if (t.chain != 0) ++chained_by[t.chain - 1];
    std::vector<bool> queued(p.tasks.size(), false);
    for (const auto& q : p.queues)
      for (uint32_t t : q) queued[t] = true;
    size_t combines = 0, argmax = 0;
    for (uint32_t k = 0; k < p.tasks.size(); ++k) {
      const ms_abi::Instr& in = p.tasks[k];
      const bool chained = in.opcode == ms_abi::kAttnCombine || in.opcode == ms_abi::kArgmax;
      EXPECT_EQ(queued[k], !chained) << p.task_label(k);
      if (!chained) {
        EXPECT_EQ(chained_by[k], 0u);
        continue;
      }
      combines += in.opcode == ms_abi::kAttnCombine;
      argmax += in.opcode == ms_abi::kArgmax;
      ASSERT_EQ(in.wait_count, 1u);
      const ms_abi::Wait w = p.waits[in.wait_begin];
      EXPECT_EQ(w.threshold, p.counter_totals[w.counter]);  // all of them
      EXPECT_EQ(chained_by[k], w.threshold) << p.task_label(k);
      if (in.opcode == ms_abi::kAttnCombine) {
        EXPECT_EQ(w.threshold, 4u);
      }
    }
    EXPECT_EQ(combines, partitions > 1 ? 32u * static_cast<size_t>(shape.layers) : 0u);
    EXPECT_EQ(argmax, 1u);
    const ValidationReport report = validate(p, test_target());
    EXPECT_TRUE(report.ok()) << (report.ok() ? "" : report.diagnostics[0].message);
  }
}

TEST(Lowering, ArgmaxIntoLmHeadNeedsAVocabularyItsFloatIndexHolds) {
  ModelShape shape = every_knob_shape();
  shape.vocab = (1 << 24) + 8;
  EXPECT_FALSE(knob_value_fits("fusion.argmax_into_lm_head", true, shape));
  EXPECT_TRUE(knob_value_fits("fusion.argmax_into_lm_head", false, shape));
  ScheduleConfig config;
  config.fusion.argmax_into_lm_head = true;
  std::string error;
  EXPECT_FALSE(lower(shape, test_target(), config, &error).has_value());
  EXPECT_NE(error.find("2^24"), std::string::npos) << error;
  EXPECT_NE(error.find("hint"), std::string::npos) << error;
}

TEST(Lowering, FusedRopeRoundsQkvTilesToWholeHeads) {
  ScheduleConfig config;
  config.tiling.gemv_rows_per_task = 8;
  const Program p = lower_ok(*find_preset("toy"), config);
  for (const ms_abi::Instr& t : p.tasks) {
    if (t.flags & ms_abi::kFlagRopeKv) {
      EXPECT_EQ(t.row_begin % 16, 0u);
      EXPECT_EQ(t.row_end - t.row_begin, 16u);
    }
  }
  config.fusion.rope_kv_into_qkv = false;
  const Program unfused = lower_ok(*find_preset("toy"), config);
  int rope = 0;
  for (const ms_abi::Instr& t : unfused.tasks) rope += t.opcode == ms_abi::kRopeKv ? 1 : 0;
  EXPECT_EQ(rope, 8);  // 4 query heads, 2 key heads, 2 value heads
}

// tiling.qkv_rope_pairs: the fused QKV op in tiles of RoPE pairs, one per block at 0 rows per
// task (llama-1b: 48 heads of 32 pairs, 12 pairs a tile, 128 tiles where whole heads give 48),
// every QKV row produced exactly once, by the task that also produces its rotation partner.
TEST(Lowering, QkvRopePairTilesProduceEveryQkvRowOnceOverTheGrid) {
  const ModelShape shape = *find_preset("llama-1b");
  ScheduleConfig config;
  config.tiling.gemv_rows_per_task = 0;
  config.tiling.qkv_rope_pairs = true;
  const Program p = lower_ok(shape, config);
  const uint32_t hd = static_cast<uint32_t>(shape.head_dim);
  const uint32_t qkv_rows = static_cast<uint32_t>(shape.q_dim() + 2 * shape.kv_dim());
  std::vector<int> produced(qkv_rows, 0);
  int tasks = 0;
  for (const ms_abi::Instr& t : p.tasks) {
    if (p.ops[t.op_id].name != "L0.qkv") continue;
    ++tasks;
    EXPECT_EQ(t.flags & (ms_abi::kFlagRopeKv | ms_abi::kFlagRopePairs),
              ms_abi::kFlagRopeKv | ms_abi::kFlagRopePairs);
    EXPECT_LE(t.row_end - t.row_begin, 12u);
    ASSERT_EQ(ms_abi::task_rows(t), 2 * (t.row_end - t.row_begin));
    for (uint32_t j = 0; j < ms_abi::task_rows(t); ++j) {
      const uint32_t r = ms_abi::task_row(t, j, hd);
      ASSERT_LT(r, qkv_rows);
      ++produced[r];
      EXPECT_EQ(ms_abi::task_row(t, j ^ 1u, hd), r % hd < hd / 2 ? r + hd / 2 : r - hd / 2);
    }
  }
  EXPECT_EQ(tasks, 128);
  EXPECT_EQ(std::count(produced.begin(), produced.end(), 1), static_cast<long>(qkv_rows));
  config.tiling.qkv_rope_pairs = false;
  const Program heads = lower_ok(shape, config);
  int whole_heads = 0;
  for (const ms_abi::Instr& t : heads.tasks) whole_heads += heads.ops[t.op_id].name == "L0.qkv";
  EXPECT_EQ(whole_heads, 48);
}

// fusion.combine_into_o (toy: 4 query heads of 16 dims, 4 partitions): no combine op and no
// attn_out region; every O tile reads the partial records (kFlagCombinePrologue, param2 = the
// partition count) and waits for the attention op's one counter (attention_to_o per_op), which
// every partition task signals, besides the residual's.
TEST(Lowering, CombineIntoOFeedsTheRecordsToEveryOTile) {
  const ModelShape shape = *find_preset("toy");
  ScheduleConfig config;
  config.tiling.attn_kv_partitions = 4;
  config.fusion.combine_into_o = true;
  const Program p = lower_ok(shape, config);
  EXPECT_EQ(p.find_region("L0.attn_out"), nullptr);
  const Region* records = p.find_region("L0.attn_partial");
  ASSERT_NE(records, nullptr);
  int o_tiles = 0, partitions = 0;
  std::set<uint32_t> attention_counters;
  for (const ms_abi::Instr& t : p.tasks) {
    const std::string& op = p.ops[t.op_id].name;
    EXPECT_NE(t.opcode, ms_abi::kAttnCombine) << op;
    if (op == "L0.attn") {
      ++partitions;
      attention_counters.insert(t.signal_counter);
    }
    if (op != "L0.o") continue;
    ++o_tiles;
    EXPECT_EQ(t.flags & ms_abi::kFlagCombinePrologue, ms_abi::kFlagCombinePrologue);
    EXPECT_EQ(t.param2, 4u);
    EXPECT_EQ(t.in, records->begin);
    EXPECT_EQ(t.col_end, static_cast<uint32_t>(shape.q_dim()));
    int on_attention = 0;  // the other wait is the residual's
    for (uint32_t w = 0; w < t.wait_count; ++w) {
      const ms_abi::Wait& wait = p.waits[t.wait_begin + w];
      if (attention_counters.count(wait.counter) == 0) continue;
      ++on_attention;
      EXPECT_EQ(wait.threshold, static_cast<uint32_t>(partitions));
    }
    EXPECT_EQ(on_attention, 1);
  }
  EXPECT_GT(o_tiles, 0);
  EXPECT_EQ(partitions, 4 * shape.kv_heads);  // whole groups per task (attn_q_heads_per_task 0)
  EXPECT_EQ(attention_counters.size(), 1u);
}

// Per-slice QKV -> attention with tiles of pairs: attention waits for exactly the tiles that hold
// pairs of its query heads and of its KV head (toy: 8 pairs a head, 4 a tile).
TEST(Lowering, PerSliceAttentionWaitsForThePairTilesOfItsHeads) {
  ScheduleConfig config;
  config.tiling.gemv_rows_per_task = 8;
  config.tiling.qkv_rope_pairs = true;
  config.dependencies.qkv_to_attention = Granularity::kPerSlice;
  const std::vector<AttentionWaits> attention =
      attention_waits(lower_ok(*find_preset("toy"), config));
  ASSERT_EQ(attention.size(), 2u);
  for (const AttentionWaits& a : attention) {
    // Tiles: q heads 0-3 -> 0-7, k heads 4-5 -> 8-11, v heads 6-7 -> 12-15.
    const uint32_t g = a.group;
    std::set<std::string> want;
    for (uint32_t tile :
         {4 * g, 4 * g + 1, 4 * g + 2, 4 * g + 3, 8 + 2 * g, 9 + 2 * g, 12 + 2 * g, 13 + 2 * g})
      want.insert("L0.qkv[" + std::to_string(tile) + "]");
    EXPECT_EQ(a.waits, 8u);
    EXPECT_EQ(a.names, want);
  }
}

/// The sentence with which lowering and the search's config_fits both refuse `config` on toy (the
/// same sentence, with a hint).
std::string refusal(const ScheduleConfig& config) {
  const ModelShape shape = *find_preset("toy");
  std::string error, why;
  EXPECT_FALSE(lower(shape, test_target(), config, &error).has_value());
  EXPECT_FALSE(config_fits(config, shape, test_target(), &why));
  EXPECT_EQ(error, why);
  EXPECT_NE(error.find("hint:"), std::string::npos) << error;
  return error;
}

TEST(Lowering, QkvRopePairsNeedFusedRopeOneSplitAndTheRegistersBuild) {
  auto error_of = [](void (*edit)(ScheduleConfig*)) {
    ScheduleConfig config;
    config.tiling.qkv_rope_pairs = true;
    edit(&config);
    return refusal(config);
  };
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->fusion.rope_kv_into_qkv = false;
            }).find("needs fusion.rope_kv_into_qkv = true"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->tiling.gemv_k_split = 2;
            }).find("needs tiling.gemv_k_split = 1"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->kernel.weight_stream = WeightStream::kSmemRing;
            }).find("needs kernel.weight_stream = registers"),
            std::string::npos);
}

// kernel.silu_stage = copies: lowering and config_fits refuse it, with the same sentence and a
// hint, where no streamed GEMV would stage a SiLU x up input (the weight ring, the product unfused,
// a k-split, tagged inputs) or where its two inputs (8 x ffn bytes) do not fit the pages; otherwise
// it lowers into the build (MS_SILU_COPIES 1; registers 0).
TEST(Lowering, SiluCopiesNeedTheStreamedDownAndRoomForBothInputs) {
  auto error_of = [](void (*edit)(ScheduleConfig*)) {
    ScheduleConfig config;
    config.kernel.silu_stage = SiluStage::kCopies;
    edit(&config);
    return refusal(config);
  };
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->kernel.weight_stream = WeightStream::kSmemRing;
            }).find("kernel.silu_stage = copies needs kernel.weight_stream = registers"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->fusion.silu_mul_into_down = false;
            }).find("needs fusion.silu_mul_into_down = true"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->tiling.gemv_k_split = 2;
            }).find("kernel.silu_stage = copies needs tiling.gemv_k_split = 1"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->pipeline.tagged_inputs = true;
            }).find("needs pipeline.tagged_inputs = false"),
            std::string::npos);
  const ModelShape toy = *find_preset("toy");
  EXPECT_NE(
      error_of([](ScheduleConfig* c) {
        c->smem.page_bytes = 64;  // toy: ffn 128 floats a input, 1024 bytes for both
        c->smem.pages = 1;
      })
          .find("kernel.silu_stage = copies needs smem.pages x smem.page_bytes >= 8 x ffn = " +
                std::to_string(8 * toy.ffn) + " bytes"),
      std::string::npos);
  ScheduleConfig config;
  EXPECT_EQ(lower_ok(toy, config).build.knob("MS_SILU_COPIES"), 0);
  config.kernel.silu_stage = SiluStage::kCopies;
  EXPECT_EQ(lower_ok(toy, config).build.knob("MS_SILU_COPIES"), 1);
  // llama-1b (ffn 8192): 64 KiB, four pages of 16 KiB; the H200's record has two.
  const ModelShape llama = *find_preset("llama-1b");
  const GpuTarget h200 = *find_target("h200");
  config.smem.pages = 2;
  std::string why;
  EXPECT_FALSE(config_fits(config, llama, h200, &why));
  EXPECT_NE(why.find(">= 8 x ffn = 65536 bytes"), std::string::npos) << why;
  config.smem.pages = 4;
  EXPECT_TRUE(config_fits(config, llama, h200, &why)) << why;
}

// fusion.combine_into_o: lowering and the search's config_fits refuse it, with the same sentence
// and a hint, without KV partitions, with the weight ring, or with a k-split.
TEST(Lowering, CombineIntoONeedsPartitionsOneSplitAndTheRegistersBuild) {
  auto error_of = [](void (*edit)(ScheduleConfig*)) {
    ScheduleConfig config;
    config.fusion.combine_into_o = true;
    config.tiling.attn_kv_partitions = 4;
    edit(&config);
    return refusal(config);
  };
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->tiling.attn_kv_partitions = 1;
            }).find("needs tiling.attn_kv_partitions > 1"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->tiling.gemv_k_split = 2;
            }).find("needs tiling.gemv_k_split = 1"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->kernel.weight_stream = WeightStream::kSmemRing;
            }).find("needs kernel.weight_stream = registers"),
            std::string::npos);
}

// fusion.attention_into_o (toy: 4 query heads, 2 KV heads of 16 dims): no attention op and no
// attn_out region; every O tile attends itself (kFlagAttentionPrologue) from the roped queries and
// waits for the QKV op's one counter (every QKV tile: the queries and every KV head's append).
TEST(Lowering, AttentionIntoOLeavesNoAttentionTasks) {
  const ModelShape shape = *find_preset("toy");
  ScheduleConfig config;
  config.fusion.attention_into_o = true;
  const Program p = lower_ok(shape, config);
  EXPECT_EQ(p.find_region("L0.attn_out"), nullptr);
  const Region* q = p.find_region("L0.q");
  ASSERT_NE(q, nullptr);
  int o_tiles = 0, qkv_tiles = 0;
  std::set<uint32_t> qkv_counters;
  for (const ms_abi::Instr& t : p.tasks) {
    EXPECT_NE(t.opcode, ms_abi::kAttnPartial);
    EXPECT_NE(t.opcode, ms_abi::kAttnCombine);
    if (p.ops[t.op_id].name == "L0.qkv") {
      ++qkv_tiles;
      qkv_counters.insert(t.signal_counter);
    }
  }
  ASSERT_EQ(qkv_counters.size(), 1u);
  for (const ms_abi::Instr& t : p.tasks) {
    if (p.ops[t.op_id].name != "L0.o") continue;
    ++o_tiles;
    EXPECT_EQ(t.flags & ms_abi::kFlagAttentionPrologue, ms_abi::kFlagAttentionPrologue);
    EXPECT_EQ(t.in, q->begin);
    EXPECT_EQ(t.layer, 0u);
    EXPECT_EQ(t.col_end, static_cast<uint32_t>(shape.q_dim()));
    int on_qkv = 0;  // the other wait is the residual's
    for (uint32_t w = 0; w < t.wait_count; ++w) {
      const ms_abi::Wait& wait = p.waits[t.wait_begin + w];
      if (qkv_counters.count(wait.counter) == 0) continue;
      ++on_qkv;
      EXPECT_EQ(wait.threshold, static_cast<uint32_t>(qkv_tiles));
    }
    EXPECT_EQ(on_qkv, 1);
  }
  EXPECT_GT(o_tiles, 0);
  const ValidationReport report = validate(p, test_target());
  EXPECT_TRUE(report.ok()) << (report.ok() ? "" : report.diagnostics[0].message);
}

// pipeline.tagged_inputs: every streamed GEMV that stages a whole input written by streamed GEMVs
// reads it as tagged words (gate/up, down, QKV past layer 0, the LM head), and exactly their
// writers write them (O, gate/up, down); layer 0's QKV reads the embedding's x and stays untagged;
// the validator accepts it, and without the knob no task is tagged.
TEST(Lowering, TaggedInputsTagTheGemvJoinsOfTheResidualStream) {
  const ModelShape shape = *find_preset("small");
  ASSERT_GE(shape.layers, 2);
  ScheduleConfig config;
  config.pipeline.tagged_inputs = true;
  config.smem.pages = 5;  // down's input and its tagged words (abi/ring.h stream_stage_bytes)
  config.smem.page_bytes = 32768;
  const Program p = lower_ok(shape, config);
  std::map<std::string, std::pair<int, int>> in_out;  // op name -> tasks with TagIn, with TagOut
  std::map<std::string, int> tasks;
  for (const ms_abi::Instr& t : p.tasks) {
    const std::string& op = p.ops[t.op_id].name;
    ++tasks[op];
    in_out[op].first += (t.flags & ms_abi::kFlagTagIn) != 0;
    in_out[op].second += (t.flags & ms_abi::kFlagTagOut) != 0;
  }
  const std::string last = "L" + std::to_string(shape.layers - 1) + ".";
  for (const auto& [op, n] : tasks) {
    const auto [tag_in, tag_out] = in_out[op];
    const bool gate_up = op.find(".gate_up") != std::string::npos;
    const bool down = op.find(".down") != std::string::npos;
    const bool o = op.size() > 2 && op.compare(op.size() - 2, 2, ".o") == 0;
    const bool qkv = op.find(".qkv") != std::string::npos;
    const bool reads_tags = gate_up || down || (qkv && op != "L0.qkv") || op == "lm_head";
    const bool writes_tags = gate_up || o || down;
    EXPECT_EQ(tag_in, reads_tags ? n : 0) << op;
    EXPECT_EQ(tag_out, writes_tags ? n : 0) << op;
  }
  EXPECT_GT(tasks[last + "down"], 0);
  EXPECT_GT(in_out["L1.qkv"].first, 0);
  const ValidationReport report = validate(p, test_target());
  EXPECT_TRUE(report.ok()) << (report.ok() ? "" : report.diagnostics[0].message);
  for (const ms_abi::Instr& t : lower_ok(shape, ScheduleConfig{}).tasks)
    EXPECT_EQ(t.flags & (ms_abi::kFlagTagIn | ms_abi::kFlagTagOut), 0);
  // With the default 32 KiB of pages the down projection's 2 x ffn words do not fit: it stays
  // untagged, and so does gate/up's output.
  config.smem = ScheduleConfig{}.smem;
  const Program narrow = lower_ok(shape, config);
  for (const ms_abi::Instr& t : narrow.tasks) {
    const std::string& op = narrow.ops[t.op_id].name;
    if (op.find(".down") != std::string::npos) {
      EXPECT_EQ(t.flags & ms_abi::kFlagTagIn, 0) << op;
    }
    if (op.find(".gate_up") != std::string::npos) {
      EXPECT_EQ(t.flags & ms_abi::kFlagTagOut, 0) << op;
    }
  }
}

// pipeline.tagged_inputs: refused with a hint in a weight-ring build, with a k-split, or with no
// GEMV -> GEMV edge to tag.
TEST(Lowering, TaggedInputsNeedTheRegistersBuildAndAGemvJoin) {
  auto error_of = [](void (*edit)(ScheduleConfig*)) {
    ScheduleConfig config;
    config.pipeline.tagged_inputs = true;
    edit(&config);
    return knob_conflict(config);
  };
  EXPECT_EQ(error_of([](ScheduleConfig*) {}), "");
  std::string e =
      error_of([](ScheduleConfig* c) { c->kernel.weight_stream = WeightStream::kSmemRing; });
  EXPECT_NE(e.find("needs kernel.weight_stream = registers"), std::string::npos) << e;
  e = error_of([](ScheduleConfig* c) { c->tiling.gemv_k_split = 2; });
  EXPECT_NE(e.find("needs tiling.gemv_k_split = 1"), std::string::npos) << e;
  e = error_of([](ScheduleConfig* c) {
    c->fusion.silu_mul_into_down = false;
    c->fusion.residual_into_gemv = false;
  });
  EXPECT_NE(e.find("needs a GEMV -> GEMV edge to tag"), std::string::npos) << e;
  EXPECT_EQ(error_of([](ScheduleConfig* c) { c->fusion.residual_into_gemv = false; }), "");
}

// smem.inflight_pages: only the weight ring has a loader to cap, and a cap at or above the ring's
// pages would cap nothing; both refused with a hint, the same sentence from lowering and
// config_fits. Below the ring's pages every cap lowers, into the build (MS_RING_INFLIGHT).
TEST(Lowering, InflightPagesNeedTheRingAndFewerPagesThanItHolds) {
  ScheduleConfig config;
  config.smem.inflight_pages = 2;
  std::string e = refusal(config);
  EXPECT_NE(e.find("smem.inflight_pages = 2 needs kernel.weight_stream = smem_ring"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("hint: set smem.inflight_pages back to 0"), std::string::npos) << e;
  config.kernel.weight_stream = WeightStream::kSmemRing;
  config.smem.pages = 4;
  EXPECT_EQ(knob_conflict(config), "");
  config.smem.pages = 2;
  e = refusal(config);
  EXPECT_NE(e.find("smem.inflight_pages = 2 must be below smem.pages = 2"), std::string::npos) << e;
  EXPECT_NE(e.find("hint: 0, or fewer pages in flight"), std::string::npos) << e;
  config.smem.inflight_pages = 0;
  EXPECT_EQ(knob_conflict(config), "");
  config.smem.pages = 8;
  for (int cap : {0, 1, 2, 3, 4}) {
    config.smem.inflight_pages = cap;
    EXPECT_EQ(lower_ok(*find_preset("toy"), config).build.knob("MS_RING_INFLIGHT"), cap);
  }
}

// kernel.stream_depth: only the registers stream keeps weight chunks in flight in registers, so a
// depth other than 2 is refused beside the weight ring, with a hint, the same sentence from
// lowering and config_fits. With the registers stream every depth lowers, into the build
// (MS_STREAM_DEPTH).
TEST(Lowering, StreamDepthNeedsTheRegistersStream) {
  ScheduleConfig config;
  config.kernel.weight_stream = WeightStream::kSmemRing;
  EXPECT_EQ(knob_conflict(config), "");
  EXPECT_EQ(lower_ok(*find_preset("toy"), config).build.knob("MS_STREAM_DEPTH"), 2);
  for (int depth : {3, 4}) {
    config.kernel.stream_depth = depth;
    const std::string e = refusal(config);
    EXPECT_NE(e.find("kernel.stream_depth = " + std::to_string(depth) +
                     " needs kernel.weight_stream = registers"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("hint: set kernel.stream_depth back to 2"), std::string::npos) << e;
  }
  config.kernel.weight_stream = WeightStream::kRegisters;
  for (int depth : {2, 3, 4}) {
    config.kernel.stream_depth = depth;
    EXPECT_EQ(knob_conflict(config), "");
    EXPECT_EQ(lower_ok(*find_preset("toy"), config).build.knob("MS_STREAM_DEPTH"), depth);
  }
}

// kernel.stream_held: the chunks a warp issues only after its wait are some of the registers
// stream's chunks in flight, so a held count is refused beside the weight ring and above
// kernel.stream_depth, with a hint, and lowers into the build (MS_STREAM_HELD) otherwise.
TEST(Lowering, StreamHeldNeedsTheRegistersStreamAndAtMostTheDepth) {
  ScheduleConfig config;
  EXPECT_EQ(lower_ok(*find_preset("toy"), config).build.knob("MS_STREAM_HELD"), 0);
  config.kernel.weight_stream = WeightStream::kSmemRing;
  config.kernel.stream_held = 1;
  std::string e = refusal(config);
  EXPECT_NE(e.find("kernel.stream_held = 1 needs kernel.weight_stream = registers"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("hint: set kernel.stream_held back to 0"), std::string::npos) << e;
  config.kernel.weight_stream = WeightStream::kRegisters;
  config.kernel.stream_held = 3;
  e = refusal(config);
  EXPECT_NE(e.find("kernel.stream_held = 3 is more than kernel.stream_depth = 2"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("hint: kernel.stream_held at most 2"), std::string::npos) << e;
  for (int depth : {2, 3, 4}) {
    for (int held = 0; held <= depth; ++held) {
      config.kernel.stream_depth = depth;
      config.kernel.stream_held = held;
      EXPECT_EQ(knob_conflict(config), "") << depth << " " << held;
      EXPECT_EQ(lower_ok(*find_preset("toy"), config).build.knob("MS_STREAM_HELD"), held);
    }
  }
  // kernel.stream_held_every picks the blocks that hold chunks back: with none held it is refused.
  config.kernel.stream_depth = 2;
  config.kernel.stream_held = 0;
  config.kernel.stream_held_every = 4;
  e = refusal(config);
  EXPECT_NE(e.find("kernel.stream_held_every = 4 needs kernel.stream_held > 0"), std::string::npos)
      << e;
  EXPECT_NE(e.find("hint: set kernel.stream_held_every back to 2"), std::string::npos) << e;
  for (int every : {1, 2, 4}) {
    config.kernel.stream_held = 1;
    config.kernel.stream_held_every = every;
    EXPECT_EQ(knob_conflict(config), "") << every;
    EXPECT_EQ(lower_ok(*find_preset("toy"), config).build.knob("MS_STREAM_HELD_EVERY"), every);
  }
}

// fusion.attention_into_o: refused with a hint, the same sentence from lowering and config_fits,
// with the weight ring, a k-split, or any knob of the attention tasks it removes set.
TEST(Lowering, AttentionIntoONeedsTheRegistersBuildAndNoAttentionKnobs) {
  auto error_of = [](void (*edit)(ScheduleConfig*)) {
    ScheduleConfig config;
    config.fusion.attention_into_o = true;
    edit(&config);
    return refusal(config);
  };
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->kernel.weight_stream = WeightStream::kSmemRing;
            }).find("needs kernel.weight_stream = registers"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->tiling.gemv_k_split = 2;
            }).find("needs tiling.gemv_k_split = 1"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->tiling.attn_kv_partitions = 2;
            }).find("tiling.attn_kv_partitions > 1 would change nothing"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->tiling.attn_kv_partitions = 2;
              c->fusion.combine_into_o = true;
            }).find("tiling.attn_kv_partitions > 1 would change nothing"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->kernel.attention = AttentionPath::kStaged;
            }).find("kernel.attention = staged would change nothing"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->tiling.attn_q_heads_per_task = 1;
            }).find("tiling.attn_q_heads_per_task would change nothing"),
            std::string::npos);
  EXPECT_NE(error_of([](ScheduleConfig* c) {
              c->dependencies.attention_to_o = Granularity::kPerSlice;
            }).find("dependencies.attention_to_o = per_slice would change nothing"),
            std::string::npos);
}

TEST(Lowering, AssignmentPoliciesFollowTheirRules) {
  const ModelShape shape = *find_preset("toy-2L");
  const GpuTarget target = test_target(4);
  ScheduleConfig config;
  const Program rr = lower_ok(shape, config, target);
  ASSERT_EQ(rr.queues.size(), 4u);
  for (uint32_t b = 0; b < 4; ++b)
    for (size_t i = 0; i < rr.queues[b].size(); ++i) EXPECT_EQ(rr.queues[b][i], b + 4 * i);

  config.assignment.policy = AssignPolicy::kDynamic;
  const Program dyn = lower_ok(shape, config, target);
  ASSERT_EQ(dyn.queues.size(), 1u);
  EXPECT_EQ(dyn.queues[0].size(), dyn.tasks.size());
  EXPECT_TRUE(dyn.launch.dynamic_queue);
  EXPECT_EQ(dyn.launch.grid_blocks, 4);

  config.assignment.policy = AssignPolicy::kLayerAffine;
  const Program affine = lower_ok(shape, config, target);
  // The first tile of every op lands on block 0.
  std::set<uint32_t> first_tasks;
  std::set<uint32_t> ops_seen;
  for (uint32_t t = 0; t < affine.tasks.size(); ++t)
    if (ops_seen.insert(affine.tasks[t].op_id).second) first_tasks.insert(t);
  for (uint32_t t : first_tasks)
    EXPECT_NE(std::find(affine.queues[0].begin(), affine.queues[0].end(), t),
              affine.queues[0].end());

  config.assignment.policy = AssignPolicy::kLoadBalance;
  const Program balanced = lower_ok(shape, config, target);
  ASSERT_EQ(balanced.queues.size(), 4u);
  EXPECT_NE(balanced.queues, rr.queues);
}

TEST(Lowering, LaunchShapeAndBuildComeFromTheKnobs) {
  ScheduleConfig config;
  config.launch.blocks_per_sm = 2;
  config.launch.threads_per_block = 512;
  config.smem.pages = 4;
  config.smem.page_bytes = 8192;
  config.pipeline.prefetch_depth = 3;
  config.kernel.weight_load = WeightLoad::kLdgStream;
  config.kernel.vector_bytes = 8;
  const Program p = lower_ok(*find_preset("toy"), config, test_target(10));
  EXPECT_EQ(p.launch.grid_blocks, 20);
  EXPECT_EQ(p.launch.threads_per_block, 512);
  EXPECT_EQ(p.launch.smem_bytes, 32768);
  EXPECT_EQ(p.launch.prefetch_depth, 3);
  EXPECT_EQ(p.build.knobs, (std::map<std::string, int>{{"MS_ATTN_STAGED", 0},
                                                       {"MS_RING_INFLIGHT", 0},
                                                       {"MS_ROWS_PER_WARP", 2},
                                                       {"MS_SILU_COPIES", 0},
                                                       {"MS_STREAM_DEPTH", 2},
                                                       {"MS_STREAM_HELD", 0},
                                                       {"MS_STREAM_HELD_EVERY", 2},
                                                       {"MS_UNROLL", 2},
                                                       {"MS_VECTOR_BYTES", 8},
                                                       {"MS_WEIGHT_LOAD", 1},
                                                       {"MS_WEIGHT_RING", 0}}));
  EXPECT_EQ(p.build.x_floats, 0);
  // The weight ring: the pages become the ring, plus the staging area and two mbarriers a page.
  config.kernel.weight_stream = WeightStream::kSmemRing;
  const Program r = lower_ok(*find_preset("toy"), config, test_target(10));
  const int x = ring_x_floats(*find_preset("toy"));
  EXPECT_EQ(r.launch.smem_bytes, 32768 + x * 4 + 4 * 16);
  EXPECT_TRUE(r.build.weight_ring());
  EXPECT_EQ(r.build.x_floats, x);
  EXPECT_EQ(r.build.knob("MS_RING_INFLIGHT"), 0);
  // The cap on the ring's pages in flight is a build knob: the launch is the same ring's.
  config.smem.inflight_pages = 3;
  const Program capped = lower_ok(*find_preset("toy"), config, test_target(10));
  EXPECT_EQ(capped.build.knob("MS_RING_INFLIGHT"), 3);
  EXPECT_EQ(capped.launch.smem_bytes, r.launch.smem_bytes);
  EXPECT_EQ(capped.tasks.size(), r.tasks.size());
}

TEST(Lowering, MarksInputsAndPlacesTheRopeTable) {
  const Program p = lower_ok(*find_preset("toy"), ScheduleConfig{});
  const Region* rope = p.find_region("rope_table");
  ASSERT_NE(rope, nullptr);
  EXPECT_TRUE(rope->input);
  EXPECT_EQ(rope->begin, p.model.rope_table);
  EXPECT_EQ(rope->end - rope->begin, 8u);
  EXPECT_TRUE(p.find_region("kv.L0.v.h1")->input);
  EXPECT_TRUE(p.find_region("w.embed")->input);
  EXPECT_TRUE(p.find_region("step")->input);
  EXPECT_FALSE(p.find_region("L0.q")->input);
  EXPECT_EQ(p.find_region("logits")->end - p.find_region("logits")->begin, 256u);
}

TEST(Lowering, LlamaOneBLowersWellUnderASecond) {
  const ModelShape shape = *find_preset("llama-1b");
  ScheduleConfig config;
  config.tiling.gemv_k_split = 2;
  config.dependencies.residual = Granularity::kPerSlice;
  const auto start = std::chrono::steady_clock::now();
  const Program p = lower_ok(shape, config);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(p.tasks.size(), 10000u);
  EXPECT_LT(seconds, 1.0);
}

}  // namespace
}  // namespace megasched::schedule
