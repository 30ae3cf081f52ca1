// The keep rule a loop takes when --min-gain and --confirm are not given (harness/verbs.h,
// resolve_keep_rule): half a percent with three confirm rounds on a GPU device, 1% without rounds
// on a CPU one, and a given value wins on either.
#include <gtest/gtest.h>

#include "harness/verbs.h"
#include "search/loop.h"

namespace megasched::harness {
namespace {

/// {min_gain, confirm} that resolve_keep_rule sets on `device` for the flags' values (-1: not
/// given).
std::pair<double, int> resolved(const std::string& device, double min_gain, int confirm) {
  LoopCommand command;
  command.min_gain = min_gain;
  command.confirm = confirm;
  resolve_keep_rule(command, device);
  return {command.loop.min_gain, command.loop.confirm};
}

TEST(KeepRuleDefault, AGpuLoopConfirmsHalfAPercentAndACpuLoopKeepsOnePercent) {
  // BENCHMARKS.md, "The search of record": the A/B of 2026-11-30 on two H200s.
  EXPECT_EQ(kGpuMinGain, 0.005);
  EXPECT_EQ(kGpuConfirm, 3);
  EXPECT_EQ(resolved("gpu", -1, -1), std::make_pair(0.005, 3));
  const search::LoopOptions library;
  EXPECT_EQ(resolved("cpu", -1, -1), std::make_pair(library.min_gain, library.confirm));
  EXPECT_EQ(library.min_gain, 0.01);
  EXPECT_EQ(library.confirm, 0);
}

TEST(KeepRuleDefault, AGivenValueWinsOnEitherDevice) {
  for (const char* device : {"gpu", "cpu"}) {
    SCOPED_TRACE(device);
    EXPECT_EQ(resolved(device, 0.02, 0), std::make_pair(0.02, 0));
    EXPECT_EQ(resolved(device, 0.0, 5), std::make_pair(0.0, 5));
    EXPECT_EQ(resolved(device, 0.02, -1).first, 0.02);
    EXPECT_EQ(resolved(device, -1, 2).second, 2);
  }
  EXPECT_EQ(resolved("gpu", 0.02, -1).second, kGpuConfirm);
  EXPECT_EQ(resolved("gpu", -1, 0).first, kGpuMinGain);
}

}  // namespace
}  // namespace megasched::harness
