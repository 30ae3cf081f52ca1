// The loop over a pool of evaluators (run_loop_on_pool): batches, decisions in proposal order
// whatever order the verdicts come in, a silent slot's trial requeued once, per-device-type
// incumbents, the re-measurement on the candidate's own slot, resume; and the batch-aware
// strategies (k distinct new candidates per call).
#include <mutex>
#include <set>

#include <gtest/gtest.h>

#include "schedule/search.h"
#include "search/compile_ahead.h"
#include "search/loop.h"
#include "search/strategy.h"
#include "search/trial_pool.h"
#include "tests/harness/run_cli.h"
#include "tests/search/loop_fakes.h"

namespace megasched::search {
namespace {

using loop_testing::FakeEvaluator;
using loop_testing::LoopFixture;
using loop_testing::ok_verdict;
using nlohmann::json;
using schedule::ScheduleConfig;

// A fake evaluator of another device type (its own target name and ids).
class OtherTargetEvaluator : public FakeEvaluator {
 public:
  using FakeEvaluator::FakeEvaluator;
  json identity() const override {
    return {{"model", "toy"}, {"target", "a100"}, {"device", "cpu"}};
  }
  std::string schedule_id(const ScheduleConfig& c) const override {
    return schedule::hash_hex(schedule::canonical_string(c) + "|toy|a100|cpu");
  }
};

// Slots over fake evaluators, run synchronously in wait(): the verdicts come back oldest first
// (fifo) or newest first (lifo); `silent(slot, n)` makes a slot stop answering on its n-th trial.
class FakePool : public TrialPool {
 public:
  FakePool(std::vector<eval::Evaluator*> evaluators, bool lifo)
      : evaluators_(std::move(evaluators)),
        lifo_(lifo),
        alive_(evaluators_.size(), true),
        submitted_(evaluators_.size(), 0) {}
  int size() const override { return static_cast<int>(evaluators_.size()); }
  json identity(int slot) const override { return evaluators_[slot]->identity(); }
  std::string label(int slot) const override { return "fake" + std::to_string(slot) + "@test"; }
  std::string schedule_id(int slot, const ScheduleConfig& c) const override {
    return evaluators_[slot]->schedule_id(c);
  }
  void submit(int slot, uint64_t ticket, const ScheduleConfig& c) override {
    EXPECT_TRUE(alive_[slot]);
    for (const Job& j : running_) EXPECT_NE(j.slot, slot) << "two trials on one slot";
    running_.push_back({slot, ticket, c, ++submitted_[slot]});
    max_in_flight = std::max(max_in_flight, static_cast<int>(running_.size()));
  }
  std::optional<PoolEvent> wait(double) override {
    if (running_.empty()) return std::nullopt;
    busy_at_events.push_back(static_cast<int>(running_.size()));
    Job job = lifo_ ? running_.back() : running_.front();
    if (lifo_)
      running_.pop_back();
    else
      running_.erase(running_.begin());
    PoolEvent e;
    e.slot = job.slot;
    e.ticket = job.ticket;
    if (silent && silent(job.slot, job.nth)) {
      alive_[job.slot] = false;
      e.lost = true;
      e.lost_reason = "scripted silence";
      return e;
    }
    e.verdict = evaluators_[job.slot]->evaluate(job.config);
    evaluated.emplace_back(job.slot, schedule::canonical_string(job.config));
    return e;
  }
  bool alive(int slot) const override { return alive_[slot]; }

  std::function<bool(int, int)> silent;
  std::vector<std::pair<int, std::string>> evaluated;  // slot, config, in evaluation order
  int max_in_flight = 0;
  std::vector<int> busy_at_events;  // slots busy when each verdict came back

 private:
  struct Job {
    int slot;
    uint64_t ticket;
    ScheduleConfig config;
    int nth;
  };
  std::vector<eval::Evaluator*> evaluators_;
  bool lifo_;
  std::vector<bool> alive_;
  std::vector<int> submitted_;
  std::vector<Job> running_;
};

class PoolLoop : public LoopFixture {
 protected:
  // The (schedule id, status) sequence of a run of `strategy_name` over `slots` fake slots.
  std::vector<std::pair<std::string, std::string>> trace(const std::string& strategy_name,
                                                         int slots, bool lifo) {
    std::vector<std::unique_ptr<FakeEvaluator>> owned;
    std::vector<eval::Evaluator*> evaluators;
    for (int i = 0; i < slots; ++i) {
      owned.push_back(std::make_unique<FakeEvaluator>(&clock));
      evaluators.push_back(owned.back().get());
    }
    FakePool pool(evaluators, lifo);
    StrategyOptions so;
    so.name = strategy_name;
    so.seed = 7;
    so.shape = shape;
    std::string error;
    auto strategy = make_strategy(so, &error);
    LoopResult r = run_loop_on_pool(pool, shape, target, *strategy, clock, options);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(pool.max_in_flight, slots);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& row : rows()) out.emplace_back(row.schedule_id, row.status);
    return out;
  }
};

TEST_F(PoolLoop, DecisionsDoNotDependOnTheOrderVerdictsArriveIn) {
  options.budget = 14;
  for (const std::string strategy : {"random", "hillclimb", "prior"}) {
    const auto fifo = trace(strategy, 3, /*lifo=*/false);
    std::filesystem::remove(options.results_path);
    std::filesystem::remove(options.corpus_path);
    const auto lifo = trace(strategy, 3, /*lifo=*/true);
    std::filesystem::remove(options.results_path);
    std::filesystem::remove(options.corpus_path);
    EXPECT_EQ(fifo.size(), 14u) << strategy;
    EXPECT_EQ(fifo, lifo) << strategy;
    std::set<std::string> ids;
    for (const auto& [id, status] : fifo) ids.insert(id);
    EXPECT_EQ(ids.size(), fifo.size()) << strategy << ": a schedule ran twice";
  }
}

// sweep waits for each phase's outcomes (state.pending) before the next phase: over a pool it still
// runs the whole budget (the screen, its combinations, the next round) with every slot busy while
// a phase lasts, each schedule once, whatever order the verdicts come in.
TEST_F(PoolLoop, SweepRunsRoundAfterRoundOnEverySlotToTheBudget) {
  options.budget = 100;  // more than toy's screen of the default and its combinations
  const auto fifo = trace("sweep", 3, /*lifo=*/false);
  std::filesystem::remove(options.results_path);
  std::filesystem::remove(options.corpus_path);
  const auto lifo = trace("sweep", 3, /*lifo=*/true);
  ASSERT_EQ(fifo.size(), 100u);
  EXPECT_EQ(fifo, lifo);
  std::set<std::string> ids;
  for (const auto& [id, status] : fifo) ids.insert(id);
  EXPECT_EQ(ids.size(), fifo.size()) << "a schedule ran twice";
  const auto log = rows();
  bool round2 = false, ahead = false;
  for (const auto& row : log) {
    round2 = round2 || row.description.find("round 2 screen") != std::string::npos;
    ahead = ahead || row.description.find("ahead of round 2") != std::string::npos;
  }
  EXPECT_TRUE(round2) << "the budget ended inside round 1: the test shows nothing of the waits";
  EXPECT_TRUE(ahead) << "the combining stages' idle slots stayed idle";
}

// Verdicts come back while every slot is busy: sweep's phases wait for their outcomes, and a slot
// they would leave idle (a GPU doing nothing) gets a proposal worth measuring instead (the next
// base's screen ahead of its round, one restart point per slot), and after a wait the pool
// refills its queue to its depth. Four slots, as `loop --gpus all` on a 4-GPU host. Left idle: a
// round with nothing faster drains the pool at its screen's end (no next base to screen) and
// while its restart points are judged (about 3 verdicts each), so at most 6 verdicts per restart
// (and 2 more) may come back with a slot idle (12 with 2 restarts here); before the pool refilled
// (commit 89950b9), a slot was idle at 71 of 240 verdicts. The last 12 verdicts, at the budget's
// end, are left out.
TEST_F(PoolLoop, SweepKeepsEverySlotBusy) {
  options.budget = 240;
  std::vector<std::unique_ptr<FakeEvaluator>> owned;
  std::vector<eval::Evaluator*> evaluators;
  for (int i = 0; i < 4; ++i) {
    owned.push_back(std::make_unique<FakeEvaluator>(&clock));
    evaluators.push_back(owned.back().get());
  }
  FakePool pool(evaluators, false);
  StrategyOptions so;
  so.name = "sweep";
  so.seed = 3;
  so.shape = shape;
  auto strategy = make_strategy(so, nullptr);
  LoopResult r = run_loop_on_pool(pool, shape, target, *strategy, clock, options);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.summary["trials"], 240);
  const std::vector<int>& busy = pool.busy_at_events;
  ASSERT_GT(busy.size(), 200u);
  int idle_events = 0;
  for (size_t i = 1; i + 12 < busy.size(); ++i) idle_events += busy[i] < 4;  // 0: the baseline
  std::set<std::string> restarts;  // "sweep restart (round N found nothing ...": one per round
  for (const auto& row : rows())
    if (row.description.rfind("sweep restart (", 0) == 0)
      restarts.insert(row.description.substr(0, row.description.find(')')));
  ASSERT_GE(restarts.size(), 1u) << "no round ended in a restart: the test shows nothing of them";
  EXPECT_LE(idle_events, 6 * static_cast<int>(restarts.size()) + 2)
      << "verdicts that came back with a slot idle, " << restarts.size() << " restarts";
}

TEST_F(PoolLoop, EveryRowNamesTheSlotThatTimedItAndTheSummaryCountsPerSlot) {
  options.budget = 9;
  FakeEvaluator a(&clock), b(&clock);
  FakePool pool({&a, &b}, false);
  StrategyOptions so;
  so.name = "random";
  so.shape = shape;
  auto strategy = make_strategy(so, nullptr);
  LoopResult r = run_loop_on_pool(pool, shape, target, *strategy, clock, options);
  ASSERT_TRUE(r.ok) << r.error;
  std::set<std::string> labels;
  for (const auto& row : rows()) labels.insert(row.timed_on);
  EXPECT_EQ(labels, (std::set<std::string>{"fake0@test", "fake1@test"}));
  for (const auto& rec : records()) EXPECT_FALSE(rec.timed_on.empty());
  ASSERT_EQ(r.summary["workers"].size(), 2u);
  EXPECT_EQ(
      r.summary["workers"][0]["trials"].get<int>() + r.summary["workers"][1]["trials"].get<int>(),
      8);  // trial 0 runs before the pool's trials
  EXPECT_EQ(r.summary["trials"], 9);
}

TEST_F(PoolLoop, ASilentSlotsTrialIsRequeuedOnceAndTheLoopGoesOnWithTheOthers) {
  options.budget = 10;
  FakeEvaluator a(&clock), b(&clock), c(&clock);
  FakePool pool({&a, &b, &c}, false);
  pool.silent = [](int slot, int nth) { return slot == 1 && nth == 2; };
  StrategyOptions so;
  so.name = "random";
  so.shape = shape;
  auto strategy = make_strategy(so, nullptr);
  LoopResult r = run_loop_on_pool(pool, shape, target, *strategy, clock, options);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.summary["trials"], 10);
  EXPECT_FALSE(r.summary["workers"][1]["alive"].get<bool>());
  bool reported = false;
  for (const auto& p : r.summary["problems"])
    reported |= p.get<std::string>().find("fake1@test stopped answering") != std::string::npos &&
                p.get<std::string>().find("requeued") != std::string::npos;
  EXPECT_TRUE(reported) << r.summary["problems"].dump();
  std::set<std::string> ids;
  int on_slot1 = 0;
  for (const auto& row : rows()) {
    ids.insert(row.schedule_id);
    on_slot1 += row.timed_on == "fake1@test";
    EXPECT_NE(row.status, "timeout");
  }
  EXPECT_EQ(on_slot1, 1) << "slot 1's first trial only: the one it went silent on ran elsewhere";
  EXPECT_EQ(r.summary["workers"][1]["trials"], 1);
  EXPECT_EQ(ids.size(), 10u);
}

TEST_F(PoolLoop, WithCompileAheadEveryTicketIsPrebuiltAndASilentSlotsTrialIsStillRequeued) {
  options.budget = 12;
  FakeEvaluator a(&clock), b(&clock);
  FakePool pool({&a, &b}, false);
  pool.silent = [](int slot, int nth) { return slot == 1 && nth == 2; };
  std::mutex mutex;
  std::set<std::string> prepared;
  Prebuilder fake;
  fake.prepare = [&](const ScheduleConfig& c) -> std::optional<vm::BuildRequest> {
    std::lock_guard<std::mutex> lock(mutex);
    prepared.insert(a.schedule_id(c));
    return vm::BuildRequest{"fake.cuh", {schedule::canonical_string(c)}, 90, ""};
  };
  fake.build = [](const vm::BuildRequest&) {
    vm::BuildResult r;
    r.ok = true;
    return r;
  };
  CompileAhead builds(fake, 2, 64);
  options.compile_ahead = 4;
  options.compile_pool = &builds;
  StrategyOptions so;
  so.name = "random";
  so.shape = shape;
  auto strategy = make_strategy(so, nullptr);
  LoopResult r = run_loop_on_pool(pool, shape, target, *strategy, clock, options);
  ASSERT_TRUE(r.ok) << r.error;
  builds.wait_idle();
  EXPECT_EQ(r.summary["trials"], 12);
  std::set<std::string> ids;
  for (const auto& row : rows()) {
    ids.insert(row.schedule_id);
    EXPECT_NE(row.status, "timeout") << "the lost trial ran again on the live slot";
  }
  EXPECT_EQ(ids.size(), 12u);
  const json& s = r.summary["compile_ahead"];
  EXPECT_EQ(s["ahead"], 4);
  // Two batches of tickets are queued at once, plus 4 more (4 per slot): the pool sees tickets
  // before their slots free up (those dispatched before a thread took them are withdrawn).
  EXPECT_GT(s["queued"].get<int>(), 2) << s.dump();
  EXPECT_EQ(s["queued"].get<int>(),
            s["compiles"].get<int>() + s["withdrawn"].get<int>() + s["deduped"].get<int>())
      << s.dump();
}

TEST_F(PoolLoop, ATrialTwoSlotsGoSilentOnIsLoggedAsATimeout) {
  options.budget = 6;
  FakeEvaluator a(&clock), b(&clock), c(&clock);
  FakePool pool({&a, &b, &c}, false);
  // Slot 1 goes silent on its first trial; the trial is requeued to slot 2 (the next to free up,
  // verdicts come oldest first), which goes silent on it too.
  pool.silent = [](int slot, int nth) {
    return (slot == 1 && nth == 1) || (slot == 2 && nth == 2);
  };
  StrategyOptions so;
  so.name = "random";
  so.shape = shape;
  auto strategy = make_strategy(so, nullptr);
  LoopResult r = run_loop_on_pool(pool, shape, target, *strategy, clock, options);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.summary["trials"], 6);
  int timeouts = 0;
  for (const auto& row : rows()) timeouts += row.status == "timeout";
  EXPECT_EQ(timeouts, 1);
  EXPECT_EQ(r.summary["workers"][0]["alive"], true);
  EXPECT_EQ(r.summary["workers"][1]["alive"], false);
  EXPECT_EQ(r.summary["workers"][2]["alive"], false);
}

TEST_F(PoolLoop, DeviceTypesKeepTheirOwnIncumbents) {
  options.budget = 8;
  FakeEvaluator h100(&clock);
  OtherTargetEvaluator a100(&clock);
  a100.fallback = [](const ScheduleConfig&) { return ok_verdict(500.0, 0.0, "predicted"); };
  FakePool pool({&h100, &a100}, false);
  StrategyOptions so;
  so.name = "random";
  so.shape = shape;
  auto strategy = make_strategy(so, nullptr);
  LoopResult r = run_loop_on_pool(pool, shape, target, *strategy, clock, options);
  ASSERT_TRUE(r.ok) << r.error;
  // The slow a100 never beats the h100's incumbent, and has its own first keep.
  ASSERT_TRUE(r.summary["other_device_types"].contains("a100/cpu"));
  EXPECT_EQ(r.summary["other_device_types"]["a100/cpu"]["latency_us"], 500.0);
  EXPECT_LT(r.summary["best"]["latency_us"].get<double>(), 200.0);
  int a100_rows = 0;
  for (const auto& row : rows())
    if (row.target == "a100") {
      ++a100_rows;
      EXPECT_EQ(row.timed_on, "fake1@test");
      EXPECT_EQ(row.best_us, 500.0);  // its own incumbent, never the h100's
    } else {
      EXPECT_LT(*row.best_us, 200.0);
    }
  EXPECT_GT(a100_rows, 0);
}

TEST_F(PoolLoop, AMeasuredWinnerIsJudgedAgainstTheIncumbentRemeasuredOnItsOwnSlot) {
  options.budget = 3;
  FakeEvaluator a(&clock, "gpu"), b(&clock, "gpu");
  const ScheduleConfig slower = loop_testing::with({{"launch.blocks_per_sm", 3}});
  const ScheduleConfig faster = loop_testing::with({{"launch.blocks_per_sm", 2}});
  a.script(slower, ok_verdict(120.0, 0.1, "measured-gpu"));
  b.script(slower, ok_verdict(120.0, 0.1, "measured-gpu"));
  a.script(ScheduleConfig{}, ok_verdict(100.0, 0.1, "measured-gpu"));
  b.script(ScheduleConfig{}, ok_verdict(100.0, 0.1, "measured-gpu"));
  a.script(faster, ok_verdict(80.0, 0.1, "measured-gpu"));
  b.script(faster, ok_verdict(80.0, 0.1, "measured-gpu"));
  FakePool pool({&a, &b}, false);
  loop_testing::ScriptedStrategy strategy({slower, faster});
  LoopResult r = run_loop_on_pool(pool, shape, target, strategy, clock, options);
  ASSERT_TRUE(r.ok) << r.error;
  const auto recs = records();
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[1].status, "discarded");
  EXPECT_EQ(recs[2].status, "kept");
  EXPECT_EQ(recs[2].keep["remeasured_incumbent_us"], 100.0);
  // The incumbent's re-measurement ran right after the candidate, on the candidate's slot.
  int candidate_slot = -1;
  for (size_t i = 0; i < pool.evaluated.size(); ++i)
    if (pool.evaluated[i].second == schedule::canonical_string(faster)) {
      candidate_slot = pool.evaluated[i].first;
      ASSERT_LT(i + 1, pool.evaluated.size());
      EXPECT_EQ(pool.evaluated[i + 1].first, candidate_slot);
      EXPECT_EQ(pool.evaluated[i + 1].second, schedule::canonical_string(ScheduleConfig{}));
    }
  EXPECT_EQ(candidate_slot, 1);  // slot 0 took the first ticket (slower)
  EXPECT_EQ(recs[2].timed_on, "fake1@test");
}

TEST_F(PoolLoop, AStopFinishesTheTrialsInFlightAndResumeRepeatsNone) {
  options.budget = 16;
  std::atomic<bool> stop{false};
  options.stop = &stop;
  FakeEvaluator a(&clock), b(&clock), c(&clock);
  int evaluations = 0;
  a.on_evaluate = b.on_evaluate = c.on_evaluate = [&] {
    if (++evaluations == 6) stop = true;
  };
  {
    FakePool pool({&a, &b, &c}, false);
    StrategyOptions so;
    so.name = "hillclimb";
    so.shape = shape;
    auto strategy = make_strategy(so, nullptr);
    LoopResult r = run_loop_on_pool(pool, shape, target, *strategy, clock, options);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.summary["stop_reason"], "interrupted");
    EXPECT_LT(r.summary["trials"].get<int>(), 16);
  }
  stop = false;
  a.on_evaluate = b.on_evaluate = c.on_evaluate = nullptr;
  options.resume = true;
  FakePool pool({&a, &b, &c}, true);
  StrategyOptions so;
  so.name = "hillclimb";
  so.shape = shape;
  auto strategy = make_strategy(so, nullptr);
  LoopResult r = run_loop_on_pool(pool, shape, target, *strategy, clock, options);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.summary["stop_reason"], "budget");
  const auto all = rows();
  ASSERT_EQ(all.size(), 16u);
  std::set<std::string> ids;
  std::set<int> trials;
  for (const auto& row : all) {
    ids.insert(row.schedule_id);
    trials.insert(row.trial);
  }
  EXPECT_EQ(ids.size(), 16u);
  EXPECT_EQ(trials.size(), 16u);
  EXPECT_EQ(*trials.rbegin(), 15);
}

TEST_F(PoolLoop, AThreadedPoolOfFakeEvaluatorsRunsTheBudget) {
  options.budget = 12;
  std::vector<std::unique_ptr<eval::Evaluator>> evaluators;
  for (int i = 0; i < 4; ++i) evaluators.push_back(std::make_unique<FakeEvaluator>(nullptr));
  ThreadedPool pool(
      std::move(evaluators), {"t0", "t1", "t2", "t3"},
      [](int, const ScheduleConfig& c) { return FakeEvaluator(nullptr).schedule_id(c); });
  StrategyOptions so;
  so.name = "random";
  so.shape = shape;
  auto strategy = make_strategy(so, nullptr);
  LoopResult r = run_loop_on_pool(pool, shape, target, *strategy, clock, options);
  ASSERT_TRUE(r.ok) << r.error;
  std::set<std::string> ids;
  for (const auto& row : rows()) ids.insert(row.schedule_id);
  EXPECT_EQ(ids.size(), 12u);
}

// ---- the command line --------------------------------------------------------------------

TEST_F(PoolLoop, WorkersRunsCpuTrialsInSeveralWorkerProcesses) {
  const std::string d = dir_.string();
  const auto run = test::run_megasched(
      "loop --model toy --device cpu --workers 3 --budget 9 --seed 2 "
      "--results " +
          d + "/r.tsv --corpus " + d + "/c.jsonl 2>" + d + "/progress.log",
      false);
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const json summary = json::parse(run.out);
  EXPECT_EQ(summary["trials"], 9);
  ASSERT_EQ(summary["workers"].size(), 3u);
  const auto logged = flywheel::read_results(d + "/r.tsv").rows;
  ASSERT_EQ(logged.size(), 9u);
  std::set<std::string> ids, labels;
  for (const auto& row : logged) {
    ids.insert(row.schedule_id);
    labels.insert(row.timed_on.substr(0, row.timed_on.find('@')));
  }
  EXPECT_EQ(ids.size(), 9u);
  EXPECT_TRUE(labels.count("cpu0")) << "trial 0 runs on the first worker";
  for (const std::string& l : labels) EXPECT_TRUE(l == "cpu0" || l == "cpu1" || l == "cpu2") << l;
  // The ids are the ones a plain loop gives: the default config's is trial 0's.
  const auto plain = test::run_megasched("loop --model toy --device cpu --budget 1 --results " + d +
                                             "/p.tsv --corpus " + d + "/p.jsonl",
                                         false);
  ASSERT_EQ(plain.exit_code, 0);
  EXPECT_EQ(flywheel::read_results(d + "/p.tsv").rows.at(0).schedule_id, logged.at(0).schedule_id);
}

TEST_F(PoolLoop, MpiOutsideAnMpiJobOrWithoutMpiSaysWhatToDo) {
  const std::string d = dir_.string();
  const auto run = test::run_megasched("loop --model toy --device cpu --mpi --budget 2 --results " +
                                           d + "/r.tsv --corpus " + d + "/c.jsonl",
                                       true);
  EXPECT_EQ(run.exit_code, 2) << run.out;
#ifdef MS_HAVE_MPI
  EXPECT_NE(run.out.find("--mpi needs at least 2 ranks"), std::string::npos) << run.out;
#else
  EXPECT_NE(run.out.find("-DMEGASCHED_MPI=ON"), std::string::npos) << run.out;
#endif
}

// ---- batch-aware strategies ------------------------------------------------------------------

TEST_F(PoolLoop, StrategiesProposeKDistinctNewCandidatesAtOnce) {
  FakeEvaluator ev(nullptr);
  std::set<std::string> known;  // what "the logs" hold
  for (int i = 0; i < 3; ++i) {
    std::mt19937_64 rng(i);
    known.insert(ev.schedule_id(schedule::random_config(shape, target, rng)));
  }
  known.insert(ev.schedule_id(ScheduleConfig{}));
  std::vector<TrialOutcome> history;
  SearchState state;
  state.shape = &shape;
  state.target = &target;
  state.history = &history;
  state.trials_left = 100;
  state.is_new = [&](const ScheduleConfig& c) { return !known.count(ev.schedule_id(c)); };
  for (const std::string name : {"random", "hillclimb", "prior"}) {
    StrategyOptions so;
    so.name = name;
    so.shape = shape;
    so.min_prior_samples = 2;
    auto strategy = make_strategy(so, nullptr);
    if (name == "prior")  // trained on a few outcomes, so it ranks rather than explores
      for (int i = 0; i < 4; ++i) {
        std::mt19937_64 rng(100 + i);
        TrialOutcome o;
        o.config = schedule::random_config(shape, target, rng);
        o.status = "discarded";
        o.latency_us = 100.0 + i;
        strategy->observe(o);
      }
    const std::vector<Proposal> batch = strategy->propose(state, 8);
    EXPECT_EQ(batch.size(), 8u) << name;
    std::set<std::string> ids;
    for (const Proposal& p : batch) {
      const std::string id = ev.schedule_id(p.config);
      EXPECT_FALSE(known.count(id)) << name << " proposed a logged schedule";
      ids.insert(id);
    }
    EXPECT_EQ(ids.size(), batch.size()) << name << " proposed one schedule twice in a batch";
  }
}

}  // namespace
}  // namespace megasched::search
