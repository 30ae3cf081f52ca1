// The JSON Schema checker of the MCP server's tool arguments: every keyword of its subset, the
// paths it reports, and the schemas of schemas/ held to the subset.
#include "harness/json_schema.h"

#include <fstream>

#include <gtest/gtest.h>

#include "schedule/config.h"

namespace megasched::harness {
namespace {

using nlohmann::json;

std::vector<std::string> paths(const std::vector<SchemaError>& errors) {
  std::vector<std::string> out;
  for (const auto& e : errors) out.push_back(e.path);
  return out;
}

TEST(JsonSchema, ConfigSchemaNamesTheFailingKnobAndItsChoices) {
  const json schema = schedule::config_schema_json();
  EXPECT_TRUE(check_against_schema(schema, json::object()).empty());
  EXPECT_TRUE(check_against_schema(schema, {{"kernel", {{"unroll", 4}}}}).empty());
  auto errors = check_against_schema(schema, {{"kernel", {{"unroll", 3}}}});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "/kernel/unroll");
  EXPECT_EQ(errors[0].message, "3 is not one of [1, 2, 4, 8]");
  errors = check_against_schema(schema, {{"kernel", {{"unrol", 4}}}});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "/kernel/unrol");
  EXPECT_NE(errors[0].message.find("did you mean 'unroll'?"), std::string::npos);
  errors = check_against_schema(schema, {{"kernel", "fast"}});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(describe(errors[0]), "/kernel: expected object, got string \"fast\"");
}

TEST(JsonSchema, TypesRequiredBoundsAndArrays) {
  const json schema = {{"type", "object"},
                       {"required", {"budget"}},
                       {"additionalProperties", false},
                       {"properties",
                        {{"budget", {{"type", "integer"}, {"minimum", 1}, {"maximum", 10}}},
                         {"rate", {{"type", "number"}, {"exclusiveMinimum", 0}}},
                         {"name", {{"type", "string"}, {"minLength", 1}, {"pattern", "^[a-z]+$"}}},
                         {"tag", {{"const", "x"}}},
                         {"maybe", {{"type", {"number", "null"}}}},
                         {"list",
                          {{"type", "array"},
                           {"minItems", 1},
                           {"maxItems", 2},
                           {"items", {{"type", "integer"}}}}}}}};
  EXPECT_TRUE(check_against_schema(schema, {{"budget", 3}, {"maybe", nullptr}}).empty());
  EXPECT_TRUE(check_against_schema(schema, {{"budget", 3.0}}).empty());  // 3.0 is an integer
  EXPECT_EQ(paths(check_against_schema(schema, json::object())),
            std::vector<std::string>{"/budget"});
  EXPECT_EQ(check_against_schema(schema, {{"budget", 0}})[0].message,
            "0 is less than the minimum 1");
  EXPECT_EQ(check_against_schema(schema, {{"budget", 11}})[0].message,
            "11 is more than the maximum 10");
  EXPECT_EQ(check_against_schema(schema, {{"budget", 2.5}})[0].message,
            "expected integer, got number 2.5");
  EXPECT_EQ(check_against_schema(schema, {{"budget", true}})[0].message,
            "expected integer, got boolean true");
  EXPECT_EQ(paths(check_against_schema(schema, {{"budget", 1}, {"rate", 0}})),
            std::vector<std::string>{"/rate"});
  EXPECT_EQ(paths(check_against_schema(schema, {{"budget", 1}, {"name", ""}, {"tag", "y"}})),
            (std::vector<std::string>{"/name", "/name", "/tag"}));
  EXPECT_EQ(paths(check_against_schema(schema, {{"budget", 1}, {"list", {1, "2", 3}}})),
            (std::vector<std::string>{"/list", "/list/1"}));
  EXPECT_EQ(paths(check_against_schema(schema, {{"budget", 1}, {"list", json::array()}})),
            std::vector<std::string>{"/list"});
  EXPECT_EQ(paths(check_against_schema(schema, {{"budget", 1}, {"a/b~", 1}})),
            std::vector<std::string>{"/a~1b~0"});
}

TEST(JsonSchema, AnyOfReportsThroughTheBranchOfTheValuesType) {
  const json schema = {
      {"type", "object"},
      {"properties",
       {{"config",
         {{"anyOf", {schedule::config_schema_json(), {{"type", "string"}, {"minLength", 1}}}}}}}}};
  EXPECT_TRUE(check_against_schema(schema, {{"config", "best:llama-1b:h100"}}).empty());
  EXPECT_TRUE(
      check_against_schema(schema, {{"config", {{"launch", {{"blocks_per_sm", 2}}}}}}).empty());
  auto errors = check_against_schema(schema, {{"config", {{"launch", {{"blocks_per_sm", 7}}}}}});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "/config/launch/blocks_per_sm");
  errors = check_against_schema(schema, {{"config", 5}});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].message, "5 matches none of: object, string");
}

TEST(JsonSchema, StopsAtMaxErrors) {
  const json schema = {{"type", "array"}, {"items", {{"type", "string"}}}};
  EXPECT_EQ(check_against_schema(schema, json::array({1, 2, 3, 4}), 2).size(), 2u);
}

// The schemas the MCP server checks values against (its tools' schemas: tests/harness/
// mcp_tools_test.cpp). corpus_record's $ref is not in the subset: nothing checks against it.
TEST(JsonSchema, TheSchemasTheServerChecksAreWithinTheSubset) {
  for (const char* name :
       {"schedule_config.schema.json", "verdict.schema.json", "search_space.schema.json",
        "results_row.schema.json", "program.schema.json"}) {
    std::ifstream in(std::string(MS_SOURCE_DIR) + "/schemas/" + name);
    const json schema = json::parse(in);
    EXPECT_EQ(unsupported_keywords(schema), std::vector<std::string>{}) << name;
  }
  EXPECT_EQ(
      unsupported_keywords({{"oneOf", json::array()}, {"properties", {{"x", {{"not", {}}}}}}}),
      (std::vector<std::string>{"/oneOf", "/properties/x/not"}));
}

TEST(JsonSchema, EmbeddableSchemaDropsTheDocumentKeywords) {
  const json schema = embeddable_schema(schedule::config_schema_json());
  EXPECT_FALSE(schema.contains("$id"));
  EXPECT_FALSE(schema.contains("$schema"));
  EXPECT_TRUE(schema.contains("properties"));
}

}  // namespace
}  // namespace megasched::harness
