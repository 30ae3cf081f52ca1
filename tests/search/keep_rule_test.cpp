// The keep rule (search/loop.h, decide_keep) on its own: the margin, and each side of its three
// boundaries (faster beyond the margin; a near-tie in either direction going to the simpler
// config; a slower or equally complex candidate never replacing the incumbent). The expected
// margins are computed here from the rule as search/loop.h states it, not read back from the code.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "eval/verdict.h"
#include "search/loop.h"

namespace megasched::search {
namespace {

constexpr double kMinGain = 0.01;  // LoopOptions' defaults: 1% ...
constexpr double kSigmas = 2.0;    // ... or 2 sigma, whichever is larger

eval::Verdict predicted(double latency_us) {
  eval::Verdict v;
  v.valid = v.correct = v.argmax_match = true;
  v.status = "ok";
  v.latency_us = latency_us;
  v.latency_kind = "predicted";
  return v;
}

eval::Verdict measured(std::vector<double> samples_us) {
  eval::Verdict v = predicted(0.0);
  double sum = 0;
  for (double s : samples_us) sum += s;
  v.latency_us = sum / static_cast<double>(samples_us.size());
  v.latency_kind = "measured-gpu";
  v.samples_us = std::move(samples_us);
  return v;
}

// The sample standard deviation (n - 1), as the header defines sigma.
double sample_sigma(const std::vector<double>& s) {
  double mean = 0;
  for (double x : s) mean += x;
  mean /= static_cast<double>(s.size());
  double var = 0;
  for (double x : s) var += (x - mean) * (x - mean);
  return std::sqrt(var / static_cast<double>(s.size() - 1));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(KeepRule, PredictedMarginIsOnePercentOfTheIncumbent) {
  // Incumbent 100 us, no noise: the margin is 1 us. 1.2 us faster is kept; 0.8 us is not.
  const KeepDecision beyond =
      decide_keep(predicted(98.8), 2, predicted(100.0), 2, kMinGain, kSigmas);
  EXPECT_TRUE(beyond.keep) << beyond.reason;
  EXPECT_NEAR(beyond.margin_us, 1.0, 1e-12);
  EXPECT_NEAR(beyond.gain_us, 1.2, 1e-12);
  EXPECT_TRUE(contains(beyond.reason, "faster by 1.200 us")) << beyond.reason;
  const KeepDecision within =
      decide_keep(predicted(99.2), 2, predicted(100.0), 2, kMinGain, kSigmas);
  EXPECT_FALSE(within.keep) << within.reason;
  EXPECT_TRUE(contains(within.reason, "within margin")) << within.reason;
}

TEST(KeepRule, MeasuredMarginIsTwoSigmaOfTheDifferenceWhenThatExceedsOnePercent) {
  const std::vector<double> inc = {96.0, 100.0, 104.0}, cand_fast = {87.0, 91.0, 95.0},
                            cand_close = {90.0, 94.0, 98.0};
  const double sigma = std::hypot(sample_sigma(inc), sample_sigma(cand_fast));  // 4 * sqrt(2)
  ASSERT_NEAR(sigma, 4.0 * std::sqrt(2.0), 1e-12);
  const double margin = kSigmas * sigma;  // 11.31 us > 1% of 100 us
  const KeepDecision fast =
      decide_keep(measured(cand_fast), 2, measured(inc), 2, kMinGain, kSigmas);
  EXPECT_NEAR(fast.margin_us, margin, 1e-9);
  EXPECT_NEAR(fast.gain_us, 9.0, 1e-9);
  EXPECT_FALSE(fast.keep) << "9 us faster is inside the 11.3 us noise margin: " << fast.reason;
  const KeepDecision close =
      decide_keep(measured(cand_close), 2, measured(inc), 2, kMinGain, kSigmas);
  EXPECT_FALSE(close.keep) << close.reason;
  const std::vector<double> cand_clear = {83.0, 87.0, 91.0};  // 13 us faster
  const KeepDecision clear =
      decide_keep(measured(cand_clear), 2, measured(inc), 2, kMinGain, kSigmas);
  EXPECT_TRUE(clear.keep) << clear.reason;
  EXPECT_TRUE(contains(clear.reason, "sigma")) << clear.reason;
}

// With ten samples or more, sigma is read off their p10 and p90: a few outlier steps in the
// incumbent's re-measurement do not make an 18% slower, simpler candidate a near-tie (their
// standard deviation gave a 560 us margin on an H200, 2026-11-29, and such a candidate was kept).
TEST(KeepRule, AFewOutlierSamplesDoNotWidenTheMargin) {
  std::vector<double> inc, cand;
  for (int i = 0; i < 100; ++i) {
    inc.push_back(939.0 + (i % 5) - 2.0);  // 937 .. 941
    cand.push_back(1108.0 + (i % 5) - 2.0);
  }
  inc[10] = inc[50] = inc[90] = 9000.0;  // three steps that waited on something else
  ASSERT_GT(sample_sigma(inc), 1000.0);
  eval::Verdict incumbent = measured(inc);
  incumbent.latency_us = 939.0;                                 // the median
  EXPECT_NEAR(latency_sigma_us(incumbent), 4.0 / 2.563, 1e-9);  // p90 941, p10 937
  const KeepDecision d = decide_keep(measured(cand), 2, incumbent, 5, kMinGain, kSigmas);
  EXPECT_FALSE(d.keep) << d.reason;
  EXPECT_LT(d.margin_us, 0.02 * 1100) << d.reason;
  EXPECT_TRUE(contains(d.reason, "slower by")) << d.reason;
  // Below ten samples, their standard deviation (the rule's small-sample case).
  EXPECT_NEAR(latency_sigma_us(measured({96.0, 100.0, 104.0})), 4.0, 1e-12);
}

// However noisy both measurements, a near-tie trade to a simpler config gives up at most 5% of the
// incumbent: a candidate 18% slower inside a wide noise margin is not kept; 4% slower is.
TEST(KeepRule, ANearTieTradeGivesUpAtMostFivePercent) {
  const eval::Verdict noisy_incumbent = measured({500.0, 930.0, 1360.0});
  const KeepDecision far =
      decide_keep(measured({700.0, 1100.0, 1500.0}), 1, noisy_incumbent, 5, kMinGain, kSigmas);
  EXPECT_GT(far.margin_us, 170.0);  // the noise margin holds it
  EXPECT_FALSE(far.keep) << far.reason;
  EXPECT_TRUE(contains(far.reason, "more than 5% of the incumbent")) << far.reason;
  const KeepDecision near =
      decide_keep(measured({537.2, 967.2, 1397.2}), 1, noisy_incumbent, 5, kMinGain, kSigmas);
  EXPECT_TRUE(near.keep) << near.reason;
}

TEST(KeepRule, SlowerSimplerCandidateBeyondTheMarginIsNotKept) {
  // 50% slower with no knob off the default against an incumbent with three: slower is slower.
  const KeepDecision far = decide_keep(predicted(150.0), 0, predicted(100.0), 3, kMinGain, kSigmas);
  EXPECT_FALSE(far.keep) << far.reason;
  EXPECT_NEAR(far.gain_us, -50.0, 1e-12);
  EXPECT_TRUE(contains(far.reason, "slower by 50.000 us")) << far.reason;
  // Just outside the 1 us margin on the slow side: still not kept, however simple.
  const KeepDecision just =
      decide_keep(predicted(101.05), 0, predicted(100.0), 3, kMinGain, kSigmas);
  EXPECT_FALSE(just.keep) << just.reason;
  // A slower measured candidate beyond its noise margin, simpler: not kept either.
  const KeepDecision noisy = decide_keep(measured({117.0, 120.0, 123.0}), 0,
                                         measured({97.0, 100.0, 103.0}), 3, kMinGain, kSigmas);
  EXPECT_NEAR(noisy.margin_us, kSigmas * std::hypot(3.0, 3.0), 1e-9);
  EXPECT_FALSE(noisy.keep) << noisy.reason;
}

TEST(KeepRule, NearTieEitherWayGoesToTheCandidateWithFewerKnobs) {
  // Within the 1 us margin on the slow side and on the fast side: the simpler candidate wins.
  for (const double us : {100.95, 100.0, 99.05}) {
    const KeepDecision d = decide_keep(predicted(us), 1, predicted(100.0), 2, kMinGain, kSigmas);
    EXPECT_TRUE(d.keep) << us << ": " << d.reason;
    EXPECT_TRUE(contains(d.reason, "near-tie")) << d.reason;
    EXPECT_TRUE(contains(d.reason, "simpler: 1 knobs off default vs 2")) << d.reason;
  }
}

TEST(KeepRule, NearTieWithEqualComplexityKeepsTheIncumbent) {
  // Same number of knobs off the default, the difference within the margin: no change, whichever
  // side of the incumbent the candidate lies.
  for (const double us : {100.95, 100.3, 99.7, 99.05}) {
    const KeepDecision d = decide_keep(predicted(us), 2, predicted(100.0), 2, kMinGain, kSigmas);
    EXPECT_FALSE(d.keep) << us << ": " << d.reason;
    EXPECT_TRUE(contains(d.reason, "not simpler (2 knobs off default vs 2)")) << d.reason;
  }
  const KeepDecision same =
      decide_keep(predicted(100.0), 2, predicted(100.0), 2, kMinGain, kSigmas);
  EXPECT_FALSE(same.keep) << same.reason;
  EXPECT_TRUE(contains(same.reason, "as fast as the incumbent")) << same.reason;
  // More knobs than the incumbent in a near-tie: not kept either.
  const KeepDecision more = decide_keep(predicted(99.5), 3, predicted(100.0), 2, kMinGain, kSigmas);
  EXPECT_FALSE(more.keep) << more.reason;
}

TEST(KeepRule, NearTieBeyondOneMarginOfTheRunsFastestIsRefused) {
  // Incumbent 100 us (margin 1 us): a simpler candidate at 100.9 us is a near-tie. Kept while the
  // run's fastest kept latency is within a margin of it (99.95), refused when the fastest is 99.5:
  // chained trades cannot move the incumbent more than one margin from the fastest config.
  const KeepDecision close =
      decide_keep(predicted(100.9), 1, predicted(100.0), 2, kMinGain, kSigmas, 99.95);
  EXPECT_TRUE(close.keep) << close.reason;
  const KeepDecision drift =
      decide_keep(predicted(100.9), 1, predicted(100.0), 2, kMinGain, kSigmas, 99.5);
  EXPECT_FALSE(drift.keep) << drift.reason;
  EXPECT_TRUE(contains(drift.reason, "1.400 us slower than the run's fastest kept (99.500 us)"))
      << drift.reason;
  // The bound acts on near-ties only: a candidate faster beyond the margin is kept whatever the
  // fastest, and without a fastest (none kept yet) a near-tie is judged as before.
  EXPECT_TRUE(decide_keep(predicted(98.5), 2, predicted(100.0), 2, kMinGain, kSigmas, 90.0).keep);
  EXPECT_TRUE(decide_keep(predicted(100.9), 1, predicted(100.0), 2, kMinGain, kSigmas).keep);
}

}  // namespace
}  // namespace megasched::search
