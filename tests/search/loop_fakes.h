// The loop's test doubles: a scripted clock, a fake evaluator over a scripted latency landscape, a
// strategy that proposes a fixed list, and a fixture with its own log files per test.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flywheel/corpus.h"
#include "flywheel/results.h"
#include "schedule/config.h"
#include "schedule/target.h"
#include "search/loop.h"
#include "search/strategy.h"
#include "tests/h100_target.h"

namespace megasched::search::loop_testing {

using schedule::ScheduleConfig;

class ScriptedClock : public Clock {
 public:
  double now_s() override { return now; }
  double now = 1.8e9;
};

inline eval::Verdict ok_verdict(double latency_us, double sigma_us, const std::string& kind) {
  eval::Verdict v;
  v.valid = true;
  v.correct = true;
  v.argmax_match = true;
  v.status = "ok";
  v.latency_us = latency_us;
  v.latency_kind = kind;
  v.floor_us = 10.0;
  if (sigma_us > 0) v.samples_us = {latency_us - sigma_us, latency_us, latency_us + sigma_us};
  return v;
}

// A scripted landscape: latencies by canonical config; anything else gets `fallback`.
class FakeEvaluator : public eval::Evaluator {
 public:
  explicit FakeEvaluator(ScriptedClock* clock, std::string device = "cpu")
      : clock_(clock), device_(std::move(device)) {}

  void script(const ScheduleConfig& c, eval::Verdict v) {
    scripted_[schedule::canonical_string(c)] = v;
  }
  eval::Verdict evaluate(const ScheduleConfig& c) override {
    if (clock_) clock_->now += seconds_per_trial;
    ++evaluations[schedule_id(c)];
    if (on_evaluate) on_evaluate();
    auto it = scripted_.find(schedule::canonical_string(c));
    eval::Verdict v = it != scripted_.end() ? it->second : fallback(c);
    v.schedule_id = schedule_id(c);
    v.model = "toy";
    v.target = "h100";
    v.device = device_;
    return v;
  }
  nlohmann::json identity() const override {
    return {{"model", "toy"}, {"target", "h100"}, {"device", device_}};
  }
  std::string schedule_id(const ScheduleConfig& c) const override {
    return schedule::hash_hex(schedule::canonical_string(c) + "|toy|h100|" + device_);
  }

  std::function<eval::Verdict(const ScheduleConfig&)> fallback = [](const ScheduleConfig& c) {
    // A smooth landscape over a few knobs, so strategies have something to find.
    double us = 100.0;
    us *= 1.0 + 0.002 * std::abs(c.tiling.gemv_rows_per_task - 32);
    us *= 1.0 + 0.05 * (c.launch.blocks_per_sm - 1);
    us *= c.kernel.vector_bytes == 16 ? 1.0 : 1.2;
    return ok_verdict(us, 0.0, "predicted");
  };
  std::function<void()> on_evaluate;
  std::map<std::string, int> evaluations;
  double seconds_per_trial = 2.0;

 private:
  ScriptedClock* clock_;
  std::string device_;
  std::map<std::string, eval::Verdict> scripted_;
};

// Proposes a fixed list, in order.
class ScriptedStrategy : public Strategy {
 public:
  explicit ScriptedStrategy(std::vector<ScheduleConfig> list) : list_(std::move(list)) {}
  std::string name() const override { return "scripted"; }
  std::vector<Proposal> propose(const SearchState&, int) override {
    if (next_ >= list_.size()) return {};
    return {{list_[next_++], "scripted", std::nullopt}};
  }
  void observe(const TrialOutcome& o) override { observed.push_back(o); }
  std::vector<TrialOutcome> observed;

 private:
  std::vector<ScheduleConfig> list_;
  size_t next_ = 0;
};

inline ScheduleConfig with(std::vector<std::pair<std::string, nlohmann::json>> knobs) {
  ScheduleConfig c;
  for (const auto& [path, value] : knobs) {
    std::string error;
    EXPECT_TRUE(schedule::set_knob(&c, path, value, &error)) << error;
  }
  return c;
}

class LoopFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ms_loop_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    options.results_path = (dir_ / "results.tsv").string();
    options.corpus_path = (dir_ / "corpus.jsonl").string();
    options.budget = 10;
    shape = *schedule::find_preset("toy");
    target = testing_support::h100_target();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  LoopResult run(eval::Evaluator& ev, Strategy& strategy) {
    return run_loop(ev, shape, target, strategy, clock, options);
  }
  std::vector<flywheel::ResultRow> rows() {
    return flywheel::read_results(options.results_path).rows;
  }
  std::vector<flywheel::CorpusRecord> records() {
    return flywheel::read_corpus(options.corpus_path).records;
  }

  std::filesystem::path dir_;
  LoopOptions options;
  ScriptedClock clock;
  schedule::ModelShape shape;
  schedule::GpuTarget target;
};

}  // namespace megasched::search::loop_testing
