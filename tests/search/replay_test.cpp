// The strategy benchmark (search/replay.h): replays through the real loop on the synthetic
// landscape (tests/search/synthetic_landscape.h), whose optimum is known.
#include "search/replay.h"

#include <gtest/gtest.h>

#include "tests/search/synthetic_landscape.h"

namespace megasched::search {
namespace {

using testing_support::synthetic_landscape;

ReplayRun replay(const Landscape& land, const std::string& strategy, uint64_t seed, int budget) {
  ReplayOptions options;
  options.strategy.name = strategy;
  options.strategy.seed = seed;
  options.strategy.candidates = 256;
  options.budget = budget;
  std::string error;
  auto run = replay_once(land, options, &error);
  EXPECT_TRUE(run) << error;
  return run ? *run : ReplayRun{};
}

// Trials until the incumbent is the optimum (budget + 1 when it never is).
int trials_to_optimum(const ReplayRun& run, int budget) {
  for (size_t t = 0; t < run.best_true_us.size(); ++t)
    if (run.best_true_us[t] && *run.best_true_us[t] <= 100.0 + 1e-9) return static_cast<int>(t) + 1;
  return budget + 1;
}

TEST(Replay, ReproducesItsTrajectoryForAFixedSeed) {
  const Landscape land = synthetic_landscape();
  for (const std::string strategy : {"hillclimb", "elite", "sweep", "guided", "random", "bandit"}) {
    const ReplayRun a = replay(land, strategy, 7, 30), b = replay(land, strategy, 7, 30);
    ASSERT_EQ(a.schedule_ids.size(), 30u) << strategy;
    EXPECT_EQ(a.schedule_ids, b.schedule_ids) << strategy;
    EXPECT_EQ(a.statuses, b.statuses) << strategy;
    EXPECT_EQ(a.measured, b.measured) << strategy;  // the noise too
    EXPECT_EQ(a.best_true_us, b.best_true_us) << strategy;
    const ReplayRun c = replay(land, strategy, 8, 30);
    EXPECT_NE(a.schedule_ids, c.schedule_ids) << strategy;
  }
}

TEST(Replay, RandomExpectedBestIsTheOrderStatistic) {
  Landscape land;
  for (int i = 1; i <= 4; ++i) {
    LandscapeRow r;
    r.status = "ok";
    r.latency_us = i;
    r.origin = "sample";
    land.rows.push_back(r);
  }
  EXPECT_DOUBLE_EQ(random_expected_best_us(land, 1), 2.5);
  EXPECT_DOUBLE_EQ(random_expected_best_us(land, 2), (1 * 3 + 2 * 2 + 3 * 1) / 6.0);
  EXPECT_DOUBLE_EQ(random_expected_best_us(land, 4), 1.0);
  EXPECT_DOUBLE_EQ(random_expected_best_us(land, 9), 1.0);
}

// The known optimum of the synthetic landscape (1 in 336 configs; 4 of the ~38 knobs matter) within
// 200 trials (replays are exact for a seed, so these counts are fixed until a strategy, the loop or
// the knob table changes: a knob or a knob's value reshuffles every random draw): over seeds 1-20
// elite's restarts from perturbed elites find it in 10, random search in 7, hillclimb (restarts at
// random) finds it at some seed; guided finds it at seed 1 (HARNESS.md section 3b has the table
// over seeds 1-20 at 2%). Over seeds 1-6, as this test counted before kernel.silu_stage, elite and
// random found it in 3 each: six seeds were too few to rank them. Before kernel.stream_held and
// kernel.stream_held_every (seeds 1-6): elite 6, random 2.
TEST(Replay, EachStrategyFindsTheSyntheticOptimumEliteMostOften) {
  const Landscape land = synthetic_landscape();
  constexpr int kBudget = 200, kSeeds = 20;
  auto found = [&](const std::string& strategy, int seed) {
    return trials_to_optimum(replay(land, strategy, seed, kBudget), kBudget) <= kBudget;
  };
  auto found_in = [&](const std::string& strategy, bool stop_at_first) {
    int n = 0;
    for (int seed = 1; seed <= kSeeds; ++seed) {
      n += found(strategy, seed);
      if (stop_at_first && n > 0) break;
    }
    return n;
  };
  const int elite = found_in("elite", false), random = found_in("random", false);
  EXPECT_EQ(elite, 10);
  EXPECT_EQ(random, 7);
  EXPECT_GT(elite, random);
  EXPECT_EQ(found_in("hillclimb", true), 1);
  EXPECT_TRUE(found("guided", 1));
}

TEST(SearchBench, ScoresStrategiesOnTheSyntheticLandscape) {
  const Landscape land = synthetic_landscape();
  BenchOptions options;
  options.strategies = {"random", "elite"};
  options.budgets = {25, 100};
  options.seeds = 4;
  options.jobs = 2;
  options.strategy.candidates = 512;
  std::string error;
  auto doc = run_search_bench(land, options, &error);
  ASSERT_TRUE(doc) << error;
  EXPECT_DOUBLE_EQ((*doc)["optimum_us"].get<double>(), 100.0);
  ASSERT_EQ((*doc)["strategies"].size(), 2u);
  const nlohmann::json& elite = (*doc)["strategies"][1];
  EXPECT_EQ(elite["name"], "elite");
  EXPECT_EQ(elite["budgets"].size(), 2u);
  EXPECT_EQ(elite["trials_to_within"]["runs"], 4);
  EXPECT_NEAR((*doc)["random_expected_us"]["25"].get<double>(), 110.0, 0.05);
  EXPECT_NEAR((*doc)["random_expected_us"]["100"].get<double>(), 104.4, 0.05);
  // A score of 1 is the optimum: the median best and the score agree on it.
  for (const auto& b : elite["budgets"]) {
    if (b["best_median_us"].get<double>() == 100.0) {
      EXPECT_EQ(b["score_median"].get<double>(), 1.0);
    }
  }
  const std::string table = format_search_bench(*doc);
  EXPECT_NE(table.find("elite"), std::string::npos);
  EXPECT_NE(table.find("n=100"), std::string::npos);
}

}  // namespace
}  // namespace megasched::search
