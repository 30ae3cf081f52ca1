// The validator's subcommands, driven in process through CLI11 (the binary's command table is
// wired in harness/main.cpp): JSON on stdout, exit 0 only when safe, 1 when unsafe, 2 on usage.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "groundtruth/program_fuzz.h"
#include "harness/commands.h"
#include "tests/harness/run_in_process.h"

namespace megasched::harness {
namespace {

using Outcome = test::InProcessResult;

Outcome run(const std::vector<std::string>& args) {
  return test::run_in_process(args, {add_validate_command, add_fuzz_validator_command});
}

TEST(CmdValidate, AcceptsTheDefaultToyLowering) {
  const Outcome o = run({"validate", "--model", "toy", "--gpu", "h100"});
  ASSERT_EQ(o.exit_code, kExitOk) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["model"], "toy");
  EXPECT_GT(j["tasks"].get<int>(), 5);
}

TEST(CmdValidate, RejectsAnUnsafeProgramFileWithRules) {
  groundtruth::ProgramBuilder b(groundtruth::fuzz_target());
  const uint32_t c = b.counter("c");
  b.add(0, b.op("x"), 0, 0, 256, 8, {}, c, 1);
  b.add(1, b.op("y"), 256, 0, 264, 8);  // no wait on c
  schedule::Program p = b.finish();
  // On h100 the grid is 132 blocks: make the launch fit so the race is the only violation.
  p.launch.grid_blocks = 132;
  const std::string path = testing::TempDir() + "cmd_validate_race.json";
  std::ofstream(path) << schedule::to_json(p).dump();
  const Outcome o = run({"validate", "--program", path, "--gpu", "h100"});
  ASSERT_EQ(o.exit_code, kExitFailure) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_EQ(j["rules"], "race");
  EXPECT_EQ(j["diagnostics"][0]["tasks"], nlohmann::json::array({1, 0}));
}

TEST(CmdValidate, UsageErrorsExitTwoAndUnreadableFilesThree) {
  EXPECT_EQ(run({"validate", "--model", "no-such-model"}).exit_code, kExitUsage);
  EXPECT_EQ(run({"validate", "--program", "/nonexistent/program.json"}).exit_code,
            kExitEnvironment);
}

TEST(CmdFuzzValidator, PrintsAScorecardWithNoAcceptedUnsafe) {
  const Outcome o = run({"fuzz-validator", "--n", "120", "--seed", "3"});
  ASSERT_EQ(o.exit_code, kExitOk) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["total"]["generated"], 120);
  EXPECT_EQ(j["total"]["accepted_unsafe"], 0);
  EXPECT_EQ(j["bases_bit_identical_in_16_random_orders"], j["bases"]);
  EXPECT_GT(j["bases"].get<int>(), 0);
}

}  // namespace
}  // namespace megasched::harness
