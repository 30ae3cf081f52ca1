// Footprints: which elements of which buffer a task reads and writes, derived from its Instr by the
// opcode semantics of abi/abi.h. The validator's race and coverage rules work on these ranges, so
// they must over-approximate what the VMs touch (never miss an access):
//   - KV accesses depend on the run-time position, so they are widened to whole heads: attention
//     reads the K and V rows [0, max_seq) of its KV head, and a KV append writes the same rows of
//     the heads it appends to. Both sides are widened alike, so an append and the attention that
//     reads it still conflict (and must be ordered), while two heads stay disjoint.
//   - The embedding reads the whole embedding matrix (the token is only known at run time).
//   - A GEMV reads what the device path it takes reads (schedule/build_fit.h ring_path): the
//     weight ring's paths stage the input over the whole row with the norm prologue, so they read
//     the norm gamma over [0, ld) where the register path reads the task's columns. A segment-path
//     tile spans whole rows, so its columns are already [0, ld).
// Every range is computed in 128-bit arithmetic; a task whose operands cannot be described (an
// unknown opcode, inconsistent flags, an empty range, a range that overflows 64 bits, model
// constants that make the semantics undefined) gets an error instead of a footprint. Bounds against
// the buffer extents are checked by the caller (validate), which knows the extents.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/program.h"

namespace megasched::schedule {

/// One contiguous element range of one buffer that a task reads or writes.
struct Access {
  uint32_t buffer = 0;  // ms_abi::BufferId
  uint64_t begin = 0;   // element offsets [begin, end), begin < end
  uint64_t end = 0;
  bool write = false;
};

/// Largest split count (kGemvReduce param0) and partition count (attention param2) a footprint
/// accepts; beyond it a task is malformed (the search space stays far below).
constexpr uint32_t kMaxFootprintSplits = 4096;

/// Appends task `task`'s accesses to *out (in a fixed order: reads then writes, per operand).
/// Returns false and sets *error (one clause, e.g. "kGemv with both prologue flags") when the
/// task's operands are malformed; *out is then unspecified. Never throws.
bool task_footprint(const Program& program, uint32_t task, std::vector<Access>* out,
                    std::string* error);

}  // namespace megasched::schedule
