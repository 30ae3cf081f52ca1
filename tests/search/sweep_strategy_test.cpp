// The sweep strategy (search/sweep_strategy.h): it screens the whole neighbourhood before it
// moves, combines the moves that paid, waits for the outcomes it asked for, and gets out of a
// mode trap that a first-improvement climb falls into. Also the elite strategy's restart point,
// which it no longer waits for once the loop holds nothing it proposed.
#include "search/sweep_strategy.h"

#include <gtest/gtest.h>

#include <set>

#include "schedule/search.h"
#include "search/replay.h"
#include "tests/search/loop_fakes.h"
#include "tests/search/synthetic_landscape.h"

namespace megasched::search {
namespace {

using schedule::ScheduleConfig;
using namespace loop_testing;

// A landscape with a trap. The weight stream through shared memory is 12% faster than the
// default's registers, and with it the unroll does not matter; with registers, unroll 4 and
// 32-row tiles together reach the optimum (100 us). A climb that takes smem_ring first can only
// reach 115 us, one knob from the optimum's basin but never better by one knob.
double trap_latency_us(const ScheduleConfig& c) {
  const bool smem = schedule::get_knob(c, "kernel.weight_stream") == "smem_ring";
  const double rows = c.tiling.gemv_rows_per_task == 32 ? 1.0 : 1.2;
  if (smem) return 115.0 * rows;
  return 100.0 * (c.kernel.unroll == 4 ? 1.0 : 1.3) * rows;
}

eval::Verdict trap_verdict(const ScheduleConfig& c) {
  return ok_verdict(trap_latency_us(c), 0.0, "predicted");
}

ScheduleConfig with_knob(ScheduleConfig c, const std::string& path, const nlohmann::json& v) {
  std::string error;
  EXPECT_TRUE(schedule::set_knob(&c, path, v, &error)) << error;
  return c;
}

class SweepLoop : public LoopFixture {};

double best_after(const std::vector<flywheel::ResultRow>& log) {
  double best = 1e300;
  for (const auto& row : log)
    if (row.latency_us) best = std::min(best, *row.latency_us);
  return best;
}

// The trap is real: a first-improvement hillclimb of some seeds ends in it (115 us); the sweep
// finds the optimum from every seed, within one screen of the default's neighbours and its
// combinations.
TEST_F(SweepLoop, EscapesTheModeTrapThatCatchesAFirstImprovementClimb) {
  const auto shape = *schedule::find_preset("toy");
  const auto target = ::megasched::testing_support::h100_target();
  const size_t screen = schedule::neighbours(ScheduleConfig{}, shape, target).size();
  ASSERT_TRUE(trap_latency_us(with_knob({}, "kernel.weight_stream", "smem_ring")) <
              trap_latency_us(ScheduleConfig{}));
  int trapped = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    for (const std::string name : {"hillclimb", "sweep"}) {
      std::filesystem::remove(options.results_path);
      std::filesystem::remove(options.corpus_path);
      FakeEvaluator ev(&clock);
      ev.fallback = trap_verdict;
      options.budget = name == "sweep" ? static_cast<int>(screen) + 9 : 150;
      StrategyOptions so;
      so.name = name;
      so.seed = seed;
      so.restart_after = 1000;  // hillclimb: no random restart to luck out of the trap
      std::string error;
      auto strategy = make_strategy(so, &error);
      ASSERT_TRUE(strategy) << error;
      LoopResult r = run(ev, *strategy);
      ASSERT_TRUE(r.ok) << r.error;
      const double best = best_after(rows());
      if (name == "sweep") {
        EXPECT_DOUBLE_EQ(best, 100.0) << "seed " << seed;
      } else {
        trapped += best > 110.0;
      }
    }
  }
  EXPECT_GE(trapped, 1) << "no hillclimb seed fell into the trap: the test shows nothing";
}

class SweepDirect : public ::testing::Test {
 protected:
  SweepDirect()
      : shape(*schedule::find_preset("toy")), target(::megasched::testing_support::h100_target()) {
    state.shape = &shape;
    state.target = &target;
    state.incumbent_latency_us = trap_latency_us(state.incumbent);
  }
  TrialOutcome outcome(const ScheduleConfig& c) {
    TrialOutcome o;
    o.config = c;
    o.status = "discarded";
    o.latency_us = trap_latency_us(c);
    return o;
  }
  schedule::ModelShape shape;
  schedule::GpuTarget target;
  SearchState state;
};

// The screen is every neighbour at once; while one is outstanding nothing else is proposed; once
// the loop holds none (pending 0) the round goes on to the combinations, best moves first, then
// to the swaps around the fastest set.
TEST_F(SweepDirect, WaitsForItsScreenThenCombinesTheMovesThatPaid) {
  StrategyOptions so;
  so.name = "sweep";
  auto sweep = make_sweep_strategy(so);
  const std::vector<Proposal> screen = sweep->propose(state, 10000);
  ASSERT_EQ(screen.size(), schedule::neighbours(state.incumbent, shape, target).size());
  for (const Proposal& p : screen) {
    EXPECT_EQ(schedule::changed_knobs(state.incumbent, p.config).size(), 1u) << p.description;
    EXPECT_NE(p.description.find("round 1 screen"), std::string::npos) << p.description;
  }
  const size_t half = screen.size() / 2;
  for (size_t i = half; i < screen.size(); ++i) sweep->observe(outcome(screen[i].config));
  state.pending = static_cast<int>(half);  // the first half is still queued or running
  // Nothing of this round's screen or combinations yet; an idle slot screens ahead of round 2.
  for (const Proposal& p : sweep->propose(state, 4))
    EXPECT_NE(p.description.find("ahead of round 2"), std::string::npos) << p.description;
  for (size_t i = 1; i < half; ++i) sweep->observe(outcome(screen[i].config));
  state.pending = 0;  // screen[0] was dropped by the loop: the round goes on without it
  std::vector<Proposal> combos = sweep->propose(state, 100);
  ASSERT_FALSE(combos.empty());
  // The two moves that paid, unroll 4 (120 us) and 32-row tiles (130 us), fastest first; smem_ring
  // (138 us) joins them in the next combination, if its screen came back.
  const ScheduleConfig both =
      with_knob(with_knob({}, "kernel.unroll", 4), "tiling.gemv_rows_per_task", 32);
  EXPECT_EQ(schedule::canonical_string(combos[0].config), schedule::canonical_string(both))
      << combos[0].description;
  EXPECT_NE(combos[0].description.find("best 2 moves together"), std::string::npos);
  for (const Proposal& p : combos) EXPECT_TRUE(schedule::config_fits(p.config, shape, target));
  // Then, from the fastest set (unroll 4 and 32-row tiles), each other faster move added and in
  // place of each of its moves: smem_ring with either.
  for (const Proposal& p : combos) sweep->observe(outcome(p.config));
  const std::vector<Proposal> swaps = sweep->propose(state, 100);
  ASSERT_EQ(swaps.size(), 2u);
  for (const Proposal& p : swaps) {
    EXPECT_NE(p.description.find("one move swapped"), std::string::npos) << p.description;
    EXPECT_EQ(schedule::get_knob(p.config, "kernel.weight_stream"), "smem_ring") << p.description;
    sweep->observe(outcome(p.config));
  }
  // The round's best (the first combination, 100 us) is the next base: its screen follows.
  const std::vector<Proposal> next = sweep->propose(state, 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_NE(next[0].description.find("round 2 screen"), std::string::npos) << next[0].description;
  ASSERT_TRUE(next[0].parent);
  EXPECT_EQ(schedule::canonical_string(*next[0].parent), schedule::canonical_string(both));
}

// Two moves each faster alone but slow together (more rows per warp and a deeper unroll), and the
// deeper unroll pays more with 32-row tiles: the chain of the best moves takes the rows per warp
// first and every longer chain pays the clash; the swap stages find the set without it.
TEST_F(SweepDirect, SwapsOutAMoveThatClashesWithTheChain) {
  auto latency = [](const ScheduleConfig& c) {
    double us = 200.0;
    const bool rpw4 = c.kernel.rows_per_warp == 4, u4 = c.kernel.unroll == 4,
               rows32 = c.tiling.gemv_rows_per_task == 32;
    us *= rpw4 ? 0.80 : 1.0;
    us *= u4 ? 0.82 : 1.0;
    us *= rows32 ? 0.85 : 1.0;
    us *= rpw4 && u4 ? 2.0 : 1.0;
    us *= u4 && rows32 ? 0.9 : 1.0;
    return us;
  };
  state.incumbent_latency_us = latency(state.incumbent);
  StrategyOptions so;
  so.name = "sweep";
  auto sweep = make_sweep_strategy(so);
  bool swapped = false;
  for (int call = 0; call < 20; ++call) {
    const std::vector<Proposal> batch = sweep->propose(state, 10000);
    ASSERT_FALSE(batch.empty());
    if (batch[0].description.find("round 2 screen") != std::string::npos) {
      ASSERT_TRUE(batch[0].parent);
      const ScheduleConfig want =
          with_knob(with_knob({}, "kernel.unroll", 4), "tiling.gemv_rows_per_task", 32);
      EXPECT_EQ(schedule::canonical_string(*batch[0].parent), schedule::canonical_string(want));
      EXPECT_TRUE(swapped) << "the chain alone found it: the test shows nothing";
      return;
    }
    for (const Proposal& p : batch) {
      swapped = swapped || p.description.find("one move swapped") != std::string::npos;
      TrialOutcome o = outcome(p.config);
      o.latency_us = latency(p.config);
      sweep->observe(o);
    }
  }
  FAIL() << "round 2 never began";
}

// The chain does not wait for the screen's last few trials (their kernels would build while the
// GPUs idle): it is built from the rest, and a late faster move joins the swap stages.
TEST_F(SweepDirect, BuildsTheChainBeforeTheLastScreensAndSwapsInALateOne) {
  StrategyOptions so;
  so.name = "sweep";
  auto sweep = make_sweep_strategy(so);
  const std::vector<Proposal> screen = sweep->propose(state, 10000);
  size_t late = screen.size();
  for (size_t i = 0; i < screen.size(); ++i)
    if (screen[i].config.tiling.gemv_rows_per_task == 32) late = i;
  ASSERT_LT(late, screen.size());
  for (size_t i = 0; i < screen.size(); ++i)
    if (i != late) sweep->observe(outcome(screen[i].config));
  state.pending = 1;  // 32-row tiles still running
  const std::vector<Proposal> chain = sweep->propose(state, 100);
  ASSERT_FALSE(chain.empty()) << "the chain waited for the last screen";
  for (const Proposal& p : chain)  // (the stage's idle slots screen ahead: not the chain's)
    if (p.description.find("moves together") != std::string::npos) {
      EXPECT_NE(p.config.tiling.gemv_rows_per_task, 32)
          << "a move not measured yet is in the chain";
    }
  sweep->observe(outcome(screen[late].config));  // 130 us: faster than the base (156)
  for (const Proposal& p : chain) sweep->observe(outcome(p.config));
  state.pending = 0;
  const std::vector<Proposal> swaps = sweep->propose(state, 100);
  bool with_late = false;
  for (const Proposal& p : swaps) with_late = with_late || p.config.tiling.gemv_rows_per_task == 32;
  EXPECT_TRUE(with_late) << "the late faster move was not tried in a swap stage";
}

// A combining stage that leaves slots idle (more GPUs than its configs, or a queue to keep full
// while the next stage cannot be known yet) screens the round's fastest config so far ahead of its
// round; when the round moves there, those outcomes are the next screen's first and are not asked
// again.
TEST_F(SweepDirect, ScreensTheLikelyNextBaseWhileAStageRuns) {
  StrategyOptions so;
  so.name = "sweep";
  auto sweep = make_sweep_strategy(so);
  std::set<std::string> proposed;  // the loop's view: logged or queued
  state.is_new = [&](const ScheduleConfig& c) {
    return proposed.count(schedule::canonical_string(c)) == 0;
  };
  auto ask = [&](int count) {
    std::vector<Proposal> batch = sweep->propose(state, count);
    for (const Proposal& p : batch) proposed.insert(schedule::canonical_string(p.config));
    return batch;
  };
  for (const Proposal& p : ask(10000)) sweep->observe(outcome(p.config));
  const std::vector<Proposal> chain = ask(100);  // unroll 4 + 32-row tiles, then + smem_ring
  ASSERT_FALSE(chain.empty());
  state.pending = static_cast<int>(chain.size());  // the chain runs: nothing to combine yet
  const std::vector<Proposal> ahead = ask(4);
  ASSERT_EQ(ahead.size(), 4u) << "the stage's idle slots stayed idle";
  const ScheduleConfig unroll4 = with_knob({}, "kernel.unroll", 4);  // the round's best: 120 us
  for (const Proposal& p : ahead) {
    EXPECT_NE(p.description.find("ahead of round 2"), std::string::npos) << p.description;
    ASSERT_TRUE(p.parent);
    EXPECT_EQ(schedule::canonical_string(*p.parent), schedule::canonical_string(unroll4));
    EXPECT_EQ(schedule::changed_knobs(unroll4, p.config).size(), 1u) << p.description;
  }
  for (const Proposal& p : chain) sweep->observe(outcome(p.config));  // both: 100 us
  for (const Proposal& p : ahead) sweep->observe(outcome(p.config));
  state.pending = 0;
  const std::vector<Proposal> swaps = ask(100);
  ASSERT_FALSE(swaps.empty());
  state.pending = static_cast<int>(swaps.size());
  // Now the chain of two (100 us) is the round's best: the speculation follows it.
  const ScheduleConfig both = with_knob(unroll4, "tiling.gemv_rows_per_task", 32);
  const std::vector<Proposal> early = ask(3);
  ASSERT_EQ(early.size(), 3u);
  std::set<std::string> early_keys;
  for (const Proposal& p : early) {
    ASSERT_TRUE(p.parent);
    EXPECT_EQ(schedule::canonical_string(*p.parent), schedule::canonical_string(both));
    early_keys.insert(schedule::canonical_string(p.config));
  }
  for (const Proposal& p : swaps) sweep->observe(outcome(p.config));
  for (const Proposal& p : early) sweep->observe(outcome(p.config));
  state.pending = 0;
  // Round 2 from `both`: its screen is the rest of its new neighbours, numbered after the three.
  const std::set<std::string> before_round2 = proposed;
  const std::vector<Proposal> screen2 = ask(10000);
  const std::vector<ScheduleConfig> neighbours = schedule::neighbours(both, shape, target);
  size_t measured_in_round1 = 0;  // one move of `both` undone, and the chain of three
  for (const ScheduleConfig& n : neighbours) {
    const std::string key = schedule::canonical_string(n);
    measured_in_round1 += before_round2.count(key) > 0 && early_keys.count(key) == 0;
  }
  EXPECT_EQ(screen2.size() + early_keys.size() + measured_in_round1, neighbours.size());
  ASSERT_FALSE(screen2.empty());
  EXPECT_NE(screen2[0].description.find("round 2 screen (4 of " +
                                        std::to_string(neighbours.size()) + ")"),
            std::string::npos)
      << screen2[0].description;
  for (const Proposal& p : screen2) {
    ASSERT_TRUE(p.parent);
    EXPECT_EQ(schedule::canonical_string(*p.parent), schedule::canonical_string(both));
    EXPECT_EQ(early_keys.count(schedule::canonical_string(p.config)), 0u) << p.description;
  }
}

// A move that ran 1.5x its base is not screened again from the next base.
TEST_F(SweepDirect, DoesNotScreenADisasterTwice) {
  StrategyOptions so;
  so.name = "sweep";
  auto sweep = make_sweep_strategy(so);
  const std::vector<Proposal> screen = sweep->propose(state, 10000);
  std::string disaster;
  for (const Proposal& p : screen) {
    TrialOutcome o = outcome(p.config);
    if (disaster.empty() &&
        p.config.launch.threads_per_block != state.incumbent.launch.threads_per_block) {
      o.latency_us = *state.incumbent_latency_us * 2.0;
      disaster = schedule::changed_knobs(state.incumbent, p.config)[0] + "=" +
                 schedule::get_knob(p.config, "launch.threads_per_block").dump();
    }
    sweep->observe(o);
  }
  ASSERT_FALSE(disaster.empty());
  std::vector<Proposal> next;
  for (int call = 0; call < 10; ++call) {  // the combining stages, then round 2's screen
    next = sweep->propose(state, 10000);
    ASSERT_FALSE(next.empty());
    if (next[0].description.find("round 2 screen") != std::string::npos) break;
    for (const Proposal& p : next) sweep->observe(outcome(p.config));
  }
  ASSERT_NE(next[0].description.find("round 2 screen"), std::string::npos);
  for (const Proposal& p : next) {
    ASSERT_TRUE(p.parent);
    for (const std::string& path : schedule::changed_knobs(*p.parent, p.config))
      EXPECT_NE(path + "=" + schedule::get_knob(p.config, path).dump(), disaster) << p.description;
  }
}

// On the separable synthetic landscape (tests/search/synthetic_landscape.h) one screen and its
// combinations hold the optimum: the sweep finds it in every seed within 200 trials.
TEST(SweepReplay, FindsTheSyntheticOptimumInEverySeed) {
  const Landscape land = testing_support::synthetic_landscape();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ReplayOptions options;
    options.strategy.name = "sweep";
    options.strategy.seed = seed;
    options.budget = 200;
    std::string error;
    auto run = replay_once(land, options, &error);
    ASSERT_TRUE(run) << error;
    bool found = false;
    for (const auto& best : run->best_true_us) found = found || (best && *best <= 100.0 + 1e-9);
    EXPECT_TRUE(found) << "seed " << seed;
  }
}

// Elite: a restart point the loop dropped (pending 0) is replaced by a new restart, not waited
// for while every later proposal only fills the batch.
TEST_F(SweepDirect, EliteDrawsANewRestartPointWhenTheLoopDroppedIt) {
  StrategyOptions so;
  so.name = "elite";
  so.restart_after = 1;
  std::string error;
  auto elite = make_strategy(so, &error);
  ASSERT_TRUE(elite) << error;
  const std::vector<Proposal> first = elite->propose(state, 1);
  ASSERT_EQ(first.size(), 1u);
  TrialOutcome slower = outcome(first[0].config);
  slower.latency_us = *state.incumbent_latency_us * 1.1;
  elite->observe(slower);  // no gain: the next proposal restarts
  std::vector<Proposal> batch = elite->propose(state, 2);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_NE(batch[0].description.find("restart ("), std::string::npos) << batch[0].description;
  EXPECT_NE(batch[1].description.find("perturbation of elite"), std::string::npos)
      << batch[1].description;  // the filler is a perturbed elite, not a random config
  state.pending = 2;            // both still queued: the restart point is being judged
  std::vector<Proposal> more = elite->propose(state, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_NE(more[0].description.find("while the restart point is judged"), std::string::npos);
  state.pending = 0;  // the loop dropped them: a new restart point
  more = elite->propose(state, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_NE(more[0].description.find("restart ("), std::string::npos) << more[0].description;
}

}  // namespace
}  // namespace megasched::search
