// Compile-ahead (search/compile_ahead.h): the pool's dedup by build key, its skips, stale drops,
// cancel and join, a job that throws; a prebuilt kernel found by the request GpuVm::create forms
// (one NVRTC compile of the toy model); and the serial loop with compile-ahead: no proposal made
// against an earlier incumbent ever runs, and with 0 ahead the trajectory is the loop's own.
#include "search/compile_ahead.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "eval/prepare.h"
#include "schedule/config.h"
#include "search/loop.h"
#include "tests/h100_target.h"
#include "tests/search/loop_fakes.h"
#include "vm/nvrtc_build.h"

namespace megasched::search {
namespace {

using loop_testing::FakeEvaluator;
using loop_testing::LoopFixture;
using loop_testing::ok_verdict;
using loop_testing::with;
using schedule::ScheduleConfig;

/// A fake prebuilder: the request of a config is its kernel.unroll as the only define (so configs
/// that differ elsewhere share a key); configs with launch.blocks_per_sm 4 do not prepare. Builds
/// are counted by key and may be held until released.
struct FakeBuilds {
  std::mutex mutex;
  std::map<std::string, int> built;  // defines[0] -> builds
  std::atomic<int> started{0};
  std::atomic<bool> hold{false};
  std::atomic<bool> throw_on_build{false};

  Prebuilder prebuilder() {
    Prebuilder p;
    p.prepare = [](const ScheduleConfig& c) -> std::optional<vm::BuildRequest> {
      if (c.launch.blocks_per_sm == 4) return std::nullopt;
      return vm::BuildRequest{"fake.cuh", {"MS_UNROLL=" + std::to_string(c.kernel.unroll)}, 90, ""};
    };
    p.build = [this](const vm::BuildRequest& r) {
      ++started;
      while (hold.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (throw_on_build.load()) throw std::runtime_error("planted");
      std::lock_guard<std::mutex> lock(mutex);
      ++built[r.defines[0]];
      vm::BuildResult b;
      b.ok = true;
      b.compile_ms = 2.0;
      return b;
    };
    return p;
  }
  int builds() {
    std::lock_guard<std::mutex> lock(mutex);
    int n = 0;
    for (const auto& [key, count] : built) n += count;
    return n;
  }
};

void wait_until(const std::function<bool()>& done) {
  for (int i = 0; i < 5000 && !done(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(done());
}

TEST(CompileAhead, BuildsEachKeyOnceAndSkipsConfigsThatDoNotPrepare) {
  FakeBuilds fake;
  CompileAhead pool(fake.prebuilder(), 3, 16);
  EXPECT_TRUE(pool.submit("a", with({{"kernel.unroll", 4}})));
  EXPECT_TRUE(pool.submit("b", with({{"kernel.unroll", 4}, {"tiling.gemv_rows_per_task", 16}})));
  EXPECT_TRUE(pool.submit("c", with({{"kernel.unroll", 8}})));
  EXPECT_TRUE(pool.submit("d", with({{"launch.blocks_per_sm", 4}})));
  EXPECT_FALSE(pool.submit("a", ScheduleConfig{})) << "an id already submitted";
  pool.wait_idle();
  EXPECT_EQ(fake.built["MS_UNROLL=4"], 1);
  EXPECT_EQ(fake.built["MS_UNROLL=8"], 1);
  EXPECT_EQ(fake.builds(), 2) << "the config that does not prepare is never built";
  const CompileAheadCounters c = pool.counters();
  EXPECT_EQ(c.queued, 4);
  EXPECT_EQ(c.compiles, 2);
  EXPECT_EQ(c.deduped, 1);
  EXPECT_EQ(c.invalid, 1);
  EXPECT_DOUBLE_EQ(c.compile_ms, 4.0);
  const nlohmann::json s = pool.summary();
  EXPECT_EQ(s["threads"], 3);
  EXPECT_EQ(s["compiles"], 2);
  EXPECT_EQ(s["invalid"], 1);
}

TEST(CompileAhead, DropsQueuedJobsOfAnEarlierGenerationAndTakesBackAStartedTrialsJob) {
  FakeBuilds fake;
  fake.hold = true;
  CompileAhead pool(fake.prebuilder(), 1, 16);
  ASSERT_TRUE(pool.submit("first", with({{"kernel.unroll", 1}}), 0));
  wait_until([&] { return fake.started.load() == 1; });  // the only thread is busy
  ASSERT_TRUE(pool.submit("old", with({{"kernel.unroll", 2}}), 0));
  ASSERT_TRUE(pool.submit("new", with({{"kernel.unroll", 4}}), 1));
  ASSERT_TRUE(pool.submit("runs-now", with({{"kernel.unroll", 8}}), 1));
  EXPECT_EQ(pool.drop_stale(1), 1);
  EXPECT_TRUE(pool.withdraw("runs-now"));
  EXPECT_FALSE(pool.withdraw("first")) << "already building";
  fake.hold = false;
  pool.wait_idle();
  EXPECT_EQ(fake.built.count("MS_UNROLL=2"), 0u) << "a stale job never builds";
  EXPECT_EQ(fake.built.count("MS_UNROLL=8"), 0u) << "a withdrawn job never builds";
  EXPECT_EQ(fake.built["MS_UNROLL=1"], 1);
  EXPECT_EQ(fake.built["MS_UNROLL=4"], 1);
  EXPECT_EQ(pool.counters().dropped_stale, 1);
  EXPECT_EQ(pool.counters().withdrawn, 1);
  EXPECT_TRUE(pool.submit("old", with({{"kernel.unroll", 2}}), 1)) << "proposed again: queued";
}

TEST(CompileAhead, ABoundedQueueRefusesWhatDoesNotFit) {
  FakeBuilds fake;
  fake.hold = true;
  CompileAhead pool(fake.prebuilder(), 1, 2);
  ASSERT_TRUE(pool.submit("a", with({{"kernel.unroll", 1}})));
  wait_until([&] { return fake.started.load() == 1; });
  EXPECT_TRUE(pool.submit("b", with({{"kernel.unroll", 2}})));
  EXPECT_TRUE(pool.submit("c", with({{"kernel.unroll", 4}})));
  EXPECT_FALSE(pool.submit("d", with({{"kernel.unroll", 8}})));
  EXPECT_EQ(pool.counters().refused_full, 1);
  fake.hold = false;
}

TEST(CompileAhead, CancelDropsTheQueueAndJoinsAfterTheJobsBuilding) {
  FakeBuilds fake;
  fake.hold = true;
  auto pool = std::make_unique<CompileAhead>(fake.prebuilder(), 2, 64);
  for (int u : {1, 2, 4, 8})
    for (int rows : {8, 16, 32, 64})
      pool->submit(std::to_string(u) + "/" + std::to_string(rows),
                   with({{"kernel.unroll", u}, {"tiling.gemv_rows_per_task", rows}}));
  wait_until([&] { return fake.started.load() == 2; });
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fake.hold = false;
  });
  pool->cancel();  // returns once the two builds in flight are done
  EXPECT_EQ(fake.builds(), 2);
  EXPECT_FALSE(pool->submit("late", ScheduleConfig{}));
  pool.reset();  // the destructor after a cancel joins nothing twice
  release.join();
  EXPECT_EQ(fake.builds(), 2);
}

TEST(CompileAhead, AJobThatThrowsCountsAsFailedAndThePoolGoesOn) {
  FakeBuilds fake;
  fake.throw_on_build = true;
  CompileAhead pool(fake.prebuilder(), 1, 8);
  pool.submit("a", with({{"kernel.unroll", 1}}));
  pool.wait_idle();
  EXPECT_EQ(pool.counters().failed, 1);
  fake.throw_on_build = false;
  pool.submit("b", with({{"kernel.unroll", 1}}));  // the same key: tried again after a failure
  pool.wait_idle();
  EXPECT_EQ(pool.counters().compiles, 1);
}

TEST(CompileAhead, APrebuiltKernelIsACacheHitForTheRequestGpuVmForms) {
  if (!vm::nvrtc_available()) GTEST_SKIP() << "no NVRTC in this build";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ms_compile_ahead_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const schedule::ModelShape shape = *schedule::find_preset("toy");
  const schedule::GpuTarget target = testing_support::h100_target();
  const eval::PreparedProgram prepared = eval::prepare_program(shape, target, ScheduleConfig{});
  ASSERT_TRUE(prepared.ok());
  const vm::CubinCacheStats before = vm::cubin_cache_stats();
  {
    CompileAhead pool(kernel_prebuilder(shape, target, dir.string()), 1, 4);
    ASSERT_TRUE(pool.submit("default", ScheduleConfig{}));
    ScheduleConfig unlowerable;  // knob_conflict: tagged inputs need gemv_k_split = 1
    unlowerable.pipeline.tagged_inputs = true;
    unlowerable.tiling.gemv_k_split = 2;
    ASSERT_TRUE(pool.submit("unlowerable", unlowerable));
    // What GpuVm::create builds for this program, at once: whichever of the two comes second
    // waits on the key's lock and reads the other's cubin.
    const vm::BuildResult now =
        vm::build_cubin(vm::megakernel_request(*prepared.program, target.sm_arch, dir.string()));
    ASSERT_TRUE(now.ok) << now.error;
    pool.wait_idle();
    const CompileAheadCounters c = pool.counters();
    EXPECT_EQ(c.compiles + c.cache_hits, 1) << pool.summary().dump();
    EXPECT_EQ(c.invalid, 1) << "a config that does not lower or validate is not built";
  }
  const vm::CubinCacheStats after = vm::cubin_cache_stats();
  EXPECT_EQ(after.compiles - before.compiles, 1u) << "one NVRTC compile for the key";
  EXPECT_EQ(after.hits - before.hits, 1u);
  const vm::BuildResult later =
      vm::build_cubin(vm::megakernel_request(*prepared.program, target.sm_arch, dir.string()));
  EXPECT_TRUE(later.cache_hit);
  EXPECT_EQ(later.key, vm::build_key(vm::megakernel_request(*prepared.program, 90, dir.string())));
  std::filesystem::remove_all(dir);
}

TEST(CompileAhead, TheRealPrebuilderSaysWhyItCannotRunWithoutAnArch) {
  schedule::GpuTarget target = testing_support::h100_target();
  EXPECT_EQ(compile_ahead_unavailable(target).empty(), vm::nvrtc_available());
  target.sm_arch = 0;
  EXPECT_FALSE(compile_ahead_unavailable(target).empty());
  EXPECT_GE(default_compile_threads(), 1);
  EXPECT_LE(default_compile_threads(), 8);
}

// Proposes up to `count` configs from a list, remembering the incumbent each was proposed
// against.
class ListStrategy : public Strategy {
 public:
  ListStrategy(std::vector<ScheduleConfig> list, const eval::Evaluator& ids)
      : list_(std::move(list)), ids_(ids) {}
  std::string name() const override { return "list"; }
  void observe(const TrialOutcome&) override {}
  std::vector<Proposal> propose(const SearchState& state, int count) override {
    std::vector<Proposal> out;
    while (static_cast<int>(out.size()) < count && next_ < list_.size()) {
      const ScheduleConfig& c = list_[next_++];
      if (state.is_new && !state.is_new(c)) continue;
      proposed_against[ids_.schedule_id(c)] = state.incumbent_id;
      out.push_back({c, "list", std::nullopt});
    }
    return out;
  }
  std::map<std::string, std::string> proposed_against;  // schedule id -> incumbent id

 private:
  std::vector<ScheduleConfig> list_;
  const eval::Evaluator& ids_;
  size_t next_ = 0;
};

class CompileAheadLoop : public LoopFixture {};

TEST_F(CompileAheadLoop, NeverRunsAProposalMadeAgainstAnEarlierIncumbent) {
  FakeEvaluator ev(&clock);
  ev.fallback = [](const ScheduleConfig&) { return ok_verdict(100.0, 0, "predicted"); };
  std::vector<ScheduleConfig> list;
  for (int rows : {8, 16, 64, 128})
    for (int unroll : {1, 4, 8})
      list.push_back(with({{"tiling.gemv_rows_per_task", rows}, {"kernel.unroll", unroll}}));
  // The third proposal is faster than the default: every one queued behind it goes stale.
  ev.script(list[2], ok_verdict(50.0, 0, "predicted"));
  ListStrategy strategy(list, ev);
  FakeBuilds fake;
  CompileAhead builds(fake.prebuilder(), 2, 64);
  options.compile_ahead = 3;
  options.compile_pool = &builds;
  options.budget = 8;
  LoopResult r = run(ev, strategy);
  ASSERT_TRUE(r.ok) << r.error;
  std::string incumbent;
  int kept = 0;
  for (const flywheel::CorpusRecord& rec : records()) {
    if (rec.trial > 0) {
      EXPECT_EQ(strategy.proposed_against.at(rec.schedule_id), incumbent)
          << "trial " << rec.trial << " ran against an incumbent it was not proposed for";
    }
    if (rec.status == "kept") incumbent = rec.schedule_id, ++kept;
  }
  EXPECT_EQ(kept, 2);  // the default, then list[2]
  EXPECT_EQ(r.summary["trials"], 8);
  const nlohmann::json& s = r.summary["compile_ahead"];
  EXPECT_EQ(s["ahead"], 3);
  EXPECT_EQ(s["stale_proposals"], 3) << s.dump();  // list[3..5] were queued behind list[2]
  EXPECT_GT(s["queued"].get<int>(), 0);
}

TEST_F(CompileAheadLoop, WithNothingAheadTheTrajectoryIsTheLoopsOwn) {
  auto trace = [this](int ahead, CompileAhead* builds, const std::string& tag) {
    options.results_path = (dir_ / (tag + ".tsv")).string();
    options.corpus_path = (dir_ / (tag + ".jsonl")).string();
    options.compile_ahead = ahead;
    options.compile_pool = builds;
    options.budget = 12;
    FakeEvaluator ev(&clock);
    StrategyOptions so;
    so.name = "hillclimb";
    so.seed = 11;
    so.shape = shape;
    auto strategy = make_strategy(so, nullptr);
    EXPECT_TRUE(run(ev, *strategy).ok);
    std::vector<std::string> ids;
    for (const auto& row : rows()) ids.push_back(row.schedule_id + " " + row.status);
    return ids;
  };
  FakeBuilds fake;
  CompileAhead builds(fake.prebuilder(), 1, 8);
  const std::vector<std::string> plain = trace(0, nullptr, "plain");
  EXPECT_EQ(trace(0, &builds, "zero"), plain);
  EXPECT_EQ(builds.counters().queued, 0);
  EXPECT_EQ(plain.size(), 12u);
  const std::vector<std::string> ahead = trace(2, &builds, "ahead");
  EXPECT_EQ(ahead.size(), 12u);
  EXPECT_EQ(std::set<std::string>(ahead.begin(), ahead.end()).size(), 12u) << "no repeats";
  EXPECT_GT(builds.counters().queued, 0);
}

}  // namespace
}  // namespace megasched::search
