// Whether the kernel build a program asks for can serve it: every field of the build and the
// launch that the device code divides by, indexes with or loops on, checked against the formula
// the device uses (abi/ring.h for the weight ring; the kernel knob table for the -D knobs). The
// validator's rule "launch" reports these (schedule/validate.h); the footprints ask ring_path which
// way a GEMV task loads, because the ring paths read more of the input than the task's columns.
//
// What the device does with each field, and what goes wrong outside its range:
//   - the kernel knobs (MS_VECTOR_BYTES, MS_ROWS_PER_WARP, MS_UNROLL, MS_WEIGHT_LOAD,
//     MS_WEIGHT_RING): compile-time constants every GEMV divides and loops by; a value outside the
//     knob table does not build, or builds a kernel no test ran. A macro the table does not know
//     would be passed as a second -D of a launch or model constant (vm::kernel_defines).
//   - model.head_dim (MS_HEAD_DIM): sizes the attention's shared arrays and the epilogue chunk
//     (1024 / head_dim whole heads); the kernel builds even head dimensions in [2, 256].
//   - the weight ring (MS_RING_PAGES, MS_RING_PAGE_BYTES, MS_X_FLOATS): each ring task stages its
//     input into the first x_floats floats (ring_x_extent of its columns must fit, or the staging
//     writes into ring page 0 while a bulk copy fills it) and streams its weights in pages of
//     ring_pieces row pieces (a page must hold one piece, or the loader's row step is zero and the
//     kernel never ends); a segment-path task needs a page of whole segments. The loader's cap on
//     the pages in flight (MS_RING_INFLIGHT, smem.inflight_pages) must be below the ring's pages
//     (MS_RING_PAGES), or the kernel does not build.
//   - a task of RoPE pairs (kFlagRopePairs): only the registers build's streamed GEMV maps its
//     rows (abi/ring.h stream_misfit, which vm/device/stream.cuh stream_fits evaluates: whole
//     rows, at most the epilogue rows, aligned weights and input, the input within the dynamic
//     shared memory); anywhere else the device would read the wrong rows.
// The other launch fields the device loops on are checked by the launch rule
// (schedule/validate.h): threads_per_block and blocks_per_sm (MS_THREADS, MS_MIN_BLOCKS), the
// grid (one HangRecord and one queue slot per block), and prefetch_depth (>= 0; the prefetch
// window's uint32 sums stay below 2^32 for any int depth and queue position).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/program.h"

namespace megasched::schedule {

/// The largest head dimension the kernel builds (vm/device/common.cuh static_assert on
/// MS_HEAD_DIM: even, in [2, 256]).
constexpr uint32_t kMaxKernelHeadDim = 256;

/// How a task's GEMV loads its weights in the program's kernel build.
enum class GemvPath : uint8_t {
  kRegisters,     // not a ring task (or not a GEMV): every warp loads its weights
  kRingPieces,    // the weight ring, row pieces: stages columns [col_begin, col_end), with the
                  // norm prologue reading act and gamma over the whole row [0, ld)
  kRingSegments,  // the weight ring, whole-row segments: stages all ld columns (act, in2, gamma)
};

/// The path the device takes for `in` (abi/ring.h ring_streams and ring_seg_streams with the
/// program's build, launch and model, as vm::kernel_defines passes them).
GemvPath ring_path(const Program& program, const ms_abi::Instr& in);

/// Whether the registers build's streamed GEMV (vm/device/stream.cuh stream_fits) takes GEMV task
/// `in` with the program's build, launch and model (abi/ring.h stream_misfit); false in a
/// weight-ring build, where it never runs.
bool stream_takes(const Program& program, const ms_abi::Instr& in);

/// The GEMV tasks of a registers build the streamed GEMV does not take, which ops.cuh's fallback
/// `gemv` runs (vm::kernel_defines compiles it in for them: MS_GEMV_FALLBACK).
struct FallbackGemv {
  size_t tasks = 0;   // how many (0 in a weight-ring build, whose GEMVs take the ring's paths)
  std::string first;  // the first one's op and why, with a hint ("L0.down is a GEMV task whose
                      // 8192 input floats do not fit ...; hint: smem.pages x ...")
};

/// The program's GEMV tasks the fallback runs (dev/perf_log.md section 54: the fallback's
/// registers cost the streamed GEMV's, so a build that compiles it streams every other op slower).
FallbackGemv fallback_gemv(const Program& program);

/// One way the build breaks the device code's assumptions.
struct BuildMisfit {
  std::string message;         // one sentence with its hint; for a task, the sentence after the
                               // task's name ("streams row pieces of ...")
  uint32_t task = UINT32_MAX;  // the task it concerns (UINT32_MAX: the build as a whole)
};

/// Every misfit of the program's kernel build, in a fixed order (empty: it fits). At most
/// `max_task_misfits` per-task misfits are listed in full; the count of the rest is returned in
/// *more_tasks. Never throws on malformed programs (tasks are not assumed well formed).
std::vector<BuildMisfit> build_misfits(const Program& program, size_t max_task_misfits,
                                       size_t* more_tasks);

}  // namespace megasched::schedule
