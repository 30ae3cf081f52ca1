// Whether a launch fits a GPU target: the one check behind the search moves (config_fits, which
// never proposes a launch that does not fit) and the validator's rule "launch" (which never lets
// one run). A persistent grid must be co-resident, so every block of the grid must fit on its SM at
// once: threads, blocks, shared memory (dynamic + the kernel's static bound + the runtime's
// reserve, in whole allocation units) and registers; the weight ring's loader warp needs a static
// queue and a compute warp beside it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/target.h"

namespace megasched::schedule {

/// Registers per thread a launch must leave each thread: the kernel's working set. A launch shape
/// with more threads per SM than regs_per_sm / this does not fit.
constexpr int kMinRegistersPerThread = 64;

/// What a launch asks of one SM.
struct LaunchRequest {
  int threads_per_block = 0;
  int blocks_per_sm = 0;
  int64_t dynamic_smem_bytes = 0;  // per block (the page ring, or the weight ring's layout)
  int head_dim = 0;                // sizes the kernel's static shared memory
  bool weight_ring = false;        // kernel.weight_stream = smem_ring
  bool dynamic_queue = false;      // assignment.policy = dynamic
};

/// Every limit of `target` the launch breaks, one sentence each, in a fixed order (empty: it fits).
/// Expects a target with its limits set (the validator checks that first).
std::vector<std::string> launch_misfits(const LaunchRequest& launch, const GpuTarget& target);

}  // namespace megasched::schedule
