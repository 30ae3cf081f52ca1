// The bottleneck rule (eval/bottleneck.h, HARNESS.md section 14) on synthetic verdicts and
// profiles: each class, its precedence, and the knob axis each class points to.
#include "eval/bottleneck.h"

#include <gtest/gtest.h>

#include "schedule/config.h"

namespace megasched::eval {
namespace {

Verdict correct_verdict(double latency_us, double floor_us) {
  Verdict v;
  v.valid = v.correct = true;
  v.status = "ok";
  v.latency_us = latency_us;
  v.floor_us = floor_us;
  return v;
}

TEST(Bottleneck, NearTheFloorIsMemory) {
  const auto c = classify_verdict(correct_verdict(100.0, 60.0), 40, 132);
  EXPECT_EQ(c["class"], "memory");
  EXPECT_EQ(c["source"], "verdict");
  EXPECT_NE(c["reason"].get<std::string>().find("60.0% of the floor"), std::string::npos);
}

TEST(Bottleneck, ManyStagesFarFromTheFloorIsLatencySync) {
  // 30 stages x 1 us = 30 us >= half of the 50 us above the floor.
  EXPECT_EQ(classify_verdict(correct_verdict(60.0, 10.0), 30, 132)["class"], "latency-sync");
}

TEST(Bottleneck, FewStagesFarFromTheFloorIsCompute) {
  // 8 stages x 1 us = 8 us < half of the 90 us above the floor.
  EXPECT_EQ(classify_verdict(correct_verdict(100.0, 10.0), 8, 132)["class"], "compute");
}

TEST(Bottleneck, SpillsOrUnderOccupancyIsLaunchBeforeAnythingElse) {
  Verdict v = correct_verdict(100.0, 90.0);  // would be memory
  v.kernel = {{"spill_store_bytes", 64}, {"spill_load_bytes", 32}};
  EXPECT_EQ(classify_verdict(v, 8, 132)["class"], "launch");
  v.kernel = {{"occupancy_blocks_per_sm", 1}, {"grid_blocks", 264}};  // asks for 2 per SM
  EXPECT_EQ(classify_verdict(v, 8, 132)["class"], "launch");
  v.kernel = {{"occupancy_blocks_per_sm", 2}, {"grid_blocks", 264}};
  EXPECT_EQ(classify_verdict(v, 8, 132)["class"], "memory");
}

TEST(Bottleneck, LaunchRejectionIsLaunchOtherFailuresHaveNoClass) {
  Verdict v;
  v.status = "rejected";
  v.rejected_reason = "launch";
  EXPECT_EQ(classify_verdict(v, 0, 132)["class"], "launch");
  v.rejected_reason = "race";
  EXPECT_TRUE(classify_verdict(v, 0, 132).is_null());
  Verdict incorrect;
  incorrect.valid = true;
  incorrect.status = "incorrect";
  EXPECT_TRUE(classify_verdict(incorrect, 10, 132).is_null());
}

TEST(Bottleneck, ProfileSplitsTheCriticalPath) {
  nlohmann::json analysis = {{"totals", {{"wall_us", 200.0}}},
                             {"critical_path",
                              {{"span_us", 180.0},
                               {"exec_us", 50.0},
                               {"wait_us", 90.0},
                               {"signal_us", 10.0},
                               {"gap_us", 30.0}}}};
  auto c = classify_profile(analysis, nlohmann::json::object(), 20.0, 132, 132);
  EXPECT_EQ(c["class"], "latency-sync");
  EXPECT_EQ(c["source"], "profile");
  analysis["critical_path"]["exec_us"] = 150.0;
  EXPECT_EQ(classify_profile(analysis, nlohmann::json::object(), 20.0, 132, 132)["class"],
            "compute");
  EXPECT_EQ(classify_profile(analysis, nlohmann::json::object(), 150.0, 132, 132)["class"],
            "memory");
  EXPECT_TRUE(classify_profile(nlohmann::json::object(), {}, 1.0, 1, 1).is_null());
}

TEST(Bottleneck, EveryClassPointsToKnobsOfTheKnobTable) {
  for (const std::string& c : bottleneck_classes()) {
    auto axis = suggest_axis(c);
    ASSERT_TRUE(axis) << c;
    EXPECT_FALSE(axis->knobs.empty());
    for (const std::string& knob : axis->knobs) {
      bool known = false;
      for (const auto& spec : schedule::knob_specs()) known = known || spec.path == knob;
      EXPECT_TRUE(known) << c << ": " << knob;
    }
  }
  EXPECT_FALSE(suggest_axis("bandwidth"));
}

TEST(Bottleneck, VerdictRoundTripsItsClassAndOldVerdictsReadAsNone) {
  Verdict v = correct_verdict(100.0, 60.0);
  v.bottleneck = classify_verdict(v, 4, 132);
  EXPECT_EQ(verdict_from_json(to_json(v)).bottleneck, v.bottleneck);
  nlohmann::json old = to_json(v);
  old.erase("bottleneck");
  EXPECT_TRUE(verdict_from_json(old).bottleneck.is_null());
}

}  // namespace
}  // namespace megasched::eval
