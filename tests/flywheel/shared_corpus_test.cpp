// The shared corpus (flywheel/shared_corpus.h): per-target files, GPU rows only, the stale notion,
// dedupe, the training rows a prior-guided loop gets, and two writers at once.
#include "flywheel/shared_corpus.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "schedule/config.h"

namespace megasched::flywheel {

// Every test of this binary runs with the shared corpus off unless it names its own folder: the
// trials of a GPU test on a GPU machine are no measurements to keep in the repository.
[[maybe_unused]] const bool kSharedCorpusOffInTests = [] {
  ::setenv(kFlywheelDirEnv, kFlywheelOff, 1);
  return true;
}();

namespace {

constexpr const char* kBuild = "kernel-sources-current";

CorpusRecord gpu_record(const std::string& id, int trial, const std::string& build = kBuild) {
  CorpusRecord r;
  r.trial = trial;
  r.run_id = "r1";
  r.timestamp = "2026-11-27T10:00:0" + std::to_string(trial % 10) + "Z";
  r.schedule_id = id;
  r.status = kStatusDiscarded;
  r.config = schedule::to_json(schedule::ScheduleConfig{});
  r.verdict.correct = true;
  r.verdict.valid = true;
  r.verdict.device = "gpu";
  r.verdict.latency_kind = "measured-gpu";
  r.verdict.latency_us = 100.0 + trial;
  r.model = "llama-1b";
  r.target = "NVIDIA H100 80GB HBM3";
  r.device = "gpu";
  r.versions = {{"abi", 1}, {"ir", 1}, {"build", build}};
  return r;
}

class SharedCorpus : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("ms_shared_corpus_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  SharedCorpusFilter filter(const std::string& target = "h100") const {
    SharedCorpusFilter f;
    f.target = target;
    f.build = kBuild;
    return f;
  }
  void append(const CorpusRecord& r, const std::string& source = kSourceLoop) {
    bool appended = false;
    std::string error;
    ASSERT_TRUE(append_shared(dir_, r, source, &appended, &error)) << error;
    ASSERT_TRUE(appended);
  }
  std::string dir_;
};

TEST_F(SharedCorpus, TheFolderComesFromTheEnvironmentAndNoneTurnsItOff) {
  const std::string saved = std::getenv(kFlywheelDirEnv) ? std::getenv(kFlywheelDirEnv) : "";
  ::unsetenv(kFlywheelDirEnv);
  EXPECT_EQ(default_flywheel_dir(), "flywheel/data");
  ::setenv(kFlywheelDirEnv, "/tmp/elsewhere", 1);
  EXPECT_EQ(default_flywheel_dir(), "/tmp/elsewhere");
  ::setenv(kFlywheelDirEnv, saved.c_str(), 1);
  EXPECT_TRUE(flywheel_enabled("flywheel/data"));
  EXPECT_FALSE(flywheel_enabled("none"));
  EXPECT_FALSE(flywheel_enabled(""));
}

TEST_F(SharedCorpus, OneFilePerTargetNamedByTheRegistryKey) {
  EXPECT_EQ(target_file_key("NVIDIA H200"), "h200");
  EXPECT_EQ(target_file_key("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(target_file_key("h100"), "h100");
  EXPECT_EQ(target_file_key("Some GPU (x)"), "some-gpu-x");
  EXPECT_EQ(target_file_key(""), "unknown");
  EXPECT_EQ(shared_corpus_path("d", "NVIDIA H200"), "d/h200.corpus.jsonl");
}

TEST_F(SharedCorpus, GpuRowsAreAppendedWithTheirSourceAndReadBackByTarget) {
  append(gpu_record("a", 0), kSourceBench);
  CorpusRecord h200 = gpu_record("b", 1);
  h200.target = "NVIDIA H200";
  append(h200, kSourcePromote);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/h100.corpus.jsonl"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/h200.corpus.jsonl"));
  SharedCorpusRead h100 = read_shared(dir_, filter("h100"));
  ASSERT_EQ(h100.records.size(), 1u);
  EXPECT_EQ(h100.records[0].schedule_id, "a");
  EXPECT_EQ(h100.records[0].source, "bench");
  SharedCorpusRead all = read_shared(dir_, filter(""));
  ASSERT_EQ(all.records.size(), 2u);
  EXPECT_EQ(all.files.size(), 2u);
  EXPECT_EQ(all.records[1].source, "promote");
}

// A shared row keeps the config, the latency with its samples and the kernel's resources, and
// leaves the per-position check entries (but failing ones) and the baselines' details to the run's
// own corpus.
TEST_F(SharedCorpus, RowsAreAppendedWithoutThePerPositionDetail) {
  CorpusRecord r = gpu_record("a", 0);
  r.verdict.samples_us = {100.0, 101.0, 99.5};
  r.verdict.checks = nlohmann::json::array();
  for (int p = 0; p < 40; ++p)
    r.verdict.checks.push_back({{"position", p}, {"rel_err", 1e-3}, {"pass", true}});
  r.verdict.checks.push_back({{"position", 40}, {"rel_err", 0.5}, {"pass", false}});
  r.verdict.kernel = {{"registers", 128},
                      {"spill_store_bytes", 0},
                      {"checks", nlohmann::json::array({{{"position", 0}}})},
                      {"baseline", {{"median_us", 4000.0}}},
                      {"baselines", {{"cublas", {{"median_us", 4000.0}}}}}};
  append(r);
  const SharedCorpusRead read = read_shared(dir_, filter());
  ASSERT_EQ(read.records.size(), 1u);
  const CorpusRecord& back = read.records[0];
  EXPECT_EQ(back.config, r.config);
  ASSERT_TRUE(back.verdict.latency_us);
  EXPECT_EQ(*back.verdict.latency_us, 100.0);
  EXPECT_EQ(back.verdict.samples_us, r.verdict.samples_us);
  ASSERT_EQ(back.verdict.checks.size(), 1u);  // the failing entry
  EXPECT_EQ(back.verdict.checks[0]["position"], 40);
  EXPECT_EQ(back.verdict.kernel["registers"], 128);
  EXPECT_FALSE(back.verdict.kernel.contains("checks"));
  EXPECT_FALSE(back.verdict.kernel.contains("baseline"));
  EXPECT_FALSE(back.verdict.kernel.contains("baselines"));
}

TEST_F(SharedCorpus, CpuTrialsAreNeverAppended) {
  CorpusRecord cpu = gpu_record("a", 0);
  cpu.device = "cpu";
  cpu.verdict.device = "cpu";
  bool appended = true;
  std::string error;
  ASSERT_TRUE(append_shared(dir_, cpu, kSourceLoop, &appended, &error));
  EXPECT_FALSE(appended);
  EXPECT_FALSE(std::filesystem::exists(dir_));
  ASSERT_TRUE(append_shared("none", gpu_record("a", 0), kSourceLoop, &appended, &error));
  EXPECT_FALSE(appended);
  EXPECT_FALSE(std::filesystem::exists("none"));
}

TEST_F(SharedCorpus, RowsOfAnotherBuildAreStaleAndLeftOutUnlessAsked) {
  append(gpu_record("a", 0));
  append(gpu_record("b", 1, "kernel-sources-old"));
  CorpusRecord no_build = gpu_record("c", 2);
  no_build.versions.erase("build");
  append(no_build);
  EXPECT_TRUE(is_stale(no_build, kBuild));
  SharedCorpusRead current = read_shared(dir_, filter());
  ASSERT_EQ(current.records.size(), 1u);
  EXPECT_EQ(current.records[0].schedule_id, "a");
  EXPECT_EQ(current.stale, 2);
  SharedCorpusFilter all = filter();
  all.include_stale = true;
  EXPECT_EQ(read_shared(dir_, all).records.size(), 3u);
}

TEST_F(SharedCorpus, DedupeKeepsTheNewestRowPerScheduleBuildAndTimedPosition) {
  append(gpu_record("a", 5));  // newer, written first
  append(gpu_record("a", 1));
  CorpusRecord at_4096 = gpu_record("a", 2);
  at_4096.verdict.timed_position = 4096;
  append(at_4096);
  append(gpu_record("a", 3, "kernel-sources-old"));
  SharedCorpusFilter f = filter();
  f.include_stale = true;
  SharedCorpusRead read = read_shared(dir_, f);
  ASSERT_EQ(read.records.size(), 3u);
  EXPECT_EQ(read.duplicates, 1);
  EXPECT_DOUBLE_EQ(*read.records[0].verdict.latency_us, 105.0);
  EXPECT_EQ(timed_key(read.records[1]), "p4096");
  f.dedupe = false;
  EXPECT_EQ(read_shared(dir_, f).records.size(), 4u);
}

TEST_F(SharedCorpus, TrainingTakesSharedRowsOfTheSameTargetModelAndTimingOnce) {
  std::vector<CorpusRecord> own = {gpu_record("own", 0)};
  own[0].run_id = "mine";
  CorpusRecord copy = own[0];  // the loop's own trial, also in the shared corpus
  CorpusRecord other_model = gpu_record("m", 1);
  other_model.model = "small";
  CorpusRecord other_target = gpu_record("t", 2);
  other_target.target = "h200";
  CorpusRecord other_position = gpu_record("p", 3);
  other_position.verdict.timed_position = 1024;
  CorpusRecord good = gpu_record("g", 4);
  good.target = "h100";  // the registry name and the live name are one target
  TrainingRequest request;
  request.target = "NVIDIA H100 80GB HBM3";
  request.model = "llama-1b";
  request.device = "gpu";
  int used = -1;
  const auto training = training_records(
      own, {copy, other_model, other_target, other_position, good}, request, &used);
  ASSERT_EQ(training.size(), 2u);
  EXPECT_EQ(training[0].schedule_id, "own");
  EXPECT_EQ(training[1].schedule_id, "g");
  EXPECT_EQ(used, 1);
  request.device = "cpu";  // a CPU loop's latencies are predicted: no measured rows join them
  own[0].device = "cpu";
  EXPECT_EQ(training_records(own, {good}, request, &used).size(), 1u);
  EXPECT_EQ(used, 0);
}

TEST_F(SharedCorpus, TwoWritersAtOnceLoseNoLine) {
  constexpr int kPerThread = 200;
  auto writer = [this](const std::string& prefix) {
    for (int i = 0; i < kPerThread; ++i) {
      bool appended = false;
      std::string error;
      EXPECT_TRUE(append_shared(dir_, gpu_record(prefix + std::to_string(i), i), kSourceLoop,
                                &appended, &error))
          << error;
    }
  };
  std::thread a(writer, "a"), b(writer, "b");
  a.join();
  b.join();
  SharedCorpusRead read = read_shared(dir_, filter());
  EXPECT_TRUE(read.problems.empty());
  EXPECT_EQ(read.records.size(), 2u * kPerThread);
}

}  // namespace
}  // namespace megasched::flywheel
