// `megasched profile` as an agent runs it: bad arguments and unsafe programs are refused on any
// machine; without a GPU it says so with the CPU alternative; on a GPU it writes the analysis.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "eval/device.h"
#include "tests/harness/run_cli.h"

namespace {

using megasched::test::RunResult;

RunResult run(const std::string& args, bool merge_stderr = true) {
  return megasched::test::run_megasched(args, merge_stderr);
}

std::string out_path() {
  return (std::filesystem::temp_directory_path() /
          ("ms_profile_" + std::to_string(::getpid()) + ".json"))
      .string();
}

TEST(ProfileCommand, WithoutAGpuSaysSoAndPointsToTheCpuCheck) {
  std::string why;
  if (megasched::eval::gpu_available(&why)) GTEST_SKIP() << "a GPU is present";
  for (const char* gpu : {"h100", "auto"}) {
    const RunResult r =
        run("profile --model toy --gpu " + std::string(gpu) + " --out " + out_path());
    EXPECT_EQ(r.exit_code, 3) << r.out;
    EXPECT_NE(r.out.find("profile needs a CUDA device: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("megasched evaluate --device cpu"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(out_path()));
}

TEST(ProfileCommand, BadArgumentsAreUsageErrorsWithHints) {
  RunResult r = run("profile --model tyo --gpu h100 --out " + out_path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("did you mean 'toy'"), std::string::npos) << r.out;
  r = run("profile --model toy --gpu h100 --position 128 --out " + out_path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--position must lie in [0, 127] for model toy"), std::string::npos)
      << r.out;
  r = run("profile --model toy --gpu h100 --token 256 --out " + out_path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--token must lie in [0, 255] for model toy"), std::string::npos) << r.out;
  r = run("profile --model toy --gpu h10 --out " + out_path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("did you mean 'h100'"), std::string::npos) << r.out;
  r = run("profile --model toy --gpu h100 --config /nonexistent/cfg.json --out " + out_path());
  EXPECT_EQ(r.exit_code, 3) << r.out;  // a file that cannot be read (HARNESS.md section 6)
  EXPECT_NE(r.out.find("cannot read '/nonexistent/cfg.json'"), std::string::npos) << r.out;
  r = run("profile --model toy --gpu h100");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--out is required"), std::string::npos) << r.out;
  EXPECT_EQ(run("profile --help").exit_code, 0);
}

TEST(ProfileCommand, RefusesAnUnsafeProgramBeforeLookingForAGpu) {
  // 8 pages of 32 KiB exceed the H100's 227 KiB of opt-in shared memory per block.
  const std::string cfg = out_path() + ".cfg.json";
  std::ofstream(cfg) << R"({"smem": {"pages": 8, "page_bytes": 32768}})";
  const RunResult r =
      run("profile --model toy --gpu h100 --config " + cfg + " --out " + out_path());
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("the program is unsafe (launch): smem_bytes"), std::string::npos) << r.out;
  std::filesystem::remove(cfg);
}

TEST(ProfileCommand, OnTheGpuWritesTheTimelineAndTheCriticalPath) {
  std::string why;
  if (!megasched::eval::gpu_available(&why)) GTEST_SKIP() << why;
  const std::string path = out_path();
  const RunResult r =
      run("profile --model toy --gpu auto --position 3 --warmup 2 --json --out " + path,
          /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json printed = nlohmann::json::parse(r.out);
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(printed, doc);
  EXPECT_EQ(doc["status"], "ok");
  EXPECT_EQ(doc["model"], "toy");
  EXPECT_EQ(doc["position"], 3);
  EXPECT_TRUE(doc["kernel_info"].is_object());
  EXPECT_GT(doc["wall_us"].get<double>(), 0.0);
  const nlohmann::json& t = doc["totals"];
  EXPECT_EQ(t["tasks_not_run"], 0);
  EXPECT_EQ(doc["tasks"].size(), t["tasks_run"].get<size_t>());
  EXPECT_GT(t["span_us"].get<double>(), 0.0);
  EXPECT_GT(t["exec_fraction"].get<double>(), 0.0);
  // Every task started after the earliest start (0) and its stamps are in order.
  for (const nlohmann::json& task : doc["tasks"]) {
    EXPECT_LE(task["start_us"].get<double>(), task["ready_us"].get<double>()) << task.dump();
    EXPECT_LE(task["ready_us"].get<double>(), task["done_us"].get<double>()) << task.dump();
    EXPECT_LE(task["done_us"].get<double>(), task["signal_us"].get<double>()) << task.dump();
  }
  // The default toy step is a chain: embed -> ... -> argmax, each stage waiting on the one before.
  const nlohmann::json& cp = doc["critical_path"];
  EXPECT_GE(cp["stages"].get<int>(), 5) << cp.dump();
  EXPECT_EQ(cp["path"].back()["op"], "argmax") << cp.dump();
  EXPECT_EQ(cp["path"].front()["op"], "embed") << cp.dump();
  std::filesystem::remove(path);
}

}  // namespace
