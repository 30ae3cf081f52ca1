// The run directory (flywheel/run_dir.h): time-sortable ids, the files an evaluate run leaves and
// their schemas, the loop's directory, and gc that prunes only on request and only run folders.
#include "flywheel/run_dir.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "harness/json_schema.h"
#include "tests/harness/run_cli.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ms_runs_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static json read_json(const fs::path& path) {
    std::ifstream in(path);
    return json::parse(in);
  }
  static void expect_schema(const std::string& schema_file, const json& value) {
    const json schema = read_json(fs::path(MS_SOURCE_DIR) / "schemas" / schema_file);
    EXPECT_TRUE(harness::unsupported_keywords(schema).empty()) << schema_file;
    for (const auto& error : harness::check_against_schema(schema, value))
      ADD_FAILURE() << schema_file << ": " << harness::describe(error);
  }
  fs::path dir_;
};

TEST_F(RunDirTest, IdsSortByTimeAndHaveTheirShape) {
  const std::string a = new_run_id(1795000000.0), b = new_run_id(1795000001.0);
  const std::string c = new_run_id(1800000000.0);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_TRUE(is_run_id(a)) << a;
  EXPECT_EQ(a.substr(0, 17), "r20261118T110640Z");
  EXPECT_FALSE(is_run_id("notes"));
  EXPECT_FALSE(is_run_id("r2026-11-18"));
}

TEST_F(RunDirTest, RunsOfTheSameSecondSortByCreationAndGcKeepsTheNewer) {
  // Once the suffix was random: `runs gc --keep 1` deleted the newer of two runs of one second.
  const fs::path root = dir_ / "runs";
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) {
    // A second later than any id this test process made before (ids grow within a process).
    auto run = open_run_dir(root.string(), new_run_id(4102444800.25), "evaluate", "cmd",
                            4102444800.25, nullptr);
    ASSERT_TRUE(run);
    ASSERT_TRUE(finish_run_dir(*run, 0, 4102444800.25, nullptr));
    ids.push_back(run->run_id);
    EXPECT_EQ(run->run_id.substr(0, 18), "r21000101T000000Z-") << run->run_id;
    EXPECT_TRUE(is_run_id(run->run_id)) << run->run_id;
    if (i > 0) {
      EXPECT_LT(ids[i - 1], ids[i]);
    }
  }
  const std::vector<RunListing> listed = list_runs(root.string(), nullptr);
  ASSERT_EQ(listed.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(listed[i].run_id, ids[i]);
  const auto r = test::run_megasched("runs gc --keep 1 --runs-dir " + root.string(), false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(fs::exists(root / ids.back()));
  EXPECT_EQ(list_runs(root.string(), nullptr).size(), 1u);
}

TEST_F(RunDirTest, TwoEvaluateRunsOfOneSecondListInTheOrderTheyRan) {
  const std::string runs = (dir_ / "runs").string();
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    const auto r = test::run_megasched(
        "evaluate --model toy --device cpu --config default --runs-dir " + runs, true);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const size_t at = r.out.find("run r");
    ASSERT_NE(at, std::string::npos) << r.out;
    ids.push_back(r.out.substr(at + 4, r.out.find(' ', at + 4) - at - 4));
  }
  const auto list = test::run_megasched("runs list --runs-dir " + runs, false);
  ASSERT_EQ(list.exit_code, 0) << list.out;
  const json listed = json::parse(list.out)["runs"];
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0]["run_id"], ids[0]);
  EXPECT_EQ(listed[1]["run_id"], ids[1]);
}

TEST_F(RunDirTest, EvaluateWritesEveryFileWithItsSchemaAndPrintsTheRunIdFirst) {
  const auto r = test::run_megasched("evaluate --model toy --gpu h100 --device cpu --runs-dir " +
                                         (dir_ / "runs").string() + " --config default",
                                     /*merge_stderr=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(r.out.rfind("megasched evaluate: run r", 0), 0u) << r.out;
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(dir_ / "runs")) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  const fs::path run = runs[0];
  EXPECT_NE(r.out.find(run.filename().string()), std::string::npos);
  for (const char* file : {"command.txt", "config.json", "program.json", "verdict.json",
                           "correctness.json", "performance.json", "run.json"})
    EXPECT_TRUE(fs::exists(run / file)) << file;
  const json manifest = read_json(run / "run.json");
  expect_schema("run_manifest.schema.json", manifest);
  EXPECT_EQ(manifest["kind"], "evaluate");
  EXPECT_EQ(manifest["exit_code"], 0);
  EXPECT_EQ(manifest["run_id"], run.filename().string());
  EXPECT_NE(manifest["command"].get<std::string>().find("'evaluate' '--model' 'toy'"),
            std::string::npos)
      << manifest["command"];
  std::ifstream command(run / "command.txt");
  std::string line;
  std::getline(command, line);
  EXPECT_EQ(line, manifest["command"].get<std::string>());
  const json verdict = read_json(run / "verdict.json");
  expect_schema("verdict.schema.json", verdict);
  EXPECT_EQ(verdict["bottleneck"]["source"], "verdict");
  const json correctness = read_json(run / "correctness.json");
  expect_schema("correctness.schema.json", correctness);
  EXPECT_EQ(correctness["positions_checked"], json({0, 3, 7}));
  EXPECT_TRUE(correctness["first_failure"].is_null());
  EXPECT_EQ(correctness["paths"][0]["path"], "reference_vm");
  ASSERT_FALSE(correctness["checks"].empty());
  EXPECT_TRUE(correctness["checks"][0]["worst_logit"].contains("index"));
  const json performance = read_json(run / "performance.json");
  expect_schema("performance.schema.json", performance);
  EXPECT_EQ(performance["latency_kind"], "predicted");
  EXPECT_DOUBLE_EQ(performance["median_us"].get<double>(), verdict["latency_us"].get<double>());
  EXPECT_DOUBLE_EQ(performance["achieved_gbs"].get<double>(),
                   verdict["bytes_min"].get<double>() / verdict["latency_us"].get<double>() / 1e3);
  EXPECT_TRUE(performance["registers"].is_null());  // no GPU: no kernel
  EXPECT_EQ(read_json(run / "program.json")["tasks"].size(), verdict["tasks"].get<size_t>());
}

TEST_F(RunDirTest, CorrectnessNamesTheFirstFailingPositionPathAndLogit) {
  eval::Verdict v;
  v.valid = true;
  v.status = "incorrect";
  v.positions_checked = {0, 3, 7};
  // A verdict without checks (older logs): the note names the path and position.
  v.notes = {"ReferenceVm differs from the reference at position 3: rel_err 0.5, max_abs_err 2"};
  json c = correctness_report(v);
  expect_schema("correctness.schema.json", c);
  EXPECT_EQ(c["first_failure"]["position"], 3);
  EXPECT_EQ(c["first_failure"]["path"], "reference_vm");
  // With checks: the first failing one, its worst logit with both values, and per-path summaries.
  v.device = "gpu";
  v.notes = {"GPU kernel differs from the reference at position 7: rel_err 0.1"};
  auto check = [](const char* path, int position, double abs, bool pass, int index) {
    return json{{"path", path},
                {"position", position},
                {"window_start", 0},
                {"rel_err", abs / 10},
                {"max_abs_err", abs},
                {"argmax_match", pass},
                {"worst_logit", {{"index", index}, {"value", 1.0 + abs}, {"reference", 1.0}}},
                {"pass", pass}};
  };
  v.checks =
      json::array({check("reference_vm", 0, 0.0, true, 0), check("reference_vm", 7, 0.0, true, 0),
                   check("gpu", 0, 0.0, true, 0), check("gpu", 7, 0.5, false, 42)});
  c = correctness_report(v);
  expect_schema("correctness.schema.json", c);
  EXPECT_EQ(c["first_failure"]["position"], 7);
  EXPECT_EQ(c["first_failure"]["path"], "gpu");
  EXPECT_EQ(c["first_failure"]["logit_index"], 42);
  EXPECT_DOUBLE_EQ(c["first_failure"]["value"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(c["first_failure"]["reference"].get<double>(), 1.0);
  EXPECT_EQ(c["first_failure"]["what"], v.notes[0]);
  ASSERT_EQ(c["paths"].size(), 2u);
  EXPECT_EQ(c["paths"][1]["positions"], json({0, 7}));
  EXPECT_DOUBLE_EQ(c["paths"][1]["max_abs_err"].get<double>(), 0.5);
  EXPECT_TRUE(c["paths"][0]["pass"]);
  EXPECT_FALSE(c["paths"][1]["pass"]);
  EXPECT_EQ(c["checks"].size(), 4u);
}

TEST_F(RunDirTest, LoopWritesItsRunDirectoryBesideItsLogs) {
  const std::string results = (dir_ / "ws" / "results.tsv").string();
  const auto r =
      test::run_megasched("loop --model toy --gpu h100 --device cpu --budget 2 --results " +
                              results + " --corpus " + (dir_ / "ws" / "corpus.jsonl").string(),
                          /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json summary = json::parse(r.out);
  const fs::path run = dir_ / "ws" / "runs" / summary["run_id"].get<std::string>();
  for (const char* file : {"command.txt", "summary.json", "config.json", "program.json",
                           "verdict.json", "correctness.json", "performance.json", "run.json"})
    EXPECT_TRUE(fs::exists(run / file)) << file;
  EXPECT_EQ(read_json(run / "summary.json")["run_id"], summary["run_id"]);
  EXPECT_EQ(read_json(run / "run.json")["kind"], "loop");
}

TEST_F(RunDirTest, GcKeepsTheNewestRunsAndNothingElseIsTouched) {
  const fs::path root = dir_ / "runs";
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    auto run = open_run_dir(root.string(), new_run_id(1795000000.0 + i), "evaluate", "cmd",
                            1795000000.0 + i, nullptr);
    ASSERT_TRUE(run);
    ASSERT_TRUE(finish_run_dir(*run, 0, 1795000000.0 + i, nullptr));
    ids.push_back(run->run_id);
  }
  fs::create_directories(root / "my-notes");  // not a run: never listed, never removed
  EXPECT_EQ(list_runs(root.string(), nullptr).size(), 4u);
  const auto r = test::run_megasched("runs gc --keep 1 --runs-dir " + root.string(), false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["removed"], json({ids[0], ids[1], ids[2]}));
  EXPECT_TRUE(fs::exists(root / ids[3]));
  EXPECT_TRUE(fs::exists(root / "my-notes"));
  const auto list = test::run_megasched("runs list --runs-dir " + root.string(), false);
  ASSERT_EQ(list.exit_code, 0);
  EXPECT_EQ(json::parse(list.out)["runs"].size(), 1u);
  EXPECT_NE(test::run_megasched("runs gc --runs-dir " + root.string(), false).exit_code, 0);
}

}  // namespace
}  // namespace megasched::flywheel
