// schemas/results_row.schema.json and schemas/corpus_record.schema.json describe exactly what
// flywheel/ writes.
#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "flywheel/corpus.h"
#include "flywheel/results.h"
#include "flywheel/shared_corpus.h"

namespace megasched::flywheel {
namespace {

nlohmann::json load(const std::string& name) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/schemas/" + name);
  EXPECT_TRUE(in.good()) << name;
  return nlohmann::json::parse(in);
}

TEST(FlywheelSchemas, ResultsRowSchemaListsTheColumnsInFileOrder) {
  const auto schema = load("results_row.schema.json");
  EXPECT_EQ(schema["x-column-order"], nlohmann::json(results_columns()));
  EXPECT_EQ(schema["properties"].size(), results_columns().size());
  EXPECT_EQ(schema["properties"]["status"]["enum"], nlohmann::json(status_vocabulary()));
}

TEST(FlywheelSchemas, CorpusRecordSchemaListsExactlyTheRecordFields) {
  const auto schema = load("corpus_record.schema.json");
  CorpusRecord filled;
  filled.timed_on = "gpu0@host";  // written only by a multi-worker loop
  filled.source = kSourceLoop;    // written only to the shared corpus
  const auto record = to_json(filled);
  for (const auto& [key, value] : record.items())
    EXPECT_TRUE(schema["properties"].contains(key)) << key;
  for (const auto& [key, value] : schema["properties"].items())
    EXPECT_TRUE(record.contains(key)) << key;
  EXPECT_EQ(schema["properties"]["status"]["enum"], nlohmann::json(status_vocabulary()));
  EXPECT_EQ(schema["properties"]["source"]["enum"],
            nlohmann::json({kSourceLoop, kSourceBench, kSourcePromote, kSourceLandscape}));
  const nlohmann::json shape = schedule::to_json(schedule::ModelShape{});
  std::vector<std::string> shape_keys;
  for (const auto& [key, value] : shape.items()) shape_keys.push_back(key);
  std::vector<std::string> required = schema["properties"]["model_shape"]["required"];
  std::sort(required.begin(), required.end());
  EXPECT_EQ(required, shape_keys);
}

}  // namespace
}  // namespace megasched::flywheel
