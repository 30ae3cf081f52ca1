// The bandit strategy (search/bandit_strategy.h): the AUC credit and the upper-confidence pick on
// hand examples, every technique tried, uses shifting toward a technique that keeps finding new
// bests, bad options refused. Its determinism for a seed is in tests/search/replay_test.cpp.
#include "search/bandit_strategy.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "schedule/model.h"
#include "schedule/search.h"
#include "tests/h100_target.h"

namespace megasched::search {
namespace {

using schedule::ScheduleConfig;

TEST(BanditStrategy, AucWeighsTheWindowsUsesByRecency) {
  AucBandit bandit(2, 3, 0.5);
  for (bool success : {true, false, true, true}) bandit.record(0, success);
  // The window keeps the last 3 uses: miss, hit, hit, weighted 1, 2, 3 of a possible 6.
  EXPECT_DOUBLE_EQ(bandit.auc(0), (2.0 + 3.0) / 6.0);
  bandit.record(1, true);
  bandit.record(1, false);
  EXPECT_DOUBLE_EQ(bandit.auc(1), 1.0 / 3.0);  // the older of 2 uses: 1 of 1 + 2
  EXPECT_EQ(bandit.total_uses(), 6);
  EXPECT_EQ(bandit.uses(0), 4);
  EXPECT_DOUBLE_EQ(bandit.score(0), 5.0 / 6.0 + 0.5 * std::sqrt(2.0 * std::log(6.0) / 4.0));
  EXPECT_DOUBLE_EQ(bandit.score(1), 1.0 / 3.0 + 0.5 * std::sqrt(2.0 * std::log(6.0) / 2.0));
  EXPECT_EQ(bandit.pick(), 0);
  AucBandit none(2, 3, 0.5);
  EXPECT_DOUBLE_EQ(none.auc(0), 0.0);
}

TEST(BanditStrategy, PicksUntriedTechniquesFirstInListOrder) {
  AucBandit bandit(3, 20, 0.05);
  EXPECT_EQ(bandit.score(2), std::numeric_limits<double>::infinity());
  EXPECT_EQ(bandit.pick(), 0);
  bandit.record(0, true);
  EXPECT_EQ(bandit.pick(), 1);
  bandit.record(1, false);
  EXPECT_EQ(bandit.pick(), 2);
  bandit.record(2, false);
  EXPECT_EQ(bandit.pick(), 0);  // the only one with credit
  EXPECT_EQ(bandit.pick_excluding({true, false, false}), 1);
  EXPECT_EQ(bandit.pick_excluding({true, true, true}), -1);
}

// A technique proposing random configs of the toy model under its own name.
class FakeTechnique : public Strategy {
 public:
  FakeTechnique(std::string name, uint64_t seed) : name_(std::move(name)), rng_(seed) {}
  std::string name() const override { return name_; }
  std::vector<Proposal> propose(const SearchState& state, int) override {
    return {{schedule::random_config(*state.shape, *state.target, rng_), name_ + ": random", {}}};
  }
  void observe(const TrialOutcome&) override { ++observed; }
  int observed = 0;

 private:
  std::string name_;
  std::mt19937_64 rng_;
};

class BanditStrategyRun : public ::testing::Test {
 protected:
  void SetUp() override {
    shape = *schedule::find_preset("toy");
    target = testing_support::h100_target();
    state.shape = &shape;
    state.target = &target;
    state.incumbent = ScheduleConfig{};  // the default config
  }
  // `trials` proposals and outcomes; latency_of gives each proposal's latency from its
  // description and the trial. The techniques named in each description, counted.
  std::map<std::string, int> run(Strategy& s, int trials,
                                 const std::function<double(const std::string&, int)>& latency_of) {
    std::map<std::string, int> uses;
    for (int t = 1; t <= trials; ++t) {
      std::vector<Proposal> p = s.propose(state, 1);
      EXPECT_EQ(p.size(), 1u) << s.last_error();
      if (p.empty()) break;
      const std::string& d = p[0].description;
      EXPECT_EQ(d.rfind("bandit/", 0), 0u) << d;
      const std::string technique = d.substr(7, d.find_first_of(": ", 7) - 7);
      ++uses[technique];
      TrialOutcome o;
      o.trial = t;
      o.config = p[0].config;
      o.status = flywheel::kStatusKept;
      o.latency_us = latency_of(technique, t);
      s.observe(o);
    }
    return uses;
  }
  schedule::ModelShape shape;
  schedule::GpuTarget target;
  SearchState state;
};

TEST_F(BanditStrategyRun, TriesEveryTechniqueAndNamesIt) {
  StrategyOptions o;
  o.name = "bandit";
  o.seed = 3;
  o.shape = shape;
  o.candidates = 64;
  std::string error;
  std::unique_ptr<Strategy> s = make_strategy(o, &error);
  ASSERT_TRUE(s) << error;
  EXPECT_EQ(s->name(), "bandit");
  const auto uses = run(*s, 12, [](const std::string&, int t) { return 100.0 + t; });
  for (const std::string technique : {"random", "hillclimb", "elite", "guided"})
    EXPECT_GE(uses.count(technique) ? uses.at(technique) : 0, 1) << technique;
}

TEST_F(BanditStrategyRun, ShiftsUsesTowardTheTechniqueThatKeepsFindingNewBests) {
  std::vector<std::unique_ptr<Strategy>> techniques;
  std::vector<FakeTechnique*> fakes;
  for (const std::string name : {"flat", "good", "stale"}) {
    techniques.push_back(std::make_unique<FakeTechnique>(name, fakes.size() + 1));
    fakes.push_back(static_cast<FakeTechnique*>(techniques.back().get()));
  }
  std::string error;
  std::unique_ptr<Strategy> s = make_bandit_strategy(std::move(techniques), 20, 0.05, &error);
  ASSERT_TRUE(s) << error;
  // "good" beats every earlier latency each time; the others never improve on the first trial.
  const auto uses = run(*s, 100, [](const std::string& technique, int t) {
    return technique == "good" ? 1000.0 - t : 2000.0;
  });
  EXPECT_GE(uses.at("good"), 80);
  EXPECT_GE(uses.at("flat"), 1);
  EXPECT_GE(uses.at("stale"), 1);
  for (const FakeTechnique* f : fakes) EXPECT_EQ(f->observed, 100);  // every outcome, to all
}

TEST(BanditStrategy, RefusesBadOptions) {
  auto refused = [](StrategyOptions o) {
    o.name = "bandit";
    std::string error;
    const bool made = make_strategy(o, &error) != nullptr;
    EXPECT_FALSE(made);
    return error;
  };
  StrategyOptions o;
  o.bandit_window = 0;
  EXPECT_NE(refused(o).find("window"), std::string::npos);
  o = {};
  o.bandit_c = -1;
  EXPECT_NE(refused(o).find("exploration constant"), std::string::npos);
  o.bandit_c = std::nan("");
  EXPECT_NE(refused(o).find("exploration constant"), std::string::npos);
  o = {};
  o.bandit_techniques = {};
  EXPECT_NE(refused(o).find("no techniques"), std::string::npos);
  o.bandit_techniques = {"random", "bandit"};
  EXPECT_NE(refused(o).find("cannot be one of its techniques"), std::string::npos);
  o.bandit_techniques = {"elite", "random", "elite"};
  EXPECT_NE(refused(o).find("listed twice"), std::string::npos);
  o.bandit_techniques = {"random", "elitist"};
  EXPECT_NE(refused(o).find("unknown strategy 'elitist'"), std::string::npos);
}

}  // namespace
}  // namespace megasched::search
