#include "harness/mcp_resources.h"

#include <filesystem>

#include "harness/cli_util.h"
#include "harness/embedded_docs.h"
#include "harness/verbs.h"

namespace megasched::harness {
namespace {

using nlohmann::json;

constexpr const char* kDocs = "megasched://docs/";
constexpr const char* kSchemas = "megasched://schemas/";
constexpr const char* kResults = "megasched://workspace/results.tsv";
constexpr const char* kReportJson = "megasched://workspace/report.json";
constexpr const char* kReportHtml = "megasched://workspace/report.html";

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

std::optional<std::string> read_file(const std::string& path, const std::string& missing,
                                     std::string* error) {
  if (!std::filesystem::exists(path)) {
    *error = missing;
    return std::nullopt;
  }
  return read_text(path, error);
}

}  // namespace

std::vector<McpResource> mcp_resources(const McpOptions& options) {
  std::vector<McpResource> out;
  out.push_back({std::string(kDocs) + "HARNESS.md", "HARNESS.md", "The agent contract",
                 "The verbs (propose, evaluate, loop), their JSON, exit codes, the keep rule, the "
                 "honesty rules, the logs, and the MCP server's tools, resources and errors",
                 "text/markdown"});
  for (const EmbeddedDoc& doc : embedded_docs()) {
    const std::string path = doc.path;
    if (!starts_with(path, "schemas/")) continue;
    const std::string name = path.substr(8);
    const bool schema = name.find(".schema.json") != std::string::npos;
    out.push_back({kSchemas + name, name, schema ? "JSON Schema: " + name : name,
                   schema ? "The JSON Schema " + name + " (draft 2020-12)"
                          : "The tools of this server as tools/list gives them (generated)",
                   schema ? "application/schema+json" : "application/json"});
  }
  out.push_back({kResults, "results.tsv", "Results: one row per trial",
                 "The loop's results file (" + options.results_path +
                     "): trial, status, latency and its kind, floor, schedule id, changed knobs, "
                     "description (schemas/results_row.schema.json); absent until a loop ran",
                 "text/tab-separated-values"});
  out.push_back({kReportJson, "report.json", "Report (JSON), built when read",
                 "The report of " + options.results_path + " and " + options.corpus_path +
                     " as the report tool gives it, built at each read",
                 "application/json"});
  out.push_back({kReportHtml, "report.html", "Report (HTML), as last written",
                 "The self-contained HTML report the report tool (or `megasched report`) last "
                 "wrote to " +
                     options.report_path,
                 "text/html"});
  return out;
}

json resource_definition(const McpResource& r) {
  return {{"uri", r.uri},
          {"name", r.name},
          {"title", r.title},
          {"description", r.description},
          {"mimeType", r.mime_type}};
}

std::optional<std::string> read_resource_text(const std::string& uri, const McpOptions& options,
                                              std::string* error) {
  if (starts_with(uri, kDocs) || starts_with(uri, kSchemas)) {
    const std::string path = starts_with(uri, kDocs)
                                 ? uri.substr(std::string(kDocs).size())
                                 : "schemas/" + uri.substr(std::string(kSchemas).size());
    const bool listed = path.find('/', starts_with(uri, kDocs) ? 0 : 8) == std::string::npos;
    if (const char* text = listed ? embedded_doc(path) : nullptr) return std::string(text);
  } else if (uri == kResults) {
    return read_file(options.results_path,
                     "no results file at " + options.results_path + " yet: run the loop tool",
                     error);
  } else if (uri == kReportJson) {
    ReportRequest request;
    request.results_path = options.results_path;
    request.corpus_path = options.corpus_path;
    request.html_path = "";
    const VerbResult report = build_report_document(request);
    if (report.document.is_null()) {
      *error = report.message;
      return std::nullopt;
    }
    return report.document.dump(2);
  } else if (uri == kReportHtml) {
    return read_file(options.report_path,
                     "no report at " + options.report_path + " yet: call the report tool", error);
  }
  *error = "no resource " + uri + " (resources/list lists them)";
  return std::nullopt;
}

}  // namespace megasched::harness
