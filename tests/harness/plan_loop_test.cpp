// Plans through the search and the registry on CPU (HARNESS.md section 15): `loop --plan-buckets`
// searches each bucket and writes plan.json into its run directory, a second run adopts what the
// first timed; bad buckets exit 2 with a hint; `promote` of a plan (both gates, bucket by bucket
// and weighted), its registry entry, `registry verify` of it, and `best:` resolving to it.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "eval/evaluate.h"
#include "flywheel/registry.h"
#include "harness/cli_util.h"
#include "harness/json_schema.h"
#include "schedule/config.h"
#include "schedule/plan.h"
#include "tests/harness/run_cli.h"

namespace megasched {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class PlanLoopCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ms_plan_loop_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string logs() const {
    return " --results " + (dir_ / "results.tsv").string() + " --corpus " +
           (dir_ / "corpus.jsonl").string() + " --runs-dir " + (dir_ / "runs").string();
  }
  std::string registry() const { return (dir_ / "verified.jsonl").string(); }
  fs::path dir_;
};

TEST_F(PlanLoopCli, SearchesEachBucketWritesThePlanAndAdoptsWhatItTimedBefore) {
  const std::string command =
      "loop --model toy --gpu h100 --device cpu --strategy hillclimb --seed 3 --budget 6 "
      "--plan-buckets 0,32,64" +
      logs();
  auto r = test::run_megasched(command, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["buckets"].size(), 3u);
  const int timed[] = {15, 47, 95};
  for (size_t i = 0; i < 3; ++i) {
    const json& b = doc["buckets"][i];
    EXPECT_EQ(b["timed_position"], timed[i]) << b.dump();
    EXPECT_EQ(b["budget"], 2);
    EXPECT_TRUE(b["searched"].get<bool>());
    EXPECT_TRUE(b["best"].is_object()) << b.dump();
    EXPECT_GT(b["evaluations"].get<int>(), 0);
  }
  EXPECT_EQ(doc["buckets"][1]["positions_checked"], json({32, 47, 63}));
  EXPECT_EQ(doc["buckets"][2]["end"], 128);
  EXPECT_EQ(doc["device"], "cpu");
  // The plan file: a plan document (or, all buckets merged, a config) that covers toy.
  const fs::path file = doc["plan_file"].get<std::string>();
  ASSERT_TRUE(fs::exists(file)) << file;
  EXPECT_EQ(file.parent_path(), dir_ / "runs" / doc["run_id"].get<std::string>());
  EXPECT_TRUE(fs::exists(file.parent_path() / "summary.json"));
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string error;
  const auto plan = schedule::parse_plan_text(text, &error);
  ASSERT_TRUE(plan) << error;
  EXPECT_TRUE(schedule::check_plan_covers(*plan, 128, &error)) << error;
  EXPECT_EQ(schedule::to_json(*plan), doc["plan"]);
  EXPECT_EQ(static_cast<int>(plan->buckets.size()), 3 - doc["merged"].get<int>());
  // Every bucket's trials carry its timed position in their schedule ids: the same command
  // again starts each bucket from the winner it timed there, adopted without re-evaluating.
  r = test::run_megasched(command, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json again = json::parse(r.out);
  for (const json& b : again["buckets"]) {
    EXPECT_EQ(b["seed"]["source"], "warm-start") << b.dump();
    EXPECT_EQ(b["seed"]["evaluated"], false) << b.dump();
  }
  // promote --plan RUN_DIR reads its plan.json (verify gate only: no 1.10x to expect here).
  r = test::run_megasched("promote --model toy --device cpu --verify-only --tokens 4 --plan " +
                              file.parent_path().string() + " --registry " + registry() +
                              " --runs-dir " + (dir_ / "runs").string(),
                          false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["config"], doc["plan"]);
}

TEST_F(PlanLoopCli, BadBucketsAndConflictingFlagsExitTwoWithAHint) {
  const std::string base = "loop --model toy --gpu h100 --device cpu --budget 2" + logs();
  struct Case {
    const char* flags;
    const char* says;
  };
  for (const Case& c :
       {Case{" --plan-buckets 0,64,32", "32 follows 64: the boundaries must be strictly ascending"},
        Case{" --plan-buckets 32,64", "the first bucket begins at 32, not 0"},
        Case{" --plan-buckets 0,200", "200 is at or past the last position 127 of model toy"},
        Case{" --plan-buckets 0,x", "is not a list of positions such as 0,512,2048"},
        Case{" --plan-buckets 0,64 --objective 0:1,64:1", "--objective with a plan search"},
        Case{" --plan-buckets 0,64 --timed-position 5", "--timed-position with a plan search"},
        Case{" --plan-buckets 0,64 --warm-start", "--warm-start with a plan search"},
        Case{" --plan-buckets 0,64 --resume", "--resume with a plan search"}}) {
    const auto r = test::run_megasched(base + c.flags, true);
    EXPECT_EQ(r.exit_code, 2) << c.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.flags << "\n" << r.out;
    EXPECT_NE(r.out.find("hint"), std::string::npos) << c.flags << "\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "results.tsv"));
}

TEST_F(PlanLoopCli, AStartingPlanGivesTheBucketsAndTheirSeeds) {
  schedule::ScheduleConfig four;
  four.tiling.attn_kv_partitions = 4;
  schedule::Plan start;
  start.buckets = {{0, 64, {}}, {64, schedule::kPlanEndOfModel, four}};
  std::ofstream(dir_ / "start.json") << schedule::to_json(start).dump();
  const auto r = test::run_megasched("loop --model toy --gpu h100 --device cpu --budget 2 --plan " +
                                         (dir_ / "start.json").string() + logs(),
                                     false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["buckets"].size(), 2u);
  EXPECT_EQ(doc["buckets"][1]["timed_position"], 95);
  EXPECT_EQ(doc["buckets"][1]["seed"]["source"], "start");
  EXPECT_EQ(doc["buckets"][1]["seed"]["schedule_id"],
            eval::trial_schedule_id(four, "toy", 0, "h100", "cpu", 95));
}

// A plan through promote on CPU (predicted latencies), into the registry and back out by id and
// by best:, verified bucket by bucket.
TEST_F(PlanLoopCli, APlanPromotesIsStoredAndResolvesByPosition) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/bench/configs/best_1b.json");
  std::string error;
  const auto fast = schedule::parse_config(json::parse(in), &error);
  ASSERT_TRUE(fast) << error;
  schedule::ScheduleConfig fast_four = *fast;
  fast_four.tiling.attn_kv_partitions = 4;
  schedule::Plan plan;
  plan.buckets = {{0, 64, *fast}, {64, schedule::kPlanEndOfModel, fast_four}};
  std::ofstream(dir_ / "plan.json") << schedule::to_json(plan).dump();
  const std::string flags = " --registry " + registry() + " --runs-dir " + (dir_ / "runs").string();
  auto r = test::run_megasched("promote --model toy --device cpu --tokens 4 --rounds 2 --plan " +
                                   (dir_ / "plan.json").string() + flags,
                               false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  json doc = json::parse(r.out);
  EXPECT_TRUE(doc["promoted"]);
  EXPECT_NE(doc["gate"].get<std::string>().find("weighted"), std::string::npos);
  EXPECT_NE(doc["message"].get<std::string>().find("benchmark gate (plan, weighted over buckets) "
                                                   "passed"),
            std::string::npos)
      << doc["message"];
  ASSERT_EQ(doc["verify"]["buckets"].size(), 2u);
  EXPECT_EQ(doc["verify"]["buckets"][1]["positions"], json({64, 127}));  // inside its bucket
  ASSERT_EQ(doc["benchmark"]["buckets"].size(), 2u);
  EXPECT_EQ(doc["benchmark"]["buckets"][0]["timed_position"], 31);
  EXPECT_EQ(doc["benchmark"]["buckets"][1]["timed_position"], 95);
  EXPECT_EQ(doc["benchmark"]["buckets"][1]["weight"], 64.0);
  const json entry = doc["entry"];
  EXPECT_EQ(entry["config"], schedule::to_json(plan));
  EXPECT_EQ(entry["id"], "toy_h100_f32_" +
                             schedule::hash_hex(schedule::to_json(plan).dump()).substr(0, 8) +
                             "_v1");  // deterministic: the plan's canonical JSON
  {
    std::ifstream schema_in(std::string(MS_SOURCE_DIR) + "/schemas/registry_entry.schema.json");
    const json schema = json::parse(schema_in);
    for (const auto& e : harness::check_against_schema(schema, entry))
      ADD_FAILURE() << "registry_entry.schema.json: " << harness::describe(e);
  }
  // Round trip: the registry reads it back whole.
  const flywheel::RegistryRead read = flywheel::read_registry(registry());
  ASSERT_EQ(read.entries.size(), 1u);
  EXPECT_TRUE(read.problems.empty());
  EXPECT_EQ(read.entries[0].config, schedule::to_json(plan));
  const std::string id = entry["id"];
  // registry verify: bucket by bucket.
  r = test::run_megasched(
      "registry verify " + id + " --device cpu --tokens 4 --registry " + registry(), false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  doc = json::parse(r.out);
  EXPECT_TRUE(doc["pass"]);
  EXPECT_EQ(doc["verify"]["buckets"].size(), 2u);
  // best:toy:h100 is the plan: evaluate times the bucket that holds --timed-position with its
  // config, and a verb of one config at a position (profile's read) gets that bucket's.
  const std::string env = "MEGASCHED_REGISTRY=" + registry() + " ";
  auto e = test::run_shell(env + MS_BINARY_PATH +
                           " evaluate --model toy --device cpu --no-run-dir --timed-position 100 "
                           "--config best:toy:h100 2>/dev/null");
  ASSERT_EQ(e.exit_code, 0) << e.out;
  const json verdict = json::parse(e.out);
  ASSERT_EQ(verdict["plan"].size(), 2u);
  EXPECT_EQ(verdict["plan"][1]["timed_position"], 100);
  EXPECT_EQ(verdict["timed_position"], 100);
  // A verb of one config at a position (profile's --position) reads that bucket's config.
  ::setenv("MEGASCHED_REGISTRY", registry().c_str(), 1);
  int code = 0;
  const auto at100 = harness::read_config_arg("best:toy:h100", &error, &code, 100);
  const auto at10 = harness::read_config_arg("best:toy:h100", &error, &code, 10);
  const auto whole = harness::read_plan_arg("best:toy:h100", &error, &code);
  ::unsetenv("MEGASCHED_REGISTRY");
  ASSERT_TRUE(at100 && at10 && whole) << error;
  EXPECT_EQ(schedule::to_json(*at100), schedule::to_json(fast_four));
  EXPECT_EQ(schedule::to_json(*at10), schedule::to_json(*fast));
  EXPECT_EQ(schedule::to_json(*whole), schedule::to_json(plan));
  // Promoting it again: the incumbent is the plan itself at every bucket's timed position.
  r = test::run_megasched("promote --model toy --device cpu --tokens 4 --rounds 2 --plan " +
                              (dir_ / "plan.json").string() + flags,
                          true);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("the candidate is the incumbent (" + id +
                       ") at every bucket's timed "
                       "position"),
            std::string::npos)
      << r.out;
  // A plan that keeps the incumbent's first bucket and changes the second: the first is timed
  // once a round for both sides (shared, its speedup exactly 1), and the entry still fits
  // registry_entry.schema.json.
  schedule::ScheduleConfig fast_eight = *fast;
  fast_eight.tiling.attn_kv_partitions = 8;
  schedule::Plan second = plan;
  second.buckets[1].config = fast_eight;
  std::ofstream(dir_ / "second.json") << schedule::to_json(second).dump();
  r = test::run_megasched(
      "promote --model toy --device cpu --tokens 4 --rounds 2 --speedup 0.5 "
      "--plan " +
          (dir_ / "second.json").string() + flags,
      false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  doc = json::parse(r.out);
  const json& shared = doc["benchmark"]["buckets"][0];
  EXPECT_TRUE(shared.value("shared", false)) << shared.dump();
  EXPECT_EQ(shared["candidate_median_us"], shared["incumbent_median_us"]);
  EXPECT_FALSE(doc["benchmark"]["buckets"][1].contains("shared"));
  std::ifstream schema_in(std::string(MS_SOURCE_DIR) + "/schemas/registry_entry.schema.json");
  const json schema = json::parse(schema_in);
  for (const auto& e : harness::check_against_schema(schema, doc["entry"]))
    ADD_FAILURE() << "registry_entry.schema.json: " << harness::describe(e);
}

TEST_F(PlanLoopCli, PromoteTakesOneCandidate) {
  const auto r = test::run_megasched(
      "promote --model toy --device cpu --verify-only --config default --plan x --registry " +
          registry(),
      true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("one of them"), std::string::npos) << r.out;
  const auto empty = test::run_megasched(
      "promote --model toy --device cpu --verify-only --plan " + dir_.string(), true);
  EXPECT_EQ(empty.exit_code, 2) << empty.out;
  EXPECT_NE(empty.out.find("a directory without plan.json"), std::string::npos) << empty.out;
}

// The built-in records are plans: with no registry entry best:llama-1b:h100 is the H100's fitted
// plan, and a verb of one config reads the bucket that holds its position (propose --position,
// loop --start at --timed-position, landscape --neighbours-of).
TEST(NamedPlans, AVerbOfOneConfigTakesTheBucketOfItsPosition) {
  ::setenv("MEGASCHED_REGISTRY", "/nonexistent/verified.jsonl", 1);
  std::string error;
  int code = 0;
  const auto plan = harness::read_plan_arg("best:llama-1b:h100", &error, &code);
  const auto at0 = harness::read_config_arg("best:llama-1b:h100", &error, &code, 0);
  const auto at200 = harness::read_config_arg("best:llama-1b:h100", &error, &code, 200);
  const auto at4096 = harness::read_config_arg("best:llama-1b:h100", &error, &code, 4096);
  const auto none = harness::read_config_arg("best:llama-1b:h100", &error, &code);
  ::unsetenv("MEGASCHED_REGISTRY");
  ASSERT_TRUE(plan && at0 && at200 && at4096) << error;
  ASSERT_EQ(plan->buckets.size(), 3u);
  EXPECT_EQ(at0->tiling.attn_kv_partitions, 1);
  EXPECT_EQ(at200->tiling.attn_kv_partitions, 8);
  EXPECT_EQ(at4096->tiling.attn_kv_partitions, 16);
  EXPECT_FALSE(none);
  EXPECT_NE(error.find("is a plan of 3 buckets"), std::string::npos) << error;
  const test::RunResult r = test::run_megasched(
      "propose --model llama-1b --config best:llama-1b:h100 --position 4096 --config-only", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["tiling"]["attn_kv_partitions"], 16);
}

}  // namespace
}  // namespace megasched
