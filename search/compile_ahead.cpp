#include "search/compile_ahead.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "eval/prepare.h"
#include "schedule/format.h"

namespace megasched::search {

using nlohmann::json;
using schedule::ScheduleConfig;

Prebuilder kernel_prebuilder(const schedule::ModelShape& shape, const schedule::GpuTarget& target,
                             const std::string& cache_dir) {
  Prebuilder p;
  p.prepare = [shape, target, cache_dir](const ScheduleConfig& config) {
    const eval::PreparedProgram prepared = eval::prepare_program(shape, target, config);
    if (!prepared.ok()) return std::optional<vm::BuildRequest>();
    return std::optional(vm::megakernel_request(*prepared.program, target.sm_arch, cache_dir));
  };
  p.build = [](const vm::BuildRequest& request) { return vm::build_cubin(request); };
  return p;
}

std::string compile_ahead_unavailable(const schedule::GpuTarget& target) {
  if (!vm::nvrtc_available())
    return "this megasched was built without the CUDA toolkit (no NVRTC), so it cannot build "
           "kernels ahead; rebuild with -DMEGASCHED_CUDA=ON or pass --compile-ahead 0";
  if (target.sm_arch <= 0)
    return "the target " + target.name + " names no arch to build kernels for";
  return "";
}

int default_compile_threads(int workers) {
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hardware - 1, 1, 8 * std::max(workers, 1));
}

CompileAhead::CompileAhead(Prebuilder prebuilder, int threads, int capacity)
    : prebuilder_(std::move(prebuilder)), capacity_(std::max(capacity, 1)) {
  for (int t = 0; t < std::max(threads, 1); ++t) threads_.emplace_back([this] { serve(); });
}

CompileAhead::~CompileAhead() { cancel(); }

bool CompileAhead::submit(const std::string& id, const ScheduleConfig& config,
                          uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancelled_ || ids_.count(id)) return false;
    if (static_cast<int>(queue_.size()) >= capacity_) {
      ++counters_.refused_full;
      return false;
    }
    ids_.insert(id);
    queue_.push_back({id, config, generation});
    ++counters_.queued;
  }
  wake_.notify_one();
  return true;
}

int CompileAhead::drop_stale(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  int dropped = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->generation == generation) {
      ++it;
      continue;
    }
    ids_.erase(it->id);  // a later proposal of the same config is queued afresh
    it = queue_.erase(it);
    ++dropped;
  }
  counters_.dropped_stale += dropped;
  if (dropped > 0) idle_.notify_all();
  return dropped;
}

bool CompileAhead::withdraw(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it =
      std::find_if(queue_.begin(), queue_.end(), [&id](const Job& j) { return j.id == id; });
  if (it == queue_.end()) return false;
  queue_.erase(it);
  ++counters_.withdrawn;
  idle_.notify_all();
  return true;
}

void CompileAhead::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return (queue_.empty() || cancelled_) && building_ == 0; });
}

void CompileAhead::cancel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void CompileAhead::serve() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return cancelled_ || !queue_.empty(); });
      if (cancelled_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      ++building_;
    }
    run(job);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --building_;
    }
    idle_.notify_all();
  }
}

void CompileAhead::run(const Job& job) {
  // A job never throws out of its thread: whatever goes wrong, the trial builds its own kernel
  // and reports its own error.
  std::string key;  // the build key this job took, once it took one
  try {
    const std::optional<vm::BuildRequest> request = prebuilder_.prepare(job.config);
    if (!request) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.invalid;
      return;
    }
    const std::string request_key = vm::build_key(*request);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!keys_.insert(request_key).second) {
        ++counters_.deduped;
        return;
      }
      key = request_key;
    }
    const vm::BuildResult built = prebuilder_.build(*request);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!built.ok) {
      ++counters_.failed;
      keys_.erase(key);  // a later job may try again (a full disk, say)
    } else if (built.cache_hit) {
      ++counters_.cache_hits;
    } else {
      ++counters_.compiles;
      counters_.compile_ms += built.compile_ms;
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.failed;
    if (!key.empty()) keys_.erase(key);  // a later job may try again
  }
}

CompileAheadCounters CompileAhead::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

json CompileAhead::summary() const {
  const CompileAheadCounters c = counters();
  return {{"threads", threads()},
          {"capacity", capacity_},
          {"queued", c.queued},
          {"compiles", c.compiles},
          {"cache_hits", c.cache_hits},
          {"deduped", c.deduped},
          {"invalid", c.invalid},
          {"failed", c.failed},
          {"dropped_stale", c.dropped_stale},
          {"withdrawn", c.withdrawn},
          {"refused_full", c.refused_full},
          {"compile_ms", c.compile_ms}};
}

std::string CompileAhead::status_line() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const CompileAheadCounters& c = counters_;
  return "compile-ahead: " + std::to_string(queue_.size()) + " queued, " +
         std::to_string(building_) + " building, " + std::to_string(c.compiles) + " compiled (" +
         schedule::fmt("%.1f", c.compile_ms / 1000.0) + " s), " + std::to_string(c.cache_hits) +
         " cache hits, " + std::to_string(c.dropped_stale) + " stale dropped";
}

}  // namespace megasched::search
