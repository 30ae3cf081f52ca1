// The JSON Schemas in schemas/ must describe what the code reads and writes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"
#include "schedule/config.h"
#include "schedule/lower.h"
#include "schedule/plan.h"

namespace {

nlohmann::json load_schema(const std::string& name) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/schemas/" + name);
  EXPECT_TRUE(in.good()) << name;
  return nlohmann::json::parse(in);
}

// The config schema is generated from the knob table; after a knob changes, rewrite it with
//   MEGASCHED_UPDATE_GOLDEN=1 build/megasched_tests --gtest_filter='Schemas.*'
TEST(Schemas, ScheduleConfigSchemaIsGeneratedFromTheKnobTable) {
  const std::string path = std::string(MS_SOURCE_DIR) + "/schemas/schedule_config.schema.json";
  const nlohmann::json generated = megasched::schedule::config_schema_json();
  const char* update = std::getenv("MEGASCHED_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << generated.dump(2) << "\n";
    GTEST_SKIP() << "rewrote " << path;
  }
  EXPECT_EQ(load_schema("schedule_config.schema.json"), generated)
      << path << " is out of date with the knob table; regenerate it (see above)";
  size_t knobs = 0;
  for (const auto& [group, body] : generated["properties"].items())
    knobs += body["properties"].size();
  EXPECT_EQ(knobs, megasched::schedule::knob_specs().size());
}

// The plan schema is generated too (schedule/plan.cpp); the same command rewrites it.
TEST(Schemas, PlanSchemaIsGeneratedAndDescribesAWrittenPlan) {
  const std::string path = std::string(MS_SOURCE_DIR) + "/schemas/plan.schema.json";
  const nlohmann::json generated = megasched::schedule::plan_schema_json();
  const char* update = std::getenv("MEGASCHED_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << generated.dump(2) << "\n";
    GTEST_SKIP() << "rewrote " << path;
  }
  const nlohmann::json schema = load_schema("plan.schema.json");
  EXPECT_EQ(schema, generated) << path << " is out of date with schedule/plan.cpp; regenerate it";
  megasched::schedule::Plan plan;
  plan.buckets = {{0, 512, {}}, {512, megasched::schedule::kPlanEndOfModel, {}}};
  const nlohmann::json written = megasched::schedule::to_json(plan);
  const nlohmann::json& item = schema["properties"]["buckets"]["items"];
  for (const auto& key : schema["required"]) EXPECT_TRUE(written.contains(key)) << key;
  for (const auto& [key, value] : written.items()) EXPECT_TRUE(schema["properties"].contains(key));
  for (const auto& b : written["buckets"]) {
    for (const auto& key : item["required"]) EXPECT_TRUE(b.contains(key)) << key;
    for (const auto& [key, value] : b.items()) EXPECT_TRUE(item["properties"].contains(key)) << key;
  }
  EXPECT_EQ(item["properties"]["config"]["$ref"], "schedule_config.schema.json");
}

TEST(Schemas, VerdictSchemaListsExactlyTheVerdictFields) {
  const auto schema = load_schema("verdict.schema.json");
  const auto v = megasched::eval::to_json(megasched::eval::Verdict{});
  for (const auto& [key, value] : v.items()) EXPECT_TRUE(schema["properties"].contains(key)) << key;
  // A verdict over an objective (eval/objective.h) of a plan (eval/plan_evaluate.h) has every
  // field; one of a config at one position, all but those two.
  megasched::eval::Verdict over;
  over.objective = nlohmann::json::array();
  over.plan = nlohmann::json::array();
  const auto o = megasched::eval::to_json(over);
  for (const auto& [key, value] : schema["properties"].items()) {
    EXPECT_TRUE(o.contains(key)) << key;
    EXPECT_EQ(v.contains(key), key != "objective" && key != "plan") << key;
  }
  for (const auto& key : schema["required"]) {
    EXPECT_NE(key, "objective");
    EXPECT_NE(key, "plan");
  }
}

TEST(Schemas, SearchSpaceSchemaRequiresWhatTheCodeWrites) {
  const auto schema = load_schema("search_space.schema.json");
  megasched::schedule::ModelShape s;
  s.name = "x";
  s.hidden = s.ffn = 64;
  s.heads = s.kv_heads = 1;
  s.head_dim = 64;
  const auto space = megasched::schedule::search_space_json(s);
  for (const auto& key : schema["required"])
    EXPECT_TRUE(space.contains(key.get<std::string>())) << key;
  for (const auto& key : schema["properties"]["knobs"]["items"]["required"])
    EXPECT_TRUE(space["knobs"][0].contains(key.get<std::string>())) << key;
}

}  // namespace

namespace {

/// Every key the value has is declared by the schema and every required key is present,
/// recursively through objects and the first element of arrays.
void expect_conforms(const nlohmann::json& schema, const nlohmann::json& value,
                     const std::string& path) {
  if (schema.contains("properties") && value.is_object()) {
    for (const auto& [k, v] : value.items()) {
      ASSERT_TRUE(schema["properties"].contains(k)) << path << "." << k << " is not in the schema";
      expect_conforms(schema["properties"][k], v, path + "." + k);
    }
    for (const auto& k : schema.value("required", nlohmann::json::array()))
      EXPECT_TRUE(value.contains(k.get<std::string>())) << path << "." << k << " missing";
  }
  if (schema.contains("items") && value.is_array() && !value.empty())
    expect_conforms(schema["items"], value[0], path + "[0]");
}

TEST(Schemas, ProgramSchemaDescribesALoweredProgram) {
  const auto schema = load_schema("program.schema.json");
  auto shape = megasched::schedule::find_preset("toy");
  auto target = megasched::schedule::find_target("h100");
  ASSERT_TRUE(shape && target);
  std::string error;
  auto program =
      megasched::schedule::lower(*shape, *target, megasched::schedule::ScheduleConfig{}, &error);
  ASSERT_TRUE(program) << error;
  expect_conforms(schema, megasched::schedule::to_json(*program), "program");
}

}  // namespace
