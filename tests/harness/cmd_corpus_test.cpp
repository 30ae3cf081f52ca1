// `megasched corpus import|show|archive` (harness/cmd_corpus.cpp) end to end.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "flywheel/gzip_lines.h"
#include "flywheel/shared_corpus.h"
#include "schedule/config.h"
#include "tests/harness/run_cli.h"

namespace megasched::flywheel {
namespace {

namespace fs = std::filesystem;

CorpusRecord record(const std::string& id, int trial, const std::string& device) {
  CorpusRecord r;
  r.trial = trial;
  r.run_id = "r-old";
  r.timestamp = "2026-11-22T05:07:50Z";
  r.schedule_id = id;
  r.strategy = "hillclimb";
  r.status = kStatusDiscarded;
  r.config = schedule::to_json(schedule::ScheduleConfig{});
  r.verdict.correct = r.verdict.valid = true;
  r.verdict.device = device;
  r.verdict.latency_us = 100.0;
  r.model = "llama-1b";
  r.target = "NVIDIA H200";
  r.device = device;
  r.versions = {{"abi", 1}, {"ir", 1}, {"build", "kernel-sources-0000000000000000"}};
  return r;
}

class CorpusCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ms_corpus_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CorpusCli, ImportKeepsGpuRowsWithTheirBuildOnceAndShowCountsThemStale) {
  const std::string old_corpus = (dir_ / "old.corpus.jsonl").string();
  for (const CorpusRecord& r :
       {record("a", 0, "gpu"), record("b", 1, "gpu"), record("c", 2, "cpu")})
    ASSERT_TRUE(append_corpus(old_corpus, r, nullptr));
  const std::string shared = (dir_ / "flywheel").string();
  auto r = test::run_megasched("corpus import " + old_corpus + " --flywheel " + shared, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["imports"][0]["imported"], 2);
  EXPECT_EQ(doc["imports"][0]["cpu_left_out"], 1);
  r = test::run_megasched("corpus import " + old_corpus + " --flywheel " + shared, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["imports"][0]["imported"], 0);
  EXPECT_EQ(doc["imports"][0]["already_held"], 2);

  r = test::run_megasched("corpus show --flywheel " + shared, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  doc = nlohmann::json::parse(r.out);
  const auto& h200 = doc["files"]["h200.corpus.jsonl"];
  EXPECT_EQ(h200["rows"], 2);
  EXPECT_EQ(h200["stale_rows"], 2);  // another kernel build: kept, but stale
  EXPECT_EQ(h200["current_build_rows"], 0);
  EXPECT_EQ(h200["by_source"]["loop"], 2);

  // The prior's evaluation reads the shared corpus by default and says what it left out.
  r = test::run_megasched("prior --eval --flywheel " + shared, false);
  EXPECT_EQ(r.exit_code, 1) << r.out;  // nothing of the current build to evaluate
  doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["corpus"]["stale_rows"], 2);
  EXPECT_EQ(doc["corpus"]["stale"], "excluded");

  r = test::run_megasched(
      "corpus import " + (dir_ / "absent.jsonl").string() + " --flywheel " + shared, true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("no corpus at"), std::string::npos) << r.out;
}

// `corpus archive`: --dry-run counts, the move leaves the live file with no stale row and show
// counts the archived ones; a folder that is no folder and the corpus turned off are errors with a
// hint, and nothing moves.
TEST_F(CorpusCli, ArchiveMovesTheStaleRowsAndShowStillCountsThem) {
  if (!zlib_available()) GTEST_SKIP() << "built without zlib";
  const std::string shared = (dir_ / "flywheel").string();
  const std::string live = shared_corpus_path(shared, "h200");
  for (const CorpusRecord& r : {record("a", 0, "gpu"), record("b", 1, "gpu")})
    ASSERT_TRUE(append_corpus(live, r, nullptr));
  auto r = test::run_megasched("corpus archive --dry-run --flywheel " + shared, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["dry_run"], true);
  EXPECT_EQ(doc["files"][0]["stale_moved"], 2);
  EXPECT_FALSE(fs::exists(archive_path(shared, "h200")));

  r = test::run_megasched("corpus archive --target h200 --flywheel " + shared, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["files"][0]["appended_to_archive"], 2);
  EXPECT_EQ(doc["files"][0]["kept"], 0);
  EXPECT_TRUE(fs::exists(archive_path(shared, "h200")));
  EXPECT_EQ(fs::file_size(live), 0u);

  r = test::run_megasched("corpus show --flywheel " + shared, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["files"]["h200.corpus.jsonl"]["stale_rows"], 2);
  EXPECT_EQ(doc["files"]["h200.corpus.jsonl"]["archived_rows"], 2);

  r = test::run_megasched("corpus archive --flywheel none", true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("name its folder"), std::string::npos) << r.out;
  const std::string not_a_folder = (dir_ / "plain").string();
  ASSERT_TRUE(append_lines_locked(not_a_folder, "", {"x"}, nullptr));
  r = test::run_megasched("corpus archive --flywheel " + not_a_folder, true);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("not a folder"), std::string::npos) << r.out;
}

TEST_F(CorpusCli, HelpOfEveryWriterAndReaderNamesTheSharedCorpusFolder) {
  for (const char* verb : {"loop", "bench", "promote", "landscape record", "prior", "corpus import",
                           "corpus show", "corpus archive"}) {
    auto r = test::run_megasched(std::string(verb) + " --help", false);
    EXPECT_EQ(r.exit_code, 0) << verb;
    EXPECT_NE(r.out.find("--flywheel"), std::string::npos) << verb << r.out;
    EXPECT_NE(r.out.find("MEGASCHED_FLYWHEEL_DIR"), std::string::npos) << verb << r.out;
  }
  for (const char* verb : {"loop", "prior"})
    EXPECT_NE(test::run_megasched(std::string(verb) + " --help", false).out.find("--corpus-stale"),
              std::string::npos)
        << verb;
}

}  // namespace
}  // namespace megasched::flywheel
