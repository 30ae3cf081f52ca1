// Planted bugs the trial must catch on a real GPU (every test GTEST_SKIP()s where there is no
// device). The test-only switch MS_TEST_FAULT_KV_FROM/UNTIL (vm/device/common.cuh, reached only
// through GpuTrialOptions::test_kernel_defines) makes the megakernel write a step's keys and values
// into the neighbouring KV slot at positions in [FROM, UNTIL). A trial timed at 4096 with the fault
// from 2048 on must come back correct: false naming position 4096; a fault at position 0 alone must
// be named at 0 although every other position is right; the same trial without the fault is
// correct (so the checks above fail because of the fault, not the set-up).
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "eval/device.h"
#include "eval/evaluate.h"
#include "schedule/checkpoint.h"

namespace megasched::eval {
namespace {

#define MS_REQUIRE_GPU()                                   \
  do {                                                     \
    std::string why_;                                      \
    if (!eval::gpu_available(&why_)) GTEST_SKIP() << why_; \
  } while (0)

/// A toy-sized fp32 model that reaches position 4096, saved as a checkpoint once per process. fp32,
/// because the fault moves one key and value among 4097: with random weights that shifts the
/// logits by far less than bf16's tolerance (2e-2 relative) and far more than fp32's (1e-4); an
/// H100 run of the bf16 version came back correct.
const std::string& long_toy_checkpoint() {
  static const std::string dir = [] {
    const std::string d = testing::TempDir() + "ms_planted_bug_" + std::to_string(::getpid());
    schedule::ModelShape s = *schedule::find_preset("toy-2L");
    s.dtype = schedule::DType::kF32;
    s.max_seq = 8192;
    std::string error;
    EXPECT_TRUE(schedule::save_checkpoint(schedule::generate_weights(s, 21), d, &error)) << error;
    return d;
  }();
  return dir;
}

Verdict trial(const std::vector<std::string>& fault, std::vector<int> positions, int timed) {
  EvaluatorOptions o;
  o.model = long_toy_checkpoint();
  o.device = "gpu";
  o.gpu = "auto";
  o.positions = std::move(positions);
  o.timed_position = timed;
  o.gpu_options.warmup = 2;
  o.gpu_options.iterations = 5;
  o.gpu_options.baselines.clear();
  o.gpu_options.test_kernel_defines = fault;
  o.reference_cache_dir = testing::TempDir() + "ms_planted_bug_cache_" + std::to_string(::getpid());
  std::string error;
  auto ev = TrialEvaluator::create(o, &error);
  EXPECT_TRUE(ev) << error;
  if (!ev) return {};
  return ev->evaluate(schedule::ScheduleConfig{});
}

/// Whether the verdict has a GPU check at `position` and whether it passed.
std::optional<bool> gpu_check_at(const Verdict& v, int position) {
  for (const auto& c : v.checks)
    if (c["path"] == "gpu" && c["position"] == position) return c["pass"].get<bool>();
  return std::nullopt;
}

TEST(PlantedBug, WithoutTheFaultTheTrialAt4096IsCorrect) {
  MS_REQUIRE_GPU();
  const Verdict v = trial({}, {0, 3, 7}, 4096);
  EXPECT_TRUE(v.correct) << to_json(v).dump(1);
  EXPECT_EQ(gpu_check_at(v, 4096), std::optional<bool>(true));
  EXPECT_EQ(v.reference["reference_vm"], "walk");
}

TEST(PlantedBug, KvIndexFaultFrom2048IsCaughtAtTheTimedPosition4096) {
  MS_REQUIRE_GPU();
  const Verdict v =
      trial({"MS_TEST_FAULT_KV_FROM=2048", "MS_TEST_FAULT_KV_UNTIL=8192"}, {0, 3, 7}, 4096);
  EXPECT_FALSE(v.correct);
  EXPECT_EQ(v.status, "incorrect");
  EXPECT_FALSE(v.latency_us.has_value());
  EXPECT_EQ(gpu_check_at(v, 4096), std::optional<bool>(false)) << to_json(v).dump(1);
  EXPECT_EQ(gpu_check_at(v, 0), std::optional<bool>(true));  // below 2048 the kernel is right
  bool named = false;
  for (const std::string& n : v.notes)
    named = named || n.find("position 4096") != std::string::npos;
  EXPECT_TRUE(named) << to_json(v).dump(1);
}

TEST(PlantedBug, FaultOnlyAtPosition0IsCaughtThere) {
  MS_REQUIRE_GPU();
  const Verdict v = trial({"MS_TEST_FAULT_KV_FROM=0", "MS_TEST_FAULT_KV_UNTIL=1"}, {0, 3, 7}, 4096);
  EXPECT_FALSE(v.correct);
  EXPECT_EQ(v.status, "incorrect");
  EXPECT_EQ(gpu_check_at(v, 0), std::optional<bool>(false)) << to_json(v).dump(1);
  EXPECT_EQ(gpu_check_at(v, 4096), std::optional<bool>(true));
  bool named = false;
  for (const std::string& n : v.notes) named = named || n.find("position 0") != std::string::npos;
  EXPECT_TRUE(named) << to_json(v).dump(1);
}

}  // namespace
}  // namespace megasched::eval
