// Appends from several processes, torn lines from a kill mid-write.
#include "flywheel/locked_file.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

namespace megasched::flywheel {
namespace {

class LockedFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("ms_lock_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()) /
             "log.tsv")
                .string();
    std::filesystem::remove_all(std::filesystem::path(path_).parent_path());
  }
  void TearDown() override {
    std::filesystem::remove_all(std::filesystem::path(path_).parent_path());
  }
  std::string path_;
};

TEST_F(LockedFile, TwoProcessesAppendingNeitherLoseNorInterleaveLines) {
  constexpr int kLines = 400;
  // Lines longer than a pipe buffer's atomic size, so only the lock keeps them whole.
  const std::string payload(6000, 'x');
  pid_t children[2];
  for (int p = 0; p < 2; ++p) {
    children[p] = ::fork();
    ASSERT_GE(children[p], 0);
    if (children[p] == 0) {
      for (int i = 0; i < kLines; ++i) {
        std::string line =
            "p" + std::to_string(p) + "\t" + std::to_string(i) + "\t" + payload + "\tend";
        if (!append_lines_locked(path_, "header", {line}, nullptr)) ::_exit(1);
      }
      ::_exit(0);
    }
  }
  for (pid_t child : children) {
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  LinesRead read = read_lines_shared(path_);
  EXPECT_FALSE(read.truncated_tail);
  ASSERT_EQ(read.lines.size(), 1u + 2 * kLines);
  EXPECT_EQ(read.lines[0], "header");
  std::map<std::string, int> next;  // each process's lines arrive whole and in its own order
  for (size_t i = 1; i < read.lines.size(); ++i) {
    const std::string& line = read.lines[i];
    ASSERT_EQ(line.size(),
              2 + 1 + std::to_string(next[line.substr(0, 2)]).size() + 1 + payload.size() + 4)
        << "line " << i << " is torn or interleaved";
    const std::string who = line.substr(0, 2);
    EXPECT_EQ(line.substr(3, line.find('\t', 3) - 3), std::to_string(next[who]));
    EXPECT_EQ(line.substr(line.size() - 4), "\tend");
    ++next[who];
  }
  EXPECT_EQ(next["p0"], kLines);
  EXPECT_EQ(next["p1"], kLines);
}

TEST_F(LockedFile, HeaderIsWrittenOnceWhenTheFileIsNew) {
  ASSERT_TRUE(append_lines_locked(path_, "h", {"a"}, nullptr));
  ASSERT_TRUE(append_lines_locked(path_, "h", {"b", "c"}, nullptr));
  LinesRead read = read_lines_shared(path_);
  EXPECT_EQ(read.lines, (std::vector<std::string>{"h", "a", "b", "c"}));
}

TEST_F(LockedFile, TruncatedLastLineIsReportedAndTheNextAppendQuarantinesIt) {
  ASSERT_TRUE(append_lines_locked(path_, "h", {"complete"}, nullptr));
  { std::ofstream(path_, std::ios::app) << "torn-by-a-ki"; }  // a kill mid-write
  LinesRead torn = read_lines_shared(path_);
  EXPECT_TRUE(torn.truncated_tail);
  EXPECT_EQ(torn.lines, (std::vector<std::string>{"h", "complete"}));
  EXPECT_EQ(torn.torn_line_numbers, (std::vector<int>{3}));

  ASSERT_TRUE(append_lines_locked(path_, "h", {"after"}, nullptr));
  LinesRead read = read_lines_shared(path_);
  EXPECT_FALSE(read.truncated_tail);
  // The fragment never becomes a line of the log, which a later reader would take for data.
  EXPECT_EQ(read.lines, (std::vector<std::string>{"h", "complete", "after"}));
  EXPECT_EQ(read.line_numbers.back(), 3);
  EXPECT_EQ(read_lines_shared(quarantine_path(path_)).lines,
            (std::vector<std::string>{"torn-by-a-ki"}));
}

TEST_F(LockedFile, ATornFirstWriteIsQuarantinedAndTheHeaderWrittenAgain) {
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
  { std::ofstream(path_) << "tri"; }  // killed inside the header
  ASSERT_TRUE(append_lines_locked(path_, "header", {"row"}, nullptr));
  EXPECT_EQ(read_lines_shared(path_).lines, (std::vector<std::string>{"header", "row"}));
  EXPECT_EQ(read_lines_shared(quarantine_path(path_)).lines, (std::vector<std::string>{"tri"}));
}

TEST_F(LockedFile, OnlyRegularFilesAreLogs) {
  std::string error;
  EXPECT_FALSE(append_lines_locked("/dev/null", "h", {"a"}, &error));
  EXPECT_NE(error.find("/dev/null is a device, not a log file"), std::string::npos) << error;
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(append_lines_locked(dir, "h", {"a"}, &error));
  EXPECT_NE(error.find("is a directory"), std::string::npos) << error;
  const LinesRead zero = read_lines_shared("/dev/zero");  // would never end
  EXPECT_TRUE(zero.exists);
  EXPECT_TRUE(zero.lines.empty());
  EXPECT_NE(zero.error.find("/dev/zero is a device"), std::string::npos) << zero.error;
}

TEST_F(LockedFile, AWorkloadLockAdmitsOneHolderPerKeyAndEndsWithIt) {
  WorkloadLock first, same, other;
  std::string error;
  ASSERT_TRUE(first.acquire(path_, "toy / h100 / cpu", &error)) << error;
  EXPECT_FALSE(same.acquire(path_, "toy / h100 / cpu", &error));
  EXPECT_NE(error.find("in use by another megasched loop of toy / h100 / cpu"), std::string::npos)
      << error;
  EXPECT_TRUE(other.acquire(path_, "toy / h100 / gpu", &error)) << error;
  // Appends are not blocked by it, and it holds across processes too.
  EXPECT_TRUE(append_lines_locked(path_, "h", {"a"}, &error)) << error;
  const pid_t child = ::fork();
  if (child == 0) {
    WorkloadLock in_child;
    ::_exit(in_child.acquire(path_, "toy / h100 / cpu", nullptr) ? 1 : 0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child got the held lock";
  {
    WorkloadLock scoped;
    ASSERT_TRUE(scoped.acquire(path_, "small / h200 / cpu", &error)) << error;
  }
  WorkloadLock after;
  EXPECT_TRUE(after.acquire(path_, "small / h200 / cpu", &error)) << error;
}

TEST_F(LockedFile, MissingFileReadsAsAbsentAndEmpty) {
  LinesRead read = read_lines_shared(path_);
  EXPECT_FALSE(read.exists);
  EXPECT_TRUE(read.lines.empty());
}

TEST_F(LockedFile, UnwritablePathIsAnErrorWithThePath) {
  std::string error;
  EXPECT_FALSE(append_lines_locked("/proc/megasched-no/such.tsv", "h", {"a"}, &error));
  EXPECT_NE(error.find("/proc/megasched-no/such.tsv"), std::string::npos) << error;
}

}  // namespace
}  // namespace megasched::flywheel
