// The resources of `megasched mcp` (harness/mcp_server.h): what an agent reads rather than runs.
// The agent contract (HARNESS.md) and the JSON Schemas (schemas/) come from the binary itself
// (embedded at build time, harness/embedded_docs.h), so they always describe the server that
// serves them; the results file and the report come from the server's workspace when read.
//   megasched://docs/HARNESS.md            the agent contract
//   megasched://schemas/<file>             each file of schemas/ (schemas/mcp_tools.json: the
//   tools) megasched://workspace/results.tsv      the results file, one row per trial
//   megasched://workspace/report.json      the report of the results and the corpus, built when
//   read megasched://workspace/report.html      the HTML page the report tool (or `megasched
//   report`) wrote
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/mcp_tools.h"

namespace megasched::harness {

struct McpResource {
  std::string uri;
  std::string name;
  std::string title;
  std::string description;
  std::string mime_type;
};

/// Every resource, in the order resources/list gives them.
std::vector<McpResource> mcp_resources(const McpOptions& options);

/// The resource's entry in resources/list.
nlohmann::json resource_definition(const McpResource& resource);

/// The text of the resource at `uri`; nullopt with *error when there is no such resource or its
/// file has not been written yet.
std::optional<std::string> read_resource_text(const std::string& uri, const McpOptions& options,
                                              std::string* error);

}  // namespace megasched::harness
