// `megasched search-bench` and `landscape record`, driven in process through CLI11: CI replays
// the strategies on the committed synthetic landscape (tests/data/synthetic.landscape.jsonl).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "harness/commands.h"
#include "search/landscape.h"
#include "tests/harness/run_in_process.h"

namespace megasched::harness {
namespace {

using Outcome = test::InProcessResult;

Outcome run(const std::vector<std::string>& args) {
  return test::run_in_process(args, {add_search_bench_command, add_landscape_command});
}

const std::string kSynthetic = std::string(MS_SOURCE_DIR) + "/tests/data/synthetic.landscape.jsonl";

TEST(CmdSearchBench, ReplaysEveryStrategyOnTheCommittedSyntheticLandscape) {
  const Outcome o = run({"search-bench", "--landscape", kSynthetic, "--seeds", "3", "--budgets",
                         "25,100", "--candidates", "256", "--jobs", "2", "--json"});
  ASSERT_EQ(o.exit_code, kExitOk) << o.err;
  const auto doc = nlohmann::json::parse(o.out);
  EXPECT_DOUBLE_EQ(doc["optimum_us"].get<double>(), 100.0);
  ASSERT_EQ(doc["strategies"].size(), 6u);  // random, hillclimb, elite, sweep, guided, bandit
  EXPECT_EQ(doc["strategies"][3]["name"], "sweep");
  EXPECT_EQ(doc["strategies"][5]["name"], "bandit");
  for (const auto& s : doc["strategies"]) {
    EXPECT_EQ(s["budgets"].size(), 2u);
    EXPECT_EQ(s["trials_to_within"]["runs"], 3);
  }
  const Outcome table = run({"search-bench", "--landscape", kSynthetic, "--seeds", "2", "--budgets",
                             "25", "--strategies", "random,elite"});
  ASSERT_EQ(table.exit_code, kExitOk) << table.err;
  EXPECT_NE(table.out.find("elite"), std::string::npos) << table.out;
  // Every synthetic row is sampled: --rows sample replays the same surface.
  const Outcome sampled =
      run({"search-bench", "--landscape", kSynthetic, "--seeds", "1", "--budgets", "10",
           "--strategies", "sweep", "--rows", "sample", "--json"});
  ASSERT_EQ(sampled.exit_code, kExitOk) << sampled.err;
  const auto sdoc = nlohmann::json::parse(sampled.out);
  EXPECT_EQ(sdoc["rows_replayed"], "sample");
  EXPECT_DOUBLE_EQ(sdoc["optimum_us"].get<double>(), 100.0);
  EXPECT_NE(run({"search-bench", "--landscape", kSynthetic, "--rows", "named"}).exit_code, kExitOk);
}

TEST(CmdSearchBench, RefusesAMalformedLandscapeWithExitCode2) {
  const std::string path = testing::TempDir() + "bad.landscape.jsonl";
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("{\"id\": 1}\n", f);
  std::fclose(f);
  const Outcome o = run({"search-bench", "--landscape", path});
  EXPECT_EQ(o.exit_code, kExitUsage);
  EXPECT_NE(o.err.find(":1: the first line is not a landscape header"), std::string::npos) << o.err;
  std::remove(path.c_str());
  EXPECT_EQ(run({"search-bench", "--landscape", kSynthetic, "--strategies", "hilclimb"}).exit_code,
            kExitUsage);
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--bandit-window", "0"},
                                              {"--bandit-c", "-1"},
                                              {"--bandit-techniques", "random,proposer"}}) {
    std::vector<std::string> args = {"search-bench", "--landscape", kSynthetic, "--strategies",
                                     "bandit"};
    args.insert(args.end(), bad.begin(), bad.end());
    EXPECT_EQ(run(args).exit_code, kExitUsage) << bad[0];
  }
}

TEST(CmdLandscape, RecordsAPredictedLandscapeThatSearchBenchReplays) {
  const std::string path = testing::TempDir() + "toy_cmd.landscape.jsonl";
  std::filesystem::remove(path);
  const Outcome o = run({"landscape", "record", "--model", "toy", "--gpu", "h100", "--device",
                         "cpu", "--positions", "0", "--sample", "6", "--out", path});
  ASSERT_EQ(o.exit_code, kExitOk) << o.err;
  const auto doc = nlohmann::json::parse(o.out);
  EXPECT_EQ(doc["recorded"], 6);
  EXPECT_EQ(doc["latency_kind"], "predicted");
  std::string error;
  auto land = search::read_landscape(path, &error);
  ASSERT_TRUE(land) << error;
  EXPECT_EQ(land->header.latency_kind, "predicted");
  EXPECT_FALSE(land->header.build.empty());
  const Outcome again = run({"landscape", "record", "--model", "toy", "--gpu", "h100", "--device",
                             "cpu", "--positions", "0", "--sample", "6", "--out", path});
  ASSERT_EQ(again.exit_code, kExitOk) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["recorded"], 0);  // resumed: nothing left
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace megasched::harness
