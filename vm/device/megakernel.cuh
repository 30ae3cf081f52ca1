// The persistent megakernel: one launch runs one decode step. Block b walks queue b (or, with a
// dynamic queue, claims tasks from one global queue with an atomic ticket): for each task it
// prefetches into L2 the weights of the `prefetch_depth` tasks starting at this one (weights depend
// on nothing, so this overlaps the dependency wait with HBM traffic), waits on the task's counters
// (acquire loads, bounded), runs the opcode with the whole block and signals (release). Counters
// only grow: thresholds are scaled by the step epoch, so no reset launch is needed between steps.
// Every wait is bounded; a timeout raises the abort flag, every block leaves, and each leaves a
// HangRecord for the host.
#pragma once

#include "vm/device/ring.cuh"
#include "vm/device/stream.cuh"

namespace ms_dev {

/// L2 prefetch of what task `t` streams and no other task produces: weight tiles, the embedding
/// row, the KV history of an attention partition.
__device__ __forceinline__ void prefetch_task(const KernelArgs& a, uint32_t t, int lane,
                                              int lanes) {
  const Instr in = a.tasks[t];
  const WeightT* W = reinterpret_cast<const WeightT*>(a.weights);
  switch (static_cast<Opcode>(in.opcode)) {
    case kGemv: {
      // A ring task too: the L2 prefetch runs ahead of the ring (pipeline.prefetch_depth decides).
      const uint64_t cols = in.col_end - in.col_begin;
      if (cols == in.ld) {
        prefetch_l2(W + in.weight + uint64_t(in.row_begin) * in.ld,
                    uint64_t(in.row_end - in.row_begin) * in.ld * kWeightBytes, lane, lanes);
      } else {
        for (uint32_t r = in.row_begin + lane; r < in.row_end; r += lanes) {
          prefetch_l2(W + in.weight + uint64_t(r) * in.ld + in.col_begin, cols * kWeightBytes, 0,
                      1);
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
      const uint32_t n = uint32_t(a.step->position) + 1, P = in.param2;
      const uint32_t chunk = (n + P - 1) / P, t0 = in.param1 * chunk;
      const uint32_t t1 = min(n, t0 + chunk);
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

}  // namespace ms_dev

extern "C" __global__ void __launch_bounds__(MS_THREADS, MS_MIN_BLOCKS)
    ms_megakernel(const ms_abi::KernelArgs a) {
  using namespace ms_dev;
  extern __shared__ __align__(16) float pages[];
  __shared__ Shared s;
  const uint32_t epoch = uint32_t(a.step->epoch);
  HangRecord rec = {kExitDrained, 0, -1, 0, 0, 0, 0, 0};
  const bool dynamic = a.dynamic_queue != 0;
  const uint32_t qbegin =
      dynamic ? 0 : (blockIdx.x < a.num_queues ? a.queue_offsets[blockIdx.x] : 0);
  const uint32_t qend =
      dynamic ? a.num_tasks : (blockIdx.x < a.num_queues ? a.queue_offsets[blockIdx.x + 1] : 0);
  const uint32_t claim_base = epoch * (a.num_tasks + gridDim.x);
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
  }
  // Threads of warps 1.. issue prefetches while warp 0 polls the counters.
  const int pf_lane = int(threadIdx.x) - 32;
  const int pf_lanes = kComputeThreads > 32 ? kComputeThreads - 32 : 32;
  uint32_t prefetched =
      0;  // static queue: positions [qbegin, qbegin + prefetched) already prefetched
  // Static queue: the next task's id and instruction are loaded while the current one waits and
  // runs, taking two dependent L2 round trips off every hop of the critical path.
  uint32_t next_task = (!dynamic && qbegin < qend) ? a.queue_tasks[qbegin] : 0;
  Instr next_instr;
  if (!dynamic && qbegin < qend) next_instr = a.tasks[next_task];
  for (uint32_t pos = 0;; ++pos) {
    uint32_t slot;  // index into queue_tasks
    uint32_t task;
    Instr instr;
    if (dynamic) {
      if (threadIdx.x == 0) s.claim = atomicAdd(a.ticket, 1u) - claim_base;
      block_sync();
      slot = s.claim;
      block_sync();
      if (slot >= a.num_tasks) break;
      rec.queue_pos = int32_t(slot);
      task = a.queue_tasks[slot];
      instr = a.tasks[task];
    } else {
      slot = qbegin + pos;
      if (slot >= qend) break;
      rec.queue_pos = int32_t(pos);
      task = next_task;
      instr = next_instr;
      if (slot + 1 < qend) {
        next_task = a.queue_tasks[slot + 1];
        next_instr = a.tasks[next_task];
      }
    }
    rec.task = int32_t(task);
#if MS_PROFILE
    const uint64_t t_start = global_ns();
#endif
    // Prefetch window: the prefetch_depth tasks starting at this one (0: no prefetch). Each task
    // is prefetched once: a static queue tracks how far it got; in the dynamic queue the claimer
    // of ticket t prefetches ticket t + depth - 1 (and the first tickets prefetch themselves).
    if (a.prefetch_depth > 0 && (kComputeThreads == 32 || pf_lane >= 0)) {
      const int lane = kComputeThreads == 32 ? int(threadIdx.x) : pf_lane;
      if (dynamic) {
        if (slot + 1 < a.prefetch_depth) prefetch_task(a, task, lane, pf_lanes);
        if (slot + a.prefetch_depth - 1 < a.num_tasks) {
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
        streamed ? gemv_stream(a, instr, s, epoch) : wait_all(a, instr, epoch, &s.wait);
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
    signal(a, instr);
#if MS_PROFILE
    if (threadIdx.x == 0) {
      uint64_t* st = a.stamps + uint64_t(task) * kStampWords;
      st[0] = t_start;
      st[1] = t_ready;
      st[2] = t_done;
      st[3] = global_ns();
      st[4] = (uint64_t(blockIdx.x) << 32) | rec.tasks_run;
    }
#endif
    ++rec.tasks_run;
  }
  if (rec.state == kExitDrained) {
    rec.task = -1;
    rec.queue_pos = int32_t(rec.tasks_run);
  }
  if (threadIdx.x == 0) a.dump[blockIdx.x] = rec;
}
