// The shared corpus (flywheel/shared_corpus.h): per-target files, GPU rows only, the stale notion,
// dedupe, the training rows a prior-guided loop gets, and two writers at once.
#include "flywheel/shared_corpus.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "flywheel/gzip_lines.h"
#include "schedule/config.h"

namespace megasched::flywheel {

// Every test of this binary runs with the shared corpus off unless it names its own folder: the
// trials of a GPU test on a GPU machine are no measurements to keep in the repository.
[[maybe_unused]] const bool kSharedCorpusOffInTests = [] {
  ::setenv(kFlywheelDirEnv, kFlywheelOff, 1);
  return true;
}();

namespace {

constexpr const char* kBuild = "kernel-sources-current";

CorpusRecord gpu_record(const std::string& id, int trial, const std::string& build = kBuild) {
  CorpusRecord r;
  r.trial = trial;
  r.run_id = "r1";
  r.timestamp = "2026-11-27T10:00:0" + std::to_string(trial % 10) + "Z";
  r.schedule_id = id;
  r.status = kStatusDiscarded;
  r.config = schedule::to_json(schedule::ScheduleConfig{});
  r.verdict.correct = true;
  r.verdict.valid = true;
  r.verdict.device = "gpu";
  r.verdict.latency_kind = "measured-gpu";
  r.verdict.latency_us = 100.0 + trial;
  r.model = "llama-1b";
  r.target = "NVIDIA H100 80GB HBM3";
  r.device = "gpu";
  r.versions = {{"abi", 1}, {"ir", 1}, {"build", build}};
  return r;
}

class SharedCorpus : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("ms_shared_corpus_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  SharedCorpusFilter filter(const std::string& target = "h100") const {
    SharedCorpusFilter f;
    f.target = target;
    f.build = kBuild;
    return f;
  }
  void append(const CorpusRecord& r, const std::string& source = kSourceLoop) {
    bool appended = false;
    std::string error;
    ASSERT_TRUE(append_shared(dir_, r, source, &appended, &error)) << error;
    ASSERT_TRUE(appended);
  }
  std::string dir_;
};

TEST_F(SharedCorpus, TheFolderComesFromTheEnvironmentAndNoneTurnsItOff) {
  const std::string saved = std::getenv(kFlywheelDirEnv) ? std::getenv(kFlywheelDirEnv) : "";
  ::unsetenv(kFlywheelDirEnv);
  EXPECT_EQ(default_flywheel_dir(), "flywheel/data");
  ::setenv(kFlywheelDirEnv, "/tmp/elsewhere", 1);
  EXPECT_EQ(default_flywheel_dir(), "/tmp/elsewhere");
  ::setenv(kFlywheelDirEnv, saved.c_str(), 1);
  EXPECT_TRUE(flywheel_enabled("flywheel/data"));
  EXPECT_FALSE(flywheel_enabled("none"));
  EXPECT_FALSE(flywheel_enabled(""));
}

TEST_F(SharedCorpus, OneFilePerTargetNamedByTheRegistryKey) {
  EXPECT_EQ(target_file_key("NVIDIA H200"), "h200");
  EXPECT_EQ(target_file_key("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(target_file_key("h100"), "h100");
  EXPECT_EQ(target_file_key("Some GPU (x)"), "some-gpu-x");
  EXPECT_EQ(target_file_key(""), "unknown");
  EXPECT_EQ(shared_corpus_path("d", "NVIDIA H200"), "d/h200.corpus.jsonl");
}

TEST_F(SharedCorpus, GpuRowsAreAppendedWithTheirSourceAndReadBackByTarget) {
  append(gpu_record("a", 0), kSourceBench);
  CorpusRecord h200 = gpu_record("b", 1);
  h200.target = "NVIDIA H200";
  append(h200, kSourcePromote);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/h100.corpus.jsonl"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/h200.corpus.jsonl"));
  SharedCorpusRead h100 = read_shared(dir_, filter("h100"));
  ASSERT_EQ(h100.records.size(), 1u);
  EXPECT_EQ(h100.records[0].schedule_id, "a");
  EXPECT_EQ(h100.records[0].source, "bench");
  SharedCorpusRead all = read_shared(dir_, filter(""));
  ASSERT_EQ(all.records.size(), 2u);
  EXPECT_EQ(all.files.size(), 2u);
  EXPECT_EQ(all.records[1].source, "promote");
}

// A shared row keeps the config, the latency with its samples and the kernel's resources, and
// leaves the per-position check entries (but failing ones) and the baselines' details to the run's
// own corpus.
TEST_F(SharedCorpus, RowsAreAppendedWithoutThePerPositionDetail) {
  CorpusRecord r = gpu_record("a", 0);
  r.verdict.samples_us = {100.0, 101.0, 99.5};
  r.verdict.checks = nlohmann::json::array();
  for (int p = 0; p < 40; ++p)
    r.verdict.checks.push_back({{"position", p}, {"rel_err", 1e-3}, {"pass", true}});
  r.verdict.checks.push_back({{"position", 40}, {"rel_err", 0.5}, {"pass", false}});
  r.verdict.kernel = {{"registers", 128},
                      {"spill_store_bytes", 0},
                      {"checks", nlohmann::json::array({{{"position", 0}}})},
                      {"baseline", {{"median_us", 4000.0}}},
                      {"baselines", {{"cublas", {{"median_us", 4000.0}}}}}};
  append(r);
  const SharedCorpusRead read = read_shared(dir_, filter());
  ASSERT_EQ(read.records.size(), 1u);
  const CorpusRecord& back = read.records[0];
  EXPECT_EQ(back.config, r.config);
  ASSERT_TRUE(back.verdict.latency_us);
  EXPECT_EQ(*back.verdict.latency_us, 100.0);
  EXPECT_EQ(back.verdict.samples_us, r.verdict.samples_us);
  ASSERT_EQ(back.verdict.checks.size(), 1u);  // the failing entry
  EXPECT_EQ(back.verdict.checks[0]["position"], 40);
  EXPECT_EQ(back.verdict.kernel["registers"], 128);
  EXPECT_FALSE(back.verdict.kernel.contains("checks"));
  EXPECT_FALSE(back.verdict.kernel.contains("baseline"));
  EXPECT_FALSE(back.verdict.kernel.contains("baselines"));
}

TEST_F(SharedCorpus, CpuTrialsAreNeverAppended) {
  CorpusRecord cpu = gpu_record("a", 0);
  cpu.device = "cpu";
  cpu.verdict.device = "cpu";
  bool appended = true;
  std::string error;
  ASSERT_TRUE(append_shared(dir_, cpu, kSourceLoop, &appended, &error));
  EXPECT_FALSE(appended);
  EXPECT_FALSE(std::filesystem::exists(dir_));
  ASSERT_TRUE(append_shared("none", gpu_record("a", 0), kSourceLoop, &appended, &error));
  EXPECT_FALSE(appended);
  EXPECT_FALSE(std::filesystem::exists("none"));
}

TEST_F(SharedCorpus, RowsOfAnotherBuildAreStaleAndLeftOutUnlessAsked) {
  append(gpu_record("a", 0));
  append(gpu_record("b", 1, "kernel-sources-old"));
  CorpusRecord no_build = gpu_record("c", 2);
  no_build.versions.erase("build");
  append(no_build);
  EXPECT_TRUE(is_stale(no_build, kBuild));
  SharedCorpusRead current = read_shared(dir_, filter());
  ASSERT_EQ(current.records.size(), 1u);
  EXPECT_EQ(current.records[0].schedule_id, "a");
  EXPECT_EQ(current.stale, 2);
  SharedCorpusFilter all = filter();
  all.include_stale = true;
  EXPECT_EQ(read_shared(dir_, all).records.size(), 3u);
}

TEST_F(SharedCorpus, DedupeKeepsTheNewestRowPerScheduleBuildAndTimedPosition) {
  append(gpu_record("a", 5));  // newer, written first
  append(gpu_record("a", 1));
  CorpusRecord at_4096 = gpu_record("a", 2);
  at_4096.verdict.timed_position = 4096;
  append(at_4096);
  append(gpu_record("a", 3, "kernel-sources-old"));
  SharedCorpusFilter f = filter();
  f.include_stale = true;
  SharedCorpusRead read = read_shared(dir_, f);
  ASSERT_EQ(read.records.size(), 3u);
  EXPECT_EQ(read.duplicates, 1);
  EXPECT_DOUBLE_EQ(*read.records[0].verdict.latency_us, 105.0);
  EXPECT_EQ(timed_key(read.records[1]), "p4096");
  f.dedupe = false;
  EXPECT_EQ(read_shared(dir_, f).records.size(), 4u);
}

TEST_F(SharedCorpus, TrainingTakesSharedRowsOfTheSameTargetModelAndTimingOnce) {
  std::vector<CorpusRecord> own = {gpu_record("own", 0)};
  own[0].run_id = "mine";
  CorpusRecord copy = own[0];  // the loop's own trial, also in the shared corpus
  CorpusRecord other_model = gpu_record("m", 1);
  other_model.model = "small";
  CorpusRecord other_target = gpu_record("t", 2);
  other_target.target = "h200";
  CorpusRecord other_position = gpu_record("p", 3);
  other_position.verdict.timed_position = 1024;
  CorpusRecord good = gpu_record("g", 4);
  good.target = "h100";  // the registry name and the live name are one target
  TrainingRequest request;
  request.target = "NVIDIA H100 80GB HBM3";
  request.model = "llama-1b";
  request.device = "gpu";
  int used = -1;
  const auto training = training_records(
      own, {copy, other_model, other_target, other_position, good}, request, &used);
  ASSERT_EQ(training.size(), 2u);
  EXPECT_EQ(training[0].schedule_id, "own");
  EXPECT_EQ(training[1].schedule_id, "g");
  EXPECT_EQ(used, 1);
  request.device = "cpu";  // a CPU loop's latencies are predicted: no measured rows join them
  own[0].device = "cpu";
  EXPECT_EQ(training_records(own, {good}, request, &used).size(), 1u);
  EXPECT_EQ(used, 0);
}

TEST_F(SharedCorpus, TwoWritersAtOnceLoseNoLine) {
  constexpr int kPerThread = 200;
  auto writer = [this](const std::string& prefix) {
    for (int i = 0; i < kPerThread; ++i) {
      bool appended = false;
      std::string error;
      EXPECT_TRUE(append_shared(dir_, gpu_record(prefix + std::to_string(i), i), kSourceLoop,
                                &appended, &error))
          << error;
    }
  };
  std::thread a(writer, "a"), b(writer, "b");
  a.join();
  b.join();
  SharedCorpusRead read = read_shared(dir_, filter());
  EXPECT_TRUE(read.problems.empty());
  EXPECT_EQ(read.records.size(), 2u * kPerThread);
}

// The archive (corpus archive): stale rows leave the live file for archive/<file>.gz, the current
// build's stay; readers asking for stale rows get both, others only the live file's; a second move
// and a second import of the same rows add nothing.
TEST_F(SharedCorpus, ArchivingMovesStaleRowsOutAndStaleReadersStillSeeThem) {
  if (!zlib_available()) GTEST_SKIP() << "built without zlib";
  append(gpu_record("a", 0));
  append(gpu_record("b", 1, "kernel-sources-old"));
  append(gpu_record("c", 2, "kernel-sources-older"));
  const std::string live = shared_corpus_path(dir_, "h100");
  const std::string before = read_lines_shared(live).lines.at(1);

  ArchiveResult dry = archive_rows(dir_, "", kBuild, ArchiveScope::kStale, /*dry_run=*/true);
  ASSERT_TRUE(dry.error.empty()) << dry.error;
  ASSERT_EQ(dry.files.size(), 1u);
  EXPECT_EQ(dry.files[0].moved, 2);
  EXPECT_EQ(read_lines_shared(live).lines.size(), 3u) << "a dry run changes nothing";
  EXPECT_FALSE(std::filesystem::exists(archive_path(dir_, "h100")));

  ArchiveResult moved = archive_rows(dir_, "h100", kBuild, ArchiveScope::kStale, false);
  ASSERT_TRUE(moved.error.empty()) << moved.error;
  ASSERT_EQ(moved.files.size(), 1u);
  EXPECT_EQ(moved.files[0].kept, 1);
  EXPECT_EQ(moved.files[0].moved, 2);
  EXPECT_EQ(moved.files[0].written, 2);
  EXPECT_EQ(moved.files[0].archive, archive_path(dir_, "NVIDIA H100 80GB HBM3"));
  EXPECT_EQ(read_lines_shared(live).lines.size(), 1u);
  const LinesRead archived = read_gz_lines(archive_path(dir_, "h100"));
  ASSERT_TRUE(archived.error.empty()) << archived.error;
  ASSERT_EQ(archived.lines.size(), 2u);
  EXPECT_EQ(archived.lines[0], before) << "rows move byte for byte";

  SharedCorpusRead current = read_shared(dir_, filter());
  EXPECT_EQ(current.records.size(), 1u);
  EXPECT_EQ(current.stale, 0);
  EXPECT_EQ(current.archives.size(), 1u);
  EXPECT_EQ(current.stale_unread, 2) << "archived rows of other builds are skipped unparsed";
  SharedCorpusFilter all = filter();
  all.include_stale = true;
  SharedCorpusRead every = read_shared(dir_, all);
  EXPECT_EQ(every.records.size(), 3u);
  EXPECT_EQ(every.stale, 2);
  EXPECT_EQ(every.archives.size(), 1u);

  ArchiveResult again = archive_rows(dir_, "", kBuild, ArchiveScope::kStale, false);
  ASSERT_TRUE(again.error.empty()) << again.error;
  EXPECT_EQ(again.files.at(0).moved, 0);
  EXPECT_EQ(read_gz_lines(archive_path(dir_, "h100")).lines.size(), 2u);

  // Importing a corpus that holds the archived rows appends none of them again.
  const std::string file = dir_ + "/run_corpus.jsonl";
  std::string error;
  ASSERT_TRUE(append_lines_locked(file, "", archived.lines, &error)) << error;
  const ImportResult imported = import_corpus(dir_, file);
  ASSERT_TRUE(imported.error.empty()) << imported.error;
  EXPECT_EQ(imported.imported, 0);
  EXPECT_EQ(imported.already, 2);
}

// corpus archive --all: every record leaves the live file, the current build's too, and readers
// read them from the archive as they read the live file (stale ones only when asked); rows
// appended later join them, and the next move adds only those.
TEST_F(SharedCorpus, ArchivingEveryRowKeepsTheCurrentBuildsRowsReadable) {
  if (!zlib_available()) GTEST_SKIP() << "built without zlib";
  append(gpu_record("a", 0));
  append(gpu_record("b", 1, "kernel-sources-old"));
  CorpusRecord other_model = gpu_record("c", 2);
  other_model.model = "small";
  append(other_model);
  const std::string live = shared_corpus_path(dir_, "h100");
  ArchiveResult moved = archive_rows(dir_, "", kBuild, ArchiveScope::kEveryRecord, false);
  ASSERT_TRUE(moved.error.empty()) << moved.error;
  ASSERT_EQ(moved.files.size(), 1u);
  EXPECT_EQ(moved.files[0].kept, 0);
  EXPECT_EQ(moved.files[0].moved, 3);
  EXPECT_EQ(moved.files[0].stale, 1);
  EXPECT_EQ(moved.files[0].written, 3);
  EXPECT_TRUE(read_lines_shared(live).lines.empty());

  append(gpu_record("d", 3));
  SharedCorpusFilter llama = filter();
  llama.model = "llama-1b";
  SharedCorpusRead current = read_shared(dir_, llama);
  ASSERT_EQ(current.records.size(), 2u) << "a and d, the current build's llama-1b rows";
  EXPECT_EQ(current.records[0].schedule_id, "a") << "the archive first, then the live file";
  EXPECT_EQ(current.records[1].schedule_id, "d");
  EXPECT_EQ(current.archived, 1);
  EXPECT_EQ(current.stale_unread, 1);
  SharedCorpusFilter all = filter();
  all.include_stale = true;
  EXPECT_EQ(read_shared(dir_, all).records.size(), 4u);

  ArchiveResult again = archive_rows(dir_, "", kBuild, ArchiveScope::kEveryRecord, false);
  ASSERT_TRUE(again.error.empty()) << again.error;
  EXPECT_EQ(again.files.at(0).moved, 1);
  EXPECT_EQ(again.files.at(0).written, 1);
  EXPECT_EQ(read_gz_lines(archive_path(dir_, "h100")).lines.size(), 4u);
  EXPECT_EQ(read_shared(dir_, llama).records.size(), 2u) << "nothing lost, nothing doubled";
  // The live file gone (say, deleted by hand), its archive is still read, by target or not.
  std::filesystem::remove(live);
  EXPECT_EQ(read_shared(dir_, llama).records.size(), 2u);
  llama.target = "";
  EXPECT_EQ(read_shared(dir_, llama).records.size(), 2u);
}

// A kill after the archive's append and before the live file's rewrite leaves the rows in both;
// the next move finds them in the archive and does not append them twice.
TEST_F(SharedCorpus, AMoveCutShortIsFinishedWithoutWritingARowTwice) {
  if (!zlib_available()) GTEST_SKIP() << "built without zlib";
  append(gpu_record("a", 0));
  append(gpu_record("b", 1, "kernel-sources-old"));
  const std::string live = shared_corpus_path(dir_, "h100");
  const std::vector<std::string> lines = read_lines_shared(live).lines;
  std::string error;
  ASSERT_TRUE(append_gz_lines(archive_path(dir_, "h100"), {lines[1]}, &error)) << error;
  ArchiveResult moved = archive_rows(dir_, "", kBuild, ArchiveScope::kStale, false);
  ASSERT_TRUE(moved.error.empty()) << moved.error;
  EXPECT_EQ(moved.files.at(0).moved, 1);
  EXPECT_EQ(moved.files.at(0).written, 0);
  EXPECT_EQ(read_gz_lines(archive_path(dir_, "h100")).lines, std::vector<std::string>{lines[1]});
  EXPECT_EQ(read_lines_shared(live).lines, std::vector<std::string>{lines[0]});
}

// Writers append while the archive rewrites the live file under them: every row ends up exactly
// once, live (the current build's) or archived (the stale ones). An appender that waited for the
// lock on the file the rewrite replaced opens the new one (LockedFd).
TEST_F(SharedCorpus, ArchivingWhileTwoWritersAppendLosesNoRow) {
  if (!zlib_available()) GTEST_SKIP() << "built without zlib";
  constexpr int kPerThread = 150;
  auto writer = [this](const std::string& prefix, const std::string& build) {
    for (int i = 0; i < kPerThread; ++i) {
      bool appended = false;
      std::string error;
      EXPECT_TRUE(append_shared(dir_, gpu_record(prefix + std::to_string(i), i, build), kSourceLoop,
                                &appended, &error))
          << error;
    }
  };
  append(gpu_record("first", 0));
  std::atomic<bool> done{false};
  int moves = 0;
  std::thread archiver([&] {
    while (!done.load()) {
      const ArchiveResult r = archive_rows(dir_, "", kBuild, ArchiveScope::kStale, false);
      EXPECT_TRUE(r.error.empty()) << r.error;
      ++moves;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::thread a(writer, "a", kBuild), b(writer, "b", "kernel-sources-old");
  a.join();
  b.join();
  done = true;
  archiver.join();
  ASSERT_TRUE(archive_rows(dir_, "", kBuild, ArchiveScope::kStale, false).error.empty());
  EXPECT_GT(moves, 0);
  SharedCorpusRead live = read_shared(dir_, filter());
  EXPECT_TRUE(live.problems.empty());
  EXPECT_EQ(live.records.size(), kPerThread + 1u);
  EXPECT_EQ(live.stale, 0);
  EXPECT_EQ(read_gz_lines(archive_path(dir_, "h100")).lines.size(), size_t(kPerThread));
}

// The gzip files: several members read as one stream; damaged or foreign data is an error, not
// rows.
TEST(GzipLines, MembersReadAsOneAndDamageIsAnError) {
  if (!zlib_available()) GTEST_SKIP() << "built without zlib";
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("ms_gzip_lines_" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  const std::string path = dir + "/sub/lines.gz";
  std::string error;
  EXPECT_FALSE(read_gz_lines(path).exists);
  ASSERT_TRUE(append_gz_lines(path, {"one", "two"}, &error)) << error;
  ASSERT_TRUE(append_gz_lines(path, {"three"}, &error)) << error;
  const LinesRead read = read_gz_lines(path);
  ASSERT_TRUE(read.error.empty()) << read.error;
  EXPECT_EQ(read.lines, (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_EQ(read.line_numbers, (std::vector<int>{1, 2, 3}));

  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 6);
  EXPECT_FALSE(read_gz_lines(path).error.empty()) << "a file cut short";
  const std::string plain = dir + "/plain.gz";
  ASSERT_TRUE(append_lines_locked(plain, "", {"not gzip"}, &error)) << error;
  const LinesRead foreign = read_gz_lines(plain);
  EXPECT_FALSE(foreign.error.empty()) << "no rows from foreign bytes";
  EXPECT_TRUE(foreign.lines.empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace megasched::flywheel
