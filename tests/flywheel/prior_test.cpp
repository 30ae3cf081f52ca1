// The learned prior: features, ridge fit, rank correlation, failure model.
#include "flywheel/prior.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "schedule/config.h"
#include "schedule/search.h"
#include "tests/h100_target.h"

namespace megasched::flywheel {
namespace {

using schedule::ScheduleConfig;

TEST(Spearman, IdenticalOrderIsOneAndReversedIsMinusOne) {
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {10, 20, 30, 400}), 1.0);
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
}

TEST(Spearman, TiesTakeTheirAverageRank) {
  // ranks a: 1, 2.5, 2.5, 4; b: 1, 2, 3, 4 -> r = 4.5 / sqrt(4.5 * 5)
  EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 2, 3, 4}), 4.5 / std::sqrt(4.5 * 5.0), 1e-12);
  EXPECT_DOUBLE_EQ(spearman({1, 1, 1}, {1, 2, 3}), 0.0);  // a constant series ranks nothing
}

schedule::GpuTarget h100() { return testing_support::h100_target(); }

// A landscape with main effects and one interaction (rows per task x blocks per SM).
double synthetic_us(const ScheduleConfig& c) {
  // rows_per_task 0 (one tile per block) lands where 64 rows would on this landscape.
  const int rows = c.tiling.gemv_rows_per_task == 0 ? 64 : c.tiling.gemv_rows_per_task;
  double us = 200.0;
  us *= 1.0 + 0.3 * std::abs(std::log2(rows / 32.0)) / 3.0;
  us *= c.kernel.vector_bytes == 16 ? 1.0 : c.kernel.vector_bytes == 8 ? 1.15 : 1.4;
  us *= 1.0 + 0.1 * c.tiling.gemv_k_split / 8.0;
  if (rows <= 16 && c.launch.blocks_per_sm >= 2) us *= 0.8;
  us *= c.fusion.norm_into_gemv ? 1.0 : 1.08;
  return us;
}

TEST(Prior, RanksHeldOutConfigsOfASyntheticLandscape) {
  const schedule::ModelShape shape = *schedule::find_preset("small");
  const schedule::GpuTarget target = h100();
  std::mt19937_64 rng(3);
  std::vector<PriorSample> samples;
  for (int i = 0; i < 240; ++i) {
    ScheduleConfig c = schedule::random_config(shape, target, rng);
    samples.push_back({schedule::to_json(c), schedule::to_json(shape), synthetic_us(c), "small"});
  }
  PriorEvaluation e = evaluate_prior(samples, 5, 1);
  EXPECT_EQ(e.samples, 240);
  EXPECT_GT(e.spearman, 0.85);
  EXPECT_GT(e.per_model["small"]["spearman"].get<double>(), 0.85);
}

TEST(Prior, UntrainedBelowTheMinimumSampleCount) {
  const schedule::ModelShape shape = *schedule::find_preset("toy");
  Prior prior;
  std::vector<PriorSample> samples(
      3, {schedule::to_json(ScheduleConfig{}), schedule::to_json(shape), 10.0, "toy"});
  EXPECT_FALSE(prior.fit(samples, 4));
  EXPECT_FALSE(prior.trained());
}

TEST(Prior, FailureModelFlagsConfigsLikeThoseThatFailed) {
  const schedule::ModelShape shape = *schedule::find_preset("toy");
  const schedule::GpuTarget target = h100();
  std::mt19937_64 rng(5);
  std::vector<PriorSample> samples;
  for (int i = 0; i < 120; ++i) {
    ScheduleConfig c = schedule::random_config(shape, target, rng);
    PriorSample s{schedule::to_json(c), schedule::to_json(shape), std::nullopt, "toy"};
    if (c.kernel.weight_load != schedule::WeightLoad::kLdgStream)
      s.latency_us = 100.0 + c.kernel.unroll;
    samples.push_back(s);
  }
  Prior prior;
  ASSERT_TRUE(prior.fit(samples));
  ScheduleConfig stream;
  stream.kernel.weight_load = schedule::WeightLoad::kLdgStream;
  EXPECT_GT(prior.predict_failure(schedule::to_json(stream), schedule::to_json(shape)), 0.6);
  EXPECT_LT(prior.predict_failure(schedule::to_json(ScheduleConfig{}), schedule::to_json(shape)),
            0.4);
}

TEST(Prior, SamplesKeepOnlyTheRequestedTargetAndLatencyKind) {
  CorpusRecord a;
  a.target = "h100";
  a.device = "cpu";
  a.status = kStatusKept;
  a.verdict.correct = true;
  a.verdict.latency_us = 5.0;
  a.verdict.latency_kind = "predicted";
  CorpusRecord b = a;
  b.target = "a100";
  CorpusRecord c = a;
  c.status = kStatusRejected;
  c.verdict.correct = false;
  c.verdict.latency_us.reset();
  auto samples = prior_samples({a, b, c}, "h100", "cpu");
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_TRUE(samples[0].latency_us.has_value());
  EXPECT_FALSE(samples[1].latency_us.has_value());  // a failure: the failure model's negative
}

/// A kept, correct GPU measurement of toy on `target`: its config has 2^(i % 4) KV partitions.
CorpusRecord measured_row(const std::string& target, int i, double latency_us) {
  CorpusRecord r;
  r.target = target;
  r.device = "gpu";
  r.model = "toy";
  r.status = kStatusKept;
  r.verdict.correct = true;
  r.verdict.latency_kind = "measured-gpu";
  r.config = {{"tiling", {{"attn_kv_partitions", 1 << (i % 4)}}}};
  r.verdict.latency_us = latency_us;
  return r;
}

// A row of `--gpu auto` names the live device, one of `--gpu h200` the registry's target: one GPU,
// one group in the per-target evaluation and in the samples of either name.
TEST(Prior, TheLiveNameAndTheTargetNameOfAGpuAreOneTarget) {
  std::vector<CorpusRecord> rows;
  for (int i = 0; i < 24; ++i)
    rows.push_back(
        measured_row(i % 2 ? "NVIDIA H200" : "h200", i, 100.0 + 10.0 * (i % 4) + 0.1 * i));
  EXPECT_EQ(prior_samples(rows, "NVIDIA H200", "gpu").size(), 24u);
  EXPECT_EQ(prior_samples(rows, "h200", "gpu").size(), 24u);
  const nlohmann::json per_target = evaluate_prior_per_target(rows, "", "", 3, 0);
  ASSERT_EQ(per_target.size(), 1u) << per_target.dump();
  EXPECT_EQ(per_target[0]["target"], "h200");
  EXPECT_EQ(per_target[0]["samples"], 24);
  EXPECT_EQ(evaluate_prior_per_target(rows, "NVIDIA H200", "gpu", 3, 0).size(), 1u);
}

// A latency at position 4096, or under an objective, is another quantity than one at position 0:
// the held-out evaluation ranks each group on its own rows (as the loop trains on rows judged as
// it judges), so rows of one config at two positions cannot pass for a config the prior misranks.
TEST(Prior, EvaluationGroupsRowsByTheirTimedPositionAndObjective) {
  std::vector<CorpusRecord> rows;
  for (int i = 0; i < 36; ++i) {
    const int kind = i % 3;  // position 0, position 4096, an objective over both
    // Position 4096 reverses position 0's order: mixed, no ranking fits both.
    const double rank = kind == 1 ? 3 - i % 4 : i % 4;
    CorpusRecord r = measured_row("h100", i, (kind == 1 ? 400.0 : 100.0) + 10.0 * rank + 0.01 * i);
    r.verdict.timed_position = kind == 1 ? 4096 : 0;
    if (kind == 2)
      r.verdict.objective = nlohmann::json::array(
          {{{"position", 0}, {"weight", 1.0}}, {{"position", 4096}, {"weight", 1.0}}});
    rows.push_back(r);
  }
  const nlohmann::json per = evaluate_prior_per_target(rows, "", "", 3, 0);
  ASSERT_EQ(per.size(), 3u) << per.dump();
  EXPECT_EQ(per[0]["timed_position"], 0);
  EXPECT_EQ(per[1]["timed_position"], 4096);
  EXPECT_EQ(per[2]["objective"], "0:1,4096:1");
  EXPECT_FALSE(per[2].contains("timed_position"));
  for (const auto& g : per) {
    EXPECT_EQ(g["samples"], 12) << g.dump();
    EXPECT_GT(g["spearman"].get<double>(), 0.9) << g.dump();  // each group alone is easy to rank
  }
}

}  // namespace
}  // namespace megasched::flywheel
