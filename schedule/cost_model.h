// The cost model: a predicted latency for a program on a target, used on machines without a GPU
// (latency_kind "predicted", never called a measurement) and to rank candidates.
//
// It simulates the persistent kernel: every block walks its queue (or claims from the global queue
// when dynamic); a task starts when its block is free and its waits hold, and takes
//   overhead + (bytes it streams) / (per-block share of the achievable bandwidth) / efficiency
// where the achievable bandwidth is a fraction of the target's (measured, else datasheet)
// bandwidth shared by all blocks, the efficiency falls with narrow vector loads, few loads in
// flight and few threads per SM, and a wait that is not yet satisfied when a block reaches it
// costs a cross-SM hop (partly hidden by weight prefetch). The prediction is never below the floor
// (HBM bandwidth is shared: the step cannot beat bytes_min / bandwidth).
#pragma once

#include <cstdint>

#include "schedule/model.h"
#include "schedule/program.h"
#include "schedule/target.h"

namespace megasched::schedule {

struct CostEstimate {
  double latency_us = 0.0;            // max(simulated makespan, floor) + launch overhead
  double makespan_us = 0.0;           // the simulated kernel
  double streamed_bytes = 0.0;        // bytes all tasks stream
  double critical_path_stages = 0.0;  // longest chain of dependent tasks
  bool completed = false;             // false: the simulation found a queue that never drains
};

/// Bytes task `task` streams from HBM at `position` (weights + KV + activations it reads).
double task_bytes(const Program& program, uint32_t task, int position);

CostEstimate predict(const Program& program, const ModelShape& shape, const GpuTarget& target,
                     int position, double floor_us);

}  // namespace megasched::schedule
