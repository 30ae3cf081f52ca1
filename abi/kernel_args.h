// The argument block of the persistent megakernel `ms_megakernel` and the per-block hang record it
// leaves behind. Shared by the host loader (vm/gpu_vm_cuda.cpp) and the device code, so it holds
// only fixed-width fields and pointers; it is passed by value as the kernel's single parameter.
#pragma once

#include "abi/abi.h"

namespace ms_abi {

/// Why a block left the interpreter loop (HangRecord::state).
enum BlockExit : int32_t {
  kExitRunning = 0,   // never written: the block did not get to its exit (a crash)
  kExitDrained = 1,   // ran its whole queue
  kExitTimedOut = 2,  // a wait passed the spin bound: this block raised the abort flag
  kExitAborted = 3,   // saw the abort flag (raised by another block) while waiting
};

/// What one block was doing when it left; the host turns these into the `hang` dump.
struct HangRecord {
  int32_t state;       // BlockExit
  int32_t queue_pos;   // position in its queue (dynamic queue: the claimed ticket)
  int32_t task;        // task id at that position (-1: none)
  uint32_t counter;    // counter it waited on (when state is kExitTimedOut / kExitAborted)
  uint32_t value;      // the counter's value when it gave up
  uint32_t target;     // epoch * per_step_total + threshold: the value it needed
  uint32_t threshold;  // the program's (epoch-relative) threshold
  uint32_t tasks_run;  // tasks this block completed in this launch
};
static_assert(sizeof(HangRecord) == 32, "HangRecord layout is shared with the host");

/// Words per task in the profile buffer: start, ready, done, signalled (globaltimer ns), then
/// (block << 32 | order in the block's run), then for a streamed GEMV (vm/device/stream.cuh) when
/// its input was staged and when its weights were multiplied (before the epilogue), 0 for any
/// other task: its exec time (done - ready) in staging, stream and epilogue.
constexpr uint32_t kStampWords = 7;

/// The first kWaitHeads waits of one task, with their counters' per-step totals, in one table
/// indexed by task (GpuVm builds it from the program's waits and counter_totals). The kernel loads
/// a task's heads together with its instruction, one task ahead, so a wait on at most kWaitHeads
/// counters polls at once instead of first reading the wait table and then the totals (two
/// dependent L2 round trips on every hop of the critical path). Unused heads are zero.
constexpr uint32_t kWaitHeads = 2;
struct WaitHead {
  uint32_t counter;
  uint32_t threshold;
  uint32_t total;  // counter_totals[counter]
  uint32_t pad;    // zero: a head is one 16-byte piece of fetch_ahead's copies
};
static_assert(sizeof(WaitHead) == 16, "WaitHead layout is shared with the host");

/// Everything the kernel reads; one build and one upload serve every step and position.
struct KernelArgs {
  const Instr* tasks;              // [num_tasks]
  const Wait* waits;               // the program's wait table
  const uint32_t* counter_totals;  // [num_counters] increments per step (epoch scale)
  const WaitHead* wait_heads;      // [num_tasks][kWaitHeads]: the first waits, totals included
  const uint32_t* queue_offsets;   // [num_queues + 1] into queue_tasks
  const uint32_t* queue_tasks;     // flattened queues (task ids)
  const void* weights;             // kBufWeights (dtype MS_WEIGHT_BF16 ? bf16 : fp32)
  float* act;                      // kBufActivations
  void* kv;                        // kBufKv (dtype MS_KV_BF16 ? bf16 : fp32)
  StepCell* step;                  // kBufStep
  uint32_t* counters;              // [num_counters], only grow
  uint32_t* ticket;        // dynamic queue: claims so far (grows by its length + grid per step)
  int32_t* abort_flag;     // 0 = running; 1 = some block timed out
  HangRecord* dump;        // [gridDim.x]
  uint64_t spin_bound_ns;  // a wait longer than this aborts the launch
  uint32_t num_tasks;
  uint32_t num_queues;      // queues[b] is run by block b (blocks >= num_queues idle)
  uint32_t dynamic_queue;   // 1: queue 0 is claimed task by task through `ticket`
  uint32_t prefetch_depth;  // weights of this many tasks, starting at the current one, go to
                            // L2 before its wait (0: no prefetch)
  uint32_t smem_bytes;      // dynamic shared memory (the page ring): GEMV input staging
  uint32_t reserved;
  uint64_t* stamps;  // MS_PROFILE builds: [num_tasks][kStampWords], else unused (may be null)
  uint64_t* tagged;  // the tagged mirror of kBufActivations (abi.h, Tagged words); null when the
                     // program has no kFlagTagOut / kFlagTagIn task
  ModelParams model;
};

}  // namespace ms_abi
