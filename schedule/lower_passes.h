// The passes lower() runs over a whole Program once its ops are emitted (schedule/lower.cpp):
// merge_waits (also each task's own waits as they are emitted), coarsen_slice_counters and, with
// pipeline.tagged_inputs, tag_joins.
#pragma once

#include <vector>

#include "abi/abi.h"
#include "schedule/program.h"

namespace megasched::schedule {

/// Sorts waits by counter and keeps one per counter, with the largest threshold.
void merge_waits(std::vector<ms_abi::Wait>& waits);

/// Merges the slice counters of an op with many tiles into at most 16 groups, so a reader of its
/// whole output waits at most 16 times per producer op (each wait still implies every producer it
/// stood for).
void coarsen_slice_counters(Program& p);

/// pipeline.tagged_inputs: marks the streamed GEMVs that read tagged words (kFlagTagIn) and
/// their writers (kFlagTagOut).
void tag_joins(Program& p);

}  // namespace megasched::schedule
