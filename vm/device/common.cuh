// Device helpers of the megakernel: the build knobs (NVRTC -D options) with their defaults, dtype
// conversion, the weight-load path, L2 prefetch, block reductions and the bounded counter waits.
// Compiled by NVRTC only: no host headers, no CUDA library headers.
#pragma once

#include "abi/abi.h"
#include "abi/kernel_args.h"

// ---- Build knobs (vm/nvrtc_build.h kernel_defines() sets every one of them) ----
#ifndef MS_THREADS
#define MS_THREADS 256  // threads per block (launch.threads_per_block)
#endif
#ifndef MS_MIN_BLOCKS
#define MS_MIN_BLOCKS 1  // blocks per SM the registers must allow (launch.blocks_per_sm)
#endif
#ifndef MS_VECTOR_BYTES
#define MS_VECTOR_BYTES 16  // bytes per weight load per lane: 4, 8 or 16
#endif
#ifndef MS_ROWS_PER_WARP
#define MS_ROWS_PER_WARP 2  // GEMV rows a warp accumulates against one input load
#endif
#ifndef MS_UNROLL
#define MS_UNROLL 2  // independent weight vectors in flight per row
#endif
#ifndef MS_STREAM_DEPTH
#define MS_STREAM_DEPTH 2  // streamed GEMV: weight chunks a warp holds in flight in registers
#endif
#ifndef MS_STREAM_HELD
#define MS_STREAM_HELD 0  // of those, the chunks issued only once the wait holds
#endif
#ifndef MS_STREAM_HELD_EVERY
#define MS_STREAM_HELD_EVERY 2  // the blocks that hold them back: block b when b % N == N - 1
#endif
#ifndef MS_WEIGHT_LOAD
#define MS_WEIGHT_LOAD 0  // 0: ld.global; 1: ld.global.nc.L1::no_allocate
#endif
#ifndef MS_WEIGHT_BF16
#define MS_WEIGHT_BF16 1  // weight dtype: 1 bf16, 0 fp32
#endif
#ifndef MS_KV_BF16
#define MS_KV_BF16 1  // KV cache dtype: 1 bf16, 0 fp32
#endif
// Task kinds the host compiles in only for programs that have them (vm/nvrtc_build.cpp
// kernel_defines): the combine prologue (kFlagCombinePrologue), the attention prologue
// (kFlagAttentionPrologue), kAttnCombine tasks (their staged copy into shared memory), tagged
// words (kFlagTagIn, kFlagTagOut).
#ifndef MS_COMBINE_IN_O
#define MS_COMBINE_IN_O 0
#endif
#ifndef MS_ATTENTION_IN_O
#define MS_ATTENTION_IN_O 0
#endif
#ifndef MS_COMBINE_TASKS
#define MS_COMBINE_TASKS 0
#endif
#ifndef MS_TAGGED
#define MS_TAGGED 0  // tagged words (kFlagTagIn / kFlagTagOut; abi/abi.h, Tagged words)
#endif
#ifndef MS_SILU_COPIES
#define MS_SILU_COPIES 0  // SiLU x up staged by copies where it fits (abi/ring.h stream_silu_copies)
#endif
// What a program with tasks compiles in (kernel_defines; everything when undefined): the opcodes
// of MS_OPCODES (bit i: opcode i), ops.cuh's gemv for GEMV tasks the streamed GEMV does not take,
// the last arrivers' path, the L2 prefetch of upcoming tasks.
#ifndef MS_OPCODES
#define MS_OPCODES 0xffffffffu
#endif
#ifndef MS_GEMV_FALLBACK
#define MS_GEMV_FALLBACK 1
#endif
#ifndef MS_CHAINS
#define MS_CHAINS 1
#endif
#ifndef MS_PREFETCH
#define MS_PREFETCH 1
#endif
#ifndef MS_ATTN_STAGED
#define MS_ATTN_STAGED 0  // long attention partitions staged in shared memory (attention.cuh)
#endif
#ifndef MS_WEIGHT_RING
#define MS_WEIGHT_RING 0  // 1: a loader warp streams GEMV weight tiles into a shared-memory ring
#endif
#ifndef MS_RING_INFLIGHT
#define MS_RING_INFLIGHT 0  // smem.inflight_pages: the loader's cap on pages in flight (0: none)
#endif
// The weight ring's shape: vm::kernel_defines passes these to every ring build (their defaults and
// ranges are the knob table's, abi/ring.h's for the segment width); a build without the ring
// compiles the ring's code but never runs it, so it gets inert values.
#if MS_WEIGHT_RING
#if !defined(MS_RING_PAGES) || !defined(MS_RING_PAGE_BYTES) || !defined(MS_X_FLOATS) || \
    !defined(MS_SEG_VECS)
#error \
    "a ring build takes MS_RING_PAGES, MS_RING_PAGE_BYTES, MS_X_FLOATS, MS_SEG_VECS from vm::kernel_defines"
#endif
#else
#ifndef MS_RING_PAGES
#define MS_RING_PAGES 1
#endif
#ifndef MS_RING_PAGE_BYTES
#define MS_RING_PAGE_BYTES 16
#endif
#ifndef MS_X_FLOATS
#define MS_X_FLOATS 0
#endif
#ifndef MS_SEG_VECS
#define MS_SEG_VECS 0
#endif
#endif
#ifndef MS_PROFILE
#define MS_PROFILE 0  // 1: every task stamps start / ready / done / signalled (megasched profile)
#endif
#ifndef MS_HEAD_DIM
#define MS_HEAD_DIM 64  // attention head dimension of the model
#endif
#ifndef MS_ATTN_HEAD_BATCH
#define MS_ATTN_HEAD_BATCH 8  // query heads an attention warp carries at once: 4 or 8
#endif

namespace ms_dev {

using namespace ms_abi;

constexpr int kThreads = MS_THREADS;
constexpr int kWarps = MS_THREADS / 32;
// With the weight ring the last warp is the loader: it never runs an opcode, so every opcode and
// every barrier of the interpreter involves the compute warps only (block_sync, a named barrier).
constexpr bool kRing = MS_WEIGHT_RING != 0;
constexpr int kLoaderWarp = kWarps - 1;
constexpr int kComputeWarps = kRing ? kWarps - 1 : kWarps;
constexpr int kComputeThreads = kComputeWarps * 32;
constexpr int kRingPages = MS_RING_PAGES;
constexpr uint32_t kRingInflight = MS_RING_INFLIGHT;
constexpr int kRingPageBytes = MS_RING_PAGE_BYTES;
constexpr int kXFloats = MS_X_FLOATS;
constexpr int kVectorBytes = MS_VECTOR_BYTES;
constexpr int kRowsPerWarp = MS_ROWS_PER_WARP;
constexpr int kUnroll = MS_UNROLL;
constexpr int kStreamDepth = MS_STREAM_DEPTH;
constexpr int kStreamHeld = MS_STREAM_HELD;
constexpr uint32_t kStreamHeldEvery = MS_STREAM_HELD_EVERY;
constexpr int kHeadDim = MS_HEAD_DIM;
constexpr int kHeadDimPerLane = (MS_HEAD_DIM + 31) / 32;  // head dims a lane owns (d = lane + 32 j)
// Query heads an attention warp carries at once: 4 when no attention task of the program has more
// (vm::kernel_defines), else 8. Each head holds head_dim / 32 floats of queries and of outputs per
// lane: at head_dim 128, eight heads' arrays made ptxas spill the streamed GEMV's weight chunks,
// another function (ARCHITECTURE.md, "Build defines derived from the program's tasks").
constexpr int kAttnHeadBatch = MS_ATTN_HEAD_BATCH;
constexpr int kRowChunk = 1024;  // GEMV rows whose results are staged for one epilogue pass

// ---- TEST-ONLY fault injection (tests/eval/planted_bug_test.cpp) ----
// MS_TEST_FAULT_KV_FROM / MS_TEST_FAULT_KV_UNTIL come only from vm::GpuVmOptions::test_defines,
// which no config, flag or MCP argument reaches: a step at a position in [FROM, UNTIL) writes its
// keys and values into the neighbouring slot (position ^ 1), so the check must catch it there.
#if defined(MS_TEST_FAULT_KV_FROM) && defined(MS_TEST_FAULT_KV_UNTIL)
__device__ __forceinline__ uint32_t kv_write_slot(uint32_t pos) {
  return pos >= MS_TEST_FAULT_KV_FROM && pos < MS_TEST_FAULT_KV_UNTIL ? pos ^ 1u : pos;
}
#else
__device__ __forceinline__ uint32_t kv_write_slot(uint32_t pos) { return pos; }
#endif

static_assert(MS_THREADS % 32 == 0 && MS_THREADS >= 32 && MS_THREADS <= 1024, "MS_THREADS");
static_assert(MS_VECTOR_BYTES == 4 || MS_VECTOR_BYTES == 8 || MS_VECTOR_BYTES == 16,
              "MS_VECTOR_BYTES");
static_assert(MS_ROWS_PER_WARP >= 1 && MS_ROWS_PER_WARP <= 8, "MS_ROWS_PER_WARP");
static_assert(MS_UNROLL >= 1 && MS_UNROLL <= 8, "MS_UNROLL");
static_assert(MS_STREAM_DEPTH >= 2 && MS_STREAM_DEPTH <= 4, "MS_STREAM_DEPTH");
static_assert(MS_STREAM_HELD >= 0 && MS_STREAM_HELD <= MS_STREAM_DEPTH,
              "MS_STREAM_HELD: chunks held back, at most MS_STREAM_DEPTH");
static_assert(MS_STREAM_HELD_EVERY == 1 || MS_STREAM_HELD_EVERY == 2 || MS_STREAM_HELD_EVERY == 4,
              "MS_STREAM_HELD_EVERY: 1, 2 or 4");
static_assert(!kRing || (MS_THREADS >= 64 && kRingPages >= 1 && kRingPageBytes % 16 == 0 &&
                         kXFloats % 4 == 0),
              "MS_WEIGHT_RING needs a compute warp, whole 16-byte pages and a staging area");
static_assert(MS_RING_INFLIGHT >= 0 && (!kRing || MS_RING_INFLIGHT < MS_RING_PAGES),
              "MS_RING_INFLIGHT: pages in flight, below the ring's pages (0: no cap)");
static_assert(MS_SEG_VECS == 0 || MS_SEG_VECS == 1 || MS_SEG_VECS == 2 || MS_SEG_VECS == 4 ||
                  MS_SEG_VECS == 8,
              "MS_SEG_VECS");
static_assert(MS_HEAD_DIM >= 2 && MS_HEAD_DIM <= 256 && MS_HEAD_DIM % 2 == 0, "MS_HEAD_DIM");
static_assert(MS_ATTN_HEAD_BATCH == 4 || MS_ATTN_HEAD_BATCH == 8, "MS_ATTN_HEAD_BATCH: 4 or 8");
static_assert(MS_ATTN_STAGED == 0 || MS_ATTN_STAGED == 1, "MS_ATTN_STAGED");

#if MS_WEIGHT_BF16
typedef uint16_t WeightT;
#else
typedef float WeightT;
#endif
#if MS_KV_BF16
typedef uint16_t KvT;
#else
typedef float KvT;
#endif
constexpr int kWeightBytes = sizeof(WeightT);
constexpr int kVecElems = kVectorBytes / kWeightBytes;  // weight elements per vector load

__device__ __forceinline__ float bf16_to_f32(uint16_t b) {
  return __uint_as_float(uint32_t(b) << 16);
}

/// Element `e` (0: the low half) of two bf16 packed in one 32-bit word, upcast: the one unpack of
/// packed weights and KV rows.
__device__ __forceinline__ float bf16_pair_elem(uint32_t word, int e) {
  return __uint_as_float((e & 1) ? (word & 0xFFFF0000u) : (word << 16));
}

/// Round-to-nearest-even, NaN kept quiet: the same rule as schedule::f32_to_bf16.
__device__ __forceinline__ uint16_t f32_to_bf16(float v) {
  const uint32_t bits = __float_as_uint(v);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    return uint16_t((bits >> 16) | 0x0040u);
  }
  return uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float to_f32(uint16_t v) { return bf16_to_f32(v); }
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ void from_f32(float v, uint16_t* dst) { *dst = f32_to_bf16(v); }
__device__ __forceinline__ void from_f32(float v, float* dst) { *dst = v; }

/// One scalar weight, upcast.
__device__ __forceinline__ float weight_at(const KernelArgs& a, uint64_t i) {
  return to_f32(reinterpret_cast<const WeightT*>(a.weights)[i]);
}

/// Activations are written by other blocks within the launch: read them at L2 (ld.global.cg), never
/// from a possibly stale L1 line.
__device__ __forceinline__ float act_load(const float* p) { return __ldcg(p); }
__device__ __forceinline__ float kv_load(const KvT* p) {
#if MS_KV_BF16
  return bf16_to_f32(__ldcg(reinterpret_cast<const unsigned short*>(p)));
#else
  return __ldcg(p);
#endif
}

/// A vector of kVectorBytes weight bytes, as 32-bit words.
struct WeightVec {
  uint32_t w[kVectorBytes / 4];
};

/// The weight-load path (MS_WEIGHT_LOAD): weights never change during a launch, so the streaming
/// variant may use the non-coherent path and skip L1.
__device__ __forceinline__ WeightVec load_weight_vec(const void* p) {
  WeightVec v;
#if MS_WEIGHT_LOAD == 1
#define MS_LD_SPACE "ld.global.nc.L1::no_allocate"
#else
#define MS_LD_SPACE "ld.global"
#endif
#if MS_VECTOR_BYTES == 16
  asm volatile(MS_LD_SPACE ".v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p));
#elif MS_VECTOR_BYTES == 8
  asm volatile(MS_LD_SPACE ".v2.u32 {%0, %1}, [%2];" : "=r"(v.w[0]), "=r"(v.w[1]) : "l"(p));
#else
  asm volatile(MS_LD_SPACE ".u32 %0, [%1];" : "=r"(v.w[0]) : "l"(p));
#endif
#undef MS_LD_SPACE
  return v;
}

/// Element e (0 .. kVecElems-1) of a weight vector, upcast.
__device__ __forceinline__ float vec_elem(const WeightVec& v, int e) {
#if MS_WEIGHT_BF16
  const uint32_t word = v.w[e >> 1];
  return bf16_pair_elem(word, e);
#else
  return __uint_as_float(v.w[e]);
#endif
}

/// Copies 16 bytes from global memory (at L2: written by other blocks, never from L1) into shared
/// memory without a register (cp.async.cg); copies_landed() waits for the thread's copies.
__device__ __forceinline__ void copy16_async(void* to, const void* src) {
#if __CUDA_ARCH__ >= 800
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
  *reinterpret_cast<uint4*>(to) = __ldcg(reinterpret_cast<const uint4*>(src));
#endif
}

/// Waits for the calling thread's copy16_async copies (a barrier then makes them block-visible).
__device__ __forceinline__ void copies_landed() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

/// Brings [p, p + bytes) into L2 without waiting; weights never depend on other tasks.
__device__ __forceinline__ void prefetch_l2(const void* p, uint64_t bytes, int lane, int lanes) {
  const char* base = reinterpret_cast<const char*>(p);
#if __CUDA_ARCH__ >= 900
  // Bulk prefetch: one instruction per 16 KiB (address and size 16-byte aligned).
  const uint64_t start = reinterpret_cast<uint64_t>(base) & ~uint64_t(15);
  const uint64_t end = (reinterpret_cast<uint64_t>(base) + bytes + 15) & ~uint64_t(15);
  constexpr uint64_t kChunk = 16384;
  for (uint64_t c = start + uint64_t(lane) * kChunk; c < end; c += uint64_t(lanes) * kChunk) {
    const uint32_t n = uint32_t(end - c < kChunk ? end - c : kChunk);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c), "r"(n) : "memory");
  }
#else
  for (uint64_t off = uint64_t(lane) * 128; off < bytes; off += uint64_t(lanes) * 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + off));
  }
#endif
}

/// The barrier of the warps that run opcodes: the whole block, or with the weight ring every warp
/// but the loader (named barrier 1).
__device__ __forceinline__ void block_sync() {
  if constexpr (kRing) {
    asm volatile("bar.sync 1, %0;" ::"r"(kComputeThreads) : "memory");
  } else {
    __syncthreads();
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// One key of a warp's online softmax for one query head: the lanes' dims d = lane + 32 i of the
/// query `q`, key `k` and value `v`; the head's running max `mx`, sum `l` and output `o` take the
/// key's score (attn_scale x q.k). The short attention path (attention_tasks.cuh attn_short) and
/// the attention prologue of the streamed GEMV (stream.cuh stream_stage_attention) both run it.
__device__ __forceinline__ void online_softmax_key(const float (&q)[kHeadDimPerLane],
                                                   const float (&k)[kHeadDimPerLane],
                                                   const float (&v)[kHeadDimPerLane],
                                                   float attn_scale, float& mx, float& l,
                                                   float (&o)[kHeadDimPerLane]) {
  float part = 0.0f;
#pragma unroll
  for (int i = 0; i < kHeadDimPerLane; ++i) part += q[i] * k[i];
  const float sc = attn_scale * warp_sum(part);
  const float mnew = fmaxf(mx, sc);
  const float corr = expf(mx - mnew), pr = expf(sc - mnew);
  l = l * corr + pr;
#pragma unroll
  for (int i = 0; i < kHeadDimPerLane; ++i) o[i] = o[i] * corr + pr * v[i];
  mx = mnew;
}

/// Block-wide sum in a fixed order (deterministic); every thread gets the result. `scratch` holds
/// kComputeWarps floats and is reused, so the function ends with a barrier.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  block_sync();
  float total = 0.0f;
  for (int w = 0; w < kComputeWarps; ++w) total += scratch[w];
  block_sync();
  return total;
}

/// rsqrt(mean(x[0 .. n)^2) + eps) of an activation vector, computed by the whole block.
__device__ __forceinline__ float block_inv_rms(const float* x, uint32_t n, float eps,
                                               float* scratch) {
  float ss = 0.0f;
  for (uint32_t i = threadIdx.x; i < n; i += kComputeThreads) {
    const float v = act_load(x + i);
    ss += v * v;
  }
  const float total = block_sum(ss, scratch);
  return rsqrtf(total / float(n) + eps);
}

/// SiLU with the fast exponential and division (a few ulp; no IEEE-division slow path: the down
/// projection stages 8192 of these per block and task).
__device__ __forceinline__ float silu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }

// ---- Counters: acquire loads, release increments, bounded waits ----

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/// A counter's value with no ordering (kFlagTagIn tasks read it early and fence once it holds).
__device__ __forceinline__ uint32_t counter_peek(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

/// With a relaxed load before it that saw a release, an acquire (the PTX acquire pattern).
__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ int32_t abort_raised(const int32_t* flag) {
  return *reinterpret_cast<const volatile int32_t*>(flag);
}

/// Where a block's wait ended.
struct WaitOutcome {
  int32_t exit;      // kExitRunning (all waits hold) / kExitTimedOut / kExitAborted
  uint32_t counter;  // the wait it gave up on
  uint32_t value;
  uint32_t target;
  uint32_t threshold;
};

/// Waits until every wait of `instr` holds at this epoch. Lane i of warp 0 polls wait i (i < 32;
/// further waits go round again), so the waits of one task are polled in parallel. Bounded: past
/// spin_bound_ns the block raises the abort flag; a block that sees the flag gives up. The result
/// is shared through `shared_out` and a barrier, so every thread returns the same outcome. The
/// caller must pass a barrier (signal() has one) before the next call.
/// `head` is lane i's WaitHead i of the task (kernel_args.h), loaded with its instruction: a task
/// with at most kWaitHeads waits polls its counters with no table reads first.
/// With `early` (a kFlagTagIn task before it reads its tagged input) each wait holds once its
/// counter is within tagged_wait_slack of the threshold; the task acquires the full waits later
/// (gemv_stream in stream.cuh).
__device__ __forceinline__ WaitOutcome wait_all(const KernelArgs& a, const Instr& instr,
                                                uint32_t epoch, WaitOutcome* shared_out,
                                                const WaitHead& head, bool early = false) {
  if (threadIdx.x < 32) {
    WaitOutcome out = {kExitRunning, 0, 0, 0, 0};
    const int lane = threadIdx.x;
    const uint64_t start = instr.wait_count > 0 ? global_ns() : 0;
    const bool from_heads = instr.wait_count <= kWaitHeads;
    for (uint32_t base = 0; base < instr.wait_count && out.exit == kExitRunning; base += 32) {
      const uint32_t i = base + lane;
      const bool mine = i < instr.wait_count;
      Wait w = {0, 0};
      uint32_t target = 0;
      if (mine && from_heads) {
        w = {head.counter, head.threshold};
        target = wait_target(epoch, head.total, head.threshold);
      } else if (mine) {
        w = a.waits[instr.wait_begin + i];
        target = wait_target(epoch, a.counter_totals[w.counter], w.threshold);
      }
      if (MS_TAGGED && early) target -= tagged_wait_slack(w.threshold);
      uint32_t spins = 0;
      while (true) {
        const uint32_t v = mine ? load_acquire(a.counters + w.counter) : 0;
        const bool ok = !mine || counter_reached(v, target);  // wrap-safe (abi/abi.h)
        if (__all_sync(0xffffffffu, ok)) break;
        if ((++spins & 15u) == 0) {
          int32_t exit = kExitRunning;
          if (lane == 0) {
            if (abort_raised(a.abort_flag))
              exit = kExitAborted;
            else if (global_ns() - start > a.spin_bound_ns)
              exit = kExitTimedOut;
          }
          exit = __shfl_sync(0xffffffffu, exit, 0);  // one decision for the whole warp
          if (exit != kExitRunning) {
            // Report the lowest-numbered wait that does not hold.
            const uint32_t pending = __ballot_sync(0xffffffffu, !ok);
            const int src = __ffs(pending) - 1;
            out.exit = exit;
            out.counter = __shfl_sync(0xffffffffu, w.counter, src);
            out.value = __shfl_sync(0xffffffffu, v, src);
            out.target = __shfl_sync(0xffffffffu, target, src);
            out.threshold = __shfl_sync(0xffffffffu, w.threshold, src);
            if (exit == kExitTimedOut && lane == 0) {
              atomicExch(a.abort_flag, 1);
              __threadfence();
            }
            break;
          }
          if (spins > 1024) __nanosleep(64);
        } else if (spins > 16) {
          __nanosleep(32);  // fewer polls of a hot counter line, which the signals also hit
        }
      }
    }
    if (threadIdx.x == 0) *shared_out = out;
  }
  block_sync();
  // No second barrier: the task's signal() barrier comes before the next wait_all writes the slot.
  return *shared_out;
}

// ---- Tagged words (abi/abi.h): 64-bit {fp32 bits, step tag}, one store or load each ----

__device__ __forceinline__ void tagged_store(uint64_t* p, float v, uint32_t tag) {
  const uint64_t w = (uint64_t(tag) << 32) | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}

__device__ __forceinline__ uint64_t tagged_load(const uint64_t* p) {
  uint64_t w;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(p));
  return w;
}

/// Whether a tagged word carries `tag`.
__device__ __forceinline__ bool tag_is(uint64_t w, uint32_t tag) {
  return uint32_t(w >> 32) == tag;
}

/// One round of a spin on tagged words that have not arrived: false once the spin must stop (past
/// the spin bound, or another block raised the abort flag; then this one raises it too, and the
/// task's acquire reports the abort). `start` is 0 before the first round.
__device__ __forceinline__ bool tagged_spin_on(const KernelArgs& a, uint32_t spins,
                                               uint64_t* start) {
  if (*start == 0) *start = global_ns();
  if ((spins & 63u) == 0 &&
      (abort_raised(a.abort_flag) || global_ns() - *start > a.spin_bound_ns)) {
    atomicExch(a.abort_flag, 1);
    return false;
  }
  if (spins > 16) __nanosleep(32);
  return true;
}

/// Publishes the block's writes of one task: barrier, then thread 0 adds the increment with a
/// release reduction at gpu scope (cumulative over the barrier, as CUTLASS's generic barrier's
/// arrive does it). A consumer that acquires the new value sees every write of the task.
/// (__threadfence is a sequentially consistent fence: stronger than needed and measured at ~2.9 us
/// per gate/up task under contention.)
__device__ __forceinline__ void signal(const KernelArgs& a, const Instr& instr) {
  block_sync();
  if (threadIdx.x == 0 && instr.signal_increment != 0) {
    asm volatile(
        "red.release.gpu.global.add.u32 [%0], %1;" ::"l"(a.counters + instr.signal_counter),
        "r"(instr.signal_increment)
        : "memory");
  }
}

/// A chainer's signal (abi/abi.h, Last arrivers): as signal(), but the add returns the counter's
/// old value, so the block learns whether its add took the counter to the chained task's wait
/// target (exactly one add per step does). That block runs the chained task. The add is acq_rel:
/// a release of the block's writes (cumulative over the barrier, as signal()'s fence is) and an
/// acquire of what every other chainer released before its own add, which the barrier then
/// passes to the block, as wait_all's acquire load does. (A fence before a relaxed add and a
/// second fence after it on the last arrival measured 8.4 us slower per step at position 4096 on
/// an H100.) `shared_flag` carries the answer to the whole block.
__device__ __forceinline__ bool signal_arrive(const KernelArgs& a, const Instr& instr,
                                              uint32_t epoch, uint32_t* shared_flag) {
  block_sync();
  if (threadIdx.x == 0) {
    const WaitHead h = a.wait_heads[uint64_t(instr.chain - 1) * kWaitHeads];  // its one wait
    uint32_t old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(a.counters + instr.signal_counter), "r"(instr.signal_increment)
                 : "memory");
    const uint32_t target = wait_target(epoch, h.total, h.threshold);
    const bool last = arrival_completes(old, instr.signal_increment, target);
    *shared_flag = last ? 1u : 0u;
  }
  block_sync();
  return *shared_flag != 0;
}

}  // namespace ms_dev
