// Compiles off the critical path: a few CPU threads that build the kernels of upcoming configs
// into the on-disk cubin cache (vm/nvrtc_build.h) while the GPU runs the current trial, so the
// GpuVm of a later trial (in this process or a `megasched worker` child sharing the cache folder)
// loads its cubin instead of waiting for NVRTC. A job lowers and validates its config as the trial
// evaluator does (eval::prepare_program), forms the megakernel's build request
// (vm::megakernel_request, the same one GpuVm::create forms) and builds it; a config that does not
// lower or validate is skipped (the evaluator rejects it before any build), a request whose key
// was already built or is building is not built twice. The loop queues its proposals here
// (`loop --compile-ahead`, search/loop_schedule.h) and drops the ones that went stale; the
// landscape recorder queues its whole plan (search/landscape_recorder.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/target.h"
#include "vm/nvrtc_build.h"

namespace megasched::search {

/// How a job turns a config into a cubin in the cache: `prepare` gives the build request of a
/// config that lowers and validates (nullopt: skip it), `build` builds it (vm::build_cubin). The
/// tests put fakes here.
struct Prebuilder {
  std::function<std::optional<vm::BuildRequest>(const schedule::ScheduleConfig&)> prepare;
  std::function<vm::BuildResult(const vm::BuildRequest&)> build;
};

/// The real one: eval::prepare_program for `shape` and `target` (a config with a diagnostic is
/// skipped), vm::megakernel_request for target.sm_arch into `cache_dir` (empty:
/// vm::default_cache_dir(), the folder a worker child's GpuVm reads by default), vm::build_cubin.
Prebuilder kernel_prebuilder(const schedule::ModelShape& shape, const schedule::GpuTarget& target,
                             const std::string& cache_dir = "");

/// Why compile-ahead cannot run for `target` in this binary ("" when it can): no NVRTC (a build
/// without the CUDA toolkit), or a target without an arch.
std::string compile_ahead_unavailable(const schedule::GpuTarget& target);

/// min(hardware threads - 1, 8 per GPU worker), at least 1: one GPU's fresh search consumes about
/// 45 kernels a minute, and an NVRTC compile of the megakernel takes ~6 s of one CPU thread
/// (BENCHMARKS.md, "The search's throughput"), so each GPU needs about 8 threads compiling.
int default_compile_threads(int workers = 1);

struct CompileAheadCounters {
  int64_t queued = 0;         // jobs accepted
  int64_t compiles = 0;       // NVRTC compiles done by the pool's threads
  int64_t cache_hits = 0;     // jobs whose cubin the cache already held
  int64_t deduped = 0;        // jobs whose build key another job had already taken
  int64_t invalid = 0;        // configs that did not lower or validate (not built)
  int64_t failed = 0;         // builds that failed (the trial reports its own build error)
  int64_t dropped_stale = 0;  // queued jobs dropped before they started (drop_stale)
  int64_t withdrawn = 0;      // queued jobs taken back because their trial started (withdraw)
  int64_t refused_full = 0;   // submits refused because the queue was full
  double compile_ms = 0.0;    // NVRTC wall time of the pool's compiles, summed over threads
};

/// The pool: `threads` workers over a bounded queue of jobs in submission order. Thread-safe;
/// nothing thrown by a job leaves its thread (it counts as failed). The destructor cancels.
class CompileAhead {
 public:
  CompileAhead(Prebuilder prebuilder, int threads, int capacity);
  ~CompileAhead();
  CompileAhead(const CompileAhead&) = delete;
  CompileAhead& operator=(const CompileAhead&) = delete;

  /// Queues `config` under `id` (the caller's name for it: a schedule id) as proposed at
  /// `generation`. False when it is not queued: an id already submitted, a full queue, or a
  /// cancelled pool.
  bool submit(const std::string& id, const schedule::ScheduleConfig& config,
              uint64_t generation = 0);
  /// Drops the queued jobs proposed at a generation other than `generation` (counted as
  /// dropped_stale); jobs already building finish. Returns how many were dropped.
  int drop_stale(uint64_t generation);
  /// Takes back the queued job of `id`, if it has not started: its trial starts now and builds
  /// the kernel itself (a build of the same key waits for the other: vm::build_cubin).
  bool withdraw(const std::string& id);
  /// Waits until no job is queued or building.
  void wait_idle();
  /// Drops every queued job, waits for the ones building, joins the threads. Idempotent.
  void cancel();

  int threads() const { return static_cast<int>(threads_.size()); }
  int capacity() const { return capacity_; }
  CompileAheadCounters counters() const;
  /// The counters as the loop's summary shows them (with "threads" and "capacity").
  nlohmann::json summary() const;
  /// "compile-ahead: 3 queued, 2 building, 12 compiled, 4 cache hits, 1 stale dropped".
  std::string status_line() const;

 private:
  struct Job {
    std::string id;
    schedule::ScheduleConfig config;
    uint64_t generation = 0;
  };
  void serve();
  /// One job, start to end; what it came to goes to the counters.
  void run(const Job& job);

  Prebuilder prebuilder_;
  const int capacity_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;  // a job queued, or cancel
  std::condition_variable idle_;  // a job finished
  std::deque<Job> queue_;
  std::set<std::string> ids_;   // every id submitted
  std::set<std::string> keys_;  // every build key taken by a job
  int building_ = 0;
  bool cancelled_ = false;
  CompileAheadCounters counters_;
  std::vector<std::thread> threads_;
};

}  // namespace megasched::search
