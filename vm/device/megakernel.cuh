// The persistent megakernel: one launch runs one decode step. Block b walks queue b (or, with a
// dynamic queue, claims tasks from one global queue with an atomic ticket), and runs a chained
// task when its own signal is the last that task waits for (abi/abi.h, Last arrivers): for each
// task it prefetches into L2 the weights of the `prefetch_depth` tasks starting at this one
// (weights depend on nothing, so this overlaps the dependency wait with HBM traffic), waits on the
// task's counters (acquire loads, bounded), runs the opcode with the whole block and signals
// (release). Counters
// only grow: thresholds are scaled by the step epoch, so no reset launch is needed between steps.
// Every wait is bounded; a timeout raises the abort flag, every block leaves, and each leaves a
// HangRecord for the host.
#pragma once

#include "vm/device/attention.cuh"
#include "vm/device/ring.cuh"
#include "vm/device/stream.cuh"

namespace ms_dev {

/// Whether this build compiles opcode `op` in (MS_OPCODES, vm/device/common.cuh): a program's
/// build has only its own opcodes (a task of any other traps: never, as kernel_defines derives the
/// mask from the program's tasks).
__device__ constexpr bool has_opcode(uint32_t op) {
  return ((uint32_t(MS_OPCODES) >> op) & 1u) != 0;
}

/// The dispatch switch: one case per opcode, no default (kOpcodeCount breaks it when an opcode is
/// added without a device function).
__device__ __forceinline__ void execute(const KernelArgs& a, const Instr& in, Shared& s,
                                        float* pages, uint32_t page_floats) {
  switch (static_cast<Opcode>(in.opcode)) {
    case kEmbed:
      if constexpr (has_opcode(kEmbed))
        embed(a, in);
      else
        __trap();
      break;
    case kRmsNorm:
      if constexpr (has_opcode(kRmsNorm))
        rms_norm(a, in, s);
      else
        __trap();
      break;
    case kGemv:
      if constexpr (has_opcode(kGemv) && MS_GEMV_FALLBACK)
        gemv(a, in, s, pages, page_floats);
      else
        __trap();
      break;
    case kGemvReduce:
      if constexpr (has_opcode(kGemvReduce))
        gemv_reduce(a, in, s);
      else
        __trap();
      break;
    case kRopeKv:
      if constexpr (has_opcode(kRopeKv))
        rope_kv(a, in, s);
      else
        __trap();
      break;
    case kAttnPartial:
      if constexpr (has_opcode(kAttnPartial))
        attn_partial(a, in, s);
      else
        __trap();
      break;
    case kAttnCombine:
      if constexpr (has_opcode(kAttnCombine))
        attn_combine(a, in, pages, page_floats);
      else
        __trap();
      break;
    case kSiluMul:
      if constexpr (has_opcode(kSiluMul))
        silu_mul(a, in);
      else
        __trap();
      break;
    case kAdd:
      if constexpr (has_opcode(kAdd))
        add(a, in);
      else
        __trap();
      break;
    case kArgmax:
      if constexpr (has_opcode(kArgmax))
        argmax(a, in, s);
      else
        __trap();
      break;
    case kOpcodeCount:
      break;
  }
}

/// Runs chained task `task` (abi/abi.h, Last arrivers) on the block whose signal completed its
/// wait, then signals it. Only chainable opcodes (the validator refuses others as chained tasks).
/// Not inlined: the task loop keeps its registers (a second inline copy of execute() would not).
__device__ __noinline__ void run_chained(const KernelArgs& a, uint32_t task, Shared& s) {
  const Instr in = a.tasks[task];
  if (in.opcode == kAttnCombine) {
    if constexpr (has_opcode(kAttnCombine)) attn_combine(a, in, nullptr, 0);
  } else if (in.opcode == kArgmax) {
    if constexpr (has_opcode(kArgmax)) argmax(a, in, s);
  }
  signal(a, in);
}

/// Lanes 0 .. 7 of warp 0 copy task t's instruction and wait heads into `dst` with cp.async, 16
/// bytes each (no register waits for them); ahead_landed() and a barrier make them visible.
__device__ __forceinline__ void fetch_ahead(const KernelArgs& a, Ahead& dst, uint32_t t) {
  constexpr uint32_t kInstrPieces = sizeof(Instr) / 16, kPieces = sizeof(Ahead) / 16;
  const uint32_t i = threadIdx.x;
  if (i >= kPieces) return;
  const char* src = i < kInstrPieces
                        ? reinterpret_cast<const char*>(a.tasks + t) + 16 * i
                        : reinterpret_cast<const char*>(a.wait_heads + uint64_t(t) * kWaitHeads) +
                              16 * (i - kInstrPieces);
  copy16_async(reinterpret_cast<char*>(&dst) + 16 * i, src);
}

/// The copying lanes wait for their fetch_ahead copies (a no-op once they have landed).
__device__ __forceinline__ void ahead_landed() {
  if (threadIdx.x < sizeof(Ahead) / 16) copies_landed();
}

/// L2 prefetch of what task `t` streams and no other task produces: weight tiles, the embedding
/// row, the KV history of an attention partition. Not inlined: inlined, its row-by-row loop for
/// tasks of RoPE pairs raised the kernel's spill stores (nvrtc_bench stream_r2u4: 28 -> 48 B).
__device__ __noinline__ void prefetch_task(const KernelArgs& a, uint32_t t, int lane, int lanes) {
  const Instr in = a.tasks[t];
  const WeightT* W = reinterpret_cast<const WeightT*>(a.weights);
  switch (static_cast<Opcode>(in.opcode)) {
    case kGemv: {
      // A ring task too: the L2 prefetch runs ahead of the ring (pipeline.prefetch_depth decides).
      const uint64_t cols = in.col_end - in.col_begin;
      if (cols == in.ld && (in.flags & kFlagRopePairs) == 0) {
        prefetch_l2(W + in.weight + uint64_t(in.row_begin) * in.ld,
                    uint64_t(in.row_end - in.row_begin) * in.ld * kWeightBytes, lane, lanes);
      } else {  // row by row (a task of RoPE pairs: its rows as task_row maps them)
        for (uint32_t j = lane; j < task_rows(in); j += lanes) {
          prefetch_l2(W + in.weight + uint64_t(task_row(in, j, kHeadDim)) * in.ld + in.col_begin,
                      cols * kWeightBytes, 0, 1);
        }
      }
      break;
    }
    case kEmbed: {
      const uint64_t row = uint64_t(uint32_t(a.step->token)) * in.ld;
      prefetch_l2(W + in.weight + row + in.row_begin,
                  uint64_t(in.row_end - in.row_begin) * kWeightBytes, lane, lanes);
      break;
    }
    case kAttnPartial: {
      const ModelParams& m = a.model;
      const AttnKeys k = attn_keys(a, in);
      const uint32_t t0 = k.t0, t1 = k.t1;
      if (t0 < t1) {
        const KvT* kv = reinterpret_cast<const KvT*>(a.kv);
        const uint64_t bytes = uint64_t(t1 - t0) * m.head_dim * sizeof(KvT);
        prefetch_l2(kv + kv_offset(m, in.layer, 0, in.param0) + uint64_t(t0) * m.head_dim, bytes,
                    lane, lanes);
        prefetch_l2(kv + kv_offset(m, in.layer, 1, in.param0) + uint64_t(t0) * m.head_dim, bytes,
                    lane, lanes);
      }
      break;
    }
    case kRmsNorm:
    case kGemvReduce:
    case kRopeKv:
    case kAttnCombine:
    case kSiluMul:
    case kAdd:
    case kArgmax:
    case kOpcodeCount:
      break;
  }
}

/// Profile builds: thread 0 writes task `task`'s stamps (start, ready, done, signalled, the block
/// with the task's place in its run order, then a streamed GEMV's staged and streamed, else 0).
__device__ __forceinline__ void stamp_task(const KernelArgs& a, uint32_t task, uint64_t start,
                                           uint64_t ready, uint64_t done, uint32_t order,
                                           uint64_t staged = 0, uint64_t streamed = 0) {
  if (threadIdx.x != 0) return;
  uint64_t* st = a.stamps + uint64_t(task) * kStampWords;
  st[0] = start;
  st[1] = ready;
  st[2] = done;
  st[3] = global_ns();
  st[4] = (uint64_t(blockIdx.x) << 32) | order;
  st[5] = staged;
  st[6] = streamed;
}

/// A static queue's look-ahead: the next task's instruction and wait heads are copied into shared
/// memory (fetch_ahead) while the current one waits and runs, and the id of the task after it is
/// loaded one task earlier still: no load at the top of the task loop waits for another, every hop
/// of the critical path starts polling at once, and no registers are held across a task for them.
struct StaticQueue {
  uint32_t cur_id = 0;   // the task at the next position to take (its copy is in flight)
  uint32_t next_id = 0;  // the task after it

  /// Fetches the first task of [qbegin, qend) into s.ahead[0]; the caller's barrier publishes it.
  __device__ void start(const KernelArgs& a, Shared& s, uint32_t qbegin, uint32_t qend) {
    if (qbegin >= qend) return;
    cur_id = a.queue_tasks[qbegin];
    next_id = qbegin + 1 < qend ? a.queue_tasks[qbegin + 1] : 0;
    fetch_ahead(a, s.ahead[0], cur_id);
    ahead_landed();
  }
  /// The task at queue position pos (index slot), from s.ahead[pos & 1] (landed before the previous
  /// task's signal() barrier, or start's), and the fetch of the next one into the other buffer
  /// (last read at the top of the previous task, before its barriers).
  __device__ uint32_t take(const KernelArgs& a, Shared& s, uint32_t pos, uint32_t slot,
                           uint32_t qend, Instr* instr, WaitHead* head) {
    const Ahead& ah = s.ahead[pos & 1];
    const uint32_t task = cur_id;
    *instr = ah.instr;
    if (threadIdx.x < kWaitHeads) *head = ah.heads[threadIdx.x];
    if (slot + 1 < qend) {
      fetch_ahead(a, s.ahead[(pos + 1) & 1], next_id);
      cur_id = next_id;
      next_id = slot + 2 < qend ? a.queue_tasks[slot + 2] : 0;
    }
    return task;
  }
};

}  // namespace ms_dev

extern "C" __global__ void __launch_bounds__(MS_THREADS, MS_MIN_BLOCKS)
    ms_megakernel(const ms_abi::KernelArgs a) {
  using namespace ms_dev;
  extern __shared__ __align__(16) float pages[];
  __shared__ Shared s;
  const uint32_t epoch = uint32_t(a.step->epoch);
  HangRecord rec = {kExitDrained, 0, -1, 0, 0, 0, 0, 0};
  const bool dynamic = a.dynamic_queue != 0;
  // Block b runs queue b; the dynamic queue is queue 0, claimed by every block. A queue holds
  // every task but the chained ones (abi/abi.h, Last arrivers).
  const uint32_t queue = dynamic ? 0 : blockIdx.x;
  const uint32_t qbegin = queue < a.num_queues ? a.queue_offsets[queue] : 0;
  const uint32_t qend = queue < a.num_queues ? a.queue_offsets[queue + 1] : 0;
  const uint32_t claim_base = epoch * (qend + gridDim.x);
  // The weight ring (static queues only; the validator refuses a ring build with a dynamic queue,
  // and should one run anyway no GEMV takes the ring path). The loader warp leaves the interpreter
  // here: it streams weights for the whole queue and never runs an opcode.
  const bool ring = kRing && !dynamic;
  const Ring rg = ring_layout(pages);
  uint32_t ring_seq = 0;
  if constexpr (kRing) {
    if (threadIdx.x == 0) {
      s.ring_failed = 0;
      for (int i = 0; i < kRingPages; ++i) {
        mbar_init(rg.full + i, 1);
        mbar_init(rg.empty + i, kComputeWarps);
      }
#if __CUDA_ARCH__ >= 900
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
    }
    __syncthreads();
    if (int(threadIdx.x >> 5) == kLoaderWarp) {
      if (ring) ring_load(a, rg, qbegin, qend);
      return;
    }
  } else if (kAttnStagedBuild) {
    attn_stage_init(s);
  }
  // Threads of warps 1.. issue prefetches while warp 0 polls the counters.
  const int pf_lane = int(threadIdx.x) - 32;
  const int pf_lanes = kComputeThreads > 32 ? kComputeThreads - 32 : 32;
  // Static queue: positions [qbegin, qbegin + prefetched) already prefetched.
  uint32_t prefetched = 0;
  StaticQueue sq;  // the static queue's look-ahead
  if (!dynamic) sq.start(a, s, qbegin, qend);
  block_sync();
  for (uint32_t pos = 0;; ++pos) {
    uint32_t slot;  // index into queue_tasks
    uint32_t task;
    Instr instr;
    WaitHead head = {0, 0, 0, 0};  // lane i < kWaitHeads of warp 0: the task's wait i
    if (dynamic) {
      if (threadIdx.x == 0) s.claim = atomicAdd(a.ticket, 1u) - claim_base;
      block_sync();
      slot = s.claim;
      block_sync();
      if (slot >= qend) break;
      rec.queue_pos = int32_t(slot);
      task = a.queue_tasks[slot];
      instr = a.tasks[task];
      if (threadIdx.x < kWaitHeads) head = a.wait_heads[uint64_t(task) * kWaitHeads + threadIdx.x];
    } else {
      slot = qbegin + pos;
      if (slot >= qend) break;
      rec.queue_pos = int32_t(pos);
      task = sq.take(a, s, pos, slot, qend, &instr, &head);
    }
    rec.task = int32_t(task);
#if MS_PROFILE
    const uint64_t t_start = global_ns();
#endif
    // Prefetch window: the prefetch_depth tasks starting at this one (0: no prefetch). Each task
    // is prefetched once: a static queue tracks how far it got; in the dynamic queue the claimer
    // of ticket t prefetches ticket t + depth - 1 (and the first tickets prefetch themselves).
    if (MS_PREFETCH && a.prefetch_depth > 0 && (kComputeThreads == 32 || pf_lane >= 0)) {
      const int lane = kComputeThreads == 32 ? int(threadIdx.x) : pf_lane;
      if (dynamic) {
        if (slot + 1 < a.prefetch_depth) prefetch_task(a, task, lane, pf_lanes);
        if (slot + a.prefetch_depth - 1 < qend) {
          prefetch_task(a, a.queue_tasks[slot + a.prefetch_depth - 1], lane, pf_lanes);
        }
      } else {
        const uint32_t last = min(qend, slot + a.prefetch_depth);
        for (uint32_t q = max(slot, qbegin + prefetched); q < last; ++q) {
          prefetch_task(a, a.queue_tasks[q], lane, pf_lanes);
        }
      }
    }
    if (!dynamic) prefetched = max(prefetched, min(qend, slot + a.prefetch_depth) - qbegin);
    // A streamed GEMV (registers build) issues its first weights before it waits, so it runs its
    // own wait (vm/device/stream.cuh).
    const bool streamed = stream_fits(a, instr);
    const WaitOutcome w =
        streamed ? gemv_stream(a, instr, s, epoch, head) : wait_all(a, instr, epoch, &s.wait, head);
    if (w.exit != kExitRunning) {
      rec.state = w.exit;
      rec.counter = w.counter;
      rec.value = w.value;
      rec.target = w.target;
      rec.threshold = w.threshold;
      break;
    }
#if MS_PROFILE
    const uint64_t t_ready = streamed ? s.ready_ns : global_ns();
#endif
    bool ran = true;
    if (streamed) {
      // ran inside gemv_stream
    } else if (ring && ring_streams(instr)) {
      ran = gemv_ring_any(a, instr, s, rg, &ring_seq);
    } else if constexpr (kRing) {
      execute(a, instr, s, rg.x, kXFloats);
    } else {
      execute(a, instr, s, pages, a.smem_bytes / 4);
    }
    if (!ran) {  // a page never came: the launch is aborting
      rec.state = kExitAborted;
      break;
    }
#if MS_PROFILE
    block_sync();
    const uint64_t t_done = global_ns();
#endif
    if (!dynamic) ahead_landed();  // the next task's copy, before signal()'s barrier publishes it
    // A chainer whose signal is the last its chained task waits for runs that task here.
    const bool run_chain =
        MS_CHAINS && instr.chain != 0 && signal_arrive(a, instr, epoch, &s.last_arrival);
    if (!MS_CHAINS || instr.chain == 0) signal(a, instr);
#if MS_PROFILE
    stamp_task(a, task, t_start, t_ready, t_done, rec.tasks_run, streamed ? s.staged_ns : 0,
               streamed ? s.streamed_ns : 0);
#endif
    ++rec.tasks_run;
    if (run_chain) {
#if MS_PROFILE
      const uint64_t c_start = global_ns();  // no wait; run_chained signals as it ends
#endif
      run_chained(a, instr.chain - 1, s);
#if MS_PROFILE
      stamp_task(a, instr.chain - 1, c_start, c_start, global_ns(), rec.tasks_run);
#endif
      ++rec.tasks_run;
    }
  }
  if (rec.state == kExitDrained) {
    rec.task = -1;
    rec.queue_pos = int32_t(rec.tasks_run);
  }
  if (threadIdx.x == 0) a.dump[blockIdx.x] = rec;
}
