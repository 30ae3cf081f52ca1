// GPU fault isolation: trials run in a worker process (`megasched worker`), so a CUDA error that
// poisons the context, a segfault or a kernel that never finishes costs one trial, not the loop.
// The WorkerEvaluator is the loop's side of it: an Evaluator that sends each config to the child
// as one JSON line and reads one JSON line back, under a per-trial wall-clock deadline. When the
// child dies, hangs past the deadline, answers garbage, or reports a crash or a hang itself, it
// is killed (its whole process group) and started afresh on the next call. A crash or a hang while
// a trial runs is the schedule's verdict ("crash" or "timeout", what happened in its notes); a
// worker that cannot start, is found dead before the request (after one fresh start), or answers
// something that is no verdict is the harness's failure (harness_failure()), not the schedule's.
//
// Protocol (HARNESS.md, "The worker"): the worker first prints
//   {"ready": true, "identity": {"model": .., "target": .., "device": ..}}
// (or {"ready": false, "error": ".."} and exits), then answers one line per request line:
//   {"op": "evaluate", "config": {..}}      -> {"verdict": {..}}
//   {"op": "schedule_id", "config": {..}}   -> {"schedule_id": ".."}
//   {"op": "identity"}                      -> {"identity": {..}}
//   {..a bare config..}                     -> {..a bare verdict..}   (for people at a terminal)
// and {"error": ".."} for a request it cannot read.
//
// Cancellation (the MCP server's notifications/cancelled): with a cancel flag set, the request in
// flight is abandoned within ChildProcess::kCancelPoll_s and the worker killed; the next call
// starts a fresh one. The verdict such a call returns is a placeholder ("crash", note
// "cancelled"): whoever set the flag discards it, and the loop logs nothing for it.
#pragma once

#include <atomic>
#include <istream>
#include <map>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "eval/evaluator.h"
#include "search/child_process.h"

namespace megasched::search {

struct WorkerOptions {
  std::string command;  // e.g. "/path/megasched worker --model small --gpu auto --device gpu"
  double trial_timeout_s = 300;               // wall clock per evaluate request
  double start_timeout_s = 300;               // until the ready line (model load, reference logits)
  double request_timeout_s = 60;              // schedule_id / identity requests
  const std::atomic<bool>* cancel = nullptr;  // set: abandon the request in flight, kill the worker
};

class WorkerEvaluator : public eval::Evaluator {
 public:
  explicit WorkerEvaluator(WorkerOptions options) : options_(std::move(options)) {}
  ~WorkerEvaluator() override;

  /// Starts the worker and waits for its ready line. False (with *error, including the worker's
  /// stderr) when it does not come up: the loop should not start.
  bool start(std::string* error);

  eval::Verdict evaluate(const schedule::ScheduleConfig& config) override;
  nlohmann::json identity() const override { return identity_; }
  std::string schedule_id(const schedule::ScheduleConfig& config) const override;
  std::string harness_failure() const override { return harness_failure_; }

  /// Workers started after the first (after a crash, a hang or a protocol error).
  int restarts() const { return restarts_; }

  /// The flag later requests watch (nullptr: none); the MCP server sets it per call.
  void set_cancel(const std::atomic<bool>* cancel) { options_.cancel = cancel; }
  void set_trial_timeout(double seconds) { options_.trial_timeout_s = seconds; }

 private:
  // Sends one request and reads one reply line; on failure kills the child and sets *what.
  enum class Reply { kOk, kDied, kTimeout, kGarbage, kCancelled };
  Reply request(const nlohmann::json& message, double timeout_s, nlohmann::json* reply,
                std::string* what) const;
  // Reads the reply to a request already written.
  Reply read_reply(double timeout_s, nlohmann::json* reply, std::string* what) const;
  bool ensure_running(std::string* error) const;
  eval::Verdict failure_verdict(const schedule::ScheduleConfig& config, const std::string& status,
                                const std::string& note) const;
  /// A "crash" verdict that is the harness's failure (harness_failure_ set to `why`).
  eval::Verdict harness_failed(const schedule::ScheduleConfig& config, const std::string& why);

  WorkerOptions options_;
  mutable ChildProcess child_;
  mutable nlohmann::json identity_ = nlohmann::json::object();
  mutable std::map<std::string, std::string> ids_;  // canonical config -> schedule id
  mutable int starts_ = 0;
  mutable int restarts_ = 0;
  std::string harness_failure_;  // of the last evaluate()
};

/// The worker's side: prints the ready line, then answers requests from `in` until end of input.
/// Returns the number of requests answered.
int serve_worker(eval::Evaluator& evaluator, std::istream& in, std::ostream& out);

}  // namespace megasched::search
