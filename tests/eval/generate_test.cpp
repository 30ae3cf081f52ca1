// Greedy generation (eval/generate.h) with a config and with a plan that switches program at a
// bucket boundary: the plan's tokens and logits are those of each config alone on its side.
#include "eval/generate.h"

#include <gtest/gtest.h>

#include "schedule/lower.h"
#include "schedule/model.h"
#include "schedule/target.h"
#include "tests/h100_target.h"

namespace megasched::eval {
namespace {

using schedule::Plan;
using schedule::PlanBucket;
using schedule::ScheduleConfig;

struct Generated {
  GenerateResult result;
  std::vector<std::vector<float>> logits;  // per step
};

Generated generate_with(const schedule::Weights& w, const Plan& plan,
                        const std::vector<int32_t>& prompt, int max_tokens) {
  Generated r;
  GenerateOptions o;
  o.prompt = prompt;
  o.max_tokens = max_tokens;
  o.on_logits = [&r](int, const std::vector<float>& logits) { r.logits.push_back(logits); };
  r.result = generate(w, testing_support::h100_target(), plan, o);
  return r;
}

// Config b splits the KV history of every attention task into 4 partitions: another program whose
// attention sums in another order, with the same QKV projection (so the same KV cache).
ScheduleConfig partitioned() {
  ScheduleConfig c;
  c.tiling.attn_kv_partitions = 4;
  return c;
}

void expect_plan_matches_each_config(const std::string& model, const std::vector<int32_t>& prompt,
                                     int max_tokens, int boundary) {
  SCOPED_TRACE(model);
  const schedule::Weights w = schedule::generate_weights(*schedule::find_preset(model), 3, 1);
  const ScheduleConfig a{};
  const ScheduleConfig b = partitioned();
  const Generated alone_a = generate_with(w, schedule::single_config_plan(a), prompt, max_tokens);
  const Generated alone_b = generate_with(w, schedule::single_config_plan(b), prompt, max_tokens);
  Plan plan;
  plan.buckets = {PlanBucket{0, boundary, a}, PlanBucket{boundary, schedule::kPlanEndOfModel, b}};
  const Generated both = generate_with(w, plan, prompt, max_tokens);
  ASSERT_TRUE(alone_a.result.ok) << alone_a.result.error;
  ASSERT_TRUE(alone_b.result.ok) << alone_b.result.error;
  ASSERT_TRUE(both.result.ok) << both.result.error;
  const size_t steps = alone_a.logits.size();
  ASSERT_EQ(both.logits.size(), steps);
  ASSERT_GE(steps, static_cast<size_t>(boundary + 2));  // two steps past the boundary
  EXPECT_EQ(both.result.switch_positions, std::vector<int>{boundary});
  EXPECT_TRUE(alone_a.result.switch_positions.empty());
  bool configs_differ = false;
  for (size_t pos = 0; pos < steps; ++pos) {
    const Generated& expect = static_cast<int>(pos) < boundary ? alone_a : alone_b;
    EXPECT_EQ(both.logits[pos], expect.logits[pos]) << "position " << pos;
    configs_differ = configs_differ || alone_a.logits[pos] != alone_b.logits[pos];
  }
  // The two programs sum attention in different orders: were their logits the same bit for bit,
  // the comparison above could not tell which program ran after the boundary.
  EXPECT_TRUE(configs_differ);
  EXPECT_EQ(both.result.tokens, alone_a.result.tokens);
  EXPECT_EQ(both.result.tokens, alone_b.result.tokens);
}

TEST(GeneratePlan, AcrossABoundaryGivesEachConfigsTokensAndLogitsOnToy) {
  expect_plan_matches_each_config("toy", {5, 17, 200}, 12, 7);
}

TEST(GeneratePlan, AcrossABoundaryGivesEachConfigsTokensAndLogitsOnToy2L) {
  expect_plan_matches_each_config("toy-2L", {1, 2}, 6, 3);
}

TEST(GeneratePlan, AcrossABoundaryGivesEachConfigsTokensAndLogitsOnSmall) {
  expect_plan_matches_each_config("small", {1, 2, 3, 4, 5}, 2, 4);
}

TEST(GeneratePlan, EveryBucketIsPreparedBeforeTheFirstToken) {
  const schedule::Weights w = schedule::generate_weights(*schedule::find_preset("toy"), 3, 1);
  ScheduleConfig bad;
  bad.fusion.combine_into_o = true;  // conflicts without KV partitions: does not lower
  Plan plan;
  plan.buckets = {PlanBucket{0, 100, {}}, PlanBucket{100, schedule::kPlanEndOfModel, bad}};
  const Generated r = generate_with(w, plan, {1}, 4);  // never reaches position 100
  EXPECT_FALSE(r.result.ok);
  EXPECT_TRUE(r.logits.empty());
  EXPECT_EQ(r.result.error.rfind("bucket [100, max): lowering: ", 0), 0u) << r.result.error;
}

TEST(GeneratePlan, RefusesAPlanThatLeavesPositionsWithoutABucket) {
  const schedule::Weights w = schedule::generate_weights(*schedule::find_preset("toy"), 3, 1);
  Plan plan;
  plan.buckets = {PlanBucket{0, 64, {}}};
  const Generated r = generate_with(w, plan, {1}, 4);
  EXPECT_FALSE(r.result.ok);
  EXPECT_NE(r.result.error.find("positions [64, 128) have no bucket"), std::string::npos)
      << r.result.error;
}

TEST(GeneratePlan, KvLayoutDifferenceNamesTheField) {
  const schedule::ModelShape shape = *schedule::find_preset("toy");
  std::string error;
  auto a = schedule::lower(shape, testing_support::h100_target(), {}, &error);
  auto b = schedule::lower(shape, testing_support::h100_target(), partitioned(), &error);
  ASSERT_TRUE(a && b) << error;
  EXPECT_EQ(kv_layout_difference(*a, *b), "");
  b->model.kv_dtype = a->model.kv_dtype + 1;
  EXPECT_EQ(kv_layout_difference(*a, *b), "KV dtype code " + std::to_string(a->model.kv_dtype) +
                                              " vs " + std::to_string(b->model.kv_dtype));
  b->buffer_elements[ms_abi::kBufKv] += 1;
  EXPECT_NE(kv_layout_difference(*a, *b).find("KV buffer elements"), std::string::npos);
}

}  // namespace
}  // namespace megasched::eval
