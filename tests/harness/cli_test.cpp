// End-to-end tests of the megasched binary as an agent uses it: JSON on stdout, one-line errors
// with hints on stderr, and exit codes.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/harness/run_cli.h"

namespace {

using megasched::test::RunResult;

RunResult run(const std::string& args, bool merge_stderr = false) {
  return megasched::test::run_megasched(args, merge_stderr);
}

TEST(Cli, EvaluateDefaultToyOnCpuIsValidCorrectAndPredictedAboveTheFloor) {
  auto r = run("evaluate --model toy --gpu h100 --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto v = nlohmann::json::parse(r.out);
  EXPECT_TRUE(v["valid"].get<bool>());
  EXPECT_TRUE(v["correct"].get<bool>());
  EXPECT_EQ(v["latency_kind"], "predicted");
  EXPECT_GE(v["latency_us"].get<double>(), v["floor_us"].get<double>());
  EXPECT_GT(v["floor_us"].get<double>(), 0.0);
  EXPECT_EQ(v["positions_checked"].size(), 3u);
  EXPECT_EQ(v["schedule_id"].get<std::string>().size(), 16u);
  for (const char* key :
       {"rejected_reason", "diagnostics", "max_abs_err", "rel_err", "argmax_match", "pct_of_floor",
        "tasks", "weight_bytes", "bytes_min", "target", "model", "device", "notes"})
    EXPECT_TRUE(v.contains(key)) << key;
}

TEST(Cli, EvaluateConfigTypoFromStdinNamesKeyAndSuggestion) {
  // Empty stdin is not a config either.
  auto r = run("evaluate --model toy --gpu h100 --device cpu --config - < /dev/null", true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  const std::string cmd = std::string("printf '%s' '{\"tilng\": {}}' | ") + MS_BINARY_PATH +
                          " evaluate --model toy --gpu h100 --device cpu --config - 2>&1";
  const RunResult piped = megasched::test::run_shell(cmd);
  const std::string& out = piped.out;
  EXPECT_EQ(piped.exit_code, 2) << out;
  EXPECT_NE(out.find("tilng"), std::string::npos) << out;
  EXPECT_NE(out.find("did you mean 'tiling'"), std::string::npos) << out;
}

TEST(Cli, UnknownModelAndTargetAreOneLineErrorsWithHints) {
  auto r = run("evaluate --model tyo --gpu h100 --device cpu", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("did you mean 'toy'"), std::string::npos) << r.out;
  r = run("propose --model toy --gpu h10", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("unknown GPU target 'h10'"), std::string::npos) << r.out;
}

TEST(Cli, MissingConfigFileIsAnEnvironmentErrorNotACrash) {
  // HARNESS.md section 6: a file that cannot be read is exit 3 (a bad config in it is 2).
  auto r = run("evaluate --model toy --device cpu --config /nonexistent/cfg.json", true);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.out.find("cannot read '/nonexistent/cfg.json'"), std::string::npos) << r.out;
}

TEST(Cli, UnknownCommandGetsASuggestion) {
  auto r = run("evalute", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("did you mean 'evaluate'"), std::string::npos) << r.out;
}

TEST(Cli, ProposePrintsIncumbentAndSearchSpace) {
  auto r = run("propose --model toy --gpu h100");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"], "toy");
  EXPECT_TRUE(j["incumbent"].contains("tiling"));
  EXPECT_GE(j["search_space"]["knobs"].size(), 20u);
}

TEST(Cli, ModelsAndTargetsListAsJson) {
  auto r = run("models --json");
  ASSERT_EQ(r.exit_code, 0);
  auto models = nlohmann::json::parse(r.out);
  bool has_1b = false;
  for (const auto& m : models)
    has_1b = has_1b || (m["name"] == "llama-1b" && m["params"] == 1235814400);
  EXPECT_TRUE(has_1b) << r.out;
  r = run("targets --json");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_GE(nlohmann::json::parse(r.out).size(), 8u);
}

TEST(Cli, NamedConfigsAreListedAndAcceptedAsConfig) {
  auto r = run("models --named-configs --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto named = nlohmann::json::parse(r.out);
  ASSERT_FALSE(named.empty());
  for (const auto& c : named) {
    const std::string name = c["name"];
    // Every named config lowers and validates for its model on its GPU.
    auto v = run("validate --model " + c["model"].get<std::string>() + " --gpu " +
                     c["gpu"].get<std::string>() + " --config " + name,
                 true);
    EXPECT_EQ(v.exit_code, 0) << name << ": " << v.out;
  }
  r = run("propose --model toy --gpu h100 --config best:nope:h100", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("no named config 'best:nope:h100'; known: best:"), std::string::npos)
      << r.out;
}

}  // namespace

namespace {

TEST(Cli, GenerateReturnsExactlyMaxTokens) {
  for (int n : {1, 4}) {
    auto r = run("generate --model toy --gpu h100 --device cpu --prompt-ids 3,5 --max-tokens " +
                 std::to_string(n));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"].size(), static_cast<size_t>(n)) << r.out;
  }
}

TEST(Cli, ConfigDefaultIsTheDefaultConfig) {
  auto named = run("propose --model toy --gpu h100 --config default");
  auto plain = run("propose --model toy --gpu h100");
  ASSERT_EQ(named.exit_code, 0) << named.out;
  EXPECT_EQ(nlohmann::json::parse(named.out)["incumbent"],
            nlohmann::json::parse(plain.out)["incumbent"]);
  auto r = run("evaluate --model toy --gpu h100 --device cpu --config default");
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

}  // namespace
