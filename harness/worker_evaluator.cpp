#include "harness/worker_evaluator.h"

#include <string>

#include "schedule/config.h"

namespace megasched::harness {
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

eval::Verdict WorkerEvaluator::evaluate(const schedule::ScheduleConfig& config) {
  std::string error;
  if (!ensure_running(&error)) return failure_verdict(config, "crash", error);
  json reply;
  std::string what;
  switch (request({{"op", "evaluate"}, {"config", schedule::to_json(config)}},
                  options_.trial_timeout_s, &reply, &what)) {
    case Reply::kTimeout:
      return failure_verdict(config, "timeout", what);
    case Reply::kDied:
    case Reply::kGarbage:
    case Reply::kCancelled:
      return failure_verdict(config, "crash", what);
    case Reply::kOk:
      break;
  }
  if (!reply.contains("verdict") || !reply["verdict"].is_object()) {
    child_.kill();
    return failure_verdict(
        config, "crash",
        "worker error: " + (reply.contains("error") ? reply["error"].dump() : reply.dump()));
  }
  eval::Verdict v = eval::verdict_from_json(reply["verdict"]);
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

int serve_worker(eval::Evaluator& evaluator, std::istream& in, std::ostream& out) {
  out << json{{"ready", true}, {"identity", evaluator.identity()}}.dump() << std::endl;
  int answered = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json message = json::parse(line, nullptr, false);
    json reply;
    if (message.is_discarded() || !message.is_object()) {
      reply = {{"error", "request is not a JSON object"}};
    } else {
      const bool bare = !message.contains("op");
      const std::string op = bare ? "evaluate" : message.value("op", "");
      const json& config_json = bare ? message : message.value("config", json::object());
      std::string error;
      if (op == "identity") {
        reply = {{"identity", evaluator.identity()}};
      } else if (op != "evaluate" && op != "schedule_id") {
        reply = {{"error", "unknown op '" + op + "'; ops: evaluate, schedule_id, identity"}};
      } else if (auto config = schedule::parse_config(config_json, &error)) {
        if (op == "schedule_id") {
          reply = {{"schedule_id", evaluator.schedule_id(*config)}};
        } else {
          json verdict = eval::to_json(evaluator.evaluate(*config));
          reply = bare ? verdict : json{{"verdict", verdict}};
        }
      } else {
        reply = {{"error", error}};
      }
    }
    out << reply.dump() << std::endl;
    ++answered;
  }
  return answered;
}

}  // namespace megasched::harness
