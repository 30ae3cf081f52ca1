// corpus.jsonl records and the schedule-id index built from them.
#include "flywheel/corpus.h"
#include "flywheel/locked_file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "flywheel/dedup.h"
#include "schedule/config.h"

namespace megasched::flywheel {
namespace {

CorpusRecord record(const std::string& id, int trial) {
  CorpusRecord r;
  r.trial = trial;
  r.run_id = "r1";
  r.schedule_id = id;
  r.status = kStatusDiscarded;
  r.config = schedule::to_json(schedule::ScheduleConfig{});
  r.verdict.correct = true;
  r.verdict.valid = true;
  r.verdict.latency_us = 10.0 + trial;
  r.verdict.samples_us = {10.0, 11.0, 12.0};
  r.model = "toy";
  r.target = "h100";
  r.device = "gpu";
  r.model_shape = {{"hidden", 64}};
  r.versions = {{"abi", 1}};
  return r;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()) + ".jsonl"))
      .string();
}

TEST(Corpus, RecordRoundTripsWithSamplesAndVersions) {
  const std::string path = temp_path("ms_corpus_");
  std::filesystem::remove(path);
  ASSERT_TRUE(append_corpus(path, record("a", 0), nullptr));
  ASSERT_TRUE(append_corpus(path, record("b", 1), nullptr));
  CorpusRead read = read_corpus(path);
  std::filesystem::remove(path);
  ASSERT_EQ(read.records.size(), 2u);
  EXPECT_TRUE(read.problems.empty());
  const CorpusRecord& b = read.records[1];
  EXPECT_EQ(b.schedule_id, "b");
  EXPECT_DOUBLE_EQ(*b.verdict.latency_us, 11.0);
  EXPECT_EQ(b.verdict.samples_us.size(), 3u);
  EXPECT_EQ(b.versions["abi"], 1);
  EXPECT_EQ(b.model_shape["hidden"], 64);
  EXPECT_EQ(b.config, schedule::to_json(schedule::ScheduleConfig{}));
}

TEST(Corpus, TornLinesAreSkippedReportedAndQuarantinedByTheNextAppend) {
  const std::string path = temp_path("ms_corpus_torn_");
  std::filesystem::remove(path);
  std::filesystem::remove(quarantine_path(path));
  ASSERT_TRUE(append_corpus(path, record("a", 0), nullptr));
  const std::string torn_b = to_json(record("b", 1)).dump().substr(0, 40);
  { std::ofstream(path, std::ios::app) << torn_b; }  // a kill mid-write
  ASSERT_TRUE(append_corpus(path, record("c", 2), nullptr));
  { std::ofstream(path, std::ios::app) << "{\"record\": \"tri"; }
  CorpusRead read = read_corpus(path);
  std::ifstream quarantine(quarantine_path(path));
  std::string quarantined;
  std::getline(quarantine, quarantined);
  std::filesystem::remove(path);
  std::filesystem::remove(quarantine_path(path));
  ASSERT_EQ(read.records.size(), 2u);
  EXPECT_EQ(read.records[1].schedule_id, "c");
  EXPECT_EQ(quarantined, torn_b);  // kept, out of the log
  ASSERT_EQ(read.problems.size(), 1u);
  EXPECT_NE(read.problems[0].find(":3: truncated last line"), std::string::npos)
      << read.problems[0];
}

TEST(Corpus, ANonRegularFileIsAnErrorNotAnEndlessRead) {
  const CorpusRead zero = read_corpus("/dev/zero");
  EXPECT_TRUE(zero.records.empty());
  EXPECT_NE(zero.error.find("/dev/zero is a device"), std::string::npos) << zero.error;
  std::string error;
  EXPECT_FALSE(append_corpus("/dev/null", record("a", 0), &error));
  EXPECT_NE(error.find("not a log file"), std::string::npos) << error;
}

TEST(ScheduleIndex, KnowsIdsFromTheCorpusAndFromResultsRows) {
  ScheduleIndex index;
  index.add_corpus({record("a", 0)});
  ResultRow row;
  row.schedule_id = "only-in-results";
  index.add_results({row});
  EXPECT_TRUE(index.contains("a"));
  EXPECT_TRUE(index.contains("only-in-results"));
  EXPECT_FALSE(index.contains("b"));
  ASSERT_NE(index.record("a"), nullptr);
  EXPECT_DOUBLE_EQ(*index.record("a")->verdict.latency_us, 10.0);
  EXPECT_EQ(index.record("only-in-results"), nullptr);
  EXPECT_EQ(index.size(), 2u);
}

}  // namespace
}  // namespace megasched::flywheel
