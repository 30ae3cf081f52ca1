// The tools of `megasched mcp` (harness/mcp_server.h): one row per tool, each the same verb as the
// CLI subcommand of its name (harness/verbs.h), with an inputSchema built from the knob table's
// config schema (schemas/schedule_config.schema.json) and the trial flags, and for `evaluate` and
// `propose` an outputSchema built from schemas/ (verdict, search space). schemas/mcp_tools.json
// is the generated list (tests/harness/mcp_tools_test.cpp keeps it current).
//
// Trials never run in the server's process: `evaluate` and `loop` send them to a `megasched
// worker` child (search/worker_evaluator.h), `profile` runs `megasched profile` as a child, so a
// crashing or hanging trial costs that trial, not the server. Tools that run trials hold the
// device for the whole call: one such call at a time; the others (propose, validate, report) run
// beside them.
//
// Adding a tool (the `promote` and `registry_list` tools of the schedule registry are the next):
// write its function (arguments in, ToolResult out, the CLI's verb in the middle), its input
// schema, and add its row to mcp_tools() in harness/mcp_tools.cpp; then regenerate
// schemas/mcp_tools.json (MEGASCHED_UPDATE_GOLDEN=1, see ARCHITECTURE.md) and list it in
// HARNESS.md.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/worker_evaluator.h"

namespace megasched::harness {

/// The server's settings (`megasched mcp` flags).
struct McpOptions {
  std::string executable;  // the megasched binary for `worker` and `profile` children; "": this
  std::string results_path = "workspace/results.tsv";
  std::string corpus_path = "workspace/corpus.jsonl";
  std::string report_path = "workspace/report.html";    // the report tool's HTML page
  std::string profile_path = "workspace/profile.json";  // the profile tool's whole document
  size_t max_message_bytes = size_t{8} << 20;           // longer lines are refused
};

/// One call of a tool: its arguments (already checked against its inputSchema), the flag the
/// client's notifications/cancelled sets, and the progress reporter (a no-op when the client gave
/// no progress token).
struct ToolCall {
  nlohmann::json arguments = nlohmann::json::object();
  const std::atomic<bool>* cancel = nullptr;
  /// progress must grow from call to call; total <= 0: unknown.
  std::function<void(double progress, double total, const std::string& message)> progress =
      [](double, double, const std::string&) {};
  bool cancelled() const { return cancel && cancel->load(); }
};

/// What a call came to.
struct ToolResult {
  enum class Kind {
    kResult,         // structured (the CLI's stdout JSON) and a summary
    kToolError,      // isError: true, with the message (the CLI's stderr line)
    kInvalidParams,  // arguments the schema admits but the tool cannot take together
  };
  Kind kind = Kind::kResult;
  nlohmann::json structured;  // kResult: structuredContent
  std::string text;           // kResult: a short summary; otherwise the message
  int exit_code = 0;          // the CLI's exit code for the same request
};

/// What the tools share over a session: the options, the device, and the evaluate tool's worker
/// (kept between calls, so a model loads once per model / target / device).
class McpContext {
 public:
  explicit McpContext(McpOptions options) : options_(std::move(options)) {}
  const McpOptions& options() const { return options_; }

  /// Takes the device for one call (released with the lock); an unlocked lock when the call was
  /// cancelled while it waited.
  std::unique_lock<std::timed_mutex> take_device(const ToolCall& call);
  /// The evaluate tool's worker for `command` (hold the device): the running one when its command
  /// matches, else a new one. nullptr with *error when it does not start.
  search::WorkerEvaluator* worker(const std::string& command, const ToolCall& call,
                                  std::string* error);
  /// Ends the evaluate tool's worker (a loop or a profile is taking the device).
  void end_worker();

 private:
  McpOptions options_;
  std::timed_mutex device_;
  std::unique_ptr<search::WorkerEvaluator> worker_;
  std::string worker_command_;
};

struct McpTool {
  std::string name;
  std::string title;
  std::string description;
  nlohmann::json input_schema;   // JSON Schema of the arguments (type object)
  nlohmann::json output_schema;  // of structuredContent; null: none declared
  nlohmann::json annotations;    // MCP tool annotations (readOnlyHint, ...)
  ToolResult (*run)(const ToolCall& call, McpContext& context);
};

/// Every tool, in the order tools/list gives them.
const std::vector<McpTool>& mcp_tools();

/// The tool's entry in tools/list.
nlohmann::json tool_definition(const McpTool& tool);

}  // namespace megasched::harness
