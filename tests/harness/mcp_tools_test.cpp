// The MCP tools' schemas: built from schemas/ (the config and verdict schemas are the files'),
// within what the server's checker checks, a default for every optional argument, and
// schemas/mcp_tools.json the list the server gives.
#include "harness/mcp_tools.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "eval/evaluate.h"
#include "harness/json_schema.h"
#include "harness/verbs.h"
#include "search/strategy.h"

namespace megasched::harness {
namespace {

using nlohmann::json;

json schema_file(const std::string& name) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/schemas/" + name);
  return json::parse(in);
}

const McpTool& tool(const std::string& name) {
  for (const McpTool& t : mcp_tools())
    if (t.name == name) return t;
  throw std::runtime_error("no tool " + name);
}

// After a tool's arguments change, rewrite the file with
//   MEGASCHED_UPDATE_GOLDEN=1 build/megasched_tests --gtest_filter='McpTools.*'
TEST(McpTools, SchemasMcpToolsJsonIsTheListTheServerGives) {
  json tools = json::array();
  for (const McpTool& t : mcp_tools()) tools.push_back(tool_definition(t));
  const json generated = {
      {"description",
       "The tools of `megasched mcp` as tools/list gives them. Generated from "
       "harness/mcp_tools.cpp "
       "(tests/harness/mcp_tools_test.cpp checks the file is what it generates)."},
      {"tools", tools}};
  const std::string path = std::string(MS_SOURCE_DIR) + "/schemas/mcp_tools.json";
  const char* update = std::getenv("MEGASCHED_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << generated.dump(2) << "\n";
    GTEST_SKIP() << "rewrote " << path;
  }
  EXPECT_EQ(schema_file("mcp_tools.json"), generated)
      << path << " is out of date with harness/mcp_tools.cpp; regenerate it (see above)";
}

// Every strategy of the loop is offered through MCP too, except the external proposer (through
// MCP the agent proposes and evaluates itself), with the knobs the model-guided ones take.
TEST(McpTools, TheLoopToolOffersEveryStrategyButTheProposer) {
  const json& properties = tool("loop").input_schema["properties"];
  std::vector<std::string> offered = properties["strategy"]["enum"];
  std::vector<std::string> expected;
  for (const std::string& name : search::strategy_names())
    if (name != "proposer") expected.push_back(name);
  std::sort(offered.begin(), offered.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(offered, expected);
  for (const char* knob : {"elite", "candidates", "guard"})
    EXPECT_TRUE(properties.contains(knob)) << knob;
}

TEST(McpTools, SchemasAreWithinTheCheckedSubsetAndOptionalArgumentsHaveDefaults) {
  for (const McpTool& t : mcp_tools()) {
    EXPECT_EQ(t.input_schema["type"], "object") << t.name;
    EXPECT_EQ(unsupported_keywords(t.input_schema), std::vector<std::string>{}) << t.name;
    EXPECT_EQ(unsupported_keywords(t.output_schema), std::vector<std::string>{}) << t.name;
    EXPECT_TRUE(check_against_schema(t.input_schema, json::object()).empty() ||
                !t.input_schema["required"].empty())
        << t.name;
    const json required = t.input_schema["required"];
    for (const auto& [name, property] : t.input_schema["properties"].items()) {
      const bool is_required = std::find(required.begin(), required.end(), name) != required.end();
      const bool absent_means_default_config = name == "config" || name == "start";
      // The loop's keep rule: absent, the device decides (harness/verbs.h kGpuMinGain), and the
      // description says so.
      const bool absent_means_by_device =
          t.name == "loop" && (name == "min_gain" || name == "confirm");
      if (absent_means_by_device) {
        EXPECT_FALSE(property.contains("default")) << t.name << "." << name;
        EXPECT_NE(property["description"].get<std::string>().find("Absent: "), std::string::npos)
            << t.name << "." << name;
      }
      if (is_required || absent_means_default_config || absent_means_by_device || name == "program")
        continue;
      ASSERT_TRUE(property.contains("default")) << t.name << "." << name;
      EXPECT_TRUE(check_against_schema(property, property["default"]).empty())
          << t.name << "." << name << " default " << property["default"];
    }
  }
}

// `schema` without "description" and "title" anywhere.
json undescribed(json schema) {
  if (schema.is_object()) {
    schema.erase("description");
    schema.erase("title");
  }
  if (schema.is_structured())
    for (auto& [key, value] : schema.items()) value = undescribed(value);
  return schema;
}

TEST(McpTools, ConfigArgumentsAndTheVerdictAreTheSchemasOfSchemas) {
  const json config = embeddable_schema(schema_file("schedule_config.schema.json"));
  EXPECT_EQ(tool("evaluate").input_schema["properties"]["config"]["anyOf"][0], config);
  for (const char* name : {"propose", "validate", "profile"})
    EXPECT_EQ(tool(name).input_schema["properties"]["config"]["anyOf"][0], undescribed(config))
        << name;
  EXPECT_EQ(tool("loop").input_schema["properties"]["start"]["anyOf"][0], undescribed(config));
  EXPECT_EQ(tool("evaluate").output_schema, embeddable_schema(schema_file("verdict.schema.json")));
  EXPECT_EQ(tool("propose").output_schema["properties"]["incumbent"], undescribed(config));
  EXPECT_EQ(tool("propose").output_schema["properties"]["search_space"],
            embeddable_schema(schema_file("search_space.schema.json")));
}

TEST(McpTools, TheOutputSchemasAdmitWhatTheVerbsGive) {
  const VerbResult proposed = propose_incumbent("toy", "h100", schedule::ScheduleConfig{});
  EXPECT_EQ(check_against_schema(tool("propose").output_schema, proposed.document).size(), 0u);
  std::string error;
  auto evaluator = eval::TrialEvaluator::create(eval::EvaluatorOptions{}, &error);
  ASSERT_TRUE(evaluator) << error;
  schedule::ScheduleConfig rejected;
  rejected.launch.threads_per_block = 1024;
  rejected.launch.blocks_per_sm = 4;
  for (const schedule::ScheduleConfig& c : {schedule::ScheduleConfig{}, rejected}) {
    const json verdict = eval::to_json(evaluator->evaluate(c));
    const auto errors = check_against_schema(tool("evaluate").output_schema, verdict);
    EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : describe(errors[0])) << verdict.dump();
  }
}

TEST(McpTools, EvaluateAndLoopTakeAnObjectiveStringAndTheVerdictSchemaAdmitsItsVerdicts) {
  for (const char* name : {"evaluate", "loop"}) {
    const json& schema = tool(name).input_schema;
    ASSERT_TRUE(schema["properties"].contains("objective")) << name;
    EXPECT_EQ(schema["properties"]["objective"]["type"], "string") << name;
    EXPECT_EQ(schema["properties"]["objective"]["default"], "") << name;
    json arguments = {{"objective", "0:1,1024:1,4096:2"}};
    if (std::string(name) == "loop") arguments["budget"] = 1;
    EXPECT_TRUE(check_against_schema(schema, arguments).empty()) << name;
    arguments["objective"] = json::array({{{"position", 0}, {"weight", 1}}});
    EXPECT_FALSE(check_against_schema(schema, arguments).empty()) << name;
  }
  eval::EvaluatorOptions o;
  o.objective = {{0, 1.0}, {60, 2.0}};
  std::string error;
  auto evaluator = eval::TrialEvaluator::create(o, &error);
  ASSERT_TRUE(evaluator) << error;
  schedule::ScheduleConfig rejected, unlowered;
  rejected.launch.threads_per_block = 1024;
  rejected.launch.blocks_per_sm = 4;
  unlowered.tiling.gemv_k_split = 0;
  for (const schedule::ScheduleConfig& c : {schedule::ScheduleConfig{}, rejected, unlowered}) {
    const json verdict = eval::to_json(evaluator->evaluate(c));
    ASSERT_TRUE(verdict.contains("objective")) << verdict.dump();
    ASSERT_EQ(verdict["objective"].size(), 2u) << verdict.dump();
    const auto errors = check_against_schema(tool("evaluate").output_schema, verdict);
    EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : describe(errors[0])) << verdict.dump();
  }
  // An entry the schema does not describe is caught: the check can fail.
  json verdict = eval::to_json(evaluator->evaluate(schedule::ScheduleConfig{}));
  verdict["objective"][0]["latency_median"] = 1.0;
  EXPECT_FALSE(check_against_schema(tool("evaluate").output_schema, verdict).empty());
}

}  // namespace
}  // namespace megasched::harness
