// How deep a GPU loop builds kernels ahead when --compile-ahead is not given
// (harness/verbs.h, start_compile_ahead): kDefaultCompileAhead proposals for one evaluator, as
// many tickets per worker for a pool, and a given value wins either way.
#include <gtest/gtest.h>

#include "harness/verbs.h"
#include "schedule/model.h"
#include "schedule/target.h"
#include "search/compile_ahead.h"

namespace megasched::harness {
namespace {

/// The depth start_compile_ahead sets for a GPU loop with --compile-ahead `given` (-1: not
/// given) over `workers` trial slots; -2 when it refused.
int depth(int given, int workers) {
  LoopCommand command;
  command.compile_ahead = given;
  command.compile_threads = 1;
  const auto shape = schedule::find_preset("toy");
  const auto target = schedule::find_target("h100");
  std::unique_ptr<search::CompileAhead> pool;
  if (start_compile_ahead(command, "gpu", *shape, *target, &pool, workers)) return -2;
  EXPECT_EQ(pool != nullptr, command.loop.compile_ahead > 0);
  return command.loop.compile_ahead;
}

TEST(CompileAheadDefault, OneEvaluatorAndEachPoolWorkerQueueTheDefault) {
  if (!search::compile_ahead_unavailable(*schedule::find_target("h100")).empty())
    GTEST_SKIP() << "this build cannot build kernels ahead (no NVRTC)";
  EXPECT_EQ(kDefaultCompileAhead, 16);  // BENCHMARKS.md, "The search's throughput"
  EXPECT_EQ(depth(-1, 1), kDefaultCompileAhead);
  EXPECT_EQ(depth(-1, 2), kDefaultCompileAhead);
  EXPECT_EQ(depth(7, 1), 7);
  EXPECT_EQ(depth(7, 2), 7);
  EXPECT_EQ(depth(0, 1), 0);
}

TEST(CompileAheadDefault, ACpuLoopBuildsNothingAndRefusesTheFlag) {
  LoopCommand command;
  const auto shape = schedule::find_preset("toy");
  const auto target = schedule::find_target("h100");
  std::unique_ptr<search::CompileAhead> pool;
  EXPECT_FALSE(start_compile_ahead(command, "cpu", *shape, *target, &pool, 1));
  EXPECT_EQ(command.loop.compile_ahead, 0);
  EXPECT_EQ(pool, nullptr);
  command.compile_ahead = 3;
  const std::optional<VerbResult> refused =
      start_compile_ahead(command, "cpu", *shape, *target, &pool, 1);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->exit_code, kExitUsage);
}

}  // namespace
}  // namespace megasched::harness
