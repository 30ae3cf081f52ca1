#include "search/worker_pool.h"

#include <unistd.h>

#include <cstdlib>
#include <future>
#include <set>
#include <sstream>

#include "eval/device.h"
#include "schedule/format.h"
#include "search/child_process.h"

namespace megasched::search {

std::optional<std::vector<std::string>> parse_gpu_list(const std::string& text, std::string* error,
                                                       bool* environment) {
  *environment = false;
  std::string why;
  const int count = eval::gpu_count(&why);
  if (count == 0) {
    *environment = true;
    *error = "--gpus " + text + ": no GPU here (" + why +
             "); CPU trials in several workers: --device cpu --workers N";
    return std::nullopt;
  }
  // The ids the workers are pinned with: CUDA_VISIBLE_DEVICES's entries when it is set.
  std::vector<std::string> visible;
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES"); env && *env) {
    std::stringstream ss(env);
    for (std::string item; std::getline(ss, item, ',');) visible.push_back(item);
  }
  visible.resize(count);  // a longer list names devices that do not exist
  for (int i = 0; i < count; ++i)
    if (visible[i].empty()) visible[i] = std::to_string(i);
  if (text == "all") return visible;
  const std::optional<std::vector<int>> indexes = schedule::parse_int_list(text);
  if (!indexes || indexes->empty()) {
    *error = "--gpus " + text + ": give all or comma-separated GPU indexes, e.g. 0,1";
    return std::nullopt;
  }
  std::vector<std::string> out;
  std::set<int> seen;
  for (int i : *indexes) {
    if (i < 0 || i >= count) {
      *error = "--gpus " + text + ": GPU " + std::to_string(i) +
               " does not exist (this process sees " + std::to_string(count) + ": 0.." +
               std::to_string(count - 1) + ")";
      return std::nullopt;
    }
    if (!seen.insert(i).second) {
      *error = "--gpus " + text + ": GPU " + std::to_string(i) + " is named twice";
      return std::nullopt;
    }
    out.push_back(visible[i]);
  }
  return out;
}

std::string pinned_command(const std::string& command, const std::string& device) {
  return "CUDA_VISIBLE_DEVICES=" + shell_quote(device) + " " + command;
}

std::string host_name() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) return "localhost";
  return host;
}

std::unique_ptr<ThreadedPool> start_worker_pool(const WorkerPoolOptions& options,
                                                std::string* error) {
  const bool gpu = !options.gpus.empty();
  const int slots = gpu ? static_cast<int>(options.gpus.size()) : options.cpu_slots;
  const std::string host = host_name();
  std::vector<std::unique_ptr<WorkerEvaluator>> workers;
  std::vector<std::string> labels;
  for (int i = 0; i < slots; ++i) {
    WorkerOptions w = options.worker;
    if (gpu) w.command = pinned_command(w.command, options.gpus[i]);
    workers.push_back(std::make_unique<WorkerEvaluator>(w));
    labels.push_back((gpu ? "gpu" + options.gpus[i] : "cpu" + std::to_string(i)) + "@" + host);
  }
  // Every worker loads the model and its reference at once.
  std::vector<std::future<std::string>> started;
  for (auto& w : workers)
    started.push_back(std::async(std::launch::async, [&w] {
      std::string why;
      return w->start(&why) ? std::string() : why;
    }));
  std::string failures;
  for (int i = 0; i < slots; ++i)
    if (const std::string why = started[i].get(); !why.empty())
      failures += (failures.empty() ? "" : "; ") + labels[i] + ": " + why;
  if (!failures.empty()) {
    *error = "workers did not start: " + failures;
    return nullptr;
  }
  std::vector<std::unique_ptr<eval::Evaluator>> evaluators;
  for (auto& w : workers) evaluators.push_back(std::move(w));
  auto pool = std::make_unique<ThreadedPool>(std::move(evaluators), labels, nullptr);
  const int position = options.timed_position;
  const eval::Objective objective = options.objective;
  ThreadedPool* raw = pool.get();
  pool->set_id_function(
      [raw, position, objective](int slot, const schedule::ScheduleConfig& config) {
        return schedule_id_for_identity(config, raw->identity(slot), position, objective);
      });
  return pool;
}

}  // namespace megasched::search
