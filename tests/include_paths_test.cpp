// Includes name a file from the source root ("schedule/program.h"), so that each layer's include
// root (CMakeLists.txt) decides what a file can see. A relative include ("../eval/x.h") would step
// around that wall unseen: none is allowed, in the code or in the tests.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace {

TEST(IncludePaths, NoFileIncludesThroughAParentDirectory) {
  namespace fs = std::filesystem;
  const fs::path root(MS_SOURCE_DIR);
  const std::regex relative(R"re(^\s*#\s*include\s*[<"]\.\.?/)re");
  int files = 0;
  std::string found;
  for (const char* folder : {"abi", "schedule", "vm", "groundtruth", "eval", "flywheel", "search",
                             "harness", "bench", "tests"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cuh") continue;
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      for (int number = 1; std::getline(in, line); ++number)
        if (std::regex_search(line, relative))
          found += "  " + fs::relative(entry.path(), root).string() + ":" + std::to_string(number) +
                   ": " + line + "\n";
    }
  }
  EXPECT_GT(files, 100);
  EXPECT_TRUE(found.empty()) << "relative includes (name the file from the source root):\n"
                             << found;
}

TEST(IncludePaths, TheScanCatchesARelativeInclude) {
  const std::regex relative(R"re(^\s*#\s*include\s*[<"]\.\.?/)re");
  EXPECT_TRUE(std::regex_search(std::string("#include \"../eval/evaluate.h\""), relative));
  EXPECT_TRUE(std::regex_search(std::string("  #include \"./x.h\""), relative));
  EXPECT_FALSE(std::regex_search(std::string("#include \"eval/evaluate.h\""), relative));
}

}  // namespace
