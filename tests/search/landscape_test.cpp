// The landscape file (search/landscape.h), its recorder (search/landscape_recorder.h) and the
// evaluator that replays it (search/landscape_evaluator.h).
#include "search/landscape.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "eval/evaluate.h"
#include "flywheel/shared_corpus.h"
#include "search/compile_ahead.h"
#include "search/landscape_evaluator.h"
#include "search/landscape_recorder.h"
#include "search/trial_pool.h"
#include "tests/h100_target.h"
#include "tests/search/loop_fakes.h"
#include "tests/search/synthetic_landscape.h"
#include "vm/nvrtc_build.h"

namespace megasched::search {
namespace {

namespace fs = std::filesystem;
using testing_support::synthetic_landscape;

const std::string kSyntheticPath =
    std::string(MS_SOURCE_DIR) + "/tests/data/synthetic.landscape.jsonl";

class LandscapeFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ms_landscape_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  /// A recording of toy into FILE under the test's folder, by the current kernel build.
  RecordOptions toy_recording(const std::string& file, const std::string& target,
                              const std::string& device, const std::string& latency_kind) const {
    RecordOptions options;
    options.path = (dir_ / file).string();
    options.header.model = "toy";
    options.header.target = target;
    options.header.device = device;
    options.header.latency_kind = latency_kind;
    options.header.build = vm::build_identity();
    return options;
  }
  std::string write(const std::string& text) {
    const std::string path = (dir_ / "l.landscape.jsonl").string();
    std::ofstream(path, std::ios::trunc) << text;
    return path;
  }
  // The error reading `text` gives ("" when it reads).
  std::string error_of(const std::string& text) {
    std::string error;
    return read_landscape(write(text), &error) ? "" : error;
  }
  fs::path dir_;
};

std::string header_line() { return to_json(synthetic_landscape().header).dump() + "\n"; }

/// A CPU evaluator of toy at position 0 (nullptr with *error when it cannot be made).
std::unique_ptr<eval::TrialEvaluator> toy_evaluator(std::string* error) {
  eval::EvaluatorOptions ev;
  ev.model = "toy";
  ev.positions = {0};
  return eval::TrialEvaluator::create(ev, error);
}

/// The landscape plan of toy on the H100 target: the default, its neighbours and a sample of 2.
std::vector<PlannedConfig> toy_plan() {
  return plan_landscape(*schedule::find_preset("toy"), ::megasched::testing_support::h100_target(),
                        2, {{"default", schedule::ScheduleConfig()}}, 3);
}

TEST_F(LandscapeFiles, CommittedSyntheticLandscapeIsTheGeneratorsOutput) {
  if (std::getenv("MS_WRITE_SYNTHETIC_LANDSCAPE"))
    std::ofstream(kSyntheticPath, std::ios::trunc) << testing_support::synthetic_landscape_text();
  std::ifstream in(kSyntheticPath);
  ASSERT_TRUE(in) << kSyntheticPath;
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), testing_support::synthetic_landscape_text())
      << "regenerate tests/data/synthetic.landscape.jsonl: MS_WRITE_SYNTHETIC_LANDSCAPE=1 "
         "build/megasched_tests --gtest_filter=LandscapeFiles.Committed*";
}

TEST_F(LandscapeFiles, RoundTripsHeaderAndRows) {
  const Landscape land = synthetic_landscape();
  std::string error;
  auto read = read_landscape(write(testing_support::synthetic_landscape_text()), &error);
  ASSERT_TRUE(read) << error;
  EXPECT_EQ(read->header.build, "synthetic");
  ASSERT_EQ(read->rows.size(), land.rows.size());
  for (size_t i = 0; i < land.rows.size(); ++i) {
    EXPECT_EQ(read->rows[i].config, land.rows[i].config);
    EXPECT_EQ(read->rows[i].latency_us, land.rows[i].latency_us);
    EXPECT_EQ(read->rows[i].sigma_us, land.rows[i].sigma_us);
  }
  ASSERT_NE(read->optimum(), nullptr);
  EXPECT_DOUBLE_EQ(*read->optimum()->latency_us, 100.0);
}

TEST_F(LandscapeFiles, RejectsMalformedFilesWithTheLineAndTheFault) {
  const std::string ok_row =
      R"({"id":"a","config":{"launch":{"blocks_per_sm":2}},"status":"ok","latency_us":5.0})";
  EXPECT_NE(error_of("").find("empty file, no landscape header"), std::string::npos);
  EXPECT_NE(error_of(ok_row + "\n").find(":1: the first line is not a landscape header"),
            std::string::npos);
  nlohmann::json future = to_json(synthetic_landscape().header);
  future["landscape"] = 99;
  EXPECT_NE(error_of(future.dump() + "\n").find("landscape version 99"), std::string::npos);
  nlohmann::json no_build = to_json(synthetic_landscape().header);
  no_build["build"] = "";
  EXPECT_NE(error_of(no_build.dump() + "\n").find("names the kernel build"), std::string::npos);
  EXPECT_NE(error_of(header_line() + "{not json\n").find(":2: not JSON"), std::string::npos);
  EXPECT_NE(error_of(header_line() + R"({"id":"a","config":{},"status":"ok"})" + "\n")
                .find(":2: a row with status ok needs \"latency_us\""),
            std::string::npos);
  EXPECT_NE(error_of(header_line() + R"({"id":"a","config":{},"status":"fast"})" + "\n")
                .find("\"status\" fast is not one of"),
            std::string::npos);
  EXPECT_NE(
      error_of(header_line() +
               R"({"id":"a","config":{"launch":{"blocks_per_sm":9}},"status":"rejected"})" + "\n")
          .find(":2: \"config\": "),
      std::string::npos);
  EXPECT_NE(error_of(header_line() + ok_row + "\n" + ok_row + "\n")
                .find(":3: the config of row a is listed twice"),
            std::string::npos);
  EXPECT_NE(
      error_of(header_line() + R"({"id":"a","config":{},"status":"ok","latency_us":-1})" + "\n")
          .find("must be a positive number"),
      std::string::npos);
  std::string missing;
  EXPECT_FALSE(read_landscape((dir_ / "absent.jsonl").string(), &missing));
  EXPECT_NE(missing.find("cannot open the landscape"), std::string::npos);
}

TEST_F(LandscapeFiles, RecorderWritesTheKernelIdentityAndResumes) {
  eval::EvaluatorOptions ev;
  ev.model = "toy";
  ev.positions = {0};
  std::string error;
  auto evaluator = eval::TrialEvaluator::create(ev, &error);
  ASSERT_TRUE(evaluator) << error;
  const schedule::ModelShape shape = *schedule::find_preset("toy");
  const schedule::GpuTarget target = ::megasched::testing_support::h100_target();
  const auto plan = plan_landscape(shape, target, 4, {{"default", schedule::ScheduleConfig()}}, 3);
  ASSERT_GT(plan.size(), 5u);
  EXPECT_EQ(plan[0].origin, "named:default");
  EXPECT_EQ(plan[1].origin, "neighbour:default");
  EXPECT_EQ(plan.back().origin, "sample");
  const std::vector<PlannedConfig> first(plan.begin(), plan.begin() + 3);
  RecordOptions options;
  options.path = (dir_ / "toy.landscape.jsonl").string();
  options.header.model = "toy";
  options.header.target = "h100";
  options.header.device = "cpu";
  options.header.latency_kind = "predicted";
  options.header.versions = eval::trial_versions(evaluator->identity());
  options.header.build = options.header.versions.value("build", "");
  RecordResult r = record_landscape(*evaluator, first, options);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.recorded, 3);
  r = record_landscape(*evaluator, plan, options);  // resumes: only the rest
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.already, 3);
  EXPECT_EQ(r.recorded, static_cast<int>(plan.size()) - 3);
  auto land = read_landscape(options.path, &error);
  ASSERT_TRUE(land) << error;
  EXPECT_EQ(land->header.build, vm::build_identity());
  EXPECT_EQ(land->rows.size(), plan.size());
  EXPECT_EQ(land->rows[0].id, evaluator->schedule_id(plan[0].config));
  ASSERT_TRUE(land->rows[0].latency_us);  // the default config lowers and predicts
  options.header.build = "another kernel";
  r = record_landscape(*evaluator, plan, options);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.bad_arguments);
  EXPECT_NE(r.error.find("record into a new file"), std::string::npos) << r.error;
}

// A measured landscape resumed on another GPU model (a `--gpu h100` recording on an H200 host)
// is refused: its rows would mix two devices' timings under one header.
TEST_F(LandscapeFiles, RecorderRefusesToResumeAMeasuredLandscapeOnAnotherGpu) {
  std::string error;
  auto evaluator = toy_evaluator(&error);
  ASSERT_TRUE(evaluator) << error;
  const auto plan = toy_plan();
  RecordOptions options = toy_recording("gpu.landscape.jsonl", "h100", "gpu", "measured-gpu");
  options.header.device_name = "NVIDIA H100 80GB HBM3";
  ASSERT_TRUE(write_landscape_header(options.path, options.header, &error)) << error;
  options.header.device_name = "NVIDIA H200";
  const RecordResult r = record_landscape(*evaluator, plan, options);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.bad_arguments);
  EXPECT_EQ(r.recorded, 0);
  EXPECT_NE(r.error.find("was measured on NVIDIA H100 80GB HBM3"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("runs on NVIDIA H200"), std::string::npos) << r.error;
}

// A landscape recorded with `--gpu h200` resumes under `--gpu auto` on that GPU, whose target
// reads "NVIDIA H200": both are the h200 target (flywheel::target_file_key).
TEST_F(LandscapeFiles, RecorderResumesALandscapeOfTheSameGpuUnderItsLiveName) {
  std::string error;
  auto evaluator = toy_evaluator(&error);
  ASSERT_TRUE(evaluator) << error;
  const auto plan = toy_plan();
  RecordOptions options = toy_recording("named.landscape.jsonl", "h200", "cpu", "predicted");
  ASSERT_TRUE(write_landscape_header(options.path, options.header, &error)) << error;
  options.header.target = "NVIDIA H200";
  const RecordResult live = record_landscape(*evaluator, plan, options);
  EXPECT_TRUE(live.ok) << live.error;
  EXPECT_GT(live.recorded, 0);
  options.header.target = "h100";
  const RecordResult other = record_landscape(*evaluator, plan, options);
  EXPECT_FALSE(other.ok);
  EXPECT_NE(other.error.find("not of this recording"), std::string::npos) << other.error;
}

TEST_F(LandscapeFiles, RecorderAppendsGpuRowsToTheSharedCorpusAndNoCpuRow) {
  const auto plan = toy_plan();
  const std::vector<PlannedConfig> three(plan.begin(), plan.begin() + 3);
  RecordOptions options;
  options.flywheel_dir = (dir_ / "flywheel").string();
  options.shape = *schedule::find_preset("toy");
  options.header.model = "toy";
  options.header.target = "h100";
  options.header.latency_kind = "measured-gpu";
  options.header.versions = eval::trial_versions(nlohmann::json::object());
  options.header.build = vm::build_identity();
  for (const std::string device : {"cpu", "gpu"}) {
    loop_testing::FakeEvaluator evaluator(nullptr, device);
    options.header.device = device;
    options.path = (dir_ / (device + ".landscape.jsonl")).string();
    RecordResult r = record_landscape(evaluator, three, options);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.recorded, 3);
  }
  flywheel::SharedCorpusFilter filter;
  filter.target = "h100";
  filter.build = vm::build_identity();
  const flywheel::SharedCorpusRead read = flywheel::read_shared(options.flywheel_dir, filter);
  ASSERT_EQ(read.records.size(), 3u);  // the GPU recording's rows only
  for (const flywheel::CorpusRecord& r : read.records) {
    EXPECT_EQ(r.source, "landscape");
    EXPECT_EQ(r.strategy, "landscape");
    EXPECT_EQ(r.device, "gpu");
    EXPECT_EQ(r.model, "toy");
    EXPECT_EQ(r.status, "discarded");
    EXPECT_EQ(r.model_shape["name"], "toy");
  }
  EXPECT_EQ(read.records[0].config, schedule::to_json(three[0].config));
  EXPECT_EQ(read.records[0].run_id, read.records[2].run_id);
  EXPECT_EQ(read.records[2].trial, 2);
}

TEST_F(LandscapeFiles, RecorderRecordsThroughAPoolOfWorkersAndResumes) {
  const Landscape source = synthetic_landscape();
  std::vector<std::unique_ptr<eval::Evaluator>> evaluators;
  evaluators.push_back(std::make_unique<LandscapeEvaluator>(source, 1));
  evaluators.push_back(std::make_unique<LandscapeEvaluator>(source, 2));
  const LandscapeEvaluator ids(source, 0);
  ThreadedPool pool(std::move(evaluators), {"slot0", "slot1"},
                    [&](int, const schedule::ScheduleConfig& c) { return ids.schedule_id(c); });
  std::vector<PlannedConfig> plan;
  for (size_t i = 0; i < 9; ++i) plan.push_back({source.rows[i].config, "sample"});
  RecordOptions options;
  options.path = (dir_ / "pool.landscape.jsonl").string();
  options.header = source.header;
  const std::vector<PlannedConfig> first(plan.begin(), plan.begin() + 4);
  RecordResult r = record_landscape_on_pool(pool, first, options);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.recorded, 4);
  r = record_landscape_on_pool(pool, plan, options);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.already, 4);
  EXPECT_EQ(r.recorded, 5);
  std::string error;
  auto land = read_landscape(options.path, &error);
  ASSERT_TRUE(land) << error;
  ASSERT_EQ(land->rows.size(), 9u);
  for (const LandscapeRow& row : land->rows) {
    const LandscapeRow* truth = source.find(row.config);
    ASSERT_NE(truth, nullptr);
    EXPECT_EQ(row.status, "ok");
    EXPECT_EQ(row.repeats, 10);
    EXPECT_NEAR(*row.latency_us, *truth->latency_us, 0.02 * *truth->latency_us);
  }
}

TEST_F(LandscapeFiles, RecorderFeedsTheConfigsAheadToCompileAheadAndRunsNoneTwice) {
  const Landscape source = synthetic_landscape();
  LandscapeEvaluator evaluator(source, 1);
  std::vector<PlannedConfig> plan;
  for (size_t i = 0; i < 9; ++i) plan.push_back({source.rows[i].config, "sample"});
  std::mutex mutex;
  std::vector<std::string> built;
  Prebuilder fake;
  fake.prepare = [](const schedule::ScheduleConfig& c) -> std::optional<vm::BuildRequest> {
    return vm::BuildRequest{"fake.cuh", {schedule::canonical_string(c)}, 90, ""};
  };
  fake.build = [&](const vm::BuildRequest& r) {
    std::lock_guard<std::mutex> lock(mutex);
    built.push_back(r.defines[0]);
    vm::BuildResult b;
    b.ok = true;
    return b;
  };
  CompileAhead builds(fake, 1, 4);
  RecordOptions options;
  options.path = (dir_ / "ahead.landscape.jsonl").string();
  options.header = source.header;
  options.compile_pool = &builds;
  const RecordResult r = record_landscape(evaluator, plan, options);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.recorded, 9);
  builds.wait_idle();
  const CompileAheadCounters c = builds.counters();
  // Every config but the first was queued ahead (four at a time at most); each either built or
  // was taken back when its turn came first.
  EXPECT_EQ(c.queued, 8);
  EXPECT_EQ(c.compiles + c.withdrawn, 8);
  EXPECT_EQ(std::set<std::string>(built.begin(), built.end()).size(), built.size());
}

TEST(SpaceFillingSample, DrawsDistinctFittingConfigsCoveringEveryChoice) {
  const schedule::ModelShape shape = *schedule::find_preset("toy");
  const schedule::GpuTarget target = ::megasched::testing_support::h100_target();
  const auto sample = space_filling_sample(shape, target, 60, 1);
  ASSERT_EQ(sample.size(), 60u);
  std::set<std::string> distinct;
  std::set<int> blocks_per_sm;
  for (const PlannedConfig& p : sample) {
    EXPECT_TRUE(schedule::config_fits(p.config, shape, target));
    distinct.insert(schedule::canonical_string(p.config));
    blocks_per_sm.insert(p.config.launch.blocks_per_sm);
  }
  EXPECT_EQ(distinct.size(), 60u);
  EXPECT_EQ(blocks_per_sm.size(), 4u);  // every choice of a 4-choice knob appears
}

TEST(LandscapeEvaluatorTest, AnswersAbsentConfigsWithTheNearestRow) {
  const Landscape land = synthetic_landscape();
  LandscapeEvaluator ev(land, 1);
  schedule::ScheduleConfig c;  // every synthetic row has the other knobs at their defaults
  c.pipeline.prefetch_depth = 0;
  c.launch.blocks_per_sm = 3;
  const LandscapeEvaluator::Answer a = ev.answer(c);
  ASSERT_NE(a.row, nullptr);
  EXPECT_EQ(a.row->config.launch.blocks_per_sm, 3);
  EXPECT_EQ(a.row->config.pipeline.prefetch_depth,
            schedule::ScheduleConfig().pipeline.prefetch_depth);
  EXPECT_GT(a.steps, 0);
  const eval::Verdict v = ev.evaluate(c);
  ASSERT_FALSE(v.notes.empty());
  EXPECT_NE(v.notes[0].find("not in the landscape: answered by row " + a.row->id),
            std::string::npos);
  EXPECT_EQ(ev.true_latency_us(c), a.row->latency_us);
}

TEST(LandscapeEvaluatorTest, DrawsSeededNoiseAroundTheMedian) {
  const Landscape land = synthetic_landscape();
  const schedule::ScheduleConfig c = land.optimum()->config;
  LandscapeEvaluator a(land, 5), b(land, 5), other(land, 6);
  std::vector<double> seen_a, seen_b;
  bool differs = false;
  for (int i = 0; i < 20; ++i) {
    const eval::Verdict va = a.evaluate(c), vb = b.evaluate(c), vo = other.evaluate(c);
    ASSERT_TRUE(va.latency_us && vb.latency_us && vo.latency_us);
    EXPECT_EQ(va.samples_us, vb.samples_us);
    EXPECT_EQ(va.samples_us.size(), 10u);
    EXPECT_NEAR(*va.latency_us, 100.0, 1.5);  // 0.3% sigma: the median of 10 stays close
    differs |= *va.latency_us != *vo.latency_us;
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(a.evaluations(), 20);
}

// --rows sample: the named config and its neighbours leave; the sample's best is the optimum, and
// every config is answered by a sampled row.
TEST(LandscapeTest, SampledRowsOnlyLeavesTheNamedConfigsAndTheirNeighboursOut) {
  Landscape land = synthetic_landscape();
  ASSERT_GE(land.rows.size(), 3u);
  land.rows[0].origin = "named:best:toy:h100";
  land.rows[0].latency_us = 50.0;  // faster than any sampled row
  land.rows[1].origin = "neighbour:best:toy:h100";
  std::string error;
  const std::optional<Landscape> sampled = sampled_rows_only(land, &error);
  ASSERT_TRUE(sampled) << error;
  EXPECT_EQ(sampled->rows.size(), land.rows.size() - 2);
  EXPECT_EQ(sampled->by_config.size(), sampled->rows.size());
  EXPECT_EQ(sampled->find(land.rows[0].config), nullptr);
  ASSERT_NE(sampled->find(land.rows[2].config), nullptr);
  EXPECT_DOUBLE_EQ(*sampled->optimum()->latency_us, 100.0);
  LandscapeEvaluator ev(*sampled, 1);
  EXPECT_NE(ev.answer(land.rows[0].config).row->origin, "named:best:toy:h100");

  for (LandscapeRow& r : land.rows) r.origin = "neighbour:best:toy:h100";
  EXPECT_FALSE(sampled_rows_only(land, &error));
  EXPECT_NE(error.find("--rows all"), std::string::npos) << error;
}

}  // namespace
}  // namespace megasched::search
