// Many evaluators at once: the slots a multi-worker loop (`loop --gpus`, `--workers`, `--mpi`)
// hands trials to. A slot is one evaluator, usually a `megasched worker` child pinned to one GPU
// (search/worker_evaluator.h) or one CPU trial slot, or, under MPI, one rank that runs its own
// worker child (search/mpi_pool.h). The loop submits a trial to an idle slot and waits for
// events: a verdict, or a slot that stopped answering (then the loop requeues its trial once).
//
// ThreadedPool runs each slot's evaluator on a thread of its own; a slot never stops answering
// (a worker child's hang is its trial timeout, a verdict). Its evaluators are any eval::Evaluator:
// WorkerEvaluators in the CLI, fakes in the tests.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/evaluator.h"
#include "eval/objective.h"
#include "schedule/config.h"

namespace megasched::search {

/// What a slot came back with.
struct PoolEvent {
  int slot = -1;
  uint64_t ticket = 0;          // the submitter's number for the trial
  bool lost = false;            // the slot stopped answering: no verdict, the trial is not judged
  std::string lost_reason;      // with lost: what happened ("no answer within 600 s")
  eval::Verdict verdict;        // without lost
  std::string harness_failure;  // without lost: the evaluator's harness_failure() of this trial
};

class TrialPool {
 public:
  virtual ~TrialPool() = default;
  /// Slots, lost ones included (slot numbers stay valid).
  virtual int size() const = 0;
  /// The slot's evaluator identity ({"model", "target", "device", ...}).
  virtual nlohmann::json identity(int slot) const = 0;
  /// Which device the slot times on, for results.tsv's timed_on ("gpu1@host", "rank2:cpu@host").
  virtual std::string label(int slot) const = 0;
  /// The schedule id the slot's evaluator would give `config` (computed here, without a round
  /// trip, so a busy slot can be asked).
  virtual std::string schedule_id(int slot, const schedule::ScheduleConfig& config) const = 0;
  /// Starts a trial on an idle, live slot.
  virtual void submit(int slot, uint64_t ticket, const schedule::ScheduleConfig& config) = 0;
  /// The next event, waiting at most timeout_s; nullopt when none came.
  virtual std::optional<PoolEvent> wait(double timeout_s) = 0;
  /// False once the slot stopped answering (it gets no more trials).
  virtual bool alive(int slot) const = 0;
};

/// Device type of an identity: timings compete only within one ("h100/gpu", "h100/cpu").
std::string device_type(const nlohmann::json& identity);

/// The schedule id of `config` for an evaluator identity (eval::trial_schedule_id over its model,
/// seed, target and device) at a timed position, or over an objective.
std::string schedule_id_for_identity(const schedule::ScheduleConfig& config,
                                     const nlohmann::json& identity, int timed_position,
                                     const eval::Objective& objective = {});

class ThreadedPool : public TrialPool {
 public:
  /// One slot per evaluator, labelled labels[i]; ids from `schedule_id` (slot, config).
  using IdFunction = std::function<std::string(int, const schedule::ScheduleConfig&)>;
  ThreadedPool(std::vector<std::unique_ptr<eval::Evaluator>> evaluators,
               std::vector<std::string> labels, IdFunction schedule_id);
  ~ThreadedPool() override;
  ThreadedPool(const ThreadedPool&) = delete;
  ThreadedPool& operator=(const ThreadedPool&) = delete;

  int size() const override { return static_cast<int>(slots_.size()); }
  nlohmann::json identity(int slot) const override { return identities_[slot]; }
  std::string label(int slot) const override { return labels_[slot]; }
  std::string schedule_id(int slot, const schedule::ScheduleConfig& config) const override {
    return id_function_(slot, config);
  }
  void submit(int slot, uint64_t ticket, const schedule::ScheduleConfig& config) override;
  /// Replaces the id function (before the first trial: one that needs the pool's identities).
  void set_id_function(IdFunction schedule_id) { id_function_ = std::move(schedule_id); }
  std::optional<PoolEvent> wait(double timeout_s) override;
  bool alive(int) const override { return true; }

 private:
  struct Slot {
    std::unique_ptr<eval::Evaluator> evaluator;
    std::optional<std::pair<uint64_t, schedule::ScheduleConfig>> job;
    std::thread thread;
  };
  void serve(int slot);

  std::vector<Slot> slots_;
  std::vector<nlohmann::json> identities_;
  std::vector<std::string> labels_;
  IdFunction id_function_;
  std::mutex mutex_;
  std::condition_variable jobs_, events_cv_;
  std::deque<PoolEvent> events_;
  bool closing_ = false;
};

}  // namespace megasched::search
