// The MCP tools' JSON Schemas: each tool's arguments (its defaults those of the CLI) and the
// output schemas read from schemas/. The tools themselves: harness/mcp_tools.h.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace megasched::harness {

const nlohmann::json& propose_schema();
const nlohmann::json& evaluate_schema();
const nlohmann::json& validate_schema();
const nlohmann::json& loop_schema();
const nlohmann::json& report_schema();
const nlohmann::json& profile_schema();
const nlohmann::json& promote_schema();
const nlohmann::json& registry_list_schema();
const nlohmann::json& registry_show_schema();

/// schemas/NAME as embedded, made embeddable in a tool definition (null when it is not embedded).
nlohmann::json schema_file(const std::string& name);
/// The `propose` tool's output: the incumbent, whether it fits, the search space.
const nlohmann::json& propose_output_schema();

}  // namespace megasched::harness
