// The plan search (search/plan_search.h) over the real loop (run_loop) and a fake evaluator whose
// schedule ids name the timed position as TrialEvaluator's do: buckets timed at their midpoints,
// the budget split, bucket i + 1 seeded with bucket i's winner, equal neighbours merged, and every
// (config, position) evaluated once across buckets and across runs.
#include "search/plan_search.h"

#include <gtest/gtest.h>

#include "eval/evaluate.h"
#include "tests/search/loop_fakes.h"

namespace megasched::search {
namespace {

using namespace loop_testing;
using nlohmann::json;
using schedule::ScheduleConfig;

TEST(PlanSearch, BoundariesBecomeBucketsOrAreRefusedWithAHint) {
  std::string error;
  auto plan = plan_from_boundaries({0, 32, 64}, 128, "toy", &error);
  ASSERT_TRUE(plan) << error;
  ASSERT_EQ(plan->buckets.size(), 3u);
  EXPECT_EQ(plan->buckets[1].begin, 32);
  EXPECT_EQ(plan->buckets[1].end, 64);
  EXPECT_EQ(plan->buckets[2].end, schedule::kPlanEndOfModel);
  struct Bad {
    std::vector<int> list;
    const char* says;
  };
  for (const Bad& bad :
       {Bad{{0, 64, 32}, "32 follows 64: the boundaries must be strictly ascending"},
        Bad{{0, 32, 32}, "32 follows 32"}, Bad{{16, 64}, "the first bucket begins at 16, not 0"},
        Bad{{0, 128}, "128 is at or past the last position 127 of model toy"},
        Bad{{}, "no bucket given"}}) {
    error.clear();
    EXPECT_FALSE(plan_from_boundaries(bad.list, 128, "toy", &error));
    EXPECT_NE(error.find(bad.says), std::string::npos) << error;
    EXPECT_NE(error.find("hint: --plan-buckets lists each bucket's first position"),
              std::string::npos)
        << error;
  }
}

TEST(PlanSearch, MidpointsBudgetSplitAndMerging) {
  EXPECT_EQ(bucket_timed_position({0, 32, {}}, 128), 15);
  EXPECT_EQ(bucket_timed_position({64, schedule::kPlanEndOfModel, {}}, 128), 95);
  EXPECT_EQ(bucket_timed_position({5, 6, {}}, 128), 5);
  EXPECT_EQ(bucket_budget(10, 3, 0), 4);
  EXPECT_EQ(bucket_budget(10, 3, 1), 3);
  EXPECT_EQ(bucket_budget(10, 3, 2), 3);
  EXPECT_EQ(bucket_budget(2, 3, 2), 1);  // at least one trial each
  ScheduleConfig a, b;
  b.tiling.attn_kv_partitions = 4;
  schedule::Plan plan;
  plan.buckets = {
      {0, 8, a}, {8, 16, b}, {16, 32, b}, {32, 64, a}, {64, schedule::kPlanEndOfModel, a}};
  const schedule::Plan merged = merge_equal_buckets(plan);
  ASSERT_EQ(merged.buckets.size(), 3u);
  EXPECT_EQ(merged.buckets[1].begin, 8);
  EXPECT_EQ(merged.buckets[1].end, 32);
  EXPECT_EQ(merged.buckets[2].begin, 32);
  EXPECT_EQ(merged.buckets[2].end, schedule::kPlanEndOfModel);
}

// A fake evaluator timed at one position: ids as TrialEvaluator gives them ("|posP"), latency
// from the position and the config, every evaluation counted by id (shared across buckets).
class PositionedEvaluator : public eval::Evaluator {
 public:
  PositionedEvaluator(int position, std::map<std::string, int>* counts)
      : position_(position), counts_(counts) {}
  eval::Verdict evaluate(const ScheduleConfig& c) override {
    ++(*counts_)[schedule_id(c)];
    // Partitioning the KV history pays off only past position 64.
    const int parts = c.tiling.attn_kv_partitions;
    double us = 100.0 + position_ * (position_ > 64 ? 1.0 / parts : 1.0) + 5.0 * (parts - 1);
    eval::Verdict v = ok_verdict(us, 0.0, "predicted");
    v.schedule_id = schedule_id(c);
    v.timed_position = position_;
    v.model = "toy", v.target = "h100", v.device = "cpu";
    return v;
  }
  json identity() const override {
    return {{"model", "toy"}, {"target", "h100"}, {"device", "cpu"}};
  }
  std::string schedule_id(const ScheduleConfig& c) const override {
    return eval::trial_schedule_id(c, "toy", 0, "h100", "cpu", position_);
  }

 private:
  int position_;
  std::map<std::string, int>* counts_;
};

class PlanSearchLoop : public LoopFixture {
 protected:
  PlanSearchResult search(const std::vector<int>& boundaries, int budget) {
    PlanSearchOptions o;
    std::string error;
    o.buckets = *plan_from_boundaries(boundaries, 128, "toy", &error);
    o.max_seq = 128;
    o.budget = budget;
    return search_plan(o, [&](const BucketSearch& s) {
      searched.push_back(s);
      PositionedEvaluator ev(s.timed_position, &counts);
      ScriptedStrategy strategy({two, four});
      LoopOptions lo = options;
      lo.budget = s.budget;
      lo.warm_start = true;  // the best known at the position, else s.start
      lo.start = s.start;
      lo.timed_position = s.timed_position;
      return run_loop(ev, shape, target, strategy, clock, lo);
    });
  }
  int evaluations() const {
    int n = 0;
    for (const auto& [id, count] : counts) {
      EXPECT_EQ(count, 1) << id << " evaluated twice";
      n += count;
    }
    return n;
  }
  ScheduleConfig two = with({{"tiling.attn_kv_partitions", 2}});
  ScheduleConfig four = with({{"tiling.attn_kv_partitions", 4}});
  std::vector<BucketSearch> searched;
  std::map<std::string, int> counts;
};

TEST_F(PlanSearchLoop, SearchesEachBucketAtItsMidpointSeedsFromTheNeighbourAndMerges) {
  const PlanSearchResult r = search({0, 32, 64, 96}, 12);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_TRUE(r.complete);
  ASSERT_EQ(searched.size(), 4u);
  EXPECT_EQ(searched[0].timed_position, 15);
  EXPECT_EQ(searched[1].timed_position, 47);
  EXPECT_EQ(searched[2].timed_position, 79);
  EXPECT_EQ(searched[3].timed_position, 111);
  EXPECT_EQ(searched[1].positions, (std::vector<int>{32, 47, 63}));  // ends and midpoint
  EXPECT_EQ(searched[3].bucket.end, 128);
  for (const BucketSearch& s : searched) EXPECT_EQ(s.budget, 3);
  EXPECT_FALSE(searched[0].start);  // the loop's own seed: the default
  // Below 64 the default wins; past it four partitions. Bucket 2 starts from bucket 1's winner
  // (the default), bucket 3 from bucket 2's (four partitions).
  ASSERT_TRUE(searched[2].start);
  EXPECT_EQ(schedule::to_json(*searched[2].start), schedule::to_json(ScheduleConfig{}));
  ASSERT_TRUE(searched[3].start);
  EXPECT_EQ(schedule::to_json(*searched[3].start), schedule::to_json(four));
  // [0, 32) and [32, 64) both keep the default: one bucket; [64, 96) and [96, max) both four.
  ASSERT_TRUE(r.plan);
  ASSERT_EQ(r.plan->buckets.size(), 2u);
  EXPECT_EQ(r.plan->buckets[0].end, 64);
  EXPECT_EQ(schedule::to_json(r.plan->buckets[1].config), schedule::to_json(four));
  EXPECT_EQ(r.plan->buckets[1].end, schedule::kPlanEndOfModel);
  EXPECT_EQ(r.summary["merged"], 2);
  ASSERT_EQ(r.summary["buckets"].size(), 4u);
  EXPECT_EQ(r.summary["buckets"][2]["timed_position"], 79);
  EXPECT_EQ(r.summary["buckets"][2]["best"]["config"], schedule::to_json(four));
  ASSERT_TRUE(r.summary["buckets"][2].contains("confirm"));   // the bucket loop's tally
  EXPECT_TRUE(r.summary["buckets"][2]["confirm"].is_null());  // (no --confirm)
  // Bucket 3's seed (four, winner of bucket 2) is a new trial at position 111, so it ran, and
  // its proposal of four was known there (skipped): 3 + 3 + 3 + 2, no (config, position) twice.
  EXPECT_EQ(evaluations(), 11);
}

TEST_F(PlanSearchLoop, TrialsTimedAtABucketsPositionAreReusedNotRerun) {
  ASSERT_TRUE(search({0, 64}, 6).ok);
  const int first = evaluations();
  EXPECT_EQ(first, 6);  // 3 configs at 31, 3 at 95
  // The same buckets again: each bucket warm-starts from its last winner and every proposal is
  // known at its position: nothing runs, and the plan is the same.
  searched.clear();
  const PlanSearchResult again = search({0, 64}, 6);
  ASSERT_TRUE(again.ok) << again.error;
  EXPECT_EQ(evaluations(), first);
  for (const json& b : again.summary["buckets"]) EXPECT_EQ(b["evaluations"], 0) << b.dump();
  EXPECT_EQ(again.summary["buckets"][1]["seed"]["evaluated"], false);
  EXPECT_EQ(again.summary["buckets"][1]["seed"]["source"], "warm-start");
  ASSERT_TRUE(again.plan);
  ASSERT_EQ(again.plan->buckets.size(), 2u);
  EXPECT_EQ(schedule::to_json(again.plan->buckets[1].config), schedule::to_json(four));
  // Finer buckets: [64, 80) is timed at 71, new; [80, max) at 103, new; [0, 64) at 31, known.
  searched.clear();
  const PlanSearchResult finer = search({0, 64, 80}, 9);
  ASSERT_TRUE(finer.ok) << finer.error;
  EXPECT_EQ(finer.summary["buckets"][0]["evaluations"], 0);
  EXPECT_GT(finer.summary["buckets"][1]["evaluations"].get<int>(), 0);
  evaluations();  // and still no (config, position) twice
}

TEST_F(PlanSearchLoop, AStopLeavesTheRestToTheirNeighbourUnsearched) {
  std::atomic<bool> stop{false};
  PlanSearchOptions o;
  std::string error;
  o.buckets = *plan_from_boundaries({0, 32, 64}, 128, "toy", &error);
  o.max_seq = 128;
  o.budget = 3;
  o.stop = &stop;
  const PlanSearchResult r = search_plan(o, [&](const BucketSearch& s) {
    stop = true;  // as a signal during the first bucket would
    PositionedEvaluator ev(s.timed_position, &counts);
    ScriptedStrategy strategy({});
    LoopOptions lo = options;
    lo.budget = s.budget;
    lo.timed_position = s.timed_position;
    return run_loop(ev, shape, target, strategy, clock, lo);
  });
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.complete);
  ASSERT_TRUE(r.plan);
  ASSERT_EQ(r.plan->buckets.size(), 1u);  // every bucket took the first one's default
  EXPECT_EQ(r.summary["buckets"][1]["searched"], false);
  EXPECT_EQ(r.summary["buckets"][2]["searched"], false);
}

TEST_F(PlanSearchLoop, ABucketWithoutACorrectTrialLeavesNoPlan) {
  PlanSearchOptions o;
  std::string error;
  o.buckets = *plan_from_boundaries({0, 64}, 128, "toy", &error);
  o.max_seq = 128;
  o.budget = 2;
  FakeEvaluator broken(&clock);
  broken.fallback = [](const ScheduleConfig&) {
    eval::Verdict v;
    v.status = "incorrect";
    v.valid = true;
    return v;
  };
  const PlanSearchResult r = search_plan(o, [&](const BucketSearch& s) {
    ScriptedStrategy strategy({});
    LoopOptions lo = options;
    lo.budget = s.budget;
    if (s.index == 1) return run_loop(broken, shape, target, strategy, clock, lo);
    PositionedEvaluator ev(s.timed_position, &counts);
    return run_loop(ev, shape, target, strategy, clock, lo);
  });
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.plan);
  EXPECT_TRUE(r.summary["plan"].is_null());
  EXPECT_NE(
      r.summary["incomplete"].get<std::string>().find("bucket [64, max) has no correct trial"),
      std::string::npos)
      << r.summary.dump();
}

}  // namespace
}  // namespace megasched::search
