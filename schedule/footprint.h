// Footprints: which elements of which buffer a task reads and writes, derived from its Instr by the
// opcode semantics of abi/abi.h. The validator's race and coverage rules work on these ranges, so
// they must over-approximate what the VMs touch (never miss an access):
//   - KV accesses depend on the run-time position, so they are widened over every position and
//     written in dimension-major coordinates: element (layer, k|v, kv head, dim d, position t) is
//     ((layer * 2 + kv) * kv_heads + head) * max_seq * head_dim + d * max_seq + t. A whole head is
//     the same range as in memory ([layer][k|v][kv_head][max_seq][head_dim]), so region names
//     still apply. Attention reads its KV head whole; a KV append writes the dims it appends (a
//     whole head, or with kFlagRopePairs the two dim ranges of its pairs) at every position. Both
//     sides are widened alike, so an append and the attention that reads it still conflict (and
//     must be ordered), while two heads, or two pair tiles of one head, stay disjoint.
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

/// The footprint coordinate of element `memory_index` of kBufKv (see the file comment: the
/// dimension-major coordinates of the KV buffer; a whole head maps onto itself).
uint64_t kv_footprint_index(const ms_abi::ModelParams& model, uint64_t memory_index);

/// Appends task `task`'s accesses to *out (in a fixed order: reads then writes, per operand).
/// Returns false and sets *error (one clause, e.g. "kGemv with both prologue flags") when the
/// task's operands are malformed; *out is then unspecified. Never throws.
bool task_footprint(const Program& program, uint32_t task, std::vector<Access>* out,
                    std::string* error);

}  // namespace megasched::schedule
