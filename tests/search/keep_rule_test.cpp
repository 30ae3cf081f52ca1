// The keep rule (search/loop.h, decide_keep) on its own: the margin, and each side of its three
// boundaries (faster beyond the margin; a near-tie in either direction going to the simpler
// config; a slower or equally complex candidate never replacing the incumbent). The expected
// margins are computed here from the rule as search/loop.h states it, not read back from the code.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "eval/verdict.h"
#include "flywheel/corpus.h"
#include "harness/json_schema.h"
#include "schedule/config.h"
#include "search/keep_rule.h"
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

/// The record's keep object against schemas/corpus_record.schema.json's "keep".
void expect_keep_fits_the_schema(const nlohmann::json& keep) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/schemas/corpus_record.schema.json");
  const nlohmann::json schema = nlohmann::json::parse(in)["properties"]["keep"];
  for (const auto& e : harness::check_against_schema(schema, keep))
    ADD_FAILURE() << "corpus_record.schema.json keep: " << harness::describe(e);
}

/// Thirty samples around `median_us`, spread +-1% (one sigma ~0.8% of it: a 2-sigma margin of
/// about 2.2% for two such timings).
eval::Verdict spread(double median_us) {
  std::vector<double> s;
  for (int i = 0; i < 30; ++i) s.push_back(median_us * (0.99 + 0.02 * i / 29.0));
  eval::Verdict v = measured(s);
  v.latency_us = median_us;
  return v;
}

/// A keep rule and a candidate config (one knob moved), by default with 5 knobs off the default
/// against the incumbent's 2 (never a near-tie trade).
struct ConfirmCase {
  explicit ConfirmCase(int rounds) : rule(kMinGain, kSigmas, rounds) {
    candidate.kernel.unroll = 4;
  }
  /// judge() with the timings `script` hands out in order (its configs are noted).
  std::string judge(double candidate_us, std::vector<double> script, flywheel::CorpusRecord* r,
                    int complexity = 5) {
    r->complexity = complexity;
    size_t next = 0;
    return rule.judge(candidate, spread(candidate_us), r,
                      [&](const schedule::ScheduleConfig& c) -> std::optional<eval::Verdict> {
                        timed.push_back(c == candidate ? "candidate" : "incumbent");
                        if (next >= script.size()) return std::nullopt;
                        return spread(script[next++]);
                      });
  }
  /// The rule's tally of three rounds a trial (KeepRule::confirm_summary) as expected.
  static nlohmann::json tally(int settled, int kept, int refused, int not_confirmed, int timings) {
    return {{"rounds", 3},
            {"settled", settled},
            {"kept", kept},
            {"trades_refused", refused},
            {"not_confirmed", not_confirmed},
            {"timings", timings}};
  }
  KeepRule rule;
  schedule::ScheduleConfig candidate;
  std::vector<std::string> timed;
};

// Rule 3b (search/loop.h): a candidate 1.5% faster, inside the ~3% noise margin. Without confirm
// rounds it is discarded after the one re-measurement the rule always makes of a kept-looking
// candidate (none here: it does not look kept). With three rounds it is timed again back to back
// with the incumbent, the order alternating, and kept when it wins every round by a median of at
// least the 1% share; a round it loses ends the rounds and discards it; a gain under the share
// never starts them.
TEST(KeepRule, ConfirmRoundsKeepAGainInsideTheNoiseOnlyWhenEveryRoundAgrees) {
  {
    ConfirmCase none(0);
    none.rule.adopt({}, "inc", spread(100.0), 2);
    flywheel::CorpusRecord r;
    const std::string why = none.judge(98.5, {}, &r);
    EXPECT_TRUE(contains(why, "within margin")) << why;
    EXPECT_TRUE(none.timed.empty());
    EXPECT_FALSE(r.keep.contains("confirm"));
    EXPECT_TRUE(none.rule.confirm_summary().is_null());  // no --confirm: no tally
  }
  {
    ConfirmCase three(3);
    three.rule.adopt({}, "inc", spread(100.0), 2);
    flywheel::CorpusRecord r;
    // Rounds: (incumbent, candidate), (candidate, incumbent), (incumbent, candidate).
    const std::string why = three.judge(98.5, {100.4, 98.9, 99.0, 100.2, 100.1, 98.7}, &r);
    EXPECT_EQ(three.timed, (std::vector<std::string>{"incumbent", "candidate", "candidate",
                                                     "incumbent", "incumbent", "candidate"}));
    EXPECT_TRUE(contains(why, "confirmed: faster in 3 of 3 back-to-back rounds")) << why;
    ASSERT_TRUE(r.keep.contains("confirm")) << r.keep.dump();
    EXPECT_TRUE(r.keep["confirm"]["confirmed"].get<bool>());
    EXPECT_EQ(r.keep["confirm"]["rounds"].size(), 3u);
    // Gains 1.5%, 1.49%, 1.20%, 1.40%: the median of the four, between the middle two.
    EXPECT_NEAR(r.keep["confirm"]["median_gain_share"].get<double>(),
                ((100.1 - 98.7) / 100.1 + (100.4 - 98.9) / 100.4) / 2, 1e-12);
    EXPECT_EQ(three.rule.incumbent().latency(), 100.1);  // the last re-measurement
    expect_keep_fits_the_schema(r.keep);
    EXPECT_EQ(three.rule.confirm_summary(), ConfirmCase::tally(1, 1, 0, 0, 6));
  }
  {
    ConfirmCase lost(3);
    lost.rule.adopt({}, "inc", spread(100.0), 2);
    flywheel::CorpusRecord r;
    const std::string why = lost.judge(98.5, {100.4, 98.9, 100.3, 100.2, 100.1, 98.7}, &r);
    EXPECT_EQ(lost.timed.size(), 4u);  // the second round lost: no third
    EXPECT_TRUE(contains(why,
                         "not confirmed: round 2 timed the incumbent 100.200 us, the "
                         "candidate 100.300 us"))
        << why;
    EXPECT_FALSE(r.keep["confirm"]["confirmed"].get<bool>());
    EXPECT_EQ(lost.rule.confirm_summary()["not_confirmed"], 1);
    EXPECT_EQ(lost.rule.confirm_summary()["timings"], 4);
  }
  {
    ConfirmCase small(3);  // 0.6% faster: under the 1% share, no rounds
    small.rule.adopt({}, "inc", spread(100.0), 2);
    flywheel::CorpusRecord r;
    const std::string why = small.judge(99.4, {100.0, 99.4, 99.4, 100.0, 100.0, 99.4}, &r);
    EXPECT_TRUE(small.timed.empty()) << why;
    EXPECT_FALSE(r.keep.contains("confirm"));
    EXPECT_EQ(small.rule.confirm_summary()["settled"], 0);
  }
  {
    ConfirmCase thin(3);  // every round won, by a median of 0.6%: under the share
    thin.rule.adopt({}, "inc", spread(100.0), 2);
    flywheel::CorpusRecord r;
    const std::string why = thin.judge(98.5, {100.0, 99.5, 99.5, 100.0, 100.0, 99.5}, &r);
    EXPECT_TRUE(contains(why, "not confirmed: median gain 0.50% under the 1.00% share")) << why;
  }
}

// Rule 3b against a trade (search/loop.h): a simpler candidate 1.5% slower, inside the noise, is
// a near-tie rule 4 would trade the incumbent for. With confirm rounds the incumbent's lead is
// tested as a candidate's gain would be: the trade is refused when the incumbent was faster in
// every round by a median of at least the share, and stands when a round says otherwise.
// (An H200, 2026-11-29: a loop kept a config with kernel.silu_stage copies after three rounds,
// then traded it for the simpler config without them, 0.62% slower inside a 16.8 us margin.)
TEST(KeepRule, ConfirmRoundsRefuseATradeThatGivesUpAConfirmedLead) {
  {
    ConfirmCase refused(3);
    refused.rule.adopt({}, "inc", spread(100.0), 6);
    flywheel::CorpusRecord r;
    // The one re-measurement of a kept-looking candidate first (100.2), then three rounds.
    const std::string why =
        refused.judge(101.5, {100.2, 100.1, 101.4, 101.6, 100.3, 100.2, 101.2}, &r, 5);
    EXPECT_EQ(refused.timed.size(), 7u);
    EXPECT_EQ(r.status, "discarded") << why;
    EXPECT_TRUE(contains(why, "near-tie")) << why;
    EXPECT_TRUE(contains(why, "the trade refused: the incumbent was faster in 3 of 3")) << why;
    EXPECT_EQ(r.keep["confirm"]["faster"], "incumbent");
    EXPECT_TRUE(r.keep["confirm"]["confirmed"].get<bool>());
    expect_keep_fits_the_schema(r.keep);
    // The re-measurement is rule 3's, not a round's: six timings.
    EXPECT_EQ(refused.rule.confirm_summary(), ConfirmCase::tally(1, 0, 1, 0, 6));
  }
  {
    ConfirmCase stands(3);
    stands.rule.adopt({}, "inc", spread(100.0), 6);
    flywheel::CorpusRecord r;
    const std::string why =
        stands.judge(101.5, {100.2, 100.1, 101.4, 100.9, 101.0, 100.2, 101.2}, &r, 5);
    EXPECT_EQ(stands.timed.size(), 5u);  // round 2 went the candidate's way: no third
    EXPECT_EQ(r.status, "kept") << why;
    EXPECT_TRUE(contains(why, "the incumbent's lead not confirmed (round 2")) << why;
    EXPECT_FALSE(r.keep["confirm"]["confirmed"].get<bool>());
  }
  {
    ConfirmCase cheap(3);  // 0.4% slower: under the share, the trade goes ahead untested
    cheap.rule.adopt({}, "inc", spread(100.0), 6);
    flywheel::CorpusRecord r;
    const std::string why = cheap.judge(100.4, {100.0}, &r, 5);
    EXPECT_EQ(cheap.timed.size(), 1u);  // the re-measurement only
    EXPECT_EQ(r.status, "kept") << why;
    EXPECT_FALSE(r.keep.contains("confirm"));
  }
}

}  // namespace
}  // namespace megasched::search
