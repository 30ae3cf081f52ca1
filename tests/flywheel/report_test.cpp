// The analyst report on a fixed results file and corpus.
#include "flywheel/report.h"
#include "flywheel/report_render.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "schedule/config.h"

namespace megasched::flywheel {
namespace {

// Five trials of toy/h100/cpu (default 100 us, a keep at 80, a discard at 90, a rejection, a
// keep at 70) and one of small.
const char* kResults =
    "trial\ttimestamp\trun_id\tmodel\ttarget\tdevice\tstrategy\tstatus\tcorrect\tlatency_"
    "us\tlatency_kind\t"
    "spread_us\tfloor_us\tpct_of_floor\tspeedup_vs_default\tbest_us\tschedule_id\tparent_"
    "id\tchanged_knobs\t"
    "complexity\tdescription\n"
    "0\tT\tr1\ttoy\th100\tcpu\tdefault\tkept\t1\t100."
    "000\tpredicted\t0\t10\t10\t1\t100\ts0\t\t\t0\tbaseline\n"
    "1\tT\tr1\ttoy\th100\tcpu\trandom\tkept\t1\t80.000\tpredicted\t0\t10\t12.5\t1."
    "25\t80\ts1\ts0\tkernel.unroll=4\t1\tx\n"
    "2\tT\tr1\ttoy\th100\tcpu\trandom\tdiscarded\t1\t90.000\tpredicted\t0\t10\t11.1\t1."
    "11\t80\ts2\ts1\tkernel.unroll=8\t1\tx\n"
    "3\tT\tr1\ttoy\th100\tcpu\trandom\trejected\t0\t\t\t0\t10\t\t\t80\ts3\ts1\tkernel.unroll="
    "1\t1\tx\n"
    "0\tT\tr2\tsmall\th100\tcpu\tdefault\tkept\t1\t500."
    "000\tpredicted\t0\t50\t10\t1\t500\tt0\t\t\t0\tbaseline\n"
    "4\tT\tr1\ttoy\th100\tcpu\trandom\tkept\t1\t70.000\tpredicted\t0\t10\t14.3\t1."
    "43\t70\ts4\ts1\tkernel.unroll=4,launch.blocks_per_sm=2\t2\tx\n";

CorpusRecord record(const std::string& id, int unroll, int blocks, std::optional<double> us) {
  CorpusRecord r;
  r.run_id = "r1";
  r.schedule_id = id;
  r.model = "toy";
  r.target = "h100";
  r.device = "cpu";
  schedule::ScheduleConfig c;
  c.kernel.unroll = unroll;
  c.launch.blocks_per_sm = blocks;
  r.config = schedule::to_json(c);
  r.verdict.correct = us.has_value();
  r.verdict.valid = true;
  r.verdict.latency_us = us;
  r.verdict.latency_kind = "predicted";
  r.status = us ? kStatusKept : kStatusRejected;
  return r;
}

class Report : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("ms_report_" + std::to_string(::getpid()) + ".tsv"))
                                 .string();
    std::ofstream(path) << kResults;
    rows_ = read_results(path).rows;
    std::filesystem::remove(path);
    records_ = {record("s0", 2, 1, 100.0), record("s1", 4, 1, 80.0), record("s2", 8, 1, 90.0),
                record("s3", 1, 1, std::nullopt), record("s4", 4, 2, 70.0)};
    report_ = build_report(rows_, records_);
  }
  std::vector<ResultRow> rows_;
  std::vector<CorpusRecord> records_;
  nlohmann::json report_;
};

TEST_F(Report, GroupsByModelTargetAndDeviceInOrderOfAppearance) {
  ASSERT_EQ(report_["groups"].size(), 2u);
  EXPECT_EQ(report_["groups"][0]["model"], "toy");
  EXPECT_EQ(report_["groups"][1]["model"], "small");
  EXPECT_EQ(report_["groups"][0]["trials"], 5);
}

TEST_F(Report, CountsStatusesAndKeepRate) {
  const auto& g = report_["groups"][0];
  EXPECT_EQ(g["status_counts"]["kept"], 3);
  EXPECT_EQ(g["status_counts"]["discarded"], 1);
  EXPECT_EQ(g["status_counts"]["rejected"], 1);
  EXPECT_EQ(g["status_counts"]["crash"], 0);
  EXPECT_DOUBLE_EQ(g["keep_rate"].get<double>(), 0.6);
}

TEST_F(Report, BestConfigAndVerdictComeFromTheCorpus) {
  const auto& best = report_["groups"][0]["best"];
  EXPECT_EQ(best["schedule_id"], "s4");
  EXPECT_DOUBLE_EQ(best["latency_us"].get<double>(), 70.0);
  EXPECT_NEAR(best["speedup_vs_default"].get<double>(), 100.0 / 70.0, 1e-12);
  EXPECT_EQ(best["config"]["launch"]["blocks_per_sm"], 2);
  EXPECT_EQ(best["verdict"]["correct"], true);
}

TEST_F(Report, BestIsTheLoopsIncumbentAndAFasterDiscardedTrialIsNamedAsSuch) {
  // The loop kept the simpler s1 (80 us) and discarded s2 (78 us) as a near-tie: once the
  // report called s2 the best without a word.
  const std::string header = std::string(kResults).substr(0, std::string(kResults).find('\n') + 1);
  const std::string rows =
      "0\tT\tr9\ttoy\th100\tcpu\tdefault\tkept\t1\t100.000\tpredicted\t0\t10\t10\t1\t100\ts0\t\t\t0"
      "\tbaseline\n"
      "1\tT\tr9\ttoy\th100\tcpu\trandom\tkept\t1\t80.000\tpredicted\t0\t10\t12.5\t1.25\t80\ts1\ts0"
      "\tkernel.unroll=4\t1\tx\n"
      "2\tT\tr9\ttoy\th100\tcpu\trandom\tdiscarded\t1\t78.000\tpredicted\t0\t10\t12.8\t1.28\t80\ts2"
      "\ts1\tkernel.unroll=4,launch.blocks_per_sm=2\t2\tnear-tie (2.5%, margin 3%): kept the "
      "simpler\n";
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ms_report_tie_" + std::to_string(::getpid()) + ".tsv"))
                               .string();
  std::ofstream(path) << header << rows;
  const std::vector<ResultRow> tie_rows = read_results(path).rows;
  std::filesystem::remove(path);
  ASSERT_EQ(tie_rows.size(), 3u);
  const nlohmann::json report = build_report(tie_rows, records_);
  const auto& best = report["groups"][0]["best"];
  EXPECT_EQ(best["schedule_id"], "s1");
  EXPECT_DOUBLE_EQ(best["latency_us"].get<double>(), 80.0);
  ASSERT_TRUE(best.contains("faster_not_kept")) << best.dump();
  EXPECT_EQ(best["faster_not_kept"]["schedule_id"], "s2");
  EXPECT_EQ(best["faster_not_kept"]["status"], "discarded");
  EXPECT_DOUBLE_EQ(best["faster_not_kept"]["latency_us"].get<double>(), 78.0);
  const std::string text = report_text(report);
  EXPECT_NE(text.find("the loop's incumbent; trial 2 of run r9 was faster, 78.000 us, but "
                      "discarded: near-tie (2.5%, margin 3%)"),
            std::string::npos)
      << text;
  // Where the fastest trial is the incumbent, nothing is added.
  EXPECT_FALSE(report_["groups"][0]["best"].contains("faster_not_kept"));
}

TEST_F(Report, BestSoFarFollowsFileOrder) {
  const auto& series = report_["groups"][0]["best_so_far"];
  ASSERT_EQ(series.size(), 5u);
  const double expected[] = {100, 80, 80, 80, 70};
  for (size_t i = 0; i < 5; ++i)
    EXPECT_DOUBLE_EQ(series[i]["best_us"].get<double>(), expected[i]) << i;
  EXPECT_TRUE(series[3]["latency_us"].is_null());
  EXPECT_EQ(series[3]["status"], "rejected");
}

TEST_F(Report, KnobEffectsGiveMedianLatencyAndCountPerValue) {
  nlohmann::json unroll;
  for (const auto& e : report_["groups"][0]["knob_effects"])
    if (e["knob"] == "kernel.unroll") unroll = e["values"];
  ASSERT_EQ(unroll.size(), 4u);  // values 1, 2, 4, 8 all tried
  for (const auto& v : unroll) {
    if (v["value"] == 4) {
      EXPECT_EQ(v["count"], 2);
      EXPECT_DOUBLE_EQ(v["median_us"].get<double>(), 75.0);
    }
    if (v["value"] == 1) {
      EXPECT_EQ(v["count"], 1);
      EXPECT_EQ(v["with_latency"], 0);
      EXPECT_TRUE(v["median_us"].is_null());
    }
  }
}

TEST_F(Report, TextAndHtmlCarryTheFigures) {
  const std::string text = report_text(report_);
  EXPECT_NE(text.find("== toy on h100 (cpu, predicted)"), std::string::npos) << text;
  EXPECT_NE(text.find("best: 70.000 us"), std::string::npos);
  EXPECT_NE(text.find("keep rate 60.0%"), std::string::npos);
  const std::string html = report_html(report_);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("70.000 us"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained, static
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no external fetches
}

// The keep rule's confirm rounds (the records' keep.confirm): counted by outcome, their timings
// (two a round) summed, the kept trials named in the text and the HTML; no line where no trial was
// settled by rounds.
TEST_F(Report, ConfirmRoundsAreCountedByOutcome) {
  // A record's keep.confirm: which side was faster, `rounds` rounds, whether it was confirmed.
  const auto confirm = [](const char* faster, int rounds, double median, bool confirmed) {
    nlohmann::json r = nlohmann::json::array();
    for (int i = 0; i < rounds; ++i) r.push_back({{"candidate_us", 79.0}, {"incumbent_us", 80.0}});
    return nlohmann::json{{"faster", faster},
                          {"rounds", r},
                          {"gain_shares", {0.01}},
                          {"median_gain_share", median},
                          {"confirmed", confirmed}};
  };
  std::vector<CorpusRecord> records = records_;
  records[1].trial = 1;
  records[1].keep["confirm"] = confirm("candidate", 3, 0.0075, true);
  records[2].trial = 2;
  records[2].keep["confirm"] = confirm("incumbent", 3, 0.006, true);
  records[4].trial = 4;
  records[4].keep["confirm"] = confirm("candidate", 1, 0.002, false);
  const nlohmann::json report = build_report(rows_, records);
  const auto& c = report["groups"][0]["confirm_rounds"];
  EXPECT_EQ(c["settled"], 3);
  EXPECT_EQ(c["kept"], 1);
  EXPECT_EQ(c["trades_refused"], 1);
  EXPECT_EQ(c["not_confirmed"], 1);
  EXPECT_EQ(c["timings"], 14);
  ASSERT_EQ(c["trials"].size(), 3u);
  EXPECT_EQ(c["trials"][0]["trial"], 1);
  EXPECT_EQ(c["trials"][0]["faster"], "candidate");
  const std::string line =
      "confirm rounds: 3 trials settled: 1 kept, 1 trades refused, 1 not confirmed (14 "
      "timings); kept: trial 1 (0.75%)";
  EXPECT_NE(report_text(report).find(line), std::string::npos) << report_text(report);
  EXPECT_NE(report_html(report).find("3 trials settled: 1 kept"), std::string::npos);
  EXPECT_EQ(report_["groups"][0]["confirm_rounds"]["settled"], 0);
  EXPECT_EQ(report_text(report_).find("confirm rounds"), std::string::npos);
}

TEST(ReportMedian, EvenCountAveragesTheMiddleTwo) {
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({5}), 5.0);
}

}  // namespace
}  // namespace megasched::flywheel
