// HARNESS.md's examples run as written: every ```sh block runs (in order, in one empty folder,
// with the megasched binary on PATH) and exits 0; a ```json block right after it is its stdout:
// the same fields with the same values (omissions marked, a few volatile values compared by type
// only); a ```text block right after that is its stderr progress lines, clock fields aside.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
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

// Fields whose values change from run to run (or with the host's floating point): only their
// type is compared.
bool volatile_key(const std::string& key) {
  // value and reference: a logit of the worst_logit of a check, host floating point like the
  // errors.
  static const std::set<std::string> keys = {"run_id",      "elapsed_s", "timestamp", "host",
                                             "max_abs_err", "rel_err",   "value",     "reference"};
  return keys.count(key) != 0;
}

// The documented output is the real one: every documented field is in the output with the same
// value, and every field of the output is documented. An object may say it shows only some of
// its fields with a "...": "..." member, an array only its first elements with a last "..."
// element, a string only its head with a trailing "...". `breakdown_ms` (wall times) is compared
// by its phases only. Numbers agree to 1e-9 (relative); volatile_key() values only by type.
void expect_documented(const json& doc, const json& actual, const std::string& where,
                       const std::string& key = "") {
  if (key == "breakdown_ms" && doc.is_object() && actual.is_object()) {  // wall times: the phases
    std::set<std::string> documented, printed;
    for (const auto& [k, v] : doc.items()) documented.insert(k);
    for (const auto& [k, v] : actual.items()) printed.insert(k);
    EXPECT_EQ(documented, printed) << where << ": the phases differ";
    return;
  }
  if (doc.is_string() && actual.is_string()) {  // "head...": the printed text starts with head
    const std::string d = doc.get<std::string>(), a = actual.get<std::string>();
    if (d.size() > 3 && d.compare(d.size() - 3, 3, "...") == 0) {
      EXPECT_EQ(a.substr(0, d.size() - 3), d.substr(0, d.size() - 3)) << where;
      return;
    }
  }
  if (doc.is_number() && actual.is_number()) {
    if (volatile_key(key)) return;
    const double d = doc.get<double>(), a = actual.get<double>();
    EXPECT_LE(std::abs(d - a), 1e-9 * std::max(std::abs(d), std::abs(a)))
        << where << ": documented " << doc.dump() << ", the command prints " << actual.dump();
    return;
  }
  ASSERT_EQ(doc.type_name(), std::string(actual.type_name()))
      << where << ": documented " << doc.dump().substr(0, 80) << ", the command prints "
      << actual.dump().substr(0, 80);
  if (doc.is_object()) {
    for (const auto& [k, value] : doc.items()) {
      if (k == "...") continue;
      ASSERT_TRUE(actual.contains(k)) << where << "." << k << " is documented but not printed";
      expect_documented(value, actual[k], where + "." + k, k);
    }
    if (!doc.contains("...")) {
      for (const auto& [k, value] : actual.items())
        EXPECT_TRUE(doc.contains(k))
            << where << "." << k << " is printed but not documented (" << value.dump().substr(0, 60)
            << "); document it, or mark the omission with \"...\": \"...\"";
    }
  } else if (doc.is_array()) {
    const bool prefix = !doc.empty() && doc.back() == "...";
    const size_t shown = prefix ? doc.size() - 1 : doc.size();
    if (prefix)
      ASSERT_GE(actual.size(), shown) << where << " prints fewer elements than documented";
    else
      ASSERT_EQ(actual.size(), shown)
          << where << ": documented " << shown << " elements, printed " << actual.size()
          << " (end the list with \"...\" to show a prefix)";
    for (size_t i = 0; i < shown; ++i)
      expect_documented(doc[i], actual[i], where + "[" + std::to_string(i) + "]", key);
  } else if (!volatile_key(key)) {
    EXPECT_EQ(doc, actual) << where;
  }
}

// A progress line without its clock fields (elapsed, eta).
std::string without_clock(const std::string& line) {
  static const std::regex clock(R"(elapsed \S+  eta \S+)");
  return std::regex_replace(line, clock, "elapsed -  eta -");
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
      expect_documented(doc, actual, where);
      if (i + 2 < blocks.size() && blocks[i + 2].lang == "text") {
        // The documented progress lines, clock fields aside, are the printed ones.
        auto trial_lines = [](const std::string& text) {
          std::vector<std::string> out;
          std::istringstream lines(text);
          std::string line;
          while (std::getline(lines, line))
            if (line.rfind("trial ", 0) == 0) out.push_back(without_clock(line));
          return out;
        };
        EXPECT_EQ(trial_lines(blocks[i + 2].text), trial_lines(slurp(dir / "err.txt"))) << where;
      }
    }
  }
  EXPECT_GE(ran, 6);
  std::filesystem::remove_all(dir);
}

// The README's "What an agent runs" block, run as written in an empty folder (build/megasched the
// binary under test): once its `evaluate --config cfg.json` failed, as nothing made cfg.json.
TEST(Readme, WhatAnAgentRunsRunsAsWrittenInAnEmptyFolder) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ms_readme_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  int ran = 0;
  for (const Block& block : fenced_blocks(std::string(MS_SOURCE_DIR) + "/README.md")) {
    if (block.lang != "sh" || block.text.find("build/megasched evaluate") == std::string::npos ||
        block.text.find("mpirun") != std::string::npos)
      continue;
    std::string script = block.text;
    const std::string binary = MS_BINARY_PATH;  // itself ends in build/megasched
    for (size_t at = 0; (at = script.find("build/megasched", at)) != std::string::npos;
         at += binary.size())
      script.replace(at, 15, binary);
    std::ofstream(dir / "block.sh") << "set -e\n" << script;
    const std::string cmd = "cd '" + dir.string() + "' && bash block.sh > out.txt 2> err.txt";
    const int status = std::system(cmd.c_str());
    ++ran;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "README.md:" << block.line << " exited " << WEXITSTATUS(status) << "\n"
        << block.text << "stderr:\n"
        << slurp(dir / "err.txt");
  }
  EXPECT_EQ(ran, 1) << "the README's block of what an agent runs";
  std::filesystem::remove_all(dir);
}

}  // namespace
