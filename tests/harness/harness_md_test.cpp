// HARNESS.md's examples run as written: every ```sh block runs (in order, in one empty folder,
// with the megasched binary on PATH) and exits 0; a ```json block right after it documents its
// stdout, and the real output must have every documented field with the same JSON type; a
// ```text block right after that documents its stderr progress lines (trial, budget, status).
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;

struct Block {
  std::string lang;
  std::string text;
  int line = 0;
};

std::vector<Block> fenced_blocks(const std::string& path) {
  std::ifstream in(path);
  std::vector<Block> blocks;
  std::string line;
  int number = 0;
  bool inside = false;
  while (std::getline(in, line)) {
    ++number;
    if (line.rfind("```", 0) == 0) {
      if (!inside) blocks.push_back({line.substr(3), "", number});
      inside = !inside;
      continue;
    }
    if (inside) blocks.back().text += line + "\n";
  }
  return blocks;
}

// Every field of `doc` is in `actual` with the same type (null documents "may be null"; arrays
// compare their first elements).
void expect_same_shape(const json& doc, const json& actual, const std::string& where) {
  if (doc.is_null()) return;
  if (doc.is_number()) {
    EXPECT_TRUE(actual.is_number() || actual.is_null()) << where << " is " << actual.dump();
    return;
  }
  ASSERT_EQ(doc.type_name(), std::string(actual.type_name()))
      << where << ": documented " << doc.dump().substr(0, 80) << ", got "
      << actual.dump().substr(0, 80);
  if (doc.is_object()) {
    for (const auto& [key, value] : doc.items()) {
      ASSERT_TRUE(actual.contains(key))
          << where << "." << key << " is documented but not in the output";
      expect_same_shape(value, actual[key], where + "." + key);
    }
  } else if (doc.is_array() && !doc.empty() && !actual.empty()) {
    expect_same_shape(doc[0], actual[0], where + "[0]");
  }
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(HarnessMd, ExamplesRunAsWrittenAndMatchTheirDocumentedOutput) {
  const std::string binary_dir = std::filesystem::path(MS_BINARY_PATH).parent_path().string();
  const auto dir =
      std::filesystem::temp_directory_path() / ("ms_harness_md_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<Block> blocks = fenced_blocks(std::string(MS_SOURCE_DIR) + "/HARNESS.md");
  int ran = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].lang != "sh") continue;
    const std::string where = "HARNESS.md:" + std::to_string(blocks[i].line);
    std::ofstream(dir / "block.sh") << blocks[i].text;
    const std::string cmd = "cd '" + dir.string() + "' && PATH='" + binary_dir +
                            "':\"$PATH\" bash block.sh > out.txt 2> err.txt";
    const int status = std::system(cmd.c_str());
    ++ran;
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << where << " exited " << WEXITSTATUS(status) << "\n"
        << blocks[i].text << "stderr:\n"
        << slurp(dir / "err.txt");
    if (i + 1 < blocks.size() && blocks[i + 1].lang == "json") {
      const json doc = json::parse(blocks[i + 1].text);
      const json actual = json::parse(slurp(dir / "out.txt"), nullptr, false);
      ASSERT_FALSE(actual.is_discarded()) << where << " printed no JSON:\n"
                                          << slurp(dir / "out.txt");
      expect_same_shape(doc, actual, where);
      if (i + 2 < blocks.size() && blocks[i + 2].lang == "text") {
        // The first three fields of each documented line (trial, n/budget, status) in order.
        auto heads = [](const std::string& text) {
          std::vector<std::string> out;
          std::istringstream lines(text);
          std::string line;
          while (std::getline(lines, line)) {
            std::istringstream tokens(line);
            std::string a, b, c;
            tokens >> a >> b >> c;
            if (a == "trial") out.push_back(a + " " + b + " " + c);
          }
          return out;
        };
        EXPECT_EQ(heads(blocks[i + 2].text), heads(slurp(dir / "err.txt"))) << where;
      }
    }
  }
  EXPECT_GE(ran, 6);
  std::filesystem::remove_all(dir);
}

}  // namespace
