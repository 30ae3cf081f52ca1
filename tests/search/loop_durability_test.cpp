// The loop's logs under concurrency, kills and bad paths: one writer per workload, nothing lost or
// repeated across kill -9 and --resume, torn lines quarantined, harness failures never logged as
// a schedule's verdict, and files that are not its logs left alone.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "flywheel/locked_file.h"
#include "flywheel/report.h"
#include "search/loop.h"
#include "search/strategy.h"
#include "tests/search/loop_fakes.h"

namespace megasched::search {
namespace {

using namespace loop_testing;

class LoopDurability : public LoopFixture {
 protected:
  std::unique_ptr<Strategy> random_strategy(uint64_t seed) {
    StrategyOptions so;
    so.name = "random";
    so.seed = seed;
    std::string error;
    auto strategy = make_strategy(so, &error);
    EXPECT_TRUE(strategy) << error;
    return strategy;
  }
  std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Every run in the results has each trial number once, and no schedule is there twice.
  void expect_no_repeats() {
    std::set<std::string> ids;
    std::map<std::string, std::set<int>> trials;
    for (const auto& row : rows()) {
      EXPECT_TRUE(ids.insert(row.schedule_id).second) << "schedule twice: " << row.schedule_id;
      EXPECT_TRUE(trials[row.run_id].insert(row.trial).second)
          << "trial " << row.trial << " twice in run " << row.run_id;
    }
  }
};

TEST_F(LoopDurability, ASecondLoopOfTheSameWorkloadOnItsLogsIsRefusedWhileTheFirstRuns) {
  options.budget = 30;
  // The first loop holds its logs from its first evaluation until the parent, done with its
  // checks, releases it (no timing assumption: a loaded machine cannot let it finish early).
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(release[1]);
    FakeEvaluator slow(nullptr);
    bool told = false;
    slow.on_evaluate = [&] {
      if (told) return;
      told = ::write(ready[1], "x", 1) == 1;  // it holds its logs from now on
      char go = 0;
      if (::read(release[0], &go, 1) != 1) ::_exit(2);
    };
    // Its own time, far from the parent's: a forked child shares the parent's last run id
    // (flywheel::new_run_id), so on a clock the two share the ids would meet after earlier loop
    // tests in this process.
    ScriptedClock later;
    later.now = clock.now + 1e6;
    LoopResult r = run_loop(slow, shape, target, *random_strategy(7), later, options);
    ::_exit(r.ok && r.summary["trials"] == 30 ? 0 : 1);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);

  // A fresh run and a --resume of the running one: both refused before they evaluate anything.
  FakeEvaluator second(&clock);
  for (bool resume : {false, true}) {
    options.resume = resume;
    LoopResult r = run(second, *random_strategy(8));
    EXPECT_FALSE(r.ok);
    EXPECT_FALSE(r.bad_arguments);
    EXPECT_NE(r.error.find("in use by another megasched loop of toy / h100 / cpu"),
              std::string::npos)
        << r.error;
  }
  EXPECT_TRUE(second.evaluations.empty());
  // Another workload shares the logs.
  FakeEvaluator gpu(&clock, "gpu");
  options.resume = false;
  options.budget = 5;
  LoopResult other = run(gpu, *random_strategy(9));
  EXPECT_TRUE(other.ok) << other.error;

  ASSERT_EQ(::write(release[1], "x", 1), 1);
  ::close(release[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  expect_no_repeats();
  EXPECT_EQ(rows().size(), 35u);
  // Once the first is done, its run can be resumed (its budget is spent: nothing to do).
  options.resume = true;
  options.budget = 30;
  LoopResult resumed = run(second, *random_strategy(7));
  ASSERT_TRUE(resumed.ok) << resumed.error;
  EXPECT_EQ(resumed.summary["trials_this_invocation"], 0);
  EXPECT_TRUE(second.evaluations.empty());
}

TEST_F(LoopDurability, KilledAtAnyMomentAndResumedTheRunLosesAndRepeatsNothing) {
  options.budget = 40;
  options.resume = true;  // the first invocation finds no run to resume and starts one
  std::mt19937 rng(11);
  int kills = 0;
  for (int round = 0; round < 8; ++round) {
    // Two --resume invocations of the one run at once (an agent retrying): one may write.
    pid_t children[2];
    for (pid_t& child : children) {
      child = ::fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        FakeEvaluator ev(nullptr);
        ev.fallback = [](const ScheduleConfig& c) {
          eval::Verdict v =
              ok_verdict(100.0 + c.kernel.unroll + c.tiling.gemv_rows_per_task, 0, "predicted");
          v.notes.assign(200, std::string(100, 'n'));  // records of ~20 KiB
          return v;
        };
        ev.on_evaluate = [] { ::usleep(3000); };
        SystemClock real;
        run_loop(ev, shape, target, *random_strategy(5), real, options);
        ::_exit(0);
      }
    }
    ::usleep(20000 + rng() % 60000);
    for (pid_t child : children) {
      kills += ::kill(child, SIGKILL) == 0;
      int status = 0;
      ::waitpid(child, &status, 0);
    }
  }
  ASSERT_GT(kills, 0);
  FakeEvaluator ev(&clock);
  LoopResult r = run(ev, *random_strategy(5));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.summary["trials"], 40);

  const flywheel::ResultsRead results = flywheel::read_results(options.results_path);
  const flywheel::CorpusRead corpus = flywheel::read_corpus(options.corpus_path);
  EXPECT_TRUE(results.problems.empty()) << results.problems.front();
  EXPECT_TRUE(corpus.problems.empty()) << corpus.problems.front();
  ASSERT_EQ(results.rows.size(), 40u);
  ASSERT_EQ(corpus.records.size(), 40u);
  expect_no_repeats();
  std::set<int> trials;
  for (const auto& record : corpus.records) trials.insert(record.trial);
  EXPECT_EQ(trials.size(), 40u);
  EXPECT_EQ(*trials.rbegin(), 39);
  // The report counts what the loop counts, and its best has its record.
  const nlohmann::json report = flywheel::build_report(results.rows, corpus.records);
  ASSERT_EQ(report["groups"].size(), 1u);
  EXPECT_EQ(report["groups"][0]["trials"], 40);
  EXPECT_FALSE(report["groups"][0]["best"]["config"].is_null());
}

TEST_F(LoopDurability, ATornLastRowIsQuarantinedSoTheReportCountsWhatTheLoopCounts) {
  FakeEvaluator ev(&clock);
  options.budget = 4;
  ASSERT_TRUE(run(ev, *random_strategy(3)).ok);
  // A kill inside the last row's last cell (its description): continued by the next append, the
  // fragment would read as a whole row.
  std::string text = slurp(options.results_path);
  text.resize(text.size() - 5);
  std::ofstream(options.results_path, std::ios::trunc) << text;
  const std::string fragment = text.substr(text.rfind('\n') + 1);

  options.resume = true;
  options.budget = 6;
  LoopResult r = run(ev, *random_strategy(3));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.summary["restored_rows"], 1);
  const flywheel::ResultsRead results = flywheel::read_results(options.results_path);
  EXPECT_TRUE(results.problems.empty()) << results.problems.front();
  ASSERT_EQ(results.rows.size(), 6u);
  expect_no_repeats();
  EXPECT_EQ(slurp(flywheel::quarantine_path(options.results_path)), fragment + "\n");
  const nlohmann::json report = flywheel::build_report(results.rows, records());
  EXPECT_EQ(report["groups"][0]["trials"], 6);
  int counted = 0;
  for (const auto& [status, n] : report["groups"][0]["status_counts"].items())
    counted += n.get<int>();
  EXPECT_EQ(counted, 6);
  for (const auto& [id, n] : ev.evaluations) EXPECT_EQ(n, 1) << id;
}

// An evaluator whose harness fails (as a worker that cannot restart) on its `fail_at`-th trial.
class FailingHarness : public eval::Evaluator {
 public:
  FailingHarness(FakeEvaluator* inner, int fail_at) : inner_(inner), fail_at_(fail_at) {}
  eval::Verdict evaluate(const ScheduleConfig& c) override {
    failure_.clear();
    if (++calls_ == fail_at_) {
      failure_ = "worker `megasched worker` did not start (exit 3)";
      eval::Verdict v;
      v.status = "crash";
      return v;
    }
    return inner_->evaluate(c);
  }
  nlohmann::json identity() const override { return inner_->identity(); }
  std::string schedule_id(const ScheduleConfig& c) const override { return inner_->schedule_id(c); }
  std::string harness_failure() const override { return failure_; }

 private:
  FakeEvaluator* inner_;
  int fail_at_;
  int calls_ = 0;
  std::string failure_;
};

TEST_F(LoopDurability, AHarnessFailureIsNotLoggedAsTheSchedulesVerdict) {
  FakeEvaluator inner(&clock);
  const ScheduleConfig a = with({{"kernel.unroll", 4}});
  const ScheduleConfig b = with({{"kernel.unroll", 8}});
  inner.script(b, ok_verdict(50.0, 0, "predicted"));
  FailingHarness flaky(&inner, 3);  // trial 0 and a run; b's trial fails on the harness side
  ScriptedStrategy first({a, b});
  options.budget = 3;
  LoopResult r = run(flaky, first);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("could not run, so nothing is logged for it"), std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("did not start"), std::string::npos) << r.error;
  ASSERT_EQ(rows().size(), 2u);
  for (const auto& row : rows()) EXPECT_NE(row.schedule_id, inner.schedule_id(b));
  // b is still untried: the next run tries it.
  options.resume = true;
  ScriptedStrategy again({b});
  LoopResult next = run(inner, again);
  ASSERT_TRUE(next.ok) << next.error;
  ASSERT_EQ(rows().size(), 3u);
  EXPECT_EQ(rows().back().schedule_id, inner.schedule_id(b));
  EXPECT_EQ(rows().back().status, "kept");
}

TEST_F(LoopDurability, ALoneUnparsableProposerCandidateIsSkippedAndTheLoopGoesOn) {
  const std::string script = (dir_ / "agent.sh").string();
  // The first call answers one candidate that does not parse, the next ones a real change.
  std::ofstream(script) << "n=$(cat '" + (dir_ / "calls").string() + "' 2>/dev/null || echo 0)\n"
                        << "echo $((n + 1)) > '" + (dir_ / "calls").string() + "'\n"
                        << "cat > /dev/null\n"
                        << "if [ $n = 0 ]; then echo '{\"tiling\": {\"bogus\": 1}}'; "
                        << "else echo \"{\\\"kernel\\\": {\\\"unroll\\\": $((n * 4))}}\"; fi\n";
  FakeEvaluator ev(&clock);
  options.budget = 3;
  StrategyOptions so;
  so.name = "proposer";
  so.proposer_command = "sh " + script;
  std::string error;
  auto strategy = make_strategy(so, &error);
  std::ostringstream progress;
  options.progress = &progress;
  LoopResult r = run(ev, *strategy);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.summary["stop_reason"], "budget") << r.summary.dump();
  EXPECT_EQ(rows().size(), 3u);
  EXPECT_NE(progress.str().find("warning: proposer: skipped: candidate 0: unknown config key "
                                "'tiling.bogus'"),
            std::string::npos)
      << progress.str();
  // Unusable three rounds in a row still ends the loop, with the reason.
  FakeEvaluator fresh(&clock);
  so.proposer_command = "cat > /dev/null; echo 'not json'";
  options.results_path = (dir_ / "r2.tsv").string();
  options.corpus_path = (dir_ / "c2.jsonl").string();
  LoopResult stuck = run(fresh, *make_strategy(so, &error));
  EXPECT_NE(stuck.summary["stop_reason"].get<std::string>().find("is not JSON"), std::string::npos)
      << stuck.summary.dump();
}

TEST_F(LoopDurability, RefusesFilesThatAreNotItsLogsAndLeavesThemAlone) {
  const std::string readme = (dir_ / "README.md").string();
  std::ofstream(readme) << "# notes\nkeep me\n";
  FakeEvaluator ev(&clock);
  ScriptedStrategy none({});
  struct Case {
    std::string results, corpus, says;
  };
  const std::vector<Case> cases = {
      {readme, options.corpus_path, "is not a results.tsv"},
      {options.results_path, readme, "is not a corpus.jsonl"},
      {options.results_path, options.results_path, "both name"},
      {"/dev/zero", options.corpus_path, "/dev/zero is not a regular file"},
      {dir_.string(), options.corpus_path, "is a directory"},
  };
  for (const Case& c : cases) {
    LoopOptions o = options;
    o.results_path = c.results;
    o.corpus_path = c.corpus;
    LoopResult r = run_loop(ev, shape, target, none, clock, o);
    EXPECT_FALSE(r.ok) << c.says;
    EXPECT_TRUE(r.bad_arguments) << c.says;
    EXPECT_NE(r.error.find(c.says), std::string::npos) << r.error;
  }
  EXPECT_EQ(slurp(readme), "# notes\nkeep me\n");
  EXPECT_TRUE(ev.evaluations.empty());
  // The swapped pair of real logs is refused too.
  ASSERT_TRUE(run(ev, none).ok);
  LoopOptions swapped = options;
  std::swap(swapped.results_path, swapped.corpus_path);
  LoopResult r = run_loop(ev, shape, target, none, clock, swapped);
  EXPECT_TRUE(r.bad_arguments);
  EXPECT_NE(r.error.find("is not a results.tsv"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace megasched::search
