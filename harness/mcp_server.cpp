#include "harness/mcp_server.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "harness/json_rpc.h"
#include "harness/json_schema.h"
#include "harness/mcp_resources.h"
#include "schedule/config.h"
#include "schedule/format.h"
#include "search/child_process.h"

#ifndef MS_VERSION
#define MS_VERSION "0.0.0"
#endif

namespace megasched::harness {
namespace {

using nlohmann::json;

// The prefix of the metadata this server adds to tool results (MCP _meta key rules).
constexpr const char* kExitCodeMeta = "dev.megasched/exit_code";

const char* kInstructions =
    "megasched searches one JSON object, the ScheduleConfig, for a model on a GPU target. Call "
    "propose for the incumbent and the search space, edit the config, call evaluate for its "
    "Verdict (valid, correct, latency_us with latency_kind, floor_us), keep what is correct and "
    "faster; or call loop to let a built-in strategy search over a budget. Read "
    "megasched://docs/HARNESS.md for the contract. Try model `toy` first: it runs in a second.";

void log_line(const std::string& text) {
  std::fprintf(stderr, "megasched mcp: %s\n", text.c_str());
  std::fflush(stderr);
}

const McpTool* find_tool(const std::string& name) {
  for (const McpTool& t : mcp_tools())
    if (t.name == name) return &t;
  return nullptr;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

/// One tools/call in flight.
struct InFlight {
  json id;
  std::string tool;
  json progress_token;  // null: the client asked for no progress
  std::atomic<bool> cancel{false};
  std::atomic<bool> finished{false};
  double last_progress = -1;  // written by the call's thread only
  double started_s = 0;
  std::thread thread;
};

class Session {
 public:
  Session(const McpOptions& options, int out_fd) : context_(options), out_fd_(out_fd) {}

  void on_line(const std::string& line);
  void on_oversize(size_t bytes);
  /// End of input: a grace period for the calls in flight, then cancel and join them.
  void finish();

 private:
  struct Method {
    const char* name;
    void (Session::*handle)(const JsonRpcMessage&);
    bool before_initialize;  // allowed before initialize
  };
  static const std::vector<Method>& methods();

  void send(const json& message);
  void send_error(const json& id, int code, const std::string& message, json data = nullptr);
  void on_request(const JsonRpcMessage& m);
  void on_notification(const JsonRpcMessage& m);

  void initialize(const JsonRpcMessage& m);
  void ping(const JsonRpcMessage& m) { send(result_message(m.id, json::object())); }
  void list_tools(const JsonRpcMessage& m);
  void call_tool(const JsonRpcMessage& m);
  void list_resources(const JsonRpcMessage& m);
  void list_resource_templates(const JsonRpcMessage& m) {
    send(result_message(m.id, {{"resourceTemplates", json::array()}}));
  }
  void read_resource(const JsonRpcMessage& m);

  void run_call(const std::shared_ptr<InFlight>& call, const McpTool& tool, json arguments);
  json tool_result(const McpTool& tool, ToolResult result) const;
  void send_progress(InFlight& call, double progress, double total, const std::string& message);
  void reap_finished();

  McpContext context_;
  int out_fd_;
  std::mutex write_mutex_;
  bool output_broken_ = false;
  bool initialized_ = false;
  std::string version_;
  std::mutex calls_mutex_;
  std::vector<std::shared_ptr<InFlight>> calls_;
};

const std::vector<Session::Method>& Session::methods() {
  static const std::vector<Method> table = {
      {"initialize", &Session::initialize, true},
      {"ping", &Session::ping, true},
      {"tools/list", &Session::list_tools, false},
      {"tools/call", &Session::call_tool, false},
      {"resources/list", &Session::list_resources, false},
      {"resources/read", &Session::read_resource, false},
      {"resources/templates/list", &Session::list_resource_templates, false},
  };
  return table;
}

void Session::send(const json& message) {
  const std::string line = serialize_line(message);
  std::lock_guard<std::mutex> lock(write_mutex_);
  if (output_broken_) return;
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(out_fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      output_broken_ = true;
      log_line("the output is closed; nothing more is written");
      return;
    }
    done += static_cast<size_t>(n);
  }
}

void Session::send_error(const json& id, int code, const std::string& message, json data) {
  JsonRpcError error;
  error.code = code;
  error.message = message;
  error.id = id;
  error.data = std::move(data);
  log_line("error " + std::to_string(code) + " to request " + id.dump() + ": " + message);
  send(error_message(error));
}

void Session::on_line(const std::string& line) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;
  JsonRpcError error;
  const std::optional<JsonRpcMessage> message = parse_message(line, &error);
  if (!message) {
    if (error.notification) return log_line("dropped a notification: " + error.message);
    return send_error(error.id, error.code, error.message);
  }
  switch (message->kind) {
    case JsonRpcMessage::Kind::kRequest:
      return on_request(*message);
    case JsonRpcMessage::Kind::kNotification:
      return on_notification(*message);
    case JsonRpcMessage::Kind::kResponse:
      return;  // this server sends no requests: a response answers nothing
  }
}

void Session::on_oversize(size_t bytes) {
  send_error(nullptr, kInvalidRequest,
             "Invalid Request: a message of " + std::to_string(bytes) +
                 " bytes is over the limit of " +
                 std::to_string(context_.options().max_message_bytes) +
                 " bytes (megasched mcp --max-message-bytes)");
}

void Session::on_request(const JsonRpcMessage& m) {
  std::vector<std::string> names;
  for (const Method& method : methods()) {
    names.push_back(method.name);
    if (m.method != method.name) continue;
    if (!initialized_ && !method.before_initialize)
      return send_error(m.id, kInvalidRequest,
                        "Invalid Request: " + m.method +
                            " before initialize; send initialize "
                            "first");
    try {
      (this->*method.handle)(m);
    } catch (const std::exception& e) {
      send_error(m.id, kInternalError, std::string("Internal error: ") + e.what());
    }
    return;
  }
  const std::string near = schedule::nearest(m.method, names);
  send_error(m.id, kMethodNotFound,
             "Method not found: " + m.method +
                 (near.empty() ? "" : " (did you mean " + near + "?)") +
                 "; methods: " + joined(names));
}

void Session::on_notification(const JsonRpcMessage& m) {
  if (m.method != "notifications/cancelled") return;  // initialized, roots: nothing to do
  const json id = m.params.value("requestId", json());
  std::lock_guard<std::mutex> lock(calls_mutex_);
  for (const auto& call : calls_) {
    if (call->id != id || call->finished) continue;
    call->cancel = true;
    log_line("cancelling " + call->tool + " (request " + id.dump() + ")" +
             (m.params.contains("reason") ? ": " + m.params["reason"].dump() : ""));
  }
}

void Session::initialize(const JsonRpcMessage& m) {
  if (initialized_)
    return send_error(m.id, kInvalidRequest,
                      "Invalid Request: initialize was already answered (one session per "
                      "process)");
  if (!m.params.contains("protocolVersion") || !m.params["protocolVersion"].is_string())
    return send_error(m.id, kInvalidParams,
                      "Invalid params: initialize needs params.protocolVersion (a string)");
  const std::string asked = m.params["protocolVersion"].get<std::string>();
  const auto& versions = mcp_protocol_versions();
  version_ = std::find(versions.begin(), versions.end(), asked) != versions.end()
                 ? asked
                 : versions.front();
  initialized_ = true;
  const json client = m.params.value("clientInfo", json::object());
  log_line("initialize: " + (client.is_object() ? client.value("name", "a client") : "a client") +
           " asked for protocol " + asked + "; speaking " + version_);
  send(result_message(
      m.id,
      {{"protocolVersion", version_},
       {"capabilities",
        {{"tools", {{"listChanged", false}}},
         {"resources", {{"subscribe", false}, {"listChanged", false}}}}},
       {"serverInfo", {{"name", "megasched"}, {"title", "megasched"}, {"version", MS_VERSION}}},
       {"instructions", kInstructions}}));
}

void Session::list_tools(const JsonRpcMessage& m) {
  json tools = json::array();
  for (const McpTool& t : mcp_tools()) tools.push_back(tool_definition(t));
  send(result_message(m.id, {{"tools", tools}}));
}

void Session::list_resources(const JsonRpcMessage& m) {
  json resources = json::array();
  for (const McpResource& r : mcp_resources(context_.options()))
    resources.push_back(resource_definition(r));
  send(result_message(m.id, {{"resources", resources}}));
}

void Session::read_resource(const JsonRpcMessage& m) {
  if (!m.params.contains("uri") || !m.params["uri"].is_string())
    return send_error(m.id, kInvalidParams,
                      "Invalid params: resources/read needs params.uri (a string)");
  const std::string uri = m.params["uri"].get<std::string>();
  std::string error;
  const std::optional<std::string> text = read_resource_text(uri, context_.options(), &error);
  if (!text)
    return send_error(m.id, kResourceNotFound, "Resource not found: " + error, {{"uri", uri}});
  std::string mime = "text/plain";
  for (const McpResource& r : mcp_resources(context_.options()))
    if (r.uri == uri) mime = r.mime_type;
  send(result_message(m.id, {{"contents", {{{"uri", uri}, {"mimeType", mime}, {"text", *text}}}}}));
}

void Session::call_tool(const JsonRpcMessage& m) {
  const json& p = m.params;
  if (!p.contains("name") || !p["name"].is_string())
    return send_error(m.id, kInvalidParams,
                      "Invalid params: tools/call needs params.name (a string)");
  const std::string name = p["name"].get<std::string>();
  const McpTool* tool = find_tool(name);
  std::vector<std::string> names;
  for (const McpTool& t : mcp_tools()) names.push_back(t.name);
  if (!tool) {
    const std::string near = schedule::nearest(name, names);
    return send_error(m.id, kInvalidParams,
                      "Unknown tool: " + name +
                          (near.empty() ? "" : " (did you mean " + near + "?)") +
                          "; tools: " + joined(names),
                      {{"tool", name}});
  }
  json arguments = p.contains("arguments") ? p["arguments"] : json::object();
  if (!arguments.is_object())
    return send_error(m.id, kInvalidParams, "Invalid params: params.arguments must be an object");
  const json meta = p.value("_meta", json::object());
  const json token = meta.is_object() ? meta.value("progressToken", json()) : json();
  if (!token.is_null() && !token.is_string() && !token.is_number_integer())
    return send_error(m.id, kInvalidParams,
                      "Invalid params: _meta.progressToken must be a string or an integer");
  const std::vector<SchemaError> errors = check_against_schema(tool->input_schema, arguments);
  if (!errors.empty()) {
    json list = json::array();
    for (const SchemaError& e : errors) list.push_back({{"path", e.path}, {"message", e.message}});
    return send_error(
        m.id, kInvalidParams,
        "Invalid arguments for tool " + name + ": " + describe(errors.front()) +
            (errors.size() > 1 ? " (and " + std::to_string(errors.size() - 1) + " more)" : ""),
        {{"tool", name}, {"errors", list}});
  }
  reap_finished();
  auto call = std::make_shared<InFlight>();
  call->id = m.id;
  call->tool = name;
  call->progress_token = token;
  call->started_s = search::monotonic_seconds();
  {
    std::lock_guard<std::mutex> lock(calls_mutex_);
    for (const auto& other : calls_)
      if (other->id == m.id && !other->finished)
        return send_error(
            m.id, kInvalidRequest,
            "Invalid Request: id " + m.id.dump() + " is already in use by a call in flight");
    calls_.push_back(call);
  }
  log_line("call " + name + " (request " + m.id.dump() + ")");
  call->thread = std::thread([this, call, tool, arguments = std::move(arguments)]() mutable {
    run_call(call, *tool, std::move(arguments));
  });
}

void Session::run_call(const std::shared_ptr<InFlight>& call, const McpTool& tool, json arguments) {
  ToolCall tc;
  tc.arguments = std::move(arguments);
  tc.cancel = &call->cancel;
  if (!call->progress_token.is_null())
    tc.progress = [this, call](double progress, double total, const std::string& message) {
      send_progress(*call, progress, total, message);
    };
  ToolResult result;
  try {
    result = tool.run(tc, context_);
  } catch (const std::exception& e) {
    result.kind = ToolResult::Kind::kToolError;
    result.text = "megasched " + tool.name + ": internal error: " + e.what();
    result.exit_code = 3;
  }
  const std::string took = schedule::fmt("%.2f s", search::monotonic_seconds() - call->started_s);
  if (call->cancel) {
    log_line(tool.name + " (request " + call->id.dump() + ") cancelled after " + took +
             "; no response, as the protocol asks");
  } else if (result.kind == ToolResult::Kind::kInvalidParams) {
    send_error(call->id, kInvalidParams, "Invalid params: " + result.text, {{"tool", tool.name}});
  } else {
    send(result_message(call->id, tool_result(tool, std::move(result))));
    log_line(tool.name + " (request " + call->id.dump() + ") answered after " + took);
  }
  call->finished = true;
}

json Session::tool_result(const McpTool& tool, ToolResult r) const {
  if (r.kind == ToolResult::Kind::kResult && !tool.output_schema.is_null()) {
    const std::vector<SchemaError> errors = check_against_schema(tool.output_schema, r.structured);
    if (!errors.empty()) {
      r.kind = ToolResult::Kind::kToolError;
      r.text = "megasched " + tool.name + ": the result does not match the tool's outputSchema (" +
               describe(errors.front()) + "), a bug to report; the result: " + r.structured.dump();
    }
  }
  const json meta = {{kExitCodeMeta, r.exit_code}};
  if (r.kind != ToolResult::Kind::kResult)
    return {
        {"content", {{{"type", "text"}, {"text", r.text}}}}, {"isError", true}, {"_meta", meta}};
  // The JSON as text too, for clients that read no structuredContent (MCP before 2025-06-18).
  return {{"content",
           {{{"type", "text"},
             {"text", r.structured.dump(-1, ' ', false, json::error_handler_t::replace)}},
            {{"type", "text"}, {"text", r.text}}}},
          {"structuredContent", r.structured},
          {"isError", false},
          {"_meta", meta}};
}

void Session::send_progress(InFlight& call, double progress, double total,
                            const std::string& message) {
  if (call.cancel || progress <= call.last_progress) return;  // progress only grows
  call.last_progress = progress;
  json params = {{"progressToken", call.progress_token}, {"progress", progress}};
  if (total > 0) params["total"] = total;
  if (!message.empty()) params["message"] = message;
  send(notification_message("notifications/progress", params));
}

void Session::reap_finished() {
  std::vector<std::shared_ptr<InFlight>> done;
  {
    std::lock_guard<std::mutex> lock(calls_mutex_);
    auto split = std::stable_partition(calls_.begin(), calls_.end(),
                                       [](const auto& c) { return !c->finished; });
    done.assign(split, calls_.end());
    calls_.erase(split, calls_.end());
  }
  for (const auto& c : done)
    if (c->thread.joinable()) c->thread.join();
}

void Session::finish() {
  const double deadline = search::monotonic_seconds() + kEndOfInputGrace_s;
  for (;;) {
    bool running = false;
    {
      std::lock_guard<std::mutex> lock(calls_mutex_);
      for (const auto& c : calls_) running = running || !c->finished;
    }
    if (!running || search::monotonic_seconds() >= deadline) break;
    ::usleep(10000);
  }
  std::vector<std::shared_ptr<InFlight>> calls;
  {
    std::lock_guard<std::mutex> lock(calls_mutex_);
    for (const auto& c : calls_) {
      if (!c->finished)
        log_line("end of input: cancelling " + c->tool + " (request " + c->id.dump() + ")");
      c->cancel = true;
    }
    calls.swap(calls_);
  }
  for (const auto& c : calls)
    if (c->thread.joinable()) c->thread.join();
}

}  // namespace

const std::vector<std::string>& mcp_protocol_versions() {
  static const std::vector<std::string> versions = {"2025-06-18", "2025-03-26", "2024-11-05"};
  return versions;
}

int serve_mcp(const McpOptions& options, int in_fd, int out_fd) {
  ::signal(SIGPIPE, SIG_IGN);  // a client gone is a failed write, not the end of the process
  Session session(options, out_fd);
  LineReader reader(in_fd, options.max_message_bytes);
  std::string line;
  size_t bytes = 0;
  for (;;) {
    const LineReader::Status status = reader.next(&line, &bytes);
    if (status == LineReader::Status::kEnd) break;
    if (status == LineReader::Status::kOversize)
      session.on_oversize(bytes);
    else
      session.on_line(line);
  }
  log_line("end of input");
  session.finish();
  return 0;
}

}  // namespace megasched::harness
