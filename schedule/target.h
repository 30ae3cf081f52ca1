// A GPU as data: the figures lowering, validation and the floor need. A registry of common GPUs
// with datasheet figures, plus `auto` (read from the live device with cudaGetDeviceProperties by
// eval::live_target, eval/device.h; never a hard-coded SM count).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abi/kernel_args.h"
#include "abi/ring.h"

namespace megasched::schedule {

/// Shared memory the CUDA runtime keeps per resident block on every target of the registry (bytes);
/// blocks_per_sm * (dynamic smem + this) must fit in smem_per_sm.
constexpr int kReservedSmemPerBlock = 1024;

/// The unit in which an SM hands out shared memory to a block (bytes): a block takes
/// round_up(static + dynamic + kReservedSmemPerBlock, unit) of the SM's shared memory (the CUDA
/// occupancy calculator's rule: 128 bytes from sm_80 on, 256 before).
constexpr int smem_allocation_unit(int sm_arch) {
  return sm_arch >= 80 || sm_arch == 0 ? 128 : 256;
}

/// Shared memory one resident block takes of its SM: dynamic + static + the runtime's reserve,
/// rounded up to the allocation unit.
constexpr int64_t smem_per_resident_block(int64_t dynamic_bytes, int64_t static_bytes,
                                          int sm_arch) {
  const int64_t unit = smem_allocation_unit(sm_arch);
  const int64_t used = dynamic_bytes + static_bytes + kReservedSmemPerBlock;
  return (used + unit - 1) / unit * unit;
}

/// Dynamic shared memory of a weight-ring build: the formula of abi/ring.h, which the device code
/// (vm/device/ring.cuh `ring_layout`) carves the same way.
constexpr int64_t ring_smem_bytes(int64_t pages, int64_t page_bytes, int64_t x_floats) {
  return static_cast<int64_t>(ms_abi::ring_smem_bytes(static_cast<uint64_t>(x_floats),
                                                      static_cast<uint64_t>(pages),
                                                      static_cast<uint64_t>(page_bytes)));
}

/// An upper bound of the megakernel's static shared memory (the `Shared` struct of
/// vm/device/ops.cuh and the argmax scratch) for `threads` per block and a head dimension. Dynamic
/// plus static shared memory must fit the opt-in cap; the GPU tests check the loaded kernel's own
/// figure against this bound.
constexpr int kernel_static_smem_bound(int threads, int head_dim) {
  const int warps = threads / 32;
  const int rows = 1024 * 4;                                     // GEMV row results
  const int attn = (8 * head_dim + warps * (head_dim + 2)) * 4;  // query batch + warp records
  // The task loop's look-ahead (two Ahead buffers: an Instr and its wait heads), 16-byte aligned.
  const int ahead =
      2 * static_cast<int>(sizeof(ms_abi::Instr) + sizeof(ms_abi::WaitHead) * ms_abi::kWaitHeads) +
      16;
  // The fixed fields: the wait outcome, four flags, three profile stamps, the staged attention's
  // two mbarriers and their parity (80 bytes).
  return 2 * warps * 4 + 80 + ahead + (rows > attn ? rows : attn) + 64;
}

struct GpuTarget {
  std::string name;              // registry key ("h100") or the live device's name
  int sm_arch = 0;               // compute capability x 10 (90 = sm_90)
  int num_sms = 0;               // streaming multiprocessors
  int smem_per_sm = 0;           // bytes of shared memory per SM
  int smem_per_block_optin = 0;  // bytes a block may opt in to
  int regs_per_sm = 65536;       // 32-bit registers per SM
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int64_t l2_bytes = 0;
  int64_t hbm_bytes = 0;
  double datasheet_bw_gbs = 0.0;  // vendor figure, GB/s (1e9 B/s)
  double measured_bw_gbs =
      0.0;  // streaming-read bandwidth measured by `doctor --measure`; 0 if unknown
  std::string source = "registry";  // "registry" | "live"

  /// Bandwidth for the floor: the measured figure when known, else the datasheet.
  double floor_bw_gbs() const { return measured_bw_gbs > 0 ? measured_bw_gbs : datasheet_bw_gbs; }
};

/// H100 SXM, H200, A100, L4, L40S, RTX 4090, RTX 5090, B200.
const std::vector<GpuTarget>& target_registry();
/// Case-insensitive lookup of a registry name ("h100", "H100-SXM" ...).
std::optional<GpuTarget> find_target(const std::string& name);

nlohmann::json to_json(const GpuTarget& target);

}  // namespace megasched::schedule
