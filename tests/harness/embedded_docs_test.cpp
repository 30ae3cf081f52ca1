// The binary carries HARNESS.md and schemas/ as they are in the source tree it was built from.
#include "harness/embedded_docs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace megasched::harness {
namespace {

std::string source_file(const std::string& path) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/" + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(EmbeddedDocs, HoldHarnessMdAndEverySchemaAsTheyAreInTheSourceTree) {
  std::vector<std::string> expected = {"HARNESS.md"};
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(MS_SOURCE_DIR) + "/schemas"))
    if (entry.path().extension() == ".json")
      expected.push_back("schemas/" + entry.path().filename().string());
  std::sort(expected.begin(), expected.end());
  std::vector<std::string> embedded;
  for (const EmbeddedDoc& doc : embedded_docs()) {
    embedded.push_back(doc.path);
    EXPECT_EQ(doc.text, source_file(doc.path)) << doc.path << " is stale: rebuild";
  }
  EXPECT_EQ(embedded, expected);
  EXPECT_NE(embedded_doc("schemas/verdict.schema.json"), nullptr);
  EXPECT_EQ(embedded_doc("schemas/nothing.json"), nullptr);
}

}  // namespace
}  // namespace megasched::harness
