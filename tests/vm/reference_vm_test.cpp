#include "vm/reference_vm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "eval/eager.h"
#include "eval/oracle.h"
#include "schedule/lower.h"
#include "schedule/search.h"
#include "tests/h100_target.h"

namespace megasched::vm {
namespace {

using schedule::AssignPolicy;
using schedule::Granularity;
using schedule::ModelShape;
using schedule::Program;
using schedule::ScheduleConfig;
using schedule::Weights;

constexpr int kPositions = 32;
constexpr int kChecked[] = {0, 1, 7, 31};

schedule::GpuTarget test_target(int num_sms) {
  return testing_support::h100_target(num_sms, "test-gpu");
}

int32_t token_at(int position, const ModelShape& shape) {
  return static_cast<int32_t>((position * 37 + 11) % shape.vocab);
}

/// Weights and the eager logits at the checked positions, computed once per model.
struct Reference {
  Weights weights;
  std::map<int, std::vector<float>> logits;
};

const Reference& reference(const ModelShape& shape) {
  static std::map<std::string, std::unique_ptr<Reference>> cache;
  std::unique_ptr<Reference>& slot = cache[shape.name];
  if (!slot) {
    slot = std::make_unique<Reference>();
    slot->weights = schedule::generate_weights(shape, 1, 1);
    eval::EagerModel eager(slot->weights);
    for (int pos = 0; pos < kPositions; ++pos) {
      std::vector<float> logits = eager.step(token_at(pos, shape), pos);
      for (int checked : kChecked)
        if (checked == pos) slot->logits[pos] = std::move(logits);
    }
  }
  return *slot;
}

Program lower_ok(const ModelShape& shape, const ScheduleConfig& config, int num_sms = 3) {
  std::string error;
  std::optional<Program> p = schedule::lower(shape, test_target(num_sms), config, &error);
  EXPECT_TRUE(p.has_value()) << error;
  return p ? *p : Program{};
}

/// Feeds positions 0..31 and compares with eager at the checked positions; returns the worst
/// relative error (infinity on any failure).
double worst_rel_err(const ModelShape& shape, const Program& program, const std::string& what) {
  const Reference& ref = reference(shape);
  ReferenceVm vm(program, ref.weights);
  double worst = 0.0;
  for (int pos = 0; pos < kPositions; ++pos) {
    ReferenceVm::StepResult r = vm.step(token_at(pos, shape), pos);
    if (!r.completed) {
      ADD_FAILURE() << what << ": deadlock at position " << pos << ": " << r.stuck;
      return INFINITY;
    }
    auto it = ref.logits.find(pos);
    if (it == ref.logits.end()) continue;
    const eval::Comparison c = eval::compare_logits(r.logits, it->second, shape.dtype);
    EXPECT_TRUE(c.pass) << what << " at position " << pos << ": rel_err " << c.rel_err
                        << " max_abs " << c.max_abs_err;
    EXPECT_EQ(r.argmax, eval::argmax(it->second)) << what << " at position " << pos;
    worst = std::max(worst, c.rel_err);
  }
  return worst;
}

TEST(ReferenceVm, DefaultConfigMatchesEager) {
  for (const char* name : {"toy", "toy-2L"}) {
    const ModelShape shape = *schedule::find_preset(name);
    EXPECT_LT(worst_rel_err(shape, lower_ok(shape, ScheduleConfig{}), name), 1e-5) << name;
  }
}

TEST(ReferenceVm, RandomValidConfigsMatchEager) {
  std::mt19937_64 rng(2024);
  int checked = 0;
  for (const char* name : {"toy", "toy-2L"}) {
    const ModelShape shape = *schedule::find_preset(name);
    for (int i = 0; i < 110; ++i) {
      const int num_sms = 1 + i % 5;
      const ScheduleConfig config = schedule::random_config(shape, test_target(num_sms), rng);
      const std::string what = std::string(name) + " " + schedule::canonical_string(config);
      EXPECT_LT(worst_rel_err(shape, lower_ok(shape, config, num_sms), what), 1e-4) << what;
      ++checked;
    }
  }
  EXPECT_GE(checked, 200);
}

TEST(ReferenceVm, Bf16ModelMatchesEagerWithinBf16Tolerance) {
  ModelShape shape = *schedule::find_preset("toy-2L");
  shape.name = "toy-2L-bf16";
  shape.dtype = schedule::DType::kBF16;
  ScheduleConfig config;
  config.tiling.gemv_k_split = 2;
  config.tiling.attn_kv_partitions = 4;
  EXPECT_LT(worst_rel_err(shape, lower_ok(shape, config), "bf16"), 2e-2);
  EXPECT_LT(worst_rel_err(shape, lower_ok(shape, ScheduleConfig{}), "bf16 default"), 2e-2);
}

// Runs positions 0..7 and returns the logits of every step.
std::vector<std::vector<float>> run_steps(const Program& program, const Weights& weights,
                                          RunOrder order, uint64_t seed, int threads = 1) {
  ReferenceVm vm(program, weights);
  vm.set_threads(threads);
  std::vector<std::vector<float>> out;
  for (int pos = 0; pos < 8; ++pos) {
    ReferenceVm::StepResult r = vm.step(token_at(pos, weights.shape), pos, order, seed + pos);
    EXPECT_TRUE(r.completed) << r.stuck;
    EXPECT_EQ(r.tasks_run, program.tasks.size());
    out.push_back(std::move(r.logits));
  }
  return out;
}

/// The default and three configs that reorder much (split-K, KV partitions, per-slice waits, the
/// dynamic queue, unfused ops, load balance): the programs the run-order tests run.
std::vector<ScheduleConfig> reordering_configs() {
  std::vector<ScheduleConfig> configs(4);
  configs[1].tiling.gemv_k_split = 4;
  configs[1].tiling.attn_kv_partitions = 4;
  configs[1].dependencies.residual = Granularity::kPerSlice;
  configs[1].dependencies.gate_up_to_down = Granularity::kPerSlice;
  configs[2].assignment.policy = AssignPolicy::kDynamic;
  configs[2].fusion.norm_into_gemv = false;
  configs[2].fusion.silu_mul_into_down = false;
  configs[2].fusion.rope_kv_into_qkv = false;
  configs[2].tiling.attn_q_heads_per_task = 1;
  configs[3].assignment.policy = AssignPolicy::kLoadBalance;
  configs[3].fusion.qkv_single_gemv = false;
  configs[3].fusion.residual_into_gemv = false;
  configs[3].dependencies.qkv_to_attention = Granularity::kPerSlice;
  configs[3].dependencies.attention_to_o = Granularity::kPerSlice;
  return configs;
}

TEST(ReferenceVm, RandomValidOrdersAreBitIdentical) {
  const ModelShape shape = *schedule::find_preset("toy-2L");
  const Weights& weights = reference(shape).weights;
  for (const ScheduleConfig& config : reordering_configs()) {
    const Program program = lower_ok(shape, config, 2);
    const auto base = run_steps(program, weights, RunOrder::kQueueOrder, 0);
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      const auto other = run_steps(program, weights, RunOrder::kRandomOrder, seed * 1000);
      for (size_t s = 0; s < base.size(); ++s) {
        ASSERT_EQ(other[s].size(), base[s].size());
        EXPECT_EQ(std::memcmp(other[s].data(), base[s].data(), base[s].size() * sizeof(float)), 0)
            << schedule::canonical_string(config) << " seed " << seed << " step " << s;
      }
    }
  }
}

// kWaves (the sampled trial check's order): every ready queue head at once on several threads,
// then their signals. On programs with split-K, KV partitions, per-slice waits, the dynamic
// queue, last-arriver chains, combine and attention in O, RoPE pairs and argmax records, the
// logits of eight steps are bit-identical to queue order's on 1, 3 and 8 threads.
TEST(ReferenceVm, WavesOnManyThreadsAreBitIdenticalToQueueOrder) {
  const ModelShape shape = *schedule::find_preset("toy-2L");
  const Weights& weights = reference(shape).weights;
  std::vector<ScheduleConfig> configs = reordering_configs();
  ScheduleConfig chained;  // last arrivers: the combines and the argmax run on the arriving block
  chained.tiling.attn_kv_partitions = 4;
  chained.tiling.lm_head_rows_per_task = 64;
  chained.fusion.argmax_into_lm_head = true;
  chained.fusion.reduce_by_last_arriver = true;
  chained.assignment.policy = AssignPolicy::kLoadBalance;
  ScheduleConfig combine_in_o;
  combine_in_o.tiling.attn_kv_partitions = 2;
  combine_in_o.fusion.combine_into_o = true;
  combine_in_o.tiling.qkv_rope_pairs = true;
  combine_in_o.dependencies.qkv_to_attention = Granularity::kPerSlice;
  ScheduleConfig attention_in_o;
  attention_in_o.fusion.attention_into_o = true;
  attention_in_o.fusion.reduce_by_last_arriver = true;
  attention_in_o.assignment.policy = AssignPolicy::kDynamic;
  configs.insert(configs.end(), {chained, combine_in_o, attention_in_o});
  for (const ScheduleConfig& config : configs) {
    const Program program = lower_ok(shape, config, 4);
    const auto base = run_steps(program, weights, RunOrder::kQueueOrder, 0);
    for (const int threads : {1, 3, 8}) {
      const auto waves = run_steps(program, weights, RunOrder::kWaves, 0, threads);
      for (size_t s = 0; s < base.size(); ++s) {
        ASSERT_EQ(waves[s].size(), base[s].size());
        EXPECT_EQ(std::memcmp(waves[s].data(), base[s].data(), base[s].size() * sizeof(float)), 0)
            << schedule::canonical_string(config) << " threads " << threads << " step " << s;
      }
    }
  }
}

// QKV tiles of RoPE pairs (one tile per block, or 4 pairs a tile with per-slice waits, in random
// orders) compute the same dot products and rotations as whole-head tiles: the logits of eight
// steps, which read the K and V rows every earlier step appended, are bit-identical.
TEST(ReferenceVm, RopePairTilesGiveTheLogitsOfWholeHeadTiles) {
  const ModelShape shape = *schedule::find_preset("toy-2L");
  const Weights& weights = reference(shape).weights;
  const auto heads =
      run_steps(lower_ok(shape, ScheduleConfig{}, 2), weights, RunOrder::kQueueOrder, 0);
  std::vector<ScheduleConfig> configs(2);
  configs[0].tiling.qkv_rope_pairs = true;
  configs[0].tiling.gemv_rows_per_task = 0;
  configs[1].tiling.qkv_rope_pairs = true;
  configs[1].tiling.gemv_rows_per_task = 8;
  configs[1].dependencies.qkv_to_attention = Granularity::kPerSlice;
  for (const ScheduleConfig& config : configs) {
    const Program program = lower_ok(shape, config, 2);
    for (uint64_t seed = 0; seed <= 2; ++seed) {
      const auto pairs =
          run_steps(program, weights, seed == 0 ? RunOrder::kQueueOrder : RunOrder::kRandomOrder,
                    seed * 1000);
      for (size_t s = 0; s < heads.size(); ++s) {
        ASSERT_EQ(pairs[s].size(), heads[s].size());
        EXPECT_EQ(std::memcmp(pairs[s].data(), heads[s].data(), heads[s].size() * sizeof(float)), 0)
            << schedule::canonical_string(config) << " seed " << seed << " step " << s;
      }
    }
  }
}

// fusion.argmax_into_lm_head: the argmax of the per-tile records is the argmax of the logits, with
// a tie across two tiles going to the smaller index as in the one-pass scan. The tie is made by
// copying the LM-head row of step 0's argmax onto a smaller row of another tile.
TEST(ReferenceVm, ArgmaxRecordsGiveTheArgmaxOfTheLogits) {
  const ModelShape shape = *schedule::find_preset("toy-2L");
  Weights weights = reference(shape).weights;
  const Program plain = lower_ok(shape, ScheduleConfig{}, 2);
  ReferenceVm probe(plain, weights);
  const int32_t top = probe.step(token_at(0, shape), 0).argmax;
  // A smaller row eight rows (one 8-row tile) or more away, else the largest row after it.
  const int32_t twin = top >= 8 ? top - 8 : shape.vocab - 1;
  const int64_t hidden = shape.hidden, from = weights.layout.lm_head + top * hidden,
                to = weights.layout.lm_head + twin * hidden;
  if (shape.dtype == schedule::DType::kF32) {
    std::copy_n(weights.f32.begin() + from, hidden, weights.f32.begin() + to);
  } else {
    std::copy_n(weights.bf16.begin() + from, hidden, weights.bf16.begin() + to);
  }
  // The smallest index of the largest logit: what kArgmax computes in one pass.
  auto first_max = [](const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
  };
  std::vector<ScheduleConfig> configs(3);
  for (ScheduleConfig& c : configs) c.fusion.argmax_into_lm_head = true;
  configs[1].tiling.lm_head_rows_per_task = 8;
  configs[2].tiling.lm_head_rows_per_task = 8;
  configs[2].tiling.gemv_k_split = 2;
  configs[2].assignment.policy = AssignPolicy::kDynamic;
  for (int pos = 0; pos < 4; ++pos) {
    ReferenceVm base(plain, weights);
    for (int p = 0; p < pos; ++p) base.step(token_at(p, shape), p);
    const ReferenceVm::StepResult want = base.step(token_at(pos, shape), pos);
    ASSERT_EQ(want.argmax, first_max(want.logits));
    if (pos == 0) {
      ASSERT_EQ(want.logits[top], want.logits[twin]);
      ASSERT_EQ(want.argmax, std::min(top, twin)) << "the tie is at step 0";
    }
    for (const ScheduleConfig& config : configs) {
      const Program program = lower_ok(shape, config, 2);
      for (uint64_t seed = 0; seed <= 2; ++seed) {
        ReferenceVm vm(program, weights);
        const RunOrder order = seed == 0 ? RunOrder::kQueueOrder : RunOrder::kRandomOrder;
        for (int p = 0; p < pos; ++p) vm.step(token_at(p, shape), p, order, seed * 100 + p);
        const ReferenceVm::StepResult got = vm.step(token_at(pos, shape), pos, order, seed);
        ASSERT_TRUE(got.completed) << got.stuck;
        const std::string what = schedule::canonical_string(config) + " " + std::to_string(pos);
        EXPECT_EQ(got.argmax, first_max(got.logits)) << what;
        if (pos == 0) {
          EXPECT_EQ(got.logits[top], got.logits[twin]) << what;
        }
        if (config.tiling.gemv_k_split == 1) {  // the same sums: the same logits and argmax
          EXPECT_EQ(got.logits, want.logits) << what;
          EXPECT_EQ(got.argmax, want.argmax) << what;
        }
      }
    }
  }
}

/// `got` (run in queue order, then in three random orders) gives bit for bit the logits and argmax
/// of `want` (queue order) at positions 0 to 5, running every task once per step.
void expect_bit_identical_steps(const Program& want_p, const Program& got_p,
                                const Weights& weights) {
  const ModelShape& shape = weights.shape;
  for (uint64_t seed = 0; seed <= 3; ++seed) {
    const RunOrder order = seed == 0 ? RunOrder::kQueueOrder : RunOrder::kRandomOrder;
    ReferenceVm want(want_p, weights), got(got_p, weights);
    for (int pos = 0; pos < 6; ++pos) {
      const ReferenceVm::StepResult w = want.step(token_at(pos, shape), pos);
      const ReferenceVm::StepResult g = got.step(token_at(pos, shape), pos, order, seed + pos);
      ASSERT_TRUE(g.completed) << g.stuck;
      EXPECT_EQ(g.tasks_run, got_p.tasks.size());
      EXPECT_EQ(g.logits, w.logits) << "position " << pos << " seed " << seed;
      EXPECT_EQ(g.argmax, w.argmax) << "position " << pos << " seed " << seed;
    }
  }
}

// fusion.reduce_by_last_arriver: the combines and the argmax run on the block that arrives last
// (ReferenceVm::run_task, as the kernel does). The same sums in the same order: bit-identical
// logits and argmax to the queued combine and argmax, in queue order and random orders, static and
// dynamic queues, with every task run once per step.
TEST(ReferenceVm, LastArriverReductionsGiveTheLogitsOfQueuedOnes) {
  const ModelShape shape = *schedule::find_preset("toy-2L");
  const Weights& weights = reference(shape).weights;
  for (const AssignPolicy policy : {AssignPolicy::kLoadBalance, AssignPolicy::kDynamic}) {
    for (const bool records : {false, true}) {
      ScheduleConfig queued;
      queued.tiling.attn_kv_partitions = 4;
      queued.tiling.attn_q_heads_per_task = 1;
      queued.tiling.lm_head_rows_per_task = 64;
      queued.fusion.argmax_into_lm_head = records;
      queued.assignment.policy = policy;
      ScheduleConfig chained = queued;
      chained.fusion.reduce_by_last_arriver = true;
      const Program want_p = lower_ok(shape, queued, 2);
      const Program got_p = lower_ok(shape, chained, 2);
      ASSERT_EQ(got_p.tasks.size(), want_p.tasks.size());
      size_t queued_tasks = 0;
      for (const auto& q : got_p.queues) queued_tasks += q.size();
      EXPECT_LT(queued_tasks, got_p.tasks.size());  // the chained tasks are in no queue
      expect_bit_identical_steps(want_p, got_p, weights);
    }
  }
}

// fusion.combine_into_o: the O projection's input load combines the KV partitions' records
// (kFlagCombinePrologue) instead of a combine task writing attn_out. The same sums in the same
// order: bit-identical logits and argmax, in queue order and random orders, static and dynamic
// queues, with and without the last arriver (which then chains only the argmax).
TEST(ReferenceVm, CombineInOGivesTheLogitsOfCombineTasks) {
  const ModelShape shape = *schedule::find_preset("toy-2L");
  const Weights& weights = reference(shape).weights;
  for (const AssignPolicy policy : {AssignPolicy::kLoadBalance, AssignPolicy::kDynamic}) {
    for (const bool last_arriver : {false, true}) {
      ScheduleConfig tasks;
      tasks.tiling.attn_kv_partitions = 4;
      tasks.tiling.attn_q_heads_per_task = 1;
      tasks.fusion.reduce_by_last_arriver = last_arriver;
      tasks.assignment.policy = policy;
      ScheduleConfig folded = tasks;
      folded.fusion.combine_into_o = true;
      const Program want_p = lower_ok(shape, tasks, 2);
      const Program got_p = lower_ok(shape, folded, 2);
      size_t combines = 0, combining = 0;
      for (const auto& t : got_p.tasks) {
        combines += t.opcode == ms_abi::kAttnCombine;
        combining += (t.flags & ms_abi::kFlagCombinePrologue) != 0;
      }
      EXPECT_EQ(combines, 0u);
      EXPECT_GT(combining, 0u);
      EXPECT_LT(got_p.tasks.size(), want_p.tasks.size());
      expect_bit_identical_steps(want_p, got_p, weights);
    }
  }
}

// fusion.attention_into_o: the O projection's input load attends every head itself
// (kFlagAttentionPrologue) instead of attention tasks writing attn_out. The ReferenceVm computes
// both with one function, so the logits and argmax are bit-identical at positions 0-5, in queue
// order and random orders, static and dynamic queues.
TEST(ReferenceVm, AttentionInOGivesTheLogitsOfAttentionTasks) {
  const ModelShape shape = *schedule::find_preset("toy-2L");
  const Weights& weights = reference(shape).weights;
  for (const AssignPolicy policy : {AssignPolicy::kLoadBalance, AssignPolicy::kDynamic}) {
    ScheduleConfig tasks;
    tasks.assignment.policy = policy;
    ScheduleConfig fused = tasks;
    fused.fusion.attention_into_o = true;
    const Program want_p = lower_ok(shape, tasks, 2);
    const Program got_p = lower_ok(shape, fused, 2);
    size_t attention = 0, attending = 0;
    for (const auto& t : got_p.tasks) {
      attention += t.opcode == ms_abi::kAttnPartial;
      attending += (t.flags & ms_abi::kFlagAttentionPrologue) != 0;
    }
    EXPECT_EQ(attention, 0u);
    EXPECT_GT(attending, 0u);
    EXPECT_LT(got_p.tasks.size(), want_p.tasks.size());
    expect_bit_identical_steps(want_p, got_p, weights);
  }
}

// ms_abi::arrival_completes, which both VMs use for a last arriver: of a step's adds exactly the
// one that reaches the chained task's target completes it, at every epoch, across the wrap.
TEST(ReferenceVm, ExactlyOneArrivalCompletesAWaitEvenAcrossTheWrap) {
  constexpr uint32_t kTotal = 4;
  for (const uint32_t epoch : {0u, 1u, 0x3fffffffu, 0x40000000u, 0xffffffffu}) {
    for (uint32_t threshold = 1; threshold <= kTotal; ++threshold) {
      const uint32_t target = ms_abi::wait_target(epoch, kTotal, threshold);
      uint32_t counter = ms_abi::wait_target(epoch, kTotal, 0), completing = 0;
      for (uint32_t add = 1; add <= kTotal; ++add, ++counter)
        if (ms_abi::arrival_completes(counter, 1, target)) completing = add;
      EXPECT_EQ(completing, threshold) << "epoch " << epoch << " threshold " << threshold;
    }
  }
}

// A chained task no arrival can reach (the argmax's wait raised beyond what the LM head adds)
// never runs: every queue drains, yet the step does not complete, and it says why.
TEST(ReferenceVm, ReportsAChainedTaskThatNeverRuns) {
  const ModelShape shape = *schedule::find_preset("toy");
  ScheduleConfig config;
  config.fusion.reduce_by_last_arriver = true;
  Program p = lower_ok(shape, config, 2);
  ASSERT_EQ(p.tasks.back().opcode, ms_abi::kArgmax);
  p.waits[p.tasks.back().wait_begin].threshold += 1;
  ReferenceVm vm(p, reference(shape).weights);
  const ReferenceVm::StepResult r = vm.step(token_at(0, shape), 0);
  EXPECT_FALSE(r.completed);
  EXPECT_EQ(r.tasks_run, p.tasks.size() - 1);
  EXPECT_NE(r.stuck.find("chained"), std::string::npos) << r.stuck;
}

// A program whose two tasks wait on each other's counters.
TEST(ReferenceVm, DetectsDeadlockAndNamesTheStuckTasks) {
  const ModelShape shape = *schedule::find_preset("toy");
  Program p = lower_ok(shape, ScheduleConfig{});
  p.tasks.resize(2);
  p.tasks[0] = {};
  p.tasks[0].opcode = ms_abi::kEmbed;
  p.tasks[0].row_end = 4;
  p.tasks[0].ld = 64;
  p.tasks[0].wait_begin = 0;
  p.tasks[0].wait_count = 1;
  p.tasks[0].signal_counter = 0;
  p.tasks[0].signal_increment = 1;
  p.tasks[1] = p.tasks[0];
  p.tasks[1].wait_begin = 1;
  p.tasks[1].signal_counter = 1;
  p.waits = {{1, 1}, {0, 1}};
  p.counter_totals = {1, 1};
  p.counter_names = {"a", "b"};
  p.queues = {{0}, {1}};
  p.launch.grid_blocks = 2;
  for (RunOrder order : {RunOrder::kQueueOrder, RunOrder::kRandomOrder, RunOrder::kWaves}) {
    ReferenceVm vm(p, reference(shape).weights);
    vm.set_threads(4);
    const ReferenceVm::StepResult r = vm.step(1, 0, order, 3);
    EXPECT_FALSE(r.completed);
    EXPECT_EQ(r.tasks_run, 0u);
    EXPECT_EQ(r.stuck,
              "block 0: task 0 (embed tile 0) waits b >= 1 (has 0); "
              "block 1: task 1 (embed tile 1) waits a >= 1 (has 0)");
    EXPECT_EQ(vm.epoch(), 0);
  }
  p.launch.dynamic_queue = true;
  p.queues = {{0, 1}};
  ReferenceVm vm(p, reference(shape).weights);
  const ReferenceVm::StepResult r = vm.step(1, 0);
  EXPECT_FALSE(r.completed);
  EXPECT_NE(r.stuck.find("task 0 (embed tile 0) waits b >= 1 (has 0)"), std::string::npos);
}

// A dynamic queue with one worker cannot run a task that waits on a later ticket.
TEST(ReferenceVm, DynamicQueueDeadlocksWhenAClaimWaitsOnALaterTicket) {
  const ModelShape shape = *schedule::find_preset("toy");
  Program p = lower_ok(shape, ScheduleConfig{});
  p.launch.dynamic_queue = true;
  p.launch.grid_blocks = 1;
  std::vector<uint32_t> reversed(p.tasks.size());
  for (uint32_t i = 0; i < p.tasks.size(); ++i)
    reversed[i] = static_cast<uint32_t>(p.tasks.size()) - 1 - i;
  p.queues = {reversed};
  ReferenceVm vm(p, reference(shape).weights);
  EXPECT_FALSE(vm.step(1, 0).completed);
  ReferenceVm waves(p, reference(shape).weights);
  waves.set_threads(4);
  EXPECT_FALSE(waves.step(1, 0, RunOrder::kWaves).completed);
  p.queues = {{}};
  for (uint32_t i = 0; i < p.tasks.size(); ++i) p.queues[0].push_back(i);
  ReferenceVm in_order(p, reference(shape).weights);
  EXPECT_TRUE(in_order.step(1, 0).completed);
}

// Task 1 (block 0) adds the embedding task 0 (block 1) writes; it waits on task 0's counter.
// At step 2 the counter already holds step 1's increment, so only the epoch-scaled threshold
// keeps task 1 from reading the stale embedding.
TEST(ReferenceVm, EpochScalesThresholdsAcrossSteps) {
  const ModelShape shape = *schedule::find_preset("toy");
  const Weights& weights = reference(shape).weights;
  Program p = lower_ok(shape, ScheduleConfig{});
  const uint32_t x = static_cast<uint32_t>(p.find_region("embed.x")->begin);
  const uint32_t logits = static_cast<uint32_t>(p.find_region("logits")->begin);
  ms_abi::Instr embed{};
  embed.opcode = ms_abi::kEmbed;
  embed.row_end = 64;
  embed.ld = 64;
  embed.weight = static_cast<uint64_t>(weights.layout.embed);
  embed.out = x;
  embed.signal_counter = 0;
  embed.signal_increment = 1;
  ms_abi::Instr add{};
  add.opcode = ms_abi::kAdd;
  add.row_end = 64;
  add.in = x;
  add.in2 = x;
  add.out = logits;
  add.wait_begin = 0;
  add.wait_count = 1;
  add.signal_counter = 1;
  add.signal_increment = 1;
  p.tasks = {embed, add};
  p.waits = {{0, 1}};
  p.counter_totals = {1, 1};
  p.counter_names = {"embed", "add"};
  p.queues = {{1}, {0}};
  p.launch.grid_blocks = 2;
  ReferenceVm vm(p, weights);
  for (int step = 0; step < 3; ++step) {
    const int32_t token = 5 + step;
    const ReferenceVm::StepResult r = vm.step(token, step);
    ASSERT_TRUE(r.completed) << r.stuck;
    for (int i = 0; i < 64; ++i) {
      const float e = weights.at(weights.layout.embed + token * 64 + i);
      ASSERT_EQ(r.logits[static_cast<size_t>(i)], e + e) << "step " << step << " element " << i;
    }
    EXPECT_EQ(vm.counters(), (std::vector<uint32_t>{static_cast<uint32_t>(step + 1),
                                                    static_cast<uint32_t>(step + 1)}));
    EXPECT_EQ(vm.epoch(), step + 1);
  }
}

// Counters are 32-bit and keep growing across steps, so they wrap: with a per-step total near
// 2^30 the counters wrap every 4 steps; with 511 (a real program's largest) after ~8.4 M steps,
// which resume_at_epoch skips to. Every step must still finish with the embedding of its own token
// (a wait compared as plain `value >= epoch * total + threshold` deadlocks on the CPU at the wrap,
// and on the device passes before its producer ran).
TEST(ReferenceVm, WaitsStayExactAcrossTheCountersWrap) {
  const ModelShape shape = *schedule::find_preset("toy");
  const Weights& weights = reference(shape).weights;
  Program p = lower_ok(shape, ScheduleConfig{});
  const uint32_t x = static_cast<uint32_t>(p.find_region("embed.x")->begin);
  const uint32_t logits = static_cast<uint32_t>(p.find_region("logits")->begin);
  for (const uint32_t total : {0x40000001u, 511u}) {
    ms_abi::Instr embed{};
    embed.opcode = ms_abi::kEmbed;
    embed.row_end = 64;
    embed.ld = 64;
    embed.weight = static_cast<uint64_t>(weights.layout.embed);
    embed.out = x;
    embed.signal_counter = 0;
    embed.signal_increment = total;
    ms_abi::Instr add{};
    add.opcode = ms_abi::kAdd;
    add.row_end = 64;
    add.in = x;
    add.in2 = x;
    add.out = logits;
    add.wait_begin = 0;
    add.wait_count = 1;
    p.tasks = {embed, add};
    p.waits = {{0, total}};
    p.counter_totals = {total};
    p.counter_names = {"embed"};
    p.queues = {{1}, {0}};  // the reader's block is polled first
    p.launch.grid_blocks = 2;
    ReferenceVm vm(p, weights);
    const uint32_t first = total == 511u ? 0xffffffffu / total - 2 : 0;  // 3 steps before the wrap
    vm.resume_at_epoch(first);
    for (uint32_t step = 0; step < 8; ++step) {
      const int32_t token = static_cast<int32_t>(5 + step);
      const ReferenceVm::StepResult r = vm.step(token, static_cast<int32_t>(step));
      ASSERT_TRUE(r.completed) << "total " << total << ", epoch " << first + step << ": "
                               << r.stuck;
      const float e = weights.at(weights.layout.embed + token * 64);
      ASSERT_EQ(r.logits[0], e + e) << "total " << total << ", epoch " << first + step;
      EXPECT_EQ(vm.counters()[0], (first + step + 1) * total) << "modulo 2^32";
    }
  }
}

TEST(ReferenceVm, CountersGrowByTheirTotalsEachStep) {
  const ModelShape shape = *schedule::find_preset("toy-2L");
  ScheduleConfig config;
  config.dependencies.residual = Granularity::kPerSlice;
  const Program p = lower_ok(shape, config);
  ReferenceVm vm(p, reference(shape).weights);
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(vm.step(1, step - 1).completed);
    for (uint32_t c = 0; c < p.num_counters(); ++c)
      EXPECT_EQ(vm.counters()[c], step * p.counter_totals[c]);
  }
}

TEST(ReferenceVm, RecordSeesEveryElementAccessOfAGemv) {
  const ModelShape shape = *schedule::find_preset("toy");
  ScheduleConfig config;
  config.tiling.gemv_k_split = 2;
  const Program p = lower_ok(shape, config);
  const Weights& weights = reference(shape).weights;
  ReferenceVm recorded(p, weights);
  ReferenceVm plain(p, weights);
  recorded.set_step(3, 0);
  plain.set_step(3, 0);
  std::map<std::pair<uint32_t, bool>, uint64_t> counts;
  uint64_t kv_writes = 0, q_writes = 0;
  std::function<void(const ElementAccess&)> record = [&](const ElementAccess& a) {
    ++counts[{a.buffer, a.write}];
  };
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const ms_abi::Instr& task = p.tasks[t];
    counts.clear();
    recorded.execute(t, &record);
    plain.execute(t);
    if (p.ops[task.op_id].name == "L0.qkv" && (task.flags & ms_abi::kFlagPartial)) {
      const uint64_t rows = task.row_end - task.row_begin;
      const uint64_t cols = task.col_end - task.col_begin;
      // Weights: the tile's columns plus the gamma slice; activations: the whole input for the
      // norm statistic plus the column slice, and one write per row.
      EXPECT_EQ((counts[{ms_abi::kBufWeights, false}]), rows * cols + cols);
      EXPECT_EQ((counts[{ms_abi::kBufActivations, false}]), 64 + cols);
      EXPECT_EQ((counts[{ms_abi::kBufActivations, true}]), rows);
    }
    if (task.opcode == ms_abi::kGemvReduce && (task.flags & ms_abi::kFlagRopeKv)) {
      kv_writes += counts[{ms_abi::kBufKv, true}];
      q_writes += counts[{ms_abi::kBufActivations, true}];
    }
  }
  // The reduces with the RoPE epilogue write every query row and every K and V row once.
  EXPECT_EQ(q_writes, 64u);
  EXPECT_EQ(kv_writes, 64u);
  EXPECT_EQ(recorded.activations(), plain.activations());
}

}  // namespace
}  // namespace megasched::vm
