#include "search/trial_pool.h"

#include <chrono>

#include "eval/evaluate.h"

namespace megasched::search {

std::string device_type(const nlohmann::json& identity) {
  return identity.value("target", std::string("?")) + "/" +
         identity.value("device", std::string("?"));
}

std::string schedule_id_for_identity(const schedule::ScheduleConfig& config,
                                     const nlohmann::json& identity, int timed_position,
                                     const eval::Objective& objective) {
  return eval::trial_schedule_id(
      config, identity.value("model", std::string()), identity.value("seed", uint64_t{0}),
      identity.value("target", std::string()), identity.value("device", std::string()),
      timed_position, objective);
}

ThreadedPool::ThreadedPool(std::vector<std::unique_ptr<eval::Evaluator>> evaluators,
                           std::vector<std::string> labels, IdFunction schedule_id)
    : slots_(evaluators.size()), labels_(std::move(labels)), id_function_(std::move(schedule_id)) {
  for (size_t i = 0; i < evaluators.size(); ++i) {
    identities_.push_back(evaluators[i]->identity());
    slots_[i].evaluator = std::move(evaluators[i]);
    if (labels_.size() <= i) labels_.push_back("slot" + std::to_string(i));
  }
  for (size_t i = 0; i < slots_.size(); ++i)
    slots_[i].thread = std::thread([this, i] { serve(static_cast<int>(i)); });
}

ThreadedPool::~ThreadedPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  jobs_.notify_all();
  for (Slot& s : slots_)
    if (s.thread.joinable()) s.thread.join();
}

void ThreadedPool::submit(int slot, uint64_t ticket, const schedule::ScheduleConfig& config) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    slots_[slot].job.emplace(ticket, config);
  }
  jobs_.notify_all();
}

void ThreadedPool::serve(int slot) {
  Slot& s = slots_[slot];
  for (;;) {
    std::pair<uint64_t, schedule::ScheduleConfig> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      jobs_.wait(lock, [&] { return closing_ || s.job.has_value(); });
      if (closing_) return;
      job = *s.job;
    }
    // The evaluator is this thread's alone: nothing else calls it while a job is out.
    PoolEvent event;
    event.slot = slot;
    event.ticket = job.first;
    event.verdict = s.evaluator->evaluate(job.second);
    event.harness_failure = s.evaluator->harness_failure();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      s.job.reset();
      events_.push_back(std::move(event));
    }
    events_cv_.notify_all();
  }
}

std::optional<PoolEvent> ThreadedPool::wait(double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!events_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                           [&] { return !events_.empty(); }))
    return std::nullopt;
  PoolEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

}  // namespace megasched::search
