// How deep a GPU loop builds kernels ahead when --compile-ahead is not given
// (harness/verbs.h, start_compile_ahead): one evaluator queues kDefaultCompileAhead proposals, a
// pool kDefaultPoolCompileAhead tickets per worker, and a given value wins either way.
#include <gtest/gtest.h>

#include "harness/verbs.h"
#include "schedule/model.h"
#include "schedule/target.h"
#include "search/compile_ahead.h"

namespace megasched::harness {
namespace {

/// The depth start_compile_ahead sets for a GPU loop with --compile-ahead `given` (-1: not
/// given), run in a pool or not; -2 when it refused.
int depth(int given, bool pooled) {
  LoopCommand command;
  command.compile_ahead = given;
  command.compile_threads = 1;
  const auto shape = schedule::find_preset("toy");
  const auto target = schedule::find_target("h100");
  std::unique_ptr<search::CompileAhead> pool;
  if (start_compile_ahead(command, "gpu", *shape, *target, &pool, pooled ? 2 : 1, pooled))
    return -2;
  EXPECT_EQ(pool != nullptr, command.loop.compile_ahead > 0);
  return command.loop.compile_ahead;
}

TEST(CompileAheadDefault, OneEvaluatorQueuesDeeperThanAPoolsWorker) {
  if (!search::compile_ahead_unavailable(*schedule::find_target("h100")).empty())
    GTEST_SKIP() << "this build cannot build kernels ahead (no NVRTC)";
  EXPECT_EQ(depth(-1, false), kDefaultCompileAhead);
  EXPECT_EQ(depth(-1, true), kDefaultPoolCompileAhead);
  EXPECT_EQ(depth(7, false), 7);
  EXPECT_EQ(depth(7, true), 7);
  EXPECT_EQ(depth(0, false), 0);
}

TEST(CompileAheadDefault, ACpuLoopBuildsNothingAndRefusesTheFlag) {
  LoopCommand command;
  const auto shape = schedule::find_preset("toy");
  const auto target = schedule::find_target("h100");
  std::unique_ptr<search::CompileAhead> pool;
  EXPECT_FALSE(start_compile_ahead(command, "cpu", *shape, *target, &pool, 1, false));
  EXPECT_EQ(command.loop.compile_ahead, 0);
  EXPECT_EQ(pool, nullptr);
  command.compile_ahead = 3;
  const std::optional<VerbResult> refused =
      start_compile_ahead(command, "cpu", *shape, *target, &pool, 1, false);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->exit_code, kExitUsage);
}

}  // namespace
}  // namespace megasched::harness
