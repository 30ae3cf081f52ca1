// The megakernel as the ground truth (groundtruth/ground_truth.h) models it: the constants the
// kernel is compiled with, read from vm::kernel_defines (the -D list the NVRTC build gets), and the
// parts of the device code that decide what a program may do beyond the opcode semantics: the
// counter wait, the static shared memory, the weight ring's input staging, page geometry and loader
// loops. Each is transcribed from vm/device/*.cuh line by line; none uses the validator, the
// footprints or abi/ring.h's host formulas, so the ground truth judges those rather than repeating
// them. tests/groundtruth/device_model_test.cpp holds the transcriptions to the compiler (static
// shared memory, by NVRTC's ptxas report) and to abi/ring.h.
//
// What it cannot judge (said where it matters): registers per thread (only the compiled kernel
// knows them; the ground truth takes the floor of 32 a __launch_bounds__ can force), and timing
// (it explores every interleaving instead).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/program.h"

namespace megasched::groundtruth {

/// The kernel's compile-time constants for a program (the device's defaults where the -D list
/// leaves a macro unset, as vm/device/common.cuh's #ifndef lines do).
struct DeviceBuild {
  int threads = 256;                       // MS_THREADS
  int min_blocks = 1;                      // MS_MIN_BLOCKS
  int vector_bytes = 16;                   // MS_VECTOR_BYTES
  int rows_per_warp = 2;                   // MS_ROWS_PER_WARP
  int unroll = 2;                          // MS_UNROLL
  int stream_depth = 2;                    // MS_STREAM_DEPTH
  int stream_held = 0;                     // MS_STREAM_HELD
  int stream_held_every = 2;               // MS_STREAM_HELD_EVERY
  int weight_load = 0;                     // MS_WEIGHT_LOAD
  bool weight_ring = false;                // MS_WEIGHT_RING
  int ring_pages = 1;                      // MS_RING_PAGES
  int ring_page_bytes = 16;                // MS_RING_PAGE_BYTES
  int ring_inflight = 0;                   // MS_RING_INFLIGHT
  int x_floats = 0;                        // MS_X_FLOATS
  int seg_vecs = 0;                        // MS_SEG_VECS
  int head_dim = 64;                       // MS_HEAD_DIM
  bool weight_bf16 = true;                 // MS_WEIGHT_BF16
  bool kv_bf16 = true;                     // MS_KV_BF16
  int attn_staged = 0;                     // MS_ATTN_STAGED
  int attn_head_batch = 8;                 // MS_ATTN_HEAD_BATCH
  std::vector<std::string> option_errors;  // a macro given twice with different values, or not a
                                           // number
};

/// The build of `program`, from vm::kernel_defines(program).
DeviceBuild device_build(const schedule::Program& program);

/// The static_asserts of vm/device/common.cuh that the build fails (empty: it compiles), plus
/// option_errors.
std::vector<std::string> device_build_errors(const DeviceBuild& build);

/// Static shared memory of the megakernel in bytes, as ptxas reports it: `Shared` of
/// vm/device/ops.cuh and argmax's `idx` array (4-byte members), rounded up to 16 bytes.
int64_t device_static_smem_bytes(const DeviceBuild& build);

/// wait_all's test for one wait (vm/device/common.cuh): the 32-bit counter, which holds
/// epoch x `added_per_step` (what the producers add each step) + `done` (this step's increments
/// so far), against the 32-bit target epoch x `declared_total` + threshold.
bool device_wait_holds(uint32_t epoch, uint64_t done, uint64_t added_per_step,
                       uint32_t declared_total, uint32_t threshold);

/// Per counter, what the program's producers add to it in one step (their signal increments).
std::vector<uint64_t> step_increments(const schedule::Program& program);

/// wait_all for task `task` (vm/device/common.cuh): every wait of it holds (device_wait_holds),
/// with `done[c]` this step's increments of counter c so far and `added[c]` from step_increments.
/// The task's waits and counters must be in range.
bool device_waits_hold(const schedule::Program& program, uint32_t task, uint32_t epoch,
                       const std::vector<uint64_t>& done, const std::vector<uint64_t>& added);

/// One element range [begin, end) of a buffer.
struct DeviceRange {
  uint32_t buffer = 0;
  uint64_t begin = 0, end = 0;
};

/// What the weight ring does with one task (vm/device/ring.cuh, megakernel.cuh).
struct RingTaskModel {
  enum class Path : uint8_t { kNone, kPieces, kSegments } path = Path::kNone;
  uint64_t staged_floats = 0;    // the staging writes floats [0, staged_floats) of the x area
  uint64_t page_bytes_used = 0;  // the most bytes the loader copies into one page
  bool loader_ends = true;       // false: a loop of the loader or the compute warps never advances
  std::vector<DeviceRange> reads;  // every input the staging reads (act, in2, the norm gamma)
};

/// The ring's handling of task `in` (Path::kNone: not a ring task; the register path then reads
/// what the ReferenceVm reads).
RingTaskModel ring_task_model(const DeviceBuild& build, const schedule::Program& program,
                              const ms_abi::Instr& in);

}  // namespace megasched::groundtruth
