// Plans through the binary (schedule/plan.h, HARNESS.md section 15): validate and evaluate check
// every bucket, generate switches program at a boundary, a verb of one config takes a one-bucket
// plan and refuses several buckets with the verbs that take them; bad plans exit 2 naming the
// positions. `bench --from-bench` fits a plan to a saved bench.json on a machine without a GPU.
#include <fstream>
#include <sstream>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/cli_util.h"
#include "harness/json_schema.h"
#include "schedule/config.h"
#include "tests/harness/run_cli.h"
#include "vm/nvrtc_build.h"

namespace {

using megasched::test::RunResult;
using nlohmann::json;

RunResult run(const std::string& args, bool merge_stderr = false) {
  return megasched::test::run_megasched(args, merge_stderr);
}

// Writes `doc` to a temporary file named after the test and returns its path.
std::string write_plan(const json& doc, const std::string& name) {
  const std::string path = testing::TempDir() + "plan_cli_" + name + ".json";
  std::ofstream(path) << doc.dump();
  return path;
}

json two_buckets() {
  return {
      {"buckets",
       {{{"begin", 0}, {"end", 64}, {"config", json::object()}},
        {{"begin", 64}, {"end", "max"}, {"config", {{"tiling", {{"attn_kv_partitions", 4}}}}}}}}};
}

TEST(PlanCli, ValidateReportsEveryBucket) {
  const std::string path = write_plan(two_buckets(), "validate");
  const RunResult r = run("validate --model toy --gpu h100 --config " + path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  ASSERT_EQ(j["buckets"].size(), 2u);
  EXPECT_EQ(j["buckets"][0]["begin"], 0);
  EXPECT_EQ(j["buckets"][0]["end"], 64);
  EXPECT_EQ(j["buckets"][1]["end"], 128);  // "max": toy's max_seq
  EXPECT_TRUE(j["buckets"][1]["ok"].get<bool>());
  EXPECT_GT(j["buckets"][1]["tasks"].get<int>(), j["buckets"][0]["tasks"].get<int>());
}

TEST(PlanCli, ValidateFailsABucketThatDoesNotLower) {
  json plan = two_buckets();
  plan["buckets"][1]["config"] = {{"fusion", {{"combine_into_o", true}}}};
  const RunResult r = run("validate --model toy --gpu h100 --config " + write_plan(plan, "bad"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const json j = json::parse(r.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_TRUE(j["buckets"][0]["ok"].get<bool>());
  EXPECT_FALSE(j["buckets"][1]["ok"].get<bool>());
  EXPECT_TRUE(j["buckets"][1].contains("lowering"));
}

TEST(PlanCli, RefusesGapsOverlapsAndShortPlansNamingThePositions) {
  json gap = two_buckets();
  gap["buckets"][1]["begin"] = 70;
  RunResult r = run("validate --model toy --config " + write_plan(gap, "gap"), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("positions [64, 70) have no bucket"), std::string::npos) << r.out;
  json overlap = two_buckets();
  overlap["buckets"][1]["begin"] = 60;
  r = run("evaluate --model toy --no-run-dir --config " + write_plan(overlap, "overlap"), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("positions [60, 64) are in bucket 0 [0, 64) and bucket 1 [60, max)"),
            std::string::npos)
      << r.out;
  json short_plan = two_buckets();
  short_plan["buckets"][1]["end"] = 100;
  r = run("generate --model toy --config " + write_plan(short_plan, "short"), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("positions [100, 128) have no bucket"), std::string::npos) << r.out;
}

TEST(PlanCli, EvaluateChecksEachBucketAtItsBoundariesAndTimesTheBucketOfThePosition) {
  const std::string path = write_plan(two_buckets(), "evaluate");
  const RunResult r =
      run("evaluate --model toy --gpu h100 --device cpu --no-run-dir "
          "--positions 0,3,70 --timed-position 80 --config " +
          path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json v = json::parse(r.out);
  EXPECT_TRUE(v["valid"].get<bool>());
  EXPECT_TRUE(v["correct"].get<bool>());
  EXPECT_EQ(v["timed_position"], 80);
  ASSERT_EQ(v["plan"].size(), 2u);
  EXPECT_EQ(v["plan"][0]["positions_checked"], json({0, 3, 63}));
  EXPECT_EQ(v["plan"][0]["timed_position"], 0);
  EXPECT_EQ(v["plan"][1]["positions_checked"], json({64, 70, 80, 127}));
  EXPECT_EQ(v["plan"][1]["timed_position"], 80);
  // The verdict's figures are the bucket of position 80's.
  EXPECT_EQ(v["schedule_id"], v["plan"][1]["schedule_id"]);
  EXPECT_EQ(v["latency_us"], v["plan"][1]["latency_us"]);
  EXPECT_EQ(v["positions_checked"], json({0, 3, 63, 64, 70, 80, 127}));
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/schemas/verdict.schema.json");
  for (const auto& e : megasched::harness::check_against_schema(json::parse(in), v))
    ADD_FAILURE() << megasched::harness::describe(e);
}

TEST(PlanCli, GenerateSwitchesAtTheBoundary) {
  json plan = two_buckets();
  plan["buckets"][0]["end"] = 5;
  plan["buckets"][1]["begin"] = 5;
  const RunResult r =
      run("generate --model toy --prompt-ids 1,2,3 --max-tokens 6 --verify --config " +
          write_plan(plan, "generate"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["switch_positions"], json({5}));
  EXPECT_EQ(j["steps_verified"], 8);
  EXPECT_EQ(j["tokens"].size(), 6u);
}

TEST(PlanCli, VerbsOfOneConfigTakeAOneBucketPlanAndTheBucketOfTheirPosition) {
  const json one = {{"buckets", {{{"begin", 0}, {"end", "max"}, {"config", json::object()}}}}};
  RunResult r = run("propose --model toy --config " + write_plan(one, "one"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // propose takes the bucket that holds --position (default 0); the buckets' configs differ.
  const std::string two = write_plan(two_buckets(), "propose");
  r = run("propose --model toy --config-only --config " + two);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json at0 = json::parse(r.out);
  r = run("propose --model toy --config-only --position 64 --config " + two);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json at64 = json::parse(r.out);
  EXPECT_NE(at0, at64);
  EXPECT_EQ(at64, megasched::schedule::to_json(*megasched::schedule::parse_config(
                      two_buckets()["buckets"][1]["config"], nullptr)));
  // A verb of one config without a position refuses a plan of several buckets, naming them.
  std::string error;
  EXPECT_FALSE(megasched::harness::read_config_arg(two, &error));
  EXPECT_NE(error.find("is a plan of 2 buckets ([0, 64) [64, max))"), std::string::npos) << error;
  EXPECT_NE(
      error.find("validate, evaluate, generate, bench, bench --generate, promote and loop --plan"),
      std::string::npos)
      << error;
}

// A bench.json of model toy on an H100 at positions 0, 64 and 127: the default (fastest at 0),
// two KV partitions (fastest at no measured position: its line is the lowest from 32 to 40) and
// four (fastest at 64 and 127), each row carrying its config as `bench` writes it.
json saved_bench(const std::string& build_key = "",
                 const std::vector<std::string>& labels = {"default", "p2", "p4"}) {
  using megasched::schedule::ScheduleConfig;
  const auto partitions = [](int p) {
    ScheduleConfig c;
    c.tiling.attn_kv_partitions = p;
    return megasched::schedule::to_json(c);
  };
  const std::vector<std::tuple<std::string, json, std::vector<double>>> configs = {
      {labels[0], megasched::schedule::to_json(ScheduleConfig{}), {100, 300, 500}},
      {labels[1], partitions(2), {150, 250, 420}},
      {labels[2], partitions(4), {220, 210, 200}}};
  json rows = json::array();
  const std::vector<int> positions = {0, 64, 127};
  for (size_t k = 0; k < positions.size(); ++k)
    for (const auto& [label, config, us] : configs) {
      json detail = {{"config", config}};
      if (!build_key.empty()) detail["kernel"] = {{"build_key", build_key}};
      rows.push_back({{"name", label},
                      {"kind", "config"},
                      {"position", positions[k]},
                      {"status", "ok"},
                      {"median_us", us[k]},
                      {"detail", detail}});
    }
  return {{"model", "toy"},
          {"device", "NVIDIA H100 80GB HBM3"},
          {"bandwidth_gbs", 3350},
          {"bandwidth", "datasheet"},
          {"positions", positions},
          {"floor_us", {10, 10, 10}},
          {"rows", rows}};
}

TEST(PlanCli, FromBenchFitsASavedBenchJsonWithoutAGpu) {
  const std::string bench = write_plan(saved_bench(), "from_bench");
  const std::string out = testing::TempDir() + "plan_cli_from_bench_out";
  const RunResult r = run("bench --model toy --from-bench " + bench + " --fit-plan " + out +
                          "/plan.json --out " + out + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json explain = json::parse(r.out);
  ASSERT_EQ(explain["buckets"].size(), 3u) << explain.dump();
  EXPECT_EQ(explain["buckets"][1]["config"], "p2");
  EXPECT_EQ(explain["buckets"][1]["begin"], 32);
  EXPECT_EQ(explain["buckets"][1]["fastest_at"], json::array());
  EXPECT_EQ(explain["buckets"][2]["begin"], 41);
  EXPECT_EQ(explain["from_bench"]["files"], json({bench}));
  std::ifstream written(out + "/plan.json");
  std::stringstream text;
  text << written.rdbuf();
  std::string error;
  const auto plan = megasched::schedule::parse_plan_text(text.str(), &error);
  ASSERT_TRUE(plan) << error;
  ASSERT_EQ(plan->buckets.size(), 3u);
  EXPECT_EQ(plan->buckets[1].config.tiling.attn_kv_partitions, 2);
  EXPECT_EQ(json::parse(std::ifstream(out + "/plan_fit.json"))["winners"],
            json({"default", "p4", "p4"}));
  // At 0 and 127 only, p4's line crosses below p2's (at 30.7) before p2's crosses below the
  // default's (at 48.8): p2 is lowest nowhere.
  const RunResult two = run("bench --model toy --from-bench " + bench + " --positions 0,127 " +
                            "--fit-plan " + out + "/two.json --out " + out + " --format json");
  ASSERT_EQ(two.exit_code, 0) << two.out;
  EXPECT_EQ(json::parse(two.out)["buckets"].size(), 2u) << two.out;
}

// With --fit-plan a plan given as --config is its buckets' configs, each a candidate labelled
// "PLAN [begin, end)": here a bench.json measured that way, refitted.
TEST(PlanCli, FitPlanTakesAPlansBucketsAsCandidates) {
  const std::string bench =
      write_plan(saved_bench("", {"default", "rec [0, 64)", "rec [64, max)"}), "from_bench_plan");
  const std::string rec = testing::TempDir() + "rec.json";
  const json plan = {
      {"buckets",
       {{{"begin", 0}, {"end", 64}, {"config", {{"tiling", {{"attn_kv_partitions", 2}}}}}},
        {{"begin", 64}, {"end", "max"}, {"config", {{"tiling", {{"attn_kv_partitions", 4}}}}}}}}};
  std::ofstream(rec) << plan.dump();
  const std::string out = testing::TempDir() + "plan_cli_from_bench_plan";
  const RunResult r = run("bench --model toy --from-bench " + bench + " --config " + rec +
                          " --fit-plan " + out + "/plan.json --out " + out + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json explain = json::parse(r.out);
  ASSERT_EQ(explain["buckets"].size(), 3u) << explain.dump();
  EXPECT_EQ(explain["buckets"][1]["config"], "rec [0, 64)");
  EXPECT_EQ(explain["buckets"][2]["config"], "rec [64, max)");
  EXPECT_EQ(explain["left_out"], json::array());
  // The plan's buckets are not the configs the file measured under those labels: refused.
  json other = plan;
  other["buckets"][1]["config"]["tiling"]["attn_kv_partitions"] = 8;
  std::ofstream(rec) << other.dump();
  const RunResult refused = run("bench --model toy --from-bench " + bench + " --config " + rec +
                                    " --fit-plan " + out + "/other.json --out " + out,
                                true);
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("--config rec [64, max) is not the config"), std::string::npos)
      << refused.out;
}

// Several bench.json files are one measurement: their positions together. The same rows split
// into a file of positions 0 and 64 and one of 127 fit the plan one file gives; a config measured
// at one position in both files, or files of two models, are refused.
TEST(PlanCli, FromBenchJoinsSeveralFiles) {
  json early = saved_bench();
  json late = saved_bench();
  early["positions"] = {0, 64};
  late["positions"] = {127};
  json early_rows = json::array(), late_rows = json::array();
  const json all = saved_bench();
  for (const json& row : all["rows"])
    (row["position"] == 127 ? late_rows : early_rows).push_back(row);
  early["rows"] = early_rows;
  late["rows"] = late_rows;
  const std::string a = write_plan(early, "from_bench_early");
  const std::string b = write_plan(late, "from_bench_late");
  const std::string out = testing::TempDir() + "plan_cli_from_bench_two";
  const RunResult r = run("bench --model toy --from-bench " + a + " --from-bench " + b +
                          " --fit-plan " + out + "/plan.json --out " + out + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json explain = json::parse(r.out);
  EXPECT_EQ(explain["positions"], json({0, 64, 127}));
  ASSERT_EQ(explain["buckets"].size(), 3u) << explain.dump();
  EXPECT_EQ(explain["buckets"][1]["begin"], 32);
  EXPECT_EQ(explain["buckets"][2]["begin"], 41);
  EXPECT_EQ(explain["from_bench"]["files"], json({a, b}));
  const RunResult twice = run("bench --model toy --from-bench " + a + " --from-bench " + a +
                                  " --fit-plan " + out + "/twice.json --out " + out,
                              true);
  EXPECT_EQ(twice.exit_code, 2) << twice.out;
  EXPECT_NE(twice.out.find("at position 0 again"), std::string::npos) << twice.out;
  json other_model = late;
  other_model["model"] = "small";
  const RunResult mixed = run("bench --model toy --from-bench " + a + " --from-bench " +
                                  write_plan(other_model, "from_bench_small") + " --fit-plan " +
                                  out + "/mixed.json --out " + out,
                              true);
  EXPECT_EQ(mixed.exit_code, 2) << mixed.out;
  EXPECT_NE(mixed.out.find("measured small on"), std::string::npos) << mixed.out;
}

TEST(PlanCli, FromBenchRefusesAMeasurementThatIsNotOfTheseConfigs) {
  const std::string bench = write_plan(saved_bench(), "from_bench_refused");
  const std::string fit = " --fit-plan " + testing::TempDir() + "plan_cli_refused.json --out " +
                          testing::TempDir() + "plan_cli_refused";
  struct Bad {
    std::string args;
    int exit_code;
    const char* says;
  };
  // A file labelled p4 (its stem) holding another config than the file's p4.
  const std::string other = testing::TempDir() + "p4.json";
  std::ofstream(other) << json({{"tiling", {{"attn_kv_partitions", 8}}}}).dump();
  for (const Bad& bad : {
           Bad{"--model llama-1b --from-bench " + bench + fit, 2, "measured model toy"},
           Bad{"--model toy --from-bench " + bench + " --positions 0,100" + fit, 2,
               "100 was not measured"},
           Bad{"--model toy --from-bench " + bench + " --config " + other + fit, 2,
               "--config p4 is not the config"},
           Bad{"--model toy --from-bench " + bench, 2, "pass --fit-plan"},
           Bad{"--model toy --from-bench " + testing::TempDir() + "no_such_bench.json" + fit, 3,
               "--from-bench"},
           Bad{"--model toy --from-bench " + write_plan(json::array(), "not_bench") + fit, 2,
               "not a bench.json"},
       }) {
    const RunResult r = run("bench " + bad.args, true);
    EXPECT_EQ(r.exit_code, bad.exit_code) << bad.args << "\n" << r.out;
    EXPECT_NE(r.out.find(bad.says), std::string::npos) << bad.args << "\n" << r.out;
  }
  // A row measured with another kernel build: refused where this megasched can build the key.
  const std::string stale = write_plan(saved_bench("0000000000000000"), "from_bench_stale");
  const RunResult r = run("bench --model toy --from-bench " + stale + fit, true);
  if (megasched::vm::nvrtc_available()) {
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("with kernel build 0000000000000000"), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("not checked: this megasched has no NVRTC"), std::string::npos) << r.out;
  }
}

}  // namespace
