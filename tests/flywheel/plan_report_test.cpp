// The report's plan section (flywheel/plan_report.h) on synthetic corpus records: latency per
// bucket config and position (medians), the fastest config per position, the boundary table's
// savings and its misplaced-boundary warning, the plot's boundary lines and per-config paths, and
// clear messages without a plan or without records of the plan's configs.
#include "flywheel/plan_report.h"

#include <gtest/gtest.h>

#include "flywheel/lessons.h"
#include "flywheel/report_render.h"
#include "schedule/config.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;

schedule::ScheduleConfig config_with_unroll(int unroll) {
  schedule::ScheduleConfig c;
  c.kernel.unroll = unroll;
  return c;
}

CorpusRecord timed(int unroll, int position, std::optional<double> us) {
  CorpusRecord r;
  r.run_id = "r1";
  r.schedule_id = "u" + std::to_string(unroll) + "@" + std::to_string(position);
  r.model = "toy";
  r.target = "h100";
  r.device = "cpu";
  r.model_shape = {{"max_seq", 128}};
  r.config = schedule::to_json(config_with_unroll(unroll));
  r.verdict.valid = true;
  r.verdict.correct = us.has_value();
  r.verdict.latency_us = us;
  r.verdict.latency_kind = "predicted";
  r.verdict.timed_position = position;
  r.status = us ? kStatusKept : kStatusIncorrect;
  return r;
}

schedule::Plan plan_of(const std::vector<std::pair<int, int>>& begin_unroll) {
  schedule::Plan plan;
  for (size_t i = 0; i < begin_unroll.size(); ++i)
    plan.buckets.push_back(
        {begin_unroll[i].first,
         i + 1 < begin_unroll.size() ? begin_unroll[i + 1].first : schedule::kPlanEndOfModel,
         config_with_unroll(begin_unroll[i].second)});
  return plan;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Bucket 0 [0, 64): unroll 2 (A); bucket 1 [64, max): unroll 4 (B); unroll 8 (C) is no bucket's.
// A: 15 -> 100 and 104 (median 102), 47 -> 102, 70 -> 110, 95 -> 120.
// B: 47 -> 105, 70 -> 108 (switching at 64 saves 1.82%), 95 -> 125 (slower inside its bucket).
// C: 15 -> 90 (the fastest there). An incorrect trial and an objective trial do not count.
std::vector<CorpusRecord> records() {
  std::vector<CorpusRecord> r = {
      timed(2, 15, 100.0), timed(2, 15, 104.0),        timed(2, 47, 102.0), timed(2, 70, 110.0),
      timed(2, 95, 120.0), timed(4, 47, 105.0),        timed(4, 70, 108.0), timed(4, 95, 125.0),
      timed(8, 15, 90.0),  timed(4, 15, std::nullopt), timed(4, 15, 1.0)};
  r.back().verdict.objective = json::array({{{"position", 15}}});
  return r;
}

class PlanReport : public ::testing::Test {
 protected:
  void SetUp() override {
    doc_ = build_plan_report(plan_of({{0, 2}, {64, 4}}), "p.json", records());
  }
  json doc_;
};

TEST_F(PlanReport, LatencyPerBucketConfigAndPositionWithMedians) {
  ASSERT_EQ(doc_["groups"].size(), 1u) << doc_.dump(1);
  const json& g = doc_["groups"][0];
  EXPECT_EQ(g["latency_kind"], "predicted");
  ASSERT_EQ(g["series"].size(), 2u);
  const json& a = g["series"][0]["points"];
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0]["position"], 15);
  EXPECT_DOUBLE_EQ(a[0]["latency_us"].get<double>(), 102.0);
  EXPECT_EQ(a[0]["n"], 2);
  EXPECT_TRUE(a[1]["inside"].get<bool>());
  EXPECT_FALSE(a[2]["inside"].get<bool>());
  const json& b = g["series"][1]["points"];
  ASSERT_EQ(b.size(), 3u) << "the incorrect and the objective trial of B at 15 do not count";
  EXPECT_FALSE(b[0]["inside"].get<bool>());
  EXPECT_TRUE(b[1]["inside"].get<bool>());
}

TEST_F(PlanReport, FastestPerPositionAndThePlansOwnConfig) {
  const json& best = doc_["groups"][0]["best_per_position"];
  ASSERT_EQ(best.size(), 4u);
  EXPECT_DOUBLE_EQ(best[0]["latency_us"].get<double>(), 90.0);
  EXPECT_TRUE(best[0]["bucket"].is_null());
  EXPECT_EQ(best[0]["schedule_id"], "u8@15");
  EXPECT_DOUBLE_EQ(best[0]["plan_us"].get<double>(), 102.0);
  EXPECT_NEAR(best[0]["plan_gap_pct"].get<double>(), 100.0 * 12 / 90, 1e-9);
  EXPECT_EQ(best[2]["bucket"], 1);  // 70: B
  EXPECT_EQ(best[3]["bucket"], 0);  // 95: A, though the plan runs B there
  EXPECT_EQ(best[3]["plan_bucket"], 1);
  EXPECT_DOUBLE_EQ(best[3]["plan_us"].get<double>(), 125.0);
}

TEST_F(PlanReport, BoundaryTableGivesSavingsAndFlagsAMisplacedBoundary) {
  const json& b = doc_["groups"][0]["boundaries"];
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]["position"], 64);
  const json& c = b[0]["comparisons"];
  ASSERT_EQ(c.size(), 3u);  // 47, 70, 95: both configs measured (15: B not)
  EXPECT_EQ(c[0]["in_bucket"], 0);
  EXPECT_NEAR(c[0]["switch_saving_pct"].get<double>(), 100.0 * (102 - 105) / 102.0, 1e-9);
  EXPECT_NEAR(c[1]["switch_saving_pct"].get<double>(), 100.0 * (110 - 108) / 110.0, 1e-9);
  EXPECT_NEAR(c[2]["switch_saving_pct"].get<double>(), 100.0 * (120 - 125) / 120.0, 1e-9);
  ASSERT_EQ(b[0]["warnings"].size(), 1u);
  const std::string warning = b[0]["warnings"][0];
  EXPECT_NE(warning.find("boundary 64 misplaced: at 95"), std::string::npos) << warning;
  EXPECT_NE(warning.find("bucket 1's config 125.00 us vs bucket 0's 120.00 us: switching costs "
                         "4.17%"),
            std::string::npos)
      << warning;
  EXPECT_TRUE(b[0]["notes"].empty());
  const std::string text = plan_report_text(doc_);
  EXPECT_NE(text.find("at 70 (bucket 1): bucket 1's config 108.00 us vs bucket 0's 110.00 us: "
                      "switching saves 1.82%"),
            std::string::npos)
      << text;
}

TEST_F(PlanReport, PlotHasTheBoundaryLinesAndAPathPerConfig) {
  const std::string svg = plan_positions_svg(doc_, doc_["groups"][0]);
  EXPECT_EQ(count(svg, "class=\"boundary\""), 1u);
  EXPECT_EQ(count(svg, "class=\"bucket-config\""), 2u);
  // A: solid 15-47 and dashed 47-95; B: dashed 47-70 and solid 70-95.
  EXPECT_EQ(count(svg, "<path "), 4u);
  EXPECT_EQ(count(svg, "stroke-dasharray"), 2u);
  EXPECT_EQ(count(svg, "class=\"best\""), 4u);
  EXPECT_NE(svg.find("predicted latency (us)"), std::string::npos);
  const std::string html = report_html({{"groups", json::array()}, {"plan", doc_}});
  EXPECT_NE(html.find("Plan over positions"), std::string::npos);
  EXPECT_NE(html.find("class=\"boundary\""), std::string::npos);
  json lessons = build_lessons(records());
  lessons["plan"] = doc_;
  const std::string md = lessons_markdown(lessons, "corpus.jsonl");
  EXPECT_NE(md.find("## Plan over positions"), std::string::npos) << md;
  EXPECT_NE(md.find("| 64 | 70 | 1 | 110.00 | 108.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("**warning**: boundary 64 misplaced"), std::string::npos) << md;
}

TEST(PlanReportBoundaries, ABoundaryWithoutSharedPositionsSaysSoAndAnEarlierWinIsANote) {
  // Three buckets: C from 100 is measured nowhere past 64; B beats A at 47, inside bucket 0.
  std::vector<CorpusRecord> r = {timed(2, 47, 110.0), timed(4, 47, 100.0), timed(4, 70, 100.0),
                                 timed(8, 15, 90.0)};
  const json doc = build_plan_report(plan_of({{0, 2}, {64, 4}, {100, 8}}), "p.json", r);
  ASSERT_EQ(doc["groups"].size(), 1u);
  const json& b = doc["groups"][0]["boundaries"];
  ASSERT_EQ(b.size(), 2u);
  ASSERT_EQ(b[0]["notes"].size(), 1u);
  EXPECT_NE(b[0]["notes"][0].get<std::string>().find(
                "at 47 (inside bucket 0) bucket 1's config 100.00 us vs bucket 0's 110.00 us "
                "already: the boundary could come earlier than 64"),
            std::string::npos)
      << b[0]["notes"][0];
  EXPECT_TRUE(b[1]["comparisons"].empty());
  EXPECT_NE(plan_report_text(doc).find("boundary 100: no position measured with both configs"),
            std::string::npos)
      << plan_report_text(doc);
  EXPECT_EQ(count(plan_positions_svg(doc, doc["groups"][0]), "class=\"boundary\""), 2u);
}

TEST(PlanReportMessages, NoPlanAndNoRecordsOfThePlanAreClearMessages) {
  const json none = no_plan_report("no plan (hint: pass --plan FILE)");
  EXPECT_NE(plan_report_text(none).find("no plan (hint"), std::string::npos);
  EXPECT_NE(plan_report_html(none).find("no plan (hint"), std::string::npos);
  EXPECT_NE(plan_report_markdown(none).find("no plan (hint"), std::string::npos);
  // Only a config that is no bucket's was measured.
  const json doc = build_plan_report(plan_of({{0, 2}, {64, 4}}), "p.json", {timed(8, 15, 90.0)});
  EXPECT_TRUE(doc["groups"].empty());
  ASSERT_TRUE(doc.contains("message"));
  EXPECT_NE(doc["message"].get<std::string>().find("no correct record"), std::string::npos);
  EXPECT_NE(plan_report_text(doc).find("hint"), std::string::npos);
  EXPECT_NE(plan_report_html(doc).find("no correct record"), std::string::npos);
  EXPECT_NE(plan_report_markdown(doc).find("no correct record"), std::string::npos);
  EXPECT_TRUE(build_plan_report(plan_of({{0, 2}}), "p.json", {})["groups"].empty());
}

}  // namespace
}  // namespace megasched::flywheel
