// The worker slots of a multi-worker loop on one host (`loop --gpus all|0,1,..`, `loop --workers
// N`) and under MPI (search/mpi_pool.h): which GPUs, the worker command pinned to one of them,
// and a ThreadedPool (search/trial_pool.h) of started WorkerEvaluators.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "search/trial_pool.h"
#include "search/worker_evaluator.h"

namespace megasched::search {

/// The CUDA device ids `--gpus` names: "all" (every GPU this process sees, as CUDA_VISIBLE_DEVICES
/// lists them when it is set) or a comma-separated list of distinct indexes into them. nullopt with
/// *error (and *environment when the machine, not the argument, is at fault: no GPU).
std::optional<std::vector<std::string>> parse_gpu_list(const std::string& text, std::string* error,
                                                       bool* environment);

/// `command` with CUDA_VISIBLE_DEVICES set to `device` (the worker sees that one GPU as device 0).
std::string pinned_command(const std::string& command, const std::string& device);

/// This host's name ("localhost" when it cannot be read).
std::string host_name();

struct WorkerPoolOptions {
  WorkerOptions worker;           // command (unpinned), timeouts, cancel
  std::vector<std::string> gpus;  // one slot per GPU id; empty: cpu_slots CPU slots
  int cpu_slots = 0;
  int timed_position = 0;     // of the schedule ids
  eval::Objective objective;  // of the schedule ids
};

/// Starts one worker per slot (all at once) and waits for their ready lines. nullptr with *error
/// naming each worker that did not come up.
std::unique_ptr<ThreadedPool> start_worker_pool(const WorkerPoolOptions& options,
                                                std::string* error);

}  // namespace megasched::search
