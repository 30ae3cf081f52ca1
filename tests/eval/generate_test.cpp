// Greedy generation (eval/generate.h) with a config and with a plan that switches program at one or
// two bucket boundaries: the plan's tokens and logits are those of each config alone on its side,
// on the CPU and (GeneratePlanGpu, skipped without a device) on the GPU, where the buckets' kernels
// share one KV cache.
#include "eval/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "eval/device.h"
#include "eval/eager.h"
#include "eval/oracle.h"
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
                        const std::vector<int32_t>& prompt, int max_tokens,
                        const std::string& device = "cpu",
                        const schedule::GpuTarget& target = testing_support::h100_target()) {
  Generated r;
  GenerateOptions o;
  o.prompt = prompt;
  o.max_tokens = max_tokens;
  o.device = device;
  o.on_logits = [&r](int, const std::vector<float>& logits) { r.logits.push_back(logits); };
  r.result = generate(w, target, plan, o);
  return r;
}

// Configs that split the KV history of every attention task into 2 or 4 partitions: programs
// whose attention sums in another order, with the same QKV projection (so the same KV cache).
ScheduleConfig partitioned(int partitions = 4) {
  ScheduleConfig c;
  c.tiling.attn_kv_partitions = partitions;
  return c;
}

/// A plan of configs[i] on [boundaries[i-1], boundaries[i]) (the last to the model's end) against
/// each config alone on `device`: every step's logits those of its bucket's config (bit for bit,
/// or on a GPU after a boundary to rounding: see below),
/// one switch per boundary, the same greedy tokens.
void expect_plan_matches_each_config(const std::string& model, const std::vector<int32_t>& prompt,
                                     int max_tokens, const std::vector<ScheduleConfig>& configs,
                                     const std::vector<int>& boundaries,
                                     const std::string& device = "cpu") {
  SCOPED_TRACE(model + " on " + device);
  ASSERT_EQ(configs.size(), boundaries.size() + 1);
  schedule::GpuTarget target = testing_support::h100_target();
  if (device == "gpu") {
    std::string why;
    auto live = live_target(&why);
    ASSERT_TRUE(live) << why;
    target = *live;
  }
  const schedule::Weights w = schedule::generate_weights(*schedule::find_preset(model), 3, 1);
  std::vector<Generated> alone;
  for (const ScheduleConfig& c : configs)
    alone.push_back(
        generate_with(w, schedule::single_config_plan(c), prompt, max_tokens, device, target));
  Plan plan;
  for (size_t i = 0; i < configs.size(); ++i)
    plan.buckets.push_back(
        PlanBucket{i == 0 ? 0 : boundaries[i - 1],
                   i < boundaries.size() ? boundaries[i] : schedule::kPlanEndOfModel, configs[i]});
  const Generated both = generate_with(w, plan, prompt, max_tokens, device, target);
  for (const Generated& a : alone) ASSERT_TRUE(a.result.ok) << a.result.error;
  ASSERT_TRUE(both.result.ok) << both.result.error;
  const size_t steps = alone[0].logits.size();
  ASSERT_EQ(both.logits.size(), steps);
  ASSERT_GE(steps, static_cast<size_t>(boundaries.back() + 2));  // two steps past the last one
  EXPECT_EQ(both.result.switch_positions, boundaries);
  EXPECT_TRUE(alone[0].result.switch_positions.empty());
  std::vector<bool> differs_from_next(configs.size() - 1, false);
  // The eager forward's logits of the tokens every run fed: the prompt, then the generated ones.
  std::vector<std::vector<float>> eager_logits;
  if (device == "gpu") {
    EagerModel eager(w);
    for (size_t pos = 0; pos < steps; ++pos) {
      const int32_t token =
          pos < prompt.size() ? prompt[pos] : both.result.tokens[pos - prompt.size()];
      eager_logits.push_back(eager.step(token, static_cast<int32_t>(pos)));
    }
  }
  for (size_t pos = 0; pos < steps; ++pos) {
    size_t bucket = 0;
    while (bucket < boundaries.size() && static_cast<int>(pos) >= boundaries[bucket]) ++bucket;
    // Bit for bit while the KV history was written by this bucket's own config. After a boundary
    // of a model of several layers it was not: the layers past the first take their K and V from
    // hidden states the earlier bucket's attention summed in its own order, so the cache differs
    // from the config alone's in its last bits (a GPU's order, not the CPU twin's), and through
    // the layers so do the logits (measured on an H100: up to 1.3e-4 of the largest logit on
    // small). There the plan's logits must pass the check every program passes, against the
    // eager forward of the same tokens, with the same greedy tokens.
    if (device == "cpu" || bucket == 0) {
      EXPECT_EQ(both.logits[pos], alone[bucket].logits[pos]) << "position " << pos;
    } else {
      const Comparison c = compare_logits(both.logits[pos], eager_logits[pos], w.shape.dtype);
      EXPECT_TRUE(c.pass) << "position " << pos << ": max abs error " << c.max_abs_err
                          << ", rel error " << c.rel_err;
    }
    for (size_t i = 0; i + 1 < alone.size(); ++i)
      differs_from_next[i] =
          differs_from_next[i] || alone[i].logits[pos] != alone[i + 1].logits[pos];
  }
  // Neighbouring buckets' programs sum attention in different orders: were their logits the same
  // bit for bit, the comparison above could not tell which program ran after a boundary.
  for (size_t i = 0; i < differs_from_next.size(); ++i)
    EXPECT_TRUE(differs_from_next[i]) << "configs " << i << " and " << i + 1;
  for (const Generated& a : alone) EXPECT_EQ(both.result.tokens, a.result.tokens);
}

TEST(GeneratePlan, AcrossABoundaryGivesEachConfigsTokensAndLogitsOnToy) {
  expect_plan_matches_each_config("toy", {5, 17, 200}, 12, {ScheduleConfig{}, partitioned()}, {7});
}

TEST(GeneratePlan, AcrossABoundaryGivesEachConfigsTokensAndLogitsOnToy2L) {
  expect_plan_matches_each_config("toy-2L", {1, 2}, 6, {ScheduleConfig{}, partitioned()}, {3});
}

TEST(GeneratePlan, AcrossABoundaryGivesEachConfigsTokensAndLogitsOnSmall) {
  expect_plan_matches_each_config("small", {1, 2, 3, 4, 5}, 2, {ScheduleConfig{}, partitioned()},
                                  {4});
}

TEST(GeneratePlan, AcrossTwoBoundariesGivesEachConfigsTokensAndLogitsOnToy) {
  expect_plan_matches_each_config("toy", {5, 17, 200}, 14,
                                  {partitioned(2), ScheduleConfig{}, partitioned(4)}, {5, 10});
}

TEST(GeneratePlanGpu, AcrossABoundaryGivesEachConfigsTokensAndLogitsOnToy) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  expect_plan_matches_each_config("toy", {5, 17, 200}, 12, {ScheduleConfig{}, partitioned()}, {7},
                                  "gpu");
}

TEST(GeneratePlanGpu, AcrossTwoBoundariesGivesEachConfigsTokensAndLogitsOnToy) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  expect_plan_matches_each_config(
      "toy", {5, 17, 200}, 14, {partitioned(2), ScheduleConfig{}, partitioned(4)}, {5, 10}, "gpu");
}

TEST(GeneratePlanGpu, AcrossABoundaryGivesEachConfigsTokensAndLogitsOnSmall) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  expect_plan_matches_each_config("small", {1, 2, 3, 4, 5}, 6, {ScheduleConfig{}, partitioned()},
                                  {4}, "gpu");
}

TEST(GeneratePlanGpu, AcrossTwoBoundariesGivesEachConfigsTokensAndLogitsOnSmall) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  expect_plan_matches_each_config("small", {1, 2, 3, 4, 5}, 12,
                                  {partitioned(2), ScheduleConfig{}, partitioned(4)}, {6, 11},
                                  "gpu");
}

// Without a reader of the logits, the GPU feeds back the kernel's own argmax (GpuVm::step_argmax,
// no logits copied): the same tokens as the host's argmax over the copied logits, across a
// boundary too.
TEST(GeneratePlanGpu, TheKernelsArgmaxGivesTheTokensOfTheHostsArgmax) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  auto target = live_target(&why);
  ASSERT_TRUE(target) << why;
  const schedule::Weights w = schedule::generate_weights(*schedule::find_preset("small"), 3, 1);
  Plan plan;
  plan.buckets = {PlanBucket{0, 6, partitioned(2)},
                  PlanBucket{6, schedule::kPlanEndOfModel, ScheduleConfig{}}};
  GenerateOptions o;
  o.prompt = {1, 2, 3, 4, 5};
  o.max_tokens = 12;
  o.device = "gpu";
  const GenerateResult by_kernel = generate(w, *target, plan, o);
  const Generated by_host = generate_with(w, plan, o.prompt, o.max_tokens, "gpu", *target);
  ASSERT_TRUE(by_kernel.ok) << by_kernel.error;
  ASSERT_TRUE(by_host.result.ok) << by_host.result.error;
  EXPECT_EQ(by_kernel.tokens.size(), 12u);
  EXPECT_EQ(by_kernel.tokens, by_host.result.tokens);
  EXPECT_EQ(by_kernel.switch_positions, std::vector<int>{6});
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
