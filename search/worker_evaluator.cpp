#include "search/worker_evaluator.h"

#include <string>

#include "schedule/config.h"

namespace megasched::search {
namespace {

using nlohmann::json;

std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace

WorkerEvaluator::~WorkerEvaluator() {
  if (child_.running()) {
    child_.close_stdin();
    child_.finish(2.0);
  }
}

bool WorkerEvaluator::ensure_running(std::string* error) const {
  if (child_.running()) return true;
  if (!child_.start(options_.command, error)) return false;
  if (starts_++ > 0) ++restarts_;
  std::string line;
  auto status = child_.read_line(options_.start_timeout_s, &line, options_.cancel);
  if (status != ChildProcess::ReadStatus::kLine) {
    std::string ended =
        status == ChildProcess::ReadStatus::kTimeout
            ? (child_.kill(), "no ready line within " +
                                  std::to_string(static_cast<int>(options_.start_timeout_s)) + " s")
        : status == ChildProcess::ReadStatus::kCancelled ? (child_.kill(), "cancelled")
                                                         : child_.finish(2.0);
    if (error)
      *error = "worker `" + options_.command + "` did not start (" + ended + ")" +
               (child_.stderr_tail().empty() ? "" : ": " + one_line(child_.stderr_tail()));
    child_.kill();
    return false;
  }
  json hello = json::parse(line, nullptr, false);
  if (hello.is_discarded() || !hello.value("ready", false)) {
    if (error)
      *error =
          "worker `" + options_.command + "` is not ready: " +
          (hello.is_object() && hello.contains("error") ? hello["error"].dump() : one_line(line));
    child_.kill();
    return false;
  }
  identity_ = hello.value("identity", json::object());
  return true;
}

bool WorkerEvaluator::start(std::string* error) { return ensure_running(error); }

WorkerEvaluator::Reply WorkerEvaluator::request(const json& message, double timeout_s, json* reply,
                                                std::string* what) const {
  if (!child_.write_line(message.dump())) {
    const std::string ended = child_.finish(2.0);
    *what = "worker gone before the request (" + ended + ")" +
            (child_.stderr_tail().empty() ? "" : "; stderr: " + one_line(child_.stderr_tail()));
    return Reply::kDied;
  }
  return read_reply(timeout_s, reply, what);
}

WorkerEvaluator::Reply WorkerEvaluator::read_reply(double timeout_s, json* reply,
                                                   std::string* what) const {
  std::string line;
  switch (child_.read_line(timeout_s, &line, options_.cancel)) {
    case ChildProcess::ReadStatus::kCancelled:
      child_.kill();
      *what = "cancelled: the request was abandoned and the worker killed";
      return Reply::kCancelled;
    case ChildProcess::ReadStatus::kTimeout:
      child_.kill();
      *what = "no answer within " + std::to_string(static_cast<int>(timeout_s)) +
              " s; worker killed and restarted";
      return Reply::kTimeout;
    case ChildProcess::ReadStatus::kEof: {
      const std::string ended = child_.finish(2.0);
      *what = "worker died (" + ended + ")" +
              (child_.stderr_tail().empty() ? "" : "; stderr: " + one_line(child_.stderr_tail()));
      return Reply::kDied;
    }
    case ChildProcess::ReadStatus::kLine:
      break;
  }
  *reply = json::parse(line, nullptr, false);
  if (reply->is_discarded() || !reply->is_object()) {
    child_.kill();
    *what = "worker answered something that is not a JSON object: " + one_line(line.substr(0, 200));
    return Reply::kGarbage;
  }
  return Reply::kOk;
}

eval::Verdict WorkerEvaluator::failure_verdict(const schedule::ScheduleConfig& config,
                                               const std::string& status,
                                               const std::string& note) const {
  eval::Verdict v;
  v.status = status;
  v.notes.push_back(note);
  v.model = identity_.value("model", "");
  v.target = identity_.value("target", "");
  v.device = identity_.value("device", "");
  auto it = ids_.find(schedule::canonical_string(config));
  if (it != ids_.end()) v.schedule_id = it->second;
  return v;
}

eval::Verdict WorkerEvaluator::harness_failed(const schedule::ScheduleConfig& config,
                                              const std::string& why) {
  child_.kill();
  harness_failure_ = why;
  return failure_verdict(config, "crash", "harness failure, not the schedule's: " + why);
}

eval::Verdict WorkerEvaluator::evaluate(const schedule::ScheduleConfig& config) {
  harness_failure_.clear();
  const json message = {{"op", "evaluate"}, {"config", schedule::to_json(config)}};
  json reply;
  std::string what;
  Reply status = Reply::kDied;
  bool gone_before_request = true;
  // A worker found dead before the request died of something earlier, not of this schedule: one
  // fresh worker gets the request again.
  for (int attempt = 0; attempt < 2 && gone_before_request; ++attempt) {
    std::string error;
    if (!ensure_running(&error)) return harness_failed(config, error);
    if (!child_.write_line(message.dump())) {
      const std::string ended = child_.finish(2.0);
      what = "worker gone before the request (" + ended + ")" +
             (child_.stderr_tail().empty() ? "" : "; stderr: " + one_line(child_.stderr_tail()));
      continue;
    }
    gone_before_request = false;
    status = read_reply(options_.trial_timeout_s, &reply, &what);
  }
  if (gone_before_request) return harness_failed(config, what);
  switch (status) {
    case Reply::kTimeout:
      return failure_verdict(config, "timeout", what);
    case Reply::kDied:
    case Reply::kCancelled:  // the loop abandons the trial (it checks the cancel flag first)
      return failure_verdict(config, "crash", what);
    case Reply::kGarbage:
      return harness_failed(config, what);
    case Reply::kOk:
      break;
  }
  if (!reply.contains("verdict") || !reply["verdict"].is_object())
    return harness_failed(
        config, "worker answered no verdict: " +
                    schedule::json_excerpt(reply.contains("error") ? reply["error"] : reply, 200));
  eval::Verdict v;
  try {
    v = eval::verdict_from_json(reply["verdict"]);
  } catch (const json::exception& e) {
    return harness_failed(config, std::string("worker's verdict is malformed: ") + e.what());
  }
  if (!v.schedule_id.empty()) ids_[schedule::canonical_string(config)] = v.schedule_id;
  // A CUDA error or a device hang leaves the worker's context unusable: start a fresh one.
  if (v.status == "crash" || v.status == "hang" || v.status == "timeout") {
    child_.kill();
    v.notes.push_back("worker restarted after a " + v.status);
  }
  return v;
}

std::string WorkerEvaluator::schedule_id(const schedule::ScheduleConfig& config) const {
  const std::string key = schedule::canonical_string(config);
  auto it = ids_.find(key);
  if (it != ids_.end()) return it->second;
  std::string error;
  json reply;
  std::string what;
  if (ensure_running(&error) &&
      request({{"op", "schedule_id"}, {"config", schedule::to_json(config)}},
              options_.request_timeout_s, &reply, &what) == Reply::kOk &&
      reply.contains("schedule_id") && reply["schedule_id"].is_string()) {
    return ids_[key] = reply["schedule_id"].get<std::string>();
  }
  // The worker cannot say: an id that is still unique to this config, model, target and device
  // (not kept after a cancellation: the worker may well say next time).
  const std::string fallback = schedule::hash_hex(key + "|" + identity_.dump());
  if (options_.cancel && options_.cancel->load()) return fallback;
  return ids_[key] = fallback;
}

namespace {

// The reply to one request line (never throws: a request it cannot read gets {"error": ..}).
json answer_request(eval::Evaluator& evaluator, const std::string& line) {
  if (line.find_first_not_of(" \t\r") == std::string::npos)
    return {{"error",
             "empty request line; send one JSON object per line, e.g. "
             "{\"op\": \"evaluate\", \"config\": {}}"}};
  std::string error;
  const std::optional<json> message = schedule::parse_json_text(line, &error);
  if (!message) return {{"error", "request is not valid JSON: " + error}};
  if (!message->is_object()) return {{"error", "request is not a JSON object"}};
  const bool bare = !message->contains("op");
  if (!bare && !(*message)["op"].is_string())
    return {{"error", "\"op\" must be a string (evaluate, schedule_id or identity), not " +
                          schedule::json_excerpt((*message)["op"])}};
  const std::string op = bare ? "evaluate" : (*message)["op"].get<std::string>();
  if (op == "identity") return {{"identity", evaluator.identity()}};
  if (op != "evaluate" && op != "schedule_id")
    return {{"error", "unknown op '" + schedule::text_excerpt(op) +
                          "'; ops: evaluate, schedule_id, identity"}};
  static const json kEmpty = json::object();
  const auto it = message->find("config");
  const json& config_json = bare ? *message : (it == message->end() ? kEmpty : *it);
  const std::optional<schedule::ScheduleConfig> config =
      schedule::parse_config(config_json, &error);
  if (!config) return {{"error", error}};
  if (op == "schedule_id") return {{"schedule_id", evaluator.schedule_id(*config)}};
  json verdict = eval::to_json(evaluator.evaluate(*config));
  return bare ? verdict : json{{"verdict", verdict}};
}

}  // namespace

int serve_worker(eval::Evaluator& evaluator, std::istream& in, std::ostream& out) {
  out << json{{"ready", true}, {"identity", evaluator.identity()}}.dump() << std::endl;
  int answered = 0;
  std::string line;
  while (std::getline(in, line)) {
    json reply;
    try {
      reply = answer_request(evaluator, line);
    } catch (const std::exception& e) {
      // A bug on this side, not the request's: say so and keep answering.
      reply = {{"error", std::string("worker failed on this request: ") + e.what()}};
    }
    out << reply.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
    ++answered;
  }
  return answered;
}

}  // namespace megasched::search
