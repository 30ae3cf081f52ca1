// The prior strategy (search/strategy.h) ranks its pool by what the learned prior predicts: the
// lowest predicted latency first, a config like those that failed pushed down by its failure risk
// (never so far that a rare failure outweighs a large speedup).
// Each test trains the strategy through observe() on a synthetic landscape and checks its
// proposals against a flywheel::Prior fitted here on the same samples.
#include "search/strategy.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flywheel/corpus.h"
#include "flywheel/prior.h"
#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/search.h"
#include "tests/h100_target.h"

namespace megasched::search {
namespace {

using schedule::ScheduleConfig;

constexpr const char* kKnob = "launch.blocks_per_sm";  // choices 1 2 3 4, default 1

int knob(const ScheduleConfig& c) { return schedule::get_knob(c, kKnob).get<int>(); }

// The landscape: `fast_value` of the knob runs at `fast_us`, every other value at 100 us, whatever
// the other knobs; `fail_of_4` of every 4 draws of the fast value crash instead.
struct Landscape {
  int fast_value = 3;
  double fast_us = 40.0;
  int fail_of_4 = 0;  // 0: nothing fails
};

class PriorStrategyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shape = *schedule::find_preset("toy");
    target = testing_support::h100_target();
  }

  // Trains a prior strategy on 320 random configs of `land` (a quarter with each knob value) and
  // fits `reference` on the same samples, as the strategy does. The linear failure model's risk at
  // the default config depends on the draw (the default sits far from the random configs' mean in
  // every knob): over draw seeds 1-30 a one-in-four failure fits from 0 to 0.66 there. Seed 19 fits
  // 0.25, near the true rate, which ARareFailureDoesNotOutweighALargeSpeedup's premise needs (the
  // draws change with the knob table: seed 6 fitted 0.22 before kernel.stream_held and
  // kernel.stream_held_every, 0.66 after; seed 3 0.26 before kernel.stream_depth, 0.59 after).
  std::unique_ptr<Strategy> trained(const Landscape& land, int pool_size = 64) {
    StrategyOptions o;
    o.name = "prior";
    o.seed = 7;
    o.exploration = 0.0;      // every proposal ranked
    o.pool_size = pool_size;  // 0: the incumbent's one-knob neighbours alone
    o.min_prior_samples = 8;
    o.shape = shape;
    std::string error;
    std::unique_ptr<Strategy> s = make_strategy(o, &error);
    EXPECT_TRUE(s) << error;
    std::mt19937_64 rng(19);
    std::vector<flywheel::PriorSample> samples;
    int fast_seen = 0;
    for (int i = 0; i < 320; ++i) {
      ScheduleConfig c = schedule::random_config(shape, target, rng);
      std::string why;
      EXPECT_TRUE(schedule::set_knob(&c, kKnob, 1 + i % 4, &why)) << why;
      TrialOutcome t;
      t.trial = i;
      t.config = c;
      const bool fast = knob(c) == land.fast_value;
      const bool fails = fast && fast_seen++ % 4 < land.fail_of_4;
      t.status = fails ? flywheel::kStatusCrash : flywheel::kStatusDiscarded;
      if (!fails) t.latency_us = fast ? land.fast_us : 100.0;
      s->observe(t);
      flywheel::PriorSample p;
      p.config = schedule::to_json(c);
      p.shape = schedule::to_json(shape);
      p.latency_us = t.latency_us;
      samples.push_back(p);
    }
    EXPECT_TRUE(reference.fit(samples, o.min_prior_samples));
    return s;
  }

  SearchState state() const {
    SearchState st;
    st.shape = &shape;
    st.target = &target;
    st.identity = {{"model", "toy"}, {"target", "h100"}, {"device", "cpu"}};
    st.incumbent = ScheduleConfig{};
    st.incumbent_latency_us = 100.0;
    st.trials_left = 10;
    return st;
  }

  double log_latency(const ScheduleConfig& c) const {
    return reference.predict_log_latency(schedule::to_json(c), schedule::to_json(shape));
  }
  double failure(const ScheduleConfig& c) const {
    return reference.predict_failure(schedule::to_json(c), schedule::to_json(shape));
  }

  schedule::ModelShape shape;
  schedule::GpuTarget target;
  flywheel::Prior reference;
};

TEST_F(PriorStrategyTest, ProposesTheLowestPredictedLatencyFirst) {
  std::unique_ptr<Strategy> s = trained({3, 40.0, 0});
  const std::vector<Proposal> out = s->propose(state(), 4);
  ASSERT_EQ(out.size(), 4u);
  // The landscape: every top proposal runs the fast value.
  for (const Proposal& p : out) {
    EXPECT_EQ(knob(p.config), 3) << p.description;
    EXPECT_NE(p.description.find("prior: "), std::string::npos) << p.description;
  }
  EXPECT_NE(out[0].description.find("prior: best of"), std::string::npos) << out[0].description;
  // The ranking: the incumbent's one-knob neighbours are always in the pool, so the best proposal
  // is predicted no slower than any of them, and the slowest of them is predicted far slower.
  double worst_neighbour = -INFINITY;
  for (const ScheduleConfig& n : schedule::neighbours(ScheduleConfig{}, shape, target)) {
    EXPECT_LE(log_latency(out[0].config), log_latency(n) + 1e-9) << schedule::canonical_string(n);
    worst_neighbour = std::max(worst_neighbour, log_latency(n));
  }
  EXPECT_GT(worst_neighbour - log_latency(out[0].config), std::log(2.0));
  // The batch in rank order.
  for (size_t i = 1; i < out.size(); ++i)
    EXPECT_LE(log_latency(out[i - 1].config), log_latency(out[i].config) + 1e-9) << i;
}

TEST_F(PriorStrategyTest, ALikelyFailureRanksBelowASaferNeighbour) {
  // The fast value runs at 40 us against 100 but crashes 3 times in 4. The pool is the default's
  // one-knob neighbours, among which the latency model alone puts the risky one first; its failure
  // risk, a failed trial ranked as if ~3x slower per unit risk (search/strategy.cpp), costs more
  // than its lead over the next neighbour, so another neighbour is proposed first.
  std::unique_ptr<Strategy> s = trained({4, 40.0, 3}, 0);
  ScheduleConfig risky;
  std::string why;
  ASSERT_TRUE(schedule::set_knob(&risky, kKnob, 4, &why)) << why;
  double next = INFINITY;  // the lowest predicted log latency of the other neighbours
  for (const ScheduleConfig& n : schedule::neighbours(ScheduleConfig{}, shape, target))
    if (knob(n) != 4) next = std::min(next, log_latency(n));
  ASSERT_LT(log_latency(risky), next) << "the latency model alone ranks the risky neighbour first";
  ASSERT_GT(std::log(3.0) * failure(risky), next - log_latency(risky))
      << "failure risk " << failure(risky);
  const std::vector<Proposal> out = s->propose(state(), 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(knob(out[0].config), 4) << out[0].description;
}

TEST_F(PriorStrategyTest, ARareFailureDoesNotOutweighALargeSpeedup) {
  // The failure penalty does not swamp the latency: the fast value fails once in 4 (risk near
  // 0.25, costing about 0.25 x ln 3 = 0.27 in log latency, a failed trial ranked as if ~3x slower
  // per unit risk) and is 1.67x faster (0.51): it stays the first choice.
  std::unique_ptr<Strategy> s = trained({4, 60.0, 1});
  ScheduleConfig fast;
  std::string why;
  ASSERT_TRUE(schedule::set_knob(&fast, kKnob, 4, &why)) << why;
  ASSERT_GT(failure(fast), 0.1);
  ASSERT_LT(failure(fast), 0.4);
  const std::vector<Proposal> out = s->propose(state(), 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(knob(out[0].config), 4) << out[0].description;
}

}  // namespace
}  // namespace megasched::search
