// results.tsv rows: made from corpus records, written and read back by column name.
#include "flywheel/results.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "schedule/config.h"

namespace megasched::flywheel {
namespace {

CorpusRecord sample_record() {
  CorpusRecord r;
  r.trial = 3;
  r.timestamp = "2026-11-22T02:31:07Z";
  r.run_id = "r1";
  r.strategy = "hillclimb";
  r.status = kStatusKept;
  r.description = "hillclimb: kernel.unroll 2->4\twith a tab";
  r.schedule_id = "abc";
  r.parent_id = "def";
  schedule::ScheduleConfig c;
  c.kernel.unroll = 4;
  r.config = schedule::to_json(c);
  r.changed_knobs = {"kernel.unroll"};
  r.complexity = 1;
  r.verdict.valid = true;
  r.verdict.correct = true;
  r.verdict.latency_us = 80.0;
  r.verdict.latency_kind = "predicted";
  r.verdict.floor_us = 20.0;
  r.default_us = 100.0;
  r.best_us = 80.0;
  r.model = "toy";
  r.target = "h100";
  r.device = "cpu";
  return r;
}

TEST(Results, HeaderNamesEveryDocumentedColumn) {
  const auto& columns = results_columns();
  for (const char* name :
       {"trial", "timestamp", "run_id", "model", "target", "device", "status", "correct",
        "latency_us", "latency_kind", "floor_us", "pct_of_floor", "speedup_vs_default",
        "schedule_id", "parent_id", "strategy", "changed_knobs", "description"})
    EXPECT_NE(std::find(columns.begin(), columns.end(), name), columns.end()) << name;
  EXPECT_EQ(results_header().find("trial\ttimestamp\t"), 0u);
}

TEST(Results, RowFromRecordDerivesFloorPercentAndSpeedup) {
  ResultRow row = row_from_record(sample_record());
  EXPECT_DOUBLE_EQ(*row.pct_of_floor, 25.0);
  EXPECT_DOUBLE_EQ(*row.speedup_vs_default, 1.25);
  EXPECT_EQ(row.changed_knobs, "kernel.unroll=4");
  EXPECT_TRUE(row.correct);
}

TEST(Results, IncorrectRecordHasNoLatencyInItsRow) {
  CorpusRecord r = sample_record();
  r.verdict.correct = false;
  r.status = kStatusIncorrect;
  ResultRow row = row_from_record(r);
  EXPECT_FALSE(row.latency_us.has_value());
  EXPECT_FALSE(row.pct_of_floor.has_value());
  EXPECT_EQ(row.latency_kind, "");
}

TEST(Results, RowsRoundTripThroughTheFileWithTabsCleaned) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ms_results_" + std::to_string(::getpid()) + ".tsv"))
                               .string();
  std::filesystem::remove(path);
  ResultRow row = row_from_record(sample_record());
  ASSERT_TRUE(append_result(path, row, nullptr));
  ASSERT_TRUE(append_result(path, row, nullptr));
  ResultsRead read = read_results(path);
  std::filesystem::remove(path);
  ASSERT_EQ(read.rows.size(), 2u);
  EXPECT_TRUE(read.problems.empty());
  const ResultRow& back = read.rows[1];
  EXPECT_EQ(back.trial, 3);
  EXPECT_EQ(back.status, "kept");
  EXPECT_DOUBLE_EQ(*back.latency_us, 80.0);
  EXPECT_EQ(back.latency_kind, "predicted");
  EXPECT_DOUBLE_EQ(*back.speedup_vs_default, 1.25);
  EXPECT_EQ(back.description, "hillclimb: kernel.unroll 2->4 with a tab");
  EXPECT_EQ(back.parent_id, "def");
  EXPECT_EQ(back.complexity, 1);
}

TEST(Results, ReadsByHeaderNameAndReportsMalformedLines) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ms_results_cols_" + std::to_string(::getpid()) + ".tsv"))
                               .string();
  std::ofstream(path) << "status\tschedule_id\ttrial\textra\n"
                         "kept\tabc\t0\tx\n"
                         "discarded\tdef\n"
                         "rejected\tghi\t2\ty\n";
  ResultsRead read = read_results(path);
  std::filesystem::remove(path);
  ASSERT_EQ(read.rows.size(), 2u);
  EXPECT_EQ(read.rows[1].schedule_id, "ghi");
  EXPECT_EQ(read.rows[1].trial, 2);
  ASSERT_EQ(read.problems.size(), 1u);
  EXPECT_NE(read.problems[0].find(":3: torn or malformed"), std::string::npos) << read.problems[0];
}

}  // namespace
}  // namespace megasched::flywheel
