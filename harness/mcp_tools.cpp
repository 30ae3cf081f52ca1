#include "harness/mcp_tools.h"

#include <chrono>
#include <filesystem>

#include "eval/baselines/baseline.h"
#include "eval/evaluate.h"
#include "eval/profile.h"
#include "eval/profile_run.h"
#include "eval/trial_timing.h"
#include "flywheel/registry.h"
#include "harness/cli_util.h"
#include "harness/json_schema.h"
#include "harness/mcp_tool_schemas.h"
#include "harness/plan_loop.h"
#include "harness/promote.h"
#include "harness/run_record.h"
#include "harness/trial_flags.h"
#include "harness/verbs.h"
#include "schedule/format.h"
#include "schedule/lookup.h"
#include "search/child_process.h"

namespace megasched::harness {

// ---- the shared context -------------------------------------------------------------------

std::unique_lock<std::timed_mutex> McpContext::take_device(const ToolCall& call) {
  std::unique_lock<std::timed_mutex> lock(device_, std::defer_lock);
  while (!call.cancelled() && !lock.try_lock_for(std::chrono::milliseconds(50))) {
  }
  if (call.cancelled() && lock.owns_lock()) lock.unlock();
  return lock;
}

search::WorkerEvaluator* McpContext::worker(const std::string& command, const ToolCall& call,
                                            std::string* error) {
  if (!worker_ || worker_command_ != command) {
    end_worker();
    search::WorkerOptions options;
    options.command = command;
    options.cancel = call.cancel;
    auto fresh = std::make_unique<search::WorkerEvaluator>(options);
    if (!fresh->start(error)) return nullptr;
    worker_ = std::move(fresh);
    worker_command_ = command;
  }
  worker_->set_cancel(call.cancel);
  return worker_.get();
}

void McpContext::end_worker() {
  worker_.reset();
  worker_command_.clear();
}

namespace {

using nlohmann::json;
using schedule::fmt;

// ---- reading arguments --------------------------------------------------------------------

/// A call's arguments with its schema's defaults for the ones the client left out.
class Arguments {
 public:
  Arguments(const json& arguments, const json& schema) : arguments_(arguments), schema_(schema) {}
  bool has(const std::string& key) const { return arguments_.contains(key); }
  const json& get(const std::string& key) const {
    return has(key) ? arguments_.at(key) : schema_.at("properties").at(key).at("default");
  }
  std::string text(const std::string& key) const { return get(key).get<std::string>(); }
  int integer(const std::string& key) const { return get(key).get<int>(); }
  uint64_t seed(const std::string& key) const { return get(key).get<uint64_t>(); }
  double number(const std::string& key) const { return get(key).get<double>(); }
  bool flag(const std::string& key) const { return get(key).get<bool>(); }
  /// A list of integers as the CLI takes it: "0,3,7".
  std::string int_list(const std::string& key) const {
    std::string out;
    for (const json& v : get(key)) out += (out.empty() ? "" : ",") + std::to_string(v.get<int>());
    return out;
  }

 private:
  const json& arguments_;
  const json& schema_;
};

/// A config argument: an object, or a name or file path (not "-": stdin is the protocol); a plan
/// (best:MODEL:GPU) gives the config of the bucket that holds `position` (-1: a plan is refused).
std::optional<schedule::ScheduleConfig> config_argument(const Arguments& a, const std::string& key,
                                                        std::string* error, int position = -1) {
  if (!a.has(key)) return schedule::ScheduleConfig{};
  const json& value = a.get(key);
  std::string why;
  if (value.is_object()) {
    auto config = schedule::parse_config(value, &why);
    if (!config) *error = key + ": " + why;
    return config;
  }
  const std::string ref = value.get<std::string>();
  if (ref == "-") {
    *error = key +
             ": '-' would read stdin, which carries the protocol here; pass the config "
             "object itself";
    return std::nullopt;
  }
  auto config = read_config_arg(ref, &why, nullptr, position);
  if (!config) *error = key + ": " + why;
  return config;
}

ToolResult tool_error(int exit_code, const std::string& message) {
  ToolResult r;
  r.kind = ToolResult::Kind::kToolError;
  r.text = message;
  r.exit_code = exit_code;
  return r;
}

ToolResult invalid_params(const std::string& message) {
  ToolResult r = tool_error(kExitUsage, message);
  r.kind = ToolResult::Kind::kInvalidParams;
  return r;
}

ToolResult cancelled() { return tool_error(kExitFailure, "cancelled"); }

/// A verb's outcome: its document and `summary(document)`, or its message as a tool error.
ToolResult from_verb(const std::string& tool, const VerbResult& verb,
                     std::string (*summary)(const json&)) {
  if (verb.document.is_null())
    return tool_error(verb.exit_code, "megasched " + tool + ": " + verb.message);
  ToolResult r;
  r.structured = verb.document;
  r.text = summary(verb.document);
  if (!verb.message.empty()) r.text += "; " + verb.message;
  r.exit_code = verb.exit_code;
  return r;
}

std::string first_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const size_t last = text.rfind('\n');
  return last == std::string::npos ? text : text.substr(last + 1);
}

// ---- summaries ----------------------------------------------------------------------------

std::string verdict_summary(const eval::Verdict& v) {
  std::string s;
  if (v.status == "ok" && v.correct && v.latency_us) {
    s = "valid and correct: " + fmt("%.3f us ", *v.latency_us) + v.latency_kind;
    if (v.pct_of_floor)
      s += fmt(", %.2f%% of the floor ", *v.pct_of_floor) + fmt("(%.3f us)", v.floor_us);
  } else if (v.status == "ok" && v.correct) {
    s = "valid and correct, no latency";
  } else if (v.status == "rejected" || !v.valid) {
    s = "rejected (" + v.rejected_reason + "): nothing ran";
    if (!v.diagnostics.empty()) s += "; " + v.diagnostics[0].value("message", "");
  } else if (v.status == "incorrect" || !v.correct) {
    s = "incorrect: " + fmt("rel_err %.3g", v.rel_err) + fmt(", max_abs_err %.3g", v.max_abs_err) +
        (v.argmax_match ? "" : ", argmax differs") + "; no latency";
  } else {
    s = v.status;
  }
  if (v.status != "ok" && !v.notes.empty()) s += ": " + v.notes.front();
  return s + "; schedule " + v.schedule_id + " (" + v.model + " on " + v.target + ", " + v.device +
         ")";
}

std::string propose_summary(const json& doc) {
  return doc.value("model", "") + " on " + doc.value("target", "") + ": the incumbent " +
         (doc.value("incumbent_fits", false)
              ? "fits"
              : "does not fit (" + doc.value("incumbent_fit_error", "") + ")") +
         "; " + std::to_string(doc["search_space"]["knobs"].size()) + " knobs, " +
         fmt("%.3g", doc["search_space"].value("size", 0.0)) +
         " configs. Edit `incumbent` (any knob to any listed choice) and call evaluate with it as "
         "`config`.";
}

/// "; kernel: 255 registers, no spills" (or its spills, or why it did not build); "" without one.
std::string kernel_summary(const json& doc) {
  if (!doc.contains("kernel")) return "";
  const json& k = doc["kernel"];
  if (!k.value("ok", false)) return "; kernel build failed: " + k.value("error", std::string());
  if (!k.contains("registers")) return "; kernel built, " + k.value("note", std::string());
  const int spilled = k.value("spill_store_bytes", 0) + k.value("spill_load_bytes", 0);
  return "; kernel: " + std::to_string(k.value("registers", 0)) + " registers, " +
         (spilled > 0 ? std::to_string(k.value("spill_store_bytes", 0)) + " bytes spilled"
                      : std::string("no spills"));
}

std::string validate_summary(const json& doc) {
  if (doc.contains("configs"))
    return "accepted " + std::to_string(doc.value("accepted", 0)) + " of " +
           std::to_string(doc.value("configs", 0)) + " random configs (" +
           std::to_string(doc.value("not_lowered", 0)) + " did not lower)";
  const std::string size = std::to_string(doc.value("tasks", 0)) + " tasks";
  if (doc.value("ok", false)) return "safe: " + size + ", no diagnostics" + kernel_summary(doc);
  std::string rules;
  for (const json& r : doc.value("rules", json::array()))
    rules += (rules.empty() ? "" : ", ") + r.get<std::string>();
  std::string s = "unsafe (" + rules + "): " + size + ", " +
                  std::to_string(doc["diagnostics"].size()) + " diagnostics";
  if (!doc["diagnostics"].empty()) s += "; " + doc["diagnostics"][0].value("message", "");
  return s + kernel_summary(doc);
}

std::string loop_summary(const json& doc) {
  std::string counts;
  const json status_counts = doc.value("status_counts", json::object());
  for (const auto& [status, n] : status_counts.items())
    if (n.get<int>() > 0) counts += (counts.empty() ? "" : ", ") + n.dump() + " " + status;
  std::string s = "stop: " + doc.value("stop_reason", "") + "; " +
                  std::to_string(doc.value("trials", 0)) + " trials (" + counts + ")";
  const json& best = doc["best"];
  if (best.is_object()) {
    s +=
        "; best " + fmt("%.3f us ", best.value("latency_us", 0.0)) + best.value("latency_kind", "");
    if (best["speedup_vs_default"].is_number())
      s += fmt(" (%.2fx the default)", best["speedup_vs_default"].get<double>());
    s += ", schedule " + best.value("schedule_id", "");
  } else {
    s += "; no correct trial with a latency";
  }
  return s + "; logged to " + doc.value("results", "") + " and " + doc.value("corpus", "");
}

std::string plan_loop_summary(const json& doc) {
  std::string s = "plan search of " + std::to_string(doc.value("buckets", json::array()).size()) +
                  " buckets, " + std::to_string(doc.value("evaluations", 0)) + " evaluations";
  if (doc["plan"].is_null()) return s + "; no plan: " + doc.value("incomplete", std::string());
  const json plan = doc["plan"];
  const size_t kept = plan.contains("buckets") ? plan["buckets"].size() : 1;
  return s + "; the plan has " + std::to_string(kept) + " bucket(s) after merging " +
         std::to_string(doc.value("merged", 0)) +
         (doc.contains("plan_file") ? "; written to " + doc.value("plan_file", std::string())
                                    : std::string());
}

std::string report_summary(const json& doc) {
  std::string s;
  for (const json& g : doc.value("groups", json::array())) {
    s += g.value("model", "") + " on " + g.value("target", "") + " (" + g.value("device", "") +
         "): " + std::to_string(g.value("trials", 0)) + " trials";
    if (g["best"].is_object() && g["best"]["latency_us"].is_number()) {
      s += fmt(", best %.3f us ", g["best"]["latency_us"].get<double>()) +
           g.value("latency_kind", "");
      if (g["best"]["speedup_vs_default"].is_number())
        s += fmt(" (%.2fx the default)", g["best"]["speedup_vs_default"].get<double>());
    }
    s += "\n";
  }
  if (s.empty()) s = "no trials\n";
  if (doc.contains("html")) s += "html: " + doc["html"].get<std::string>() + "\n";
  return s;
}

// ---- the tools ----------------------------------------------------------------------------

ToolResult propose_tool(const ToolCall& call, McpContext&) {
  const Arguments a(call.arguments, propose_schema());
  std::string error;
  auto config = config_argument(a, "config", &error, a.integer("position"));
  if (!config) return tool_error(kExitUsage, "megasched propose: " + error);
  return from_verb("propose", propose_incumbent(a.text("model"), a.text("gpu"), *config),
                   propose_summary);
}

ToolResult validate_tool(const ToolCall& call, McpContext&) {
  const Arguments a(call.arguments, validate_schema());
  ValidateRequest request;
  request.model = a.text("model");
  request.model_given = a.has("model");
  request.gpu = a.text("gpu");
  request.random_configs = a.integer("random_configs");
  request.seed = a.seed("seed");
  request.kernel = a.flag("kernel");
  const int given =
      (a.has("config") ? 1 : 0) + (a.has("program") ? 1 : 0) + (request.random_configs > 0 ? 1 : 0);
  if (given > 1) return invalid_params("validate takes one of config, program, random_configs");
  std::string error;
  if (a.has("program")) {
    request.program_label = "arguments.program";
    request.program = schedule::program_from_json(a.get("program"), &error);
    if (!request.program)
      return tool_error(kExitUsage,
                        "megasched validate: program '" + request.program_label + "': " + error);
  } else if (request.random_configs == 0) {
    request.config = config_argument(a, "config", &error);
    if (!request.config) return tool_error(kExitUsage, "megasched validate: " + error);
  }
  return from_verb("validate", validate_schedule(request), validate_summary);
}

ToolResult evaluate_tool(const ToolCall& call, McpContext& context) {
  const Arguments a(call.arguments, evaluate_schema());
  std::string error;
  auto config = config_argument(a, "config", &error, a.integer("timed_position"));
  if (!config) return tool_error(kExitUsage, "megasched evaluate: " + error);
  TrialFlags flags;
  flags.ev.model = a.text("model");
  flags.ev.gpu = a.text("gpu");
  flags.ev.device = a.text("device");
  flags.ev.seed = a.seed("seed");
  flags.ev.timed_position = a.integer("timed_position");
  flags.positions = a.int_list("positions");
  flags.objective = a.text("objective");
  if (!flags.parse_positions(&error) || !flags.parse_objective(&error, "objective"))
    return tool_error(kExitUsage, "megasched evaluate: " + error);
  const auto baselines = eval::parse_baseline_selection(a.text("baselines"), &error);
  if (!baselines) return tool_error(kExitUsage, "megasched evaluate: baselines " + error);
  flags.ev.gpu_options.baselines = *baselines;
  // The model and the target here, for the CLI's messages; the worker loads them.
  const auto shape = schedule::resolve_shape(flags.ev.model, &error);
  if (!shape) return tool_error(kExitUsage, "megasched evaluate: " + error);
  if (const std::string why =
          eval::objective_range_error(flags.ev.objective, shape->name, shape->max_seq, "objective");
      !why.empty())
    return tool_error(kExitUsage, "megasched evaluate: " + why);
  if (!eval::resolve_target(flags.ev.gpu, &error))
    return tool_error(flags.ev.gpu == "auto" ? kExitEnvironment : kExitUsage,
                      "megasched evaluate: " + error);

  auto device = context.take_device(call);
  if (!device.owns_lock()) return cancelled();
  call.progress(0, 2,
                "starting the worker (" + flags.ev.model + " on " + flags.ev.gpu + ", " +
                    flags.ev.device + ")");
  search::WorkerEvaluator* worker =
      context.worker(worker_command(context.options().executable, flags), call, &error);
  if (call.cancelled()) return cancelled();
  if (!worker) return tool_error(kExitEnvironment, "megasched evaluate: " + error);
  struct Unhook {  // the worker outlives this call; its cancel flag does not
    search::WorkerEvaluator* worker;
    ~Unhook() { worker->set_cancel(nullptr); }
  } unhook{worker};
  worker->set_trial_timeout(a.number("trial_timeout"));
  const std::string id = worker->schedule_id(*config);
  call.progress(1, 2, "running the trial of schedule " + id);
  const eval::Verdict verdict = worker->evaluate(*config);
  if (call.cancelled()) return cancelled();
  ToolResult r;  // no last progress notification: the response says the trial is done
  r.structured = eval::to_json(verdict);
  r.text = verdict_summary(verdict);
  r.exit_code = verdict_exit_code(verdict);
  return r;
}

ToolResult loop_tool(const ToolCall& call, McpContext& context) {
  const Arguments a(call.arguments, loop_schema());
  LoopCommand command;
  command.trial.ev.model = a.text("model");
  command.trial.ev.gpu = a.text("gpu");
  command.trial.ev.seed = a.seed("weight_seed");
  command.trial.ev.timed_position = a.integer("timed_position");
  command.trial.positions = a.int_list("positions");
  command.trial.objective = a.text("objective");
  command.objective_flag = "objective";
  std::string error;
  const auto baselines = eval::parse_baseline_selection(a.text("baselines"), &error);
  if (!baselines) return tool_error(kExitUsage, "megasched loop: baselines " + error);
  command.trial.ev.gpu_options.baselines = *baselines;
  command.trial.ev.stop_slower = a.number("stop_slower");
  if (const std::string why = eval::stop_slower_error(command.trial.ev.stop_slower); !why.empty())
    return tool_error(kExitUsage, "megasched loop: stop_slower " + why);
  command.device = a.text("device");
  command.strategy.name = a.text("strategy");
  command.strategy.seed = a.seed("seed");
  command.strategy.restart_after = a.integer("restart_after");
  command.strategy.exploration = a.number("exploration");
  command.strategy.pool_size = a.integer("pool");
  command.strategy.elite_size = a.integer("elite");
  command.strategy.candidates = a.integer("candidates");
  command.strategy.guard = a.number("guard");
  command.loop.budget = a.integer("budget");
  command.loop.minutes = a.number("minutes");
  command.loop.plateau = a.integer("plateau");
  // Absent: the device's default (harness/verbs.h kGpuMinGain), resolved with the device.
  if (a.has("min_gain")) {
    command.min_gain = a.number("min_gain");
    if (!(command.min_gain >= 0.0 && command.min_gain <= 0.5))
      return tool_error(kExitUsage,
                        "megasched loop: min_gain must be in [0, 0.5] (a share of the "
                        "incumbent's latency; 0.01 is 1%); hint: 0.005 for half a "
                        "percent, or leave it out for the device's default");
  }
  if (a.has("confirm")) command.confirm = a.integer("confirm");
  command.loop.resume = a.flag("resume");
  command.loop.warm_start = a.flag("warm_start");
  command.loop.results_path = context.options().results_path;
  command.loop.corpus_path = context.options().corpus_path;
  if (a.has("start")) {
    command.start_config = config_argument(a, "start", &error, command.trial.ev.timed_position);
    if (!command.start_config) return tool_error(kExitUsage, "megasched loop: " + error);
  }
  // Every trial in a worker: a crash costs the trial, a cancellation kills the trial in flight.
  command.isolate = true;
  command.trial_timeout_s = a.number("trial_timeout");
  command.executable = context.options().executable;
  command.loop.cancel = call.cancel;
  command.loop.progress = &std::cerr;
  command.loop.on_trial = [&call](int done, int budget, const std::string& line) {
    call.progress(done, budget, line);
  };
  auto device = context.take_device(call);
  if (!device.owns_lock()) return cancelled();
  context.end_worker();
  // The run directory, as the CLI's loop writes it: runs/ beside the server's results file.
  command.on_end = [&command](const VerbResult& result) {
    write_loop_run_dir("", command, result);
  };
  PlanLoopFlags plan;
  plan.buckets = a.int_list("plan_buckets");
  call.progress(0, command.loop.budget, "starting the loop's worker");
  const VerbResult verb =
      plan.given() ? run_plan_loop_command(command, plan) : run_loop_command(command);
  if (call.cancelled()) return cancelled();
  if (verb.exit_code == kExitUsage || verb.exit_code == kExitEnvironment)
    return tool_error(verb.exit_code, "megasched loop: " + verb.message);
  return from_verb("loop", verb, plan.given() ? plan_loop_summary : loop_summary);
}

ToolResult report_tool(const ToolCall& call, McpContext& context) {
  const Arguments a(call.arguments, report_schema());
  ReportRequest request;
  request.results_path = context.options().results_path;
  request.corpus_path = context.options().corpus_path;
  request.html_path = a.flag("html") ? context.options().report_path : "";
  request.model = a.text("model");
  request.target = a.text("target");
  return from_verb("report", build_report_document(request), report_summary);
}

/// `megasched profile` in a child process: a kernel that faults or hangs takes the child only.
std::string profile_command(const Arguments& a, const McpOptions& options,
                            const std::string& config) {
  std::string command =
      search::shell_quote(options.executable.empty() ? this_executable() : options.executable) +
      " profile --model " + search::shell_quote(a.text("model")) + " --gpu " +
      search::shell_quote(a.text("gpu")) + " --config " + search::shell_quote(config);
  for (const char* flag : {"position", "token", "warmup", "seed"}) {
    const json value = a.get(flag);
    if (std::string(flag) == "token" && value == -1) continue;  // -1: profile's own token sequence
    command += std::string(" --") + flag + " " + value.dump();
  }
  return command + " --out " + search::shell_quote(options.profile_path) + " --json";
}

ToolResult profile_tool(const ToolCall& call, McpContext& context) {
  const Arguments a(call.arguments, profile_schema());
  std::string config = "default", config_text;
  if (a.has("config") && a.get("config").is_object()) {
    config = "-";  // sent on the child's stdin
    config_text = a.get("config").dump();
  } else if (a.has("config")) {
    config = a.text("config");
    if (config == "-")
      return tool_error(kExitUsage,
                        "megasched profile: config: '-' would read stdin, which "
                        "carries the protocol here; pass the config object itself");
  }
  const McpOptions& options = context.options();
  auto device = context.take_device(call);
  if (!device.owns_lock()) return cancelled();
  context.end_worker();
  std::error_code ec;
  const auto parent = std::filesystem::path(options.profile_path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  call.progress(0, 1, "profiling one stamped step");
  search::ChildProcess child;
  std::string error, out;
  if (!child.start(profile_command(a, options, config), &error))
    return tool_error(kExitEnvironment, "megasched profile: " + error);
  if (!config_text.empty()) child.write_line(config_text);
  child.close_stdin();
  const auto status = child.read_all(a.number("timeout"), &out, call.cancel);
  if (status == search::ChildProcess::ReadStatus::kCancelled) return child.kill(), cancelled();
  if (status == search::ChildProcess::ReadStatus::kTimeout)
    return child.kill(), tool_error(kExitEnvironment, "megasched profile: no result within " +
                                                          a.get("timeout").dump() + " s; killed");
  const std::string ended = child.finish(10.0);
  if (child.exit_code() != kExitOk) {
    const std::string said = first_line(child.stderr_tail());
    return tool_error(child.exit_code() > 0 ? child.exit_code() : kExitEnvironment,
                      said.empty() ? "megasched profile ended: " + ended : said);
  }
  json doc = json::parse(out, nullptr, false);
  if (!doc.is_object()) return tool_error(kExitEnvironment, "megasched profile printed no JSON");
  ToolResult r;
  r.text = eval::format_profile(doc, 15);
  doc.erase("tasks");  // the timeline stays in the file: one entry per task is too much to read
  doc["timeline"] = options.profile_path;
  r.structured = std::move(doc);
  call.progress(1, 1, "profiled");
  return r;
}

// ---- the verified registry ------------------------------------------------------------------

ToolResult registry_show_tool(const ToolCall& call, McpContext&) {
  const Arguments a(call.arguments, registry_show_schema());
  return from_verb(
      "registry show", registry_show(flywheel::default_registry_path(), a.text("id")),
      [](const json& doc) { return "registry entry " + doc["id"].get<std::string>(); });
}

std::string registry_summary(const json& doc) {
  return std::to_string(doc["entries"].size()) + " verified entries in " +
         doc["registry"].get<std::string>();
}

ToolResult registry_list_tool(const ToolCall&, McpContext&) {
  return from_verb("registry list", registry_list(flywheel::default_registry_path()),
                   registry_summary);
}

/// The run directories of the server's promotions: runs/ beside its results file.
std::string runs_dir_beside(const std::string& results_path) {
  const std::filesystem::path parent = std::filesystem::path(results_path).parent_path();
  return (parent.empty() ? std::filesystem::path("runs") : parent / "runs").string();
}

/// `megasched promote` in a child process (its trials run there, never in the server): a failed
/// gate is a result (promoted false, exit code 1), bad arguments or no GPU a tool error.
ToolResult promote_tool(const ToolCall& call, McpContext& context) {
  const Arguments a(call.arguments, promote_schema());
  const json config_arg = a.get("config");
  const std::string config = config_arg.is_object() ? "-" : a.text("config");
  if (config == "-" && !config_arg.is_object())
    return tool_error(kExitUsage,
                      "megasched promote: config: '-' would read stdin, which carries "
                      "the protocol here; pass the config object itself");
  const McpOptions& options = context.options();
  std::string command =
      search::shell_quote(options.executable.empty() ? this_executable() : options.executable) +
      " promote --model " + search::shell_quote(a.text("model")) + " --gpu " +
      search::shell_quote(a.text("gpu")) + " --device " + search::shell_quote(a.text("device")) +
      " --config " + search::shell_quote(config) + " --rounds " + a.get("rounds").dump() +
      " --tokens " + a.get("tokens").dump() + (a.flag("verify_only") ? " --verify-only" : "") +
      " --runs-dir " + search::shell_quote(runs_dir_beside(options.results_path));
  auto device = context.take_device(call);
  if (!device.owns_lock()) return cancelled();
  context.end_worker();
  call.progress(0, 1, "promoting: verify gate, then the benchmark gate");
  search::ChildProcess child;
  std::string error, out;
  if (!child.start(command, &error))
    return tool_error(kExitEnvironment, "megasched promote: " + error);
  if (config_arg.is_object()) child.write_line(config_arg.dump());
  child.close_stdin();
  const auto status = child.read_all(a.number("timeout"), &out, call.cancel);
  if (status == search::ChildProcess::ReadStatus::kCancelled) return child.kill(), cancelled();
  if (status == search::ChildProcess::ReadStatus::kTimeout)
    return child.kill(), tool_error(kExitEnvironment, "megasched promote: no result within " +
                                                          a.get("timeout").dump() + " s; killed");
  const std::string ended = child.finish(10.0);
  json doc = json::parse(out, nullptr, false);
  if (!doc.is_object()) {
    const std::string said = first_line(child.stderr_tail());
    return tool_error(child.exit_code() > 0 ? child.exit_code() : kExitEnvironment,
                      said.empty() ? "megasched promote ended: " + ended : said);
  }
  ToolResult r;
  r.text = doc.value("message", std::string());
  r.structured = std::move(doc);
  r.exit_code = child.exit_code();
  call.progress(1, 1, "done");
  return r;
}

json read_only() { return {{"readOnlyHint", true}, {"openWorldHint", false}}; }

json writes(bool idempotent) {
  return {{"readOnlyHint", false},
          {"destructiveHint", false},
          {"idempotentHint", idempotent},
          {"openWorldHint", false}};
}

}  // namespace

const std::vector<McpTool>& mcp_tools() {
  static const std::vector<McpTool> tools = {
      {"propose", "Propose: the incumbent config and the search space",
       "The incumbent ScheduleConfig (the default, or `config`) and the search space of a model "
       "on a GPU target: every knob with its dotted path, allowed choices, default and meaning. "
       "Edit the incumbent and pass it to evaluate as `config`. Same JSON as `megasched "
       "propose`.",
       propose_schema(), propose_output_schema(), read_only(), propose_tool},
      {"evaluate", "Evaluate: one trial of one config",
       "Lowers the config into a megakernel program, validates it (deadlock, races, coverage, "
       "launch), checks its output against an eager forward at `positions`, and times it (device "
       "gpu: measured) or predicts its latency (device cpu), held to the HBM floor. Gives the "
       "Verdict of `megasched evaluate` (schemas/verdict.schema.json): valid, correct, "
       "latency_us with latency_kind, floor_us, status. The trial runs in a worker process (a "
       "crash is a verdict, not a server failure); progress and cancellation are honoured. "
       "Nothing is logged: the loop tool logs.",
       evaluate_schema(), schema_file("verdict.schema.json"), read_only(), evaluate_tool},
      {"validate", "Validate: prove a schedule safe to launch",
       "The validator's verdict on a config lowered for a model and target (or a program JSON, or "
       "random configs): ok, the rules broken (structure, reachability, deadlock, race, "
       "coverage, launch) and a diagnostic per violation. Same JSON as `megasched validate`.",
       validate_schema(), nullptr, read_only(), validate_tool},
      {"loop", "Loop: search schedules over a bounded budget",
       "The keep/revert search of `megasched loop`: trial 0 (the default, warm_start's best or "
       "start), then the strategy proposes, every trial runs in a worker, the keep rule (correct "
       "first, faster beyond max(min_gain, 2 sigma), a difference inside the noise settled by "
       "`confirm` back-to-back rounds, near-ties to the simpler config) decides, and "
       "every trial is logged to the server's results.tsv and corpus.jsonl. Progress: one "
       "notification per trial. Cancelling stops the trial in flight (it is not logged) and the "
       "loop; `resume` continues the run later. Gives the loop's summary JSON.",
       loop_schema(), nullptr, writes(false), loop_tool},
      {"report", "Report: what the logs say",
       "The analyst report of the server's results.tsv and corpus.jsonl, per model, target and "
       "device: best config and verdict, status counts, keep rate, best so far per trial, "
       "median latency per knob value, the keep rule's confirm rounds by outcome (`megasched "
       "report --format json`); also writes the HTML page.",
       report_schema(), nullptr, writes(true), report_tool},
      {"profile", "Profile: where one step's time goes (GPU)",
       "One decode step of the config with a timestamp per task, on the GPU (`megasched "
       "profile`): per-op and per-block time, the critical path; the task timeline is written to "
       "the server's profile path (field `timeline`). Needs a CUDA device; without one it is a "
       "tool error pointing to evaluate on the cpu device.",
       profile_schema(), nullptr, writes(true), profile_tool},
      {"promote", "Promote: a config into the verified registry",
       "`megasched promote`: the verify gate (valid, correct at positions 0, 1024 and 4096 and "
       "a generate --verify of `tokens` tokens), then the benchmark gate (the candidate and the "
       "registry's newest entry for the model, GPU and dtype, or the default config, re-measured "
       "in interleaved rounds; promoted at >= 1.10x), then an append to registry/verified.jsonl "
       "($MEGASCHED_REGISTRY). A failed gate is a result naming the gate with its numbers "
       "(promoted false, exit code 1). device cpu compares the cost model's predictions (the entry "
       "says latency_kind predicted; best: names prefer measured entries). A plan file path as "
       "config (e.g. a loop run's plan.json) is verified bucket by bucket and benchmarked over "
       "its weighted objective (HARNESS.md section 15).",
       promote_schema(), nullptr, writes(false), promote_tool},
      {"registry_list", "Registry: the verified configs",
       "Every entry of the verified registry (`megasched registry list`): id, model, GPU, dtype, "
       "median, speedup, incumbent, run id; corrupt lines are listed under problems (exit code "
       "1) and the other entries kept. `best:<model>:<gpu>` names resolve to the newest entry.",
       registry_list_schema(), nullptr, read_only(), registry_list_tool},
      {"registry_show", "Registry: one verified entry",
       "One entry of the verified registry by id (`megasched registry show ID`): the config, both "
       "medians and every round, the speedup, latency_kind (measured-gpu or predicted), the "
       "device, "
       "driver, commit and run id. An unknown id is a tool error naming the nearest one.",
       registry_show_schema(), nullptr, read_only(), registry_show_tool},
  };
  return tools;
}

json tool_definition(const McpTool& tool) {
  json d = {{"name", tool.name},
            {"title", tool.title},
            {"description", tool.description},
            {"inputSchema", tool.input_schema},
            {"annotations", tool.annotations}};
  if (!tool.output_schema.is_null()) d["outputSchema"] = tool.output_schema;
  return d;
}

}  // namespace megasched::harness
