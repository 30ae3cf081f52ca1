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
#include "vm/nvrtc_build.h"

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

TEST(CmdValidate, KernelReportsTheBuiltMegakernelsRegistersAndSpills) {
  if (!vm::nvrtc_available()) {
    EXPECT_EQ(run({"validate", "--model", "toy", "--kernel"}).exit_code, kExitEnvironment);
    GTEST_SKIP() << "built without the CUDA toolkit";
  }
  // The default toy kernel fits its registers; at 1024 threads a thread has 64 registers, and
  // unroll 8 over 4 rows per warp needs more: ptxas spills, and the report says so.
  const Outcome fits = run({"validate", "--model", "toy", "--gpu", "h100", "--kernel"});
  ASSERT_EQ(fits.exit_code, kExitOk) << fits.out << fits.err;
  const auto k = nlohmann::json::parse(fits.out)["kernel"];
  EXPECT_TRUE(k["ok"].get<bool>()) << k.dump();
  EXPECT_EQ(k["arch"], "sm_90a");
  EXPECT_GT(k["registers"].get<int>(), 64);
  EXPECT_LE(k["registers"].get<int>(), 255);
  EXPECT_EQ(k["spill_store_bytes"], 0);
  EXPECT_FALSE(k.contains("note")) << k.dump();
  bool threads = false;
  for (const auto& d : k["defines"]) threads = threads || d == "MS_THREADS=256";
  EXPECT_TRUE(threads) << k["defines"].dump();

  const std::string path = testing::TempDir() + "cmd_validate_1024.json";
  std::ofstream(path) << R"({"launch": {"threads_per_block": 1024},
                            "kernel": {"unroll": 8, "rows_per_warp": 4}})";
  const Outcome spills = run({"validate", "--model", "toy", "--config", path, "--kernel"});
  ASSERT_EQ(spills.exit_code, kExitOk) << spills.out << spills.err;  // spills are not unsafe
  const auto s = nlohmann::json::parse(spills.out)["kernel"];
  EXPECT_EQ(s["registers"], 64);
  EXPECT_GT(s["spill_store_bytes"].get<int>(), 0);
  EXPECT_NE(s["note"].get<std::string>().find("spills"), std::string::npos);
}

// A llama-8b config whose down projection does not fit the streamed GEMV's staging (one 16 KiB
// page for 14336 input floats) compiles the fallback GEMV, whose registers cost the streamed
// GEMV's (dev/perf_log.md section 54; at four rows a warp it still spills there with the fallback's
// quarter unroll): the report names the tasks, the first one's reason and its hint, and the spill
// note says so; with the pages it needs, no fallback, and the note does not name one.
TEST(CmdValidate, KernelNamesTheFallbackGemvThatSpillsTheStreamedOne) {
  if (!vm::nvrtc_available()) GTEST_SKIP() << "built without the CUDA toolkit";
  auto report = [](int pages) {
    const std::string path = testing::TempDir() + "cmd_validate_fallback.json";
    std::ofstream(path) << R"({"kernel": {"rows_per_warp": 4, "unroll": 4, "stream_depth": 2,
                                          "weight_load": "ldg_stream"},
                              "smem": {"pages": )"
                        << pages << R"(, "page_bytes": 16384}, "pipeline": {"prefetch_depth": 0},
                              "tiling": {"gemv_rows_per_task": 0, "qkv_rope_pairs": true}})";
    const Outcome o =
        run({"validate", "--model", "llama-8b", "--gpu", "h200", "--config", path, "--kernel"});
    EXPECT_EQ(o.exit_code, kExitOk) << o.out << o.err;
    return nlohmann::json::parse(o.out)["kernel"];
  };
  const auto small = report(1);
  ASSERT_TRUE(small.contains("fallback_gemv")) << small.dump();
  EXPECT_EQ(small["fallback_gemv"]["tasks"], 32 * 128);  // every layer's down tasks
  const std::string first = small["fallback_gemv"]["first"];
  EXPECT_EQ(first.rfind("L0.down is a GEMV task whose 14336 input floats", 0), 0u) << first;
  EXPECT_NE(first.find("hint: smem.pages x smem.page_bytes >= 57344"), std::string::npos) << first;
  ASSERT_TRUE(small.contains("note")) << small.dump();
  EXPECT_NE(small["note"].get<std::string>().find("compiles the fallback GEMV for 4096 GEMV"),
            std::string::npos)
      << small.dump();
  const auto fits = report(4);
  EXPECT_FALSE(fits.contains("fallback_gemv")) << fits.dump();
  EXPECT_EQ(fits.value("note", std::string()).find("fallback"), std::string::npos) << fits.dump();
}

TEST(CmdValidate, KernelTakesOneConfig) {
  // Random configs, or a plan of several buckets, have no one kernel to build.
  const Outcome random = run({"validate", "--random-configs", "3", "--kernel"});
  EXPECT_EQ(random.exit_code, kExitUsage);
  EXPECT_NE(random.err.find("kernel builds one config's kernel"), std::string::npos) << random.err;
  const Outcome plan =
      run({"validate", "--model", "llama-1b", "--config", "best:llama-1b:h100", "--kernel"});
  EXPECT_EQ(plan.exit_code, kExitUsage);
  EXPECT_NE(plan.err.find("--config-only"), std::string::npos) << plan.err;
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
