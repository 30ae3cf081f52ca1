// The plan fitted to measured medians (search/plan_fit.h): at each position the config on the
// lowest of the straight lines through the configs' medians, boundaries where two lines cross (a
// config fastest only between measured positions included), the running config kept within the
// tie margin, equal configs merged, and bad input refused with a hint.
#include "search/plan_fit.h"

#include <gtest/gtest.h>

namespace megasched::search {
namespace {

using schedule::ScheduleConfig;

ScheduleConfig partitions(int p) {
  ScheduleConfig c;
  c.tiling.attn_kv_partitions = p;
  return c;
}

/// A config whose median is `at0 + slope * position` at each of `positions`.
MeasuredConfig linear(const std::string& label, const ScheduleConfig& config, double at0,
                      double slope, const std::vector<int>& positions) {
  MeasuredConfig m{label, config, {}};
  for (int p : positions) m.median_us.push_back(at0 + slope * p);
  return m;
}

TEST(PlanFit, OneConfigIsTheOneBucketPlan) {
  PlanFitInput in{{0, 1024}, {linear("a", ScheduleConfig{}, 1000, 0.5, {0, 1024})}};
  std::string error;
  auto fit = fit_plan(in, &error);
  ASSERT_TRUE(fit) << error;
  EXPECT_TRUE(fit->plan.single());
  EXPECT_EQ(fit->labels, std::vector<std::string>{"a"});
}

TEST(PlanFit, TheBoundaryIsWhereTheLinesCross) {
  // a grows 0.5 us per position from 1000, b is flat at 1100: they cross at position 200.
  const std::vector<int> at = {0, 256, 1024};
  PlanFitInput in{
      at,
      {linear("a", ScheduleConfig{}, 1000, 0.5, at), linear("b", partitions(4), 1100, 0.0, at)}};
  std::string error;
  auto fit = fit_plan(in, &error);
  ASSERT_TRUE(fit) << error;
  ASSERT_EQ(fit->plan.buckets.size(), 2u);
  EXPECT_EQ(fit->plan.buckets[0].begin, 0);
  EXPECT_EQ(fit->plan.buckets[0].end, 200);
  EXPECT_EQ(fit->plan.buckets[0].config, ScheduleConfig{});
  EXPECT_EQ(fit->plan.buckets[1].begin, 200);
  EXPECT_EQ(fit->plan.buckets[1].end, schedule::kPlanEndOfModel);
  EXPECT_EQ(fit->plan.buckets[1].config, partitions(4));
  EXPECT_EQ(fit->labels, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(fit->explain["winners"], nlohmann::json({"a", "b", "b"}));
  EXPECT_EQ(fit->explain["buckets"][1]["crossover_between"], nlohmann::json({0, 256}));
  EXPECT_EQ(fit->explain["buckets"][1]["end"], "max");
  std::string covers;
  EXPECT_TRUE(schedule::check_plan_covers(fit->plan, 8192, &covers)) << covers;
}

TEST(PlanFit, ARunningConfigWithinTheMarginKeepsItsPlace) {
  // b is 0.5% faster than a from 1024 on: noise, not a reason for a boundary at 1%, one at 0.1%.
  const std::vector<int> at = {0, 1024, 4096};
  MeasuredConfig a{"a", ScheduleConfig{}, {1000, 1000, 1000}};
  MeasuredConfig b{"b", partitions(2), {1100, 995, 995}};
  std::string error;
  auto kept = fit_plan(PlanFitInput{at, {a, b}, 0.01}, &error);
  ASSERT_TRUE(kept) << error;
  EXPECT_TRUE(kept->plan.single());
  auto split = fit_plan(PlanFitInput{at, {a, b}, 0.001}, &error);
  ASSERT_TRUE(split) << error;
  ASSERT_EQ(split->plan.buckets.size(), 2u);
  // The lines cross where 1000 = 1100 - 105 t: t = 100 / 105 of the way from 0 to 1024.
  EXPECT_EQ(split->plan.buckets[1].begin, 976);
}

TEST(PlanFit, AConfigCanComeBackAndEqualConfigsAreOneBucket) {
  const std::vector<int> at = {0, 100, 200, 300};
  MeasuredConfig a{"a", ScheduleConfig{}, {100, 300, 100, 100}};
  MeasuredConfig b{"b", partitions(2), {200, 200, 200, 200}};
  MeasuredConfig a_again{"a-file", ScheduleConfig{}, {400, 400, 400, 90}};
  std::string error;
  auto fit = fit_plan(PlanFitInput{at, {a, b, a_again}}, &error);
  ASSERT_TRUE(fit) << error;
  ASSERT_EQ(fit->plan.buckets.size(), 3u);
  EXPECT_EQ(fit->labels, (std::vector<std::string>{"a", "b", "a"}));
  EXPECT_EQ(fit->plan.buckets[1].begin, 50);   // 100 + 200 t = 200 at t = 1/2 of [0, 100]
  EXPECT_EQ(fit->plan.buckets[2].begin, 150);  // and back at 1/2 of [100, 200]
  // At 300 "a-file" (a's config under another label) is fastest: still a's bucket.
  EXPECT_EQ(fit->plan.buckets[2].end, schedule::kPlanEndOfModel);
  EXPECT_EQ(fit->explain["winners"][3], "a-file");
}

TEST(PlanFit, AConfigFastestOnlyBetweenMeasuredPositionsGetsItsBucket) {
  // a is fastest at 0 and c at 100, but b's line is the lowest from 50 (a = b) to 64 (b = c at
  // 63.6): as on an H200 on 2026-11-29, where the three-rows-a-warp config measured fastest at
  // neither 3 nor 128 and its line was the lowest from 5 to 88.
  const std::vector<int> at = {0, 100};
  MeasuredConfig a{"a", ScheduleConfig{}, {100, 300}};
  MeasuredConfig b{"b", partitions(2), {150, 250}};
  MeasuredConfig c{"c", partitions(4), {220, 210}};
  std::string error;
  auto fit = fit_plan(PlanFitInput{at, {a, b, c}}, &error);
  ASSERT_TRUE(fit) << error;
  ASSERT_EQ(fit->plan.buckets.size(), 3u);
  EXPECT_EQ(fit->labels, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(fit->plan.buckets[1].begin, 50);  // a tie goes to b, whose line falls faster
  EXPECT_EQ(fit->plan.buckets[2].begin, 64);
  EXPECT_EQ(fit->explain["winners"], nlohmann::json({"a", "c"}));
  EXPECT_EQ(fit->explain["buckets"][1]["fastest_at"], nlohmann::json::array());
  EXPECT_EQ(fit->explain["buckets"][2]["fastest_at"], nlohmann::json({100}));
  EXPECT_EQ(fit->explain["buckets"][2]["crossover_between"], nlohmann::json({0, 100}));
  // Within a 10% margin b never beats a by enough (at most 226 / 213 at 63), so a runs until c,
  // which beats a by 43% at 100; its bucket begins where its line crossed below a's (100 + 2x =
  // 220 - 0.1x at 57.1), inside the stretch where a was kept.
  auto wide = fit_plan(PlanFitInput{at, {a, b, c}, 0.10}, &error);
  ASSERT_TRUE(wide) << error;
  ASSERT_EQ(wide->plan.buckets.size(), 2u);
  EXPECT_EQ(wide->labels, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(wide->plan.buckets[1].begin, 58);
}

TEST(PlanFit, AConfigMeasuredAtSomePositionsCompetesBetweenThem) {
  // a and c measured at 0, 100 and 1000; b only at 100 and 200 (a second measurement), where it
  // is the fastest: its line runs from 100 to 200 only, so c takes over at 200, not where b's
  // line would have crossed c's.
  const std::vector<int> at = {0, 100, 200, 1000};
  MeasuredConfig a{"a", ScheduleConfig{}, {100, 300, 500, 2100}};
  MeasuredConfig b{"b", partitions(2), {250, 260}, {100, 200}};
  MeasuredConfig c{"c", partitions(4), {400, 400, 400, 400}};
  std::string error;
  auto fit = fit_plan(PlanFitInput{at, {a, b, c}}, &error);
  ASSERT_TRUE(fit) << error;
  ASSERT_EQ(fit->plan.buckets.size(), 3u);
  EXPECT_EQ(fit->labels, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(fit->plan.buckets[1].begin, 100);  // b has no line before 100 (a = 300 there)
  EXPECT_EQ(fit->plan.buckets[2].begin, 201);  // past b's last measured position
  EXPECT_EQ(fit->explain["winners"], nlohmann::json({"a", "b", "b", "c"}));
}

TEST(PlanFit, BadInputIsRefusedWithAHint) {
  struct Bad {
    PlanFitInput in;
    const char* says;
  };
  const MeasuredConfig two{"a", ScheduleConfig{}, {1, 2}};
  for (const Bad& bad : {
           Bad{PlanFitInput{{0, 8}, {}}, "no config was measured"},
           Bad{PlanFitInput{{4, 8}, {two}}, "must start at 0"},
           Bad{PlanFitInput{{0, 0}, {two}}, "strictly ascending: 0 follows 0"},
           Bad{PlanFitInput{{0, 8, 9}, {two}}, "config a has 2 medians for 3 positions"},
           Bad{PlanFitInput{{0, 8}, {MeasuredConfig{"z", {}, {1, -2}}}}, "not a positive"},
           Bad{PlanFitInput{{0, 8}, {two}, 1.5}, "tie margin must be in [0, 1)"},
           Bad{PlanFitInput{{0, 8}, {MeasuredConfig{"late", {}, {5}, {8}}}},
               "no config was measured at position 0"},
           Bad{PlanFitInput{{0, 8}, {MeasuredConfig{"odd", {}, {5}, {4}}}},
               "odd was measured at 4, not one of the measured positions"},
           Bad{PlanFitInput{{0, 8}, {MeasuredConfig{"short", {}, {5}, {0, 8}}}},
               "short has 1 medians for 2 positions"},
       }) {
    std::string error;
    EXPECT_FALSE(fit_plan(bad.in, &error));
    EXPECT_NE(error.find(bad.says), std::string::npos) << error;
  }
  std::string error;
  fit_plan(PlanFitInput{{3}, {two}}, &error);
  EXPECT_NE(error.find("hint: bench --fit-plan"), std::string::npos) << error;
}

}  // namespace
}  // namespace megasched::search
