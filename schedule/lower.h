// lower(): (model shape, GPU target, ScheduleConfig) -> Program. Every knob family of the config
// changes the program or its kernel build (tests/schedule/lower_test.cpp).
//
// What lowering does, in order:
//   1. plan the activation arena (SSA: each layer's q, attn_out, gate_up, ... have their own
//      regions, so no task overwrites what another still reads) and the KV cache layout;
//   2. emit the ops of one decode step in topological order, each split into tiles by the tiling
//      knobs, fused or not by the fusion knobs; a GEMV with gemv_k_split > 1 gets partial tasks
//      and one reduce task per tile;
//   3. give each producer op its counters (one per op, or one per tile when an edge out of it is
//      per_slice) and each task the waits for exactly the producer tiles whose output it reads;
//   4. assign tasks to block queues by the assignment policy (every queue a subsequence of one
//      topological order, so a co-resident grid cannot deadlock);
//   5. fill the launch shape and kernel build from the launch, smem, pipeline and kernel knobs.
#pragma once

#include <optional>
#include <string>

#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/program.h"
#include "schedule/target.h"

namespace megasched::schedule {

/// Returns nullopt and sets *error (one line, naming the knob) when the config cannot be lowered
/// for this shape (e.g. attn_q_heads_per_task does not divide the KV group).
std::optional<Program> lower(const ModelShape& shape, const GpuTarget& target,
                             const ScheduleConfig& config, std::string* error);

}  // namespace megasched::schedule
