#include "schedule/launch_fit.h"

#include <algorithm>

namespace megasched::schedule {

std::vector<std::string> launch_misfits(const LaunchRequest& l, const GpuTarget& target) {
  std::vector<std::string> out;
  const int64_t threads = l.threads_per_block, bps = l.blocks_per_sm;
  const int64_t smem = l.dynamic_smem_bytes;
  // The kernel's static shared memory comes on top of the dynamic part.
  const int64_t static_smem = kernel_static_smem_bound(l.threads_per_block, l.head_dim);
  if (smem + static_smem > target.smem_per_block_optin)
    out.push_back("smem_bytes " + std::to_string(smem) + " + " + std::to_string(static_smem) +
                  " static bytes exceed the opt-in cap of " +
                  std::to_string(target.smem_per_block_optin) + " bytes per block on " +
                  target.name);
  if (l.weight_ring) {
    // The ring's loader warp walks the block's queue ahead of the compute warps, so it needs a
    // static queue and a compute warp besides it.
    if (l.dynamic_queue)
      out.push_back(
          "the weight ring needs static queues: its loader warp walks the block's own queue "
          "ahead of the compute warps, and a dynamic queue is only known as it is claimed");
    if (threads < 64)
      out.push_back(
          "the weight ring needs at least 64 threads per block (a loader and a compute warp)");
  }
  if (bps > target.max_blocks_per_sm)
    out.push_back(std::to_string(bps) + " blocks per SM exceed the limit of " +
                  std::to_string(target.max_blocks_per_sm) + " on " + target.name);
  if (bps * threads > target.max_threads_per_sm)
    out.push_back(std::to_string(bps) + " blocks of " + std::to_string(threads) +
                  " threads exceed " + std::to_string(target.max_threads_per_sm) +
                  " threads per SM: the grid is not co-resident");
  // Each resident block takes its shared memory in whole allocation units (schedule/target.h).
  const int64_t per_block =
      smem_per_resident_block(std::max<int64_t>(smem, 0), static_smem, target.sm_arch);
  if (bps * per_block > target.smem_per_sm)
    out.push_back(std::to_string(bps) + " blocks of " + std::to_string(per_block) +
                  " bytes of shared memory (" + std::to_string(smem) + " dynamic + " +
                  std::to_string(static_smem) + " static + " +
                  std::to_string(kReservedSmemPerBlock) + " reserved, rounded up to whole " +
                  std::to_string(smem_allocation_unit(target.sm_arch)) +
                  "-byte allocation units) exceed " + std::to_string(target.smem_per_sm) +
                  " bytes per SM: the grid is not co-resident");
  if (threads > 0 && bps > 0 && target.regs_per_sm / (threads * bps) < kMinRegistersPerThread)
    out.push_back(std::to_string(bps) + " blocks of " + std::to_string(threads) +
                  " threads leave fewer than " + std::to_string(kMinRegistersPerThread) +
                  " registers per thread");
  return out;
}

}  // namespace megasched::schedule
