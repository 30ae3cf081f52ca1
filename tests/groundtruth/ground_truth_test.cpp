#include "groundtruth/ground_truth.h"

#include <gtest/gtest.h>

#include <random>

#include "groundtruth/program_fuzz.h"
#include "schedule/lower.h"
#include "schedule/search.h"
#include "schedule/validate.h"
#include "tests/toy_weights.h"

namespace megasched::groundtruth {
namespace {

using namespace schedule;

constexpr uint32_t kIn = 0, kA = 256, kB = 264, kC = 272;

using testing_support::toy_weights;

// The verdict over every position that matters (an unsafe position makes the program unsafe).
GroundTruth truth_of(const Program& p, const GpuTarget& t = fuzz_target()) {
  GroundTruth all;
  for (int32_t position : ground_truth_positions(p)) {
    TaskAccesses acc;
    std::string error;
    EXPECT_TRUE(record_accesses(p, toy_weights(), position, &acc, &error)) << error;
    const GroundTruth g = explore_ground_truth(p, t, acc);
    all.complete = all.complete && g.complete;
    all.states += g.states;
    all.kinds.insert(g.kinds.begin(), g.kinds.end());
    all.findings.insert(all.findings.end(), g.findings.begin(), g.findings.end());
  }
  return all;
}

TEST(GroundTruth, RecordsElementAccessesFromTheReferenceVm) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), 10, 20, kA, 2);
  TaskAccesses acc;
  std::string error;
  ASSERT_TRUE(record_accesses(b.finish(), toy_weights(), 0, &acc, &error)) << error;
  const auto act = [](uint64_t i) { return element_key(ms_abi::kBufActivations, i); };
  EXPECT_EQ(acc.reads[0], (std::vector<uint64_t>{act(10), act(11), act(20), act(21)}));
  EXPECT_EQ(acc.writes[0], (std::vector<uint64_t>{act(256), act(257)}));
}

TEST(GroundTruth, AcceptsProducerConsumerAcrossQueues) {
  ProgramBuilder b(fuzz_target());
  const uint32_t c = b.counter("c");
  b.add(0, b.op("x"), kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, b.op("y"), kA, kIn, kB, 8, {{c, 1}});
  const GroundTruth g = truth_of(b.finish());
  EXPECT_TRUE(g.safe()) << (g.findings.empty() ? "" : g.findings[0]);
  EXPECT_EQ(g.states, 6u);  // {}, {x}, {x, y} at step epoch 0 and at the epoch where c wraps
}

TEST(GroundTruth, FindsRaceWhenAWaitIsMissing) {
  ProgramBuilder b(fuzz_target());
  const uint32_t c = b.counter("c");
  b.add(0, b.op("x"), kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, b.op("y"), kA, kIn, kB, 8);
  EXPECT_EQ(truth_of(b.finish()).kinds, (std::set<std::string>{"race"}));
}

TEST(GroundTruth, FindsStaleReadWhenTheConsumerIsQueuedFirst) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("y"), kA, kIn, kB, 8);
  b.add(0, b.op("x"), kIn, kIn, kA, 8);
  EXPECT_EQ(truth_of(b.finish()).kinds, (std::set<std::string>{"stale_read"}));
}

TEST(GroundTruth, FindsDeadlockInACrossQueueCycle) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), c0 = b.counter("c0"), c1 = b.counter("c1");
  b.add(0, x, kIn, kIn, kA, 8, {{c1, 1}}, c0, 1);
  b.add(1, x, kIn, kIn, kB, 8, {{c0, 1}}, c1, 1);
  EXPECT_EQ(truth_of(b.finish()).kinds, (std::set<std::string>{"deadlock"}));
}

TEST(GroundTruth, SeesWhichProducerAPartialWaitImplies) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), c = b.counter("c");
  b.add(0, x, kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, x, kIn, kIn, kB, 8, {}, c, 1);
  b.add(2, b.op("y"), kA, kIn, kC, 8, {{c, 1}});
  EXPECT_EQ(truth_of(b.finish()).kinds, (std::set<std::string>{"race"}));
  ProgramBuilder same_queue(fuzz_target());
  same_queue.op("x");
  same_queue.counter("c");
  same_queue.add(0, x, kIn, kIn, kA, 8, {}, c, 1);
  same_queue.add(0, x, kIn, kIn, kB, 8, {}, c, 1);
  same_queue.add(2, 0, kA, kIn, kC, 8, {{c, 1}});
  EXPECT_TRUE(truth_of(same_queue.finish()).safe());
}

TEST(GroundTruth, CountsWorkersHeldByClaimedTasksInADynamicQueue) {
  auto build = [](int sms) {
    ProgramBuilder b(fuzz_target(sms));
    b.set_dynamic(true);
    const uint32_t x = b.op("x"), c = b.counter("p.done");
    for (uint32_t i = 0; i < 4; ++i) b.add(0, x, kA, kIn, kB + 8 * i, 8, {{c, 1}});
    b.add(0, b.op("p"), kIn, kIn, kA, 8, {}, c, 1);
    return b.finish();
  };
  EXPECT_EQ(truth_of(build(4), fuzz_target(4)).kinds, (std::set<std::string>{"deadlock"}));
  EXPECT_TRUE(truth_of(build(5), fuzz_target(5)).safe());
}

TEST(GroundTruth, FindsLaunchesThatCannotBeCoResident) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), kIn, kIn, kA, 8);
  Program p = b.finish();
  p.launch.grid_blocks = 4 * 32 + 1;  // beyond 32 blocks per SM
  EXPECT_EQ(truth_of(p).kinds, (std::set<std::string>{"launch"}));
  p = b.finish();
  p.launch.smem_bytes = fuzz_target().smem_per_block_optin + 1;
  EXPECT_EQ(truth_of(p).kinds, (std::set<std::string>{"launch"}));
}

TEST(GroundTruth, ValidatorNeverAcceptsWhatTheGroundTruthRejectsOnRandomDags) {
  std::mt19937_64 rng(11);
  const GpuTarget t = fuzz_target();
  int unsafe = 0;
  for (int i = 0; i < 300; ++i) {
    std::string label;
    const Program p = random_dag_program(t, rng, &label);
    const GroundTruth g = truth_of(p, t);
    ASSERT_TRUE(g.complete);
    unsafe += !g.safe();
    if (!g.safe()) {
      EXPECT_FALSE(validate(p, t).ok()) << label << ": " << g.findings[0];
    }
  }
  EXPECT_GT(unsafe, 60);
}

// Small real lowerings on a 4-SM target: explored exhaustively, safe, and the ReferenceVm gives the
// same bits in every random order.
TEST(GroundTruth, RealToyLoweringsAreSafeAndOrderIndependent) {
  const ModelShape shape = *find_preset("toy");
  const GpuTarget target = fuzz_target(4);
  std::mt19937_64 rng(3);
  int checked = 0;
  for (int i = 0; i < 200 && checked < 6; ++i) {
    const ScheduleConfig cfg = random_config(shape, target, rng);
    std::string error;
    const std::optional<Program> p = lower(shape, target, cfg, &error);
    ASSERT_TRUE(p) << error;
    if (p->tasks.size() > 40) continue;
    const GroundTruth g = truth_of(*p, target);
    ASSERT_TRUE(g.safe()) << canonical_string(cfg) << "\n"
                          << (g.findings.empty() ? "" : g.findings[0]);
    const DynamicCheck d = dynamic_check(*p, toy_weights(), 12, 100, 5, 3);
    EXPECT_TRUE(d.completed && d.deterministic) << d.detail;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

TEST(GroundTruth, CoversEveryPositionAtWhichAPartitionReadsTheCurrentKey) {
  ScheduleConfig cfg;
  cfg.tiling.attn_kv_partitions = 4;
  std::string error;
  const std::optional<Program> p = lower(*find_preset("toy"), fuzz_target(4), cfg, &error);
  ASSERT_TRUE(p) << error;
  EXPECT_EQ(ground_truth_positions(*p), (std::vector<int32_t>{0, 1, 2, 3}));
  // Partition 0 without its wait on the K/V append: safe at position 3 (it reads only history
  // there), unsafe at position 0 (it reads the key being appended).
  Program m = *p;
  bool dropped = false;
  for (auto& in : m.tasks)
    if (in.opcode == ms_abi::kAttnPartial && in.param1 == 0 && !dropped) {
      in.wait_count = 0;
      dropped = true;
    }
  ASSERT_TRUE(dropped);
  TaskAccesses at3;
  ASSERT_TRUE(record_accesses(m, toy_weights(), 3, &at3, &error));
  EXPECT_FALSE(truth_of(m, fuzz_target(4)).safe());
  EXPECT_FALSE(validate(m, fuzz_target(4)).ok());
}

// Inputs come from the model: the KV history at position 7 is an input because this program's
// appends write each head's row at every position; a head that no task appends is not, however the
// program marks its region, and neither is an activation region the program marks input.
TEST(GroundTruth, TakesInputsFromTheModelNotFromRegionFlags) {
  std::string error;
  const std::optional<Program> base = lower(*find_preset("toy"), fuzz_target(4), {}, &error);
  ASSERT_TRUE(base) << error;
  auto kinds_at = [](const Program& p, int32_t position) {
    TaskAccesses acc;
    std::string why;
    EXPECT_TRUE(record_accesses(p, toy_weights(), position, &acc, &why)) << why;
    return explore_ground_truth(p, fuzz_target(4), acc).kinds;
  };
  EXPECT_TRUE(kinds_at(*base, 7).empty());
  Program no_v = *base;
  const uint32_t hd = no_v.model.head_dim;
  for (auto& in : no_v.tasks)
    if ((in.flags & ms_abi::kFlagRopeKv) &&
        in.row_end == (no_v.model.heads + 2 * no_v.model.kv_heads) * hd)
      in.row_end -= hd;  // the last V head is never appended
  for (const Region& r : no_v.regions) ASSERT_TRUE(r.buffer != ms_abi::kBufKv || r.input);
  EXPECT_EQ(kinds_at(no_v, 7), (std::set<std::string>{"uninitialized_read"}));
  EXPECT_EQ(kinds_at(no_v, 0), (std::set<std::string>{"uninitialized_read"}));
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), 600, kIn, kA, 8);
  Program marked = b.finish();
  marked.regions.push_back(Region{"mine", ms_abi::kBufActivations, 600, 608, true});
  EXPECT_EQ(truth_of(marked).kinds, (std::set<std::string>{"uninitialized_read"}));
}

TEST(GroundTruth, DynamicCheckSeesADroppedWait) {
  const ModelShape shape = *find_preset("toy");
  const GpuTarget target = fuzz_target(4);
  std::string error;
  const std::optional<Program> base = lower(shape, target, ScheduleConfig{}, &error);
  ASSERT_TRUE(base) << error;
  // Drop every wait: consumers may now run before their producers in some orders.
  Program p = *base;
  for (auto& in : p.tasks) in.wait_count = 0;
  const DynamicCheck d = dynamic_check(p, toy_weights(), 24, 1, 5, 3);
  EXPECT_FALSE(d.deterministic) << "24 random orders all agreed";
  EXPECT_FALSE(truth_of(p, target).safe());
  EXPECT_FALSE(validate(p, target).ok());
}

}  // namespace
}  // namespace megasched::groundtruth
