// The opcodes of the megakernel but attention's (vm/device/attention_tasks.cuh): one device
// function per opcode, each run by the whole block, with exactly the semantics of abi/abi.h; and
// the block's shared state. The dispatch switch is the interpreter's (vm/device/megakernel.cuh).
// Each has a CPU twin of the same name in the ReferenceVm (vm/reference_vm.cpp). All arithmetic is
// fp32; weights and KV are upcast on load; no atomics on data, so results are deterministic.
#pragma once

#include "abi/ring.h"
#include "vm/device/common.cuh"

namespace ms_dev {

// GEMV rows per epilogue pass, head-aligned (RoPE pairs): abi/ring.h's formula, the validator's
// too.
constexpr int kEpilogueRows = int(ring_epilogue_rows(kHeadDim));
static_assert(kEpilogueRows == (kRowChunk / kHeadDim) * kHeadDim, "kRowChunk and abi/ring.h agree");

/// A static queue's next task, copied into shared memory one task ahead (megakernel.cuh
/// fetch_ahead): its instruction and its wait heads, with no registers held across the current
/// task.
struct __align__(16) Ahead {
  Instr instr;
  WaitHead heads[kWaitHeads];
};
static_assert(sizeof(Instr) % 16 == 0 && sizeof(Ahead) == sizeof(Instr) + 16 * kWaitHeads,
              "fetch_ahead copies Ahead in 16-byte pieces");

/// Static shared memory of one block. The dynamic part (the page ring, KernelArgs::smem_bytes)
/// stages GEMV input vectors (and holds the weight ring of vm/device/ring.cuh).
struct Shared {
  float red[kComputeWarps];  // block reductions
  WaitOutcome wait;          // wait_all's result
  uint32_t claim;            // dynamic queue: the ticket thread 0 claimed
  uint32_t last_arrival;     // signal_arrive: 1 when this block runs the chained task
  uint32_t tag_acquired;     // kFlagTagIn: 1 when the early counter reads acquired the waits
  int32_t ring_failed;       // weight ring: a compute warp gave up waiting for a page (abort)
  uint64_t ready_ns;         // profile builds: when a streamed GEMV's wait ended (stream.cuh),
  uint64_t staged_ns;        // its input was staged
  uint64_t streamed_ns;      // and its weights multiplied (before the epilogue)
  uint64_t kv_bar;           // staged attention: the mbarrier its K copies complete on
  uint64_t kv_bar_v;         // staged attention: the mbarrier its V copies complete on
  uint32_t kv_phase;         // staged attention: the parity both bars' next phase completes with
  Ahead ahead[2];            // static queue: the next task (double-buffered by queue position)
  union {
    float rows[kEpilogueRows];  // GEMV results of one row chunk, before the epilogue
    struct {
      float q[kAttnHeadBatch * kHeadDim];         // query heads of one batch
      float rec[kComputeWarps * (kHeadDim + 2)];  // per-warp {m, l, o[hd]} of one head
    } attn;
  } u;
};

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// ---- kEmbed ----
/// Elements of the embedding row a thread loads before it stores any: the stores to act may alias
/// the weights for all the compiler knows, so a load-store loop waited one HBM round trip an
/// element (6.0 us for llama-8b's 16 a thread on an H200, on the step's critical path: every first
/// QKV task waits for it; dev/perf_log.md section 57). 4, not 8: with 8 (and 16) ptxas spilled 4 B
/// in the streamed GEMV of the llama-1b position-0 record's build, another function.
constexpr int kEmbedBatch = 4;

__device__ __forceinline__ void embed(const KernelArgs& a, const Instr& in) {
  const uint64_t row = uint64_t(uint32_t(a.step->token)) * in.ld;
  for (uint32_t r0 = in.row_begin + threadIdx.x; r0 < in.row_end;
       r0 += kComputeThreads * kEmbedBatch) {
    float v[kEmbedBatch];
#pragma unroll
    for (int u = 0; u < kEmbedBatch; ++u) {
      const uint32_t r = r0 + u * kComputeThreads;
      v[u] = r < in.row_end ? weight_at(a, in.weight + row + r) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kEmbedBatch; ++u) {
      const uint32_t r = r0 + u * kComputeThreads;
      if (r < in.row_end) a.act[in.out + r] = v[u];
    }
  }
}

// ---- kRmsNorm ----
__device__ __forceinline__ void rms_norm(const KernelArgs& a, const Instr& in, Shared& s) {
  const float inv = block_inv_rms(a.act + in.in, in.col_end, a.model.rms_eps, s.red);
  for (uint32_t r = in.row_begin + threadIdx.x; r < in.row_end; r += kComputeThreads) {
    a.act[in.out + r] = act_load(a.act + in.in + r) * inv * weight_at(a, in.weight2 + r);
  }
}

// ---- The QKV-row epilogue (RoPE + KV append) shared by kGemv, kGemvReduce and kRopeKv ----

/// Row r of the concatenated [Wq; Wk; Wv] output with value v; `pair` is the value of its
/// rotate-half partner (r + hd/2 or r - hd/2 within the head).
__device__ __forceinline__ void qkv_row(const KernelArgs& a, const Instr& in, uint32_t r, float v,
                                        float pair) {
  const ModelParams& m = a.model;
  const uint32_t hd = m.head_dim, half = hd / 2;
  const uint32_t q_dim = m.heads * hd, kv_dim = m.kv_heads * hd;
  const uint32_t pos = uint32_t(a.step->position);
  KvT* kv = reinterpret_cast<KvT*>(a.kv);
  if (r < q_dim + kv_dim) {
    const uint32_t local = r < q_dim ? r : r - q_dim;
    const uint32_t d = local % hd;
    const float angle = float(pos) * act_load(a.act + m.rope_table + (d % half));
    const float c = cosf(angle), sn = sinf(angle);
    const float rotated = d < half ? v * c - pair * sn : v * c + pair * sn;
    if (r < q_dim) {
      a.act[in.out + r] = rotated;
    } else {
      const uint32_t g = local / hd;
      from_f32(rotated, kv + kv_offset(m, in.layer, 0, g) + uint64_t(kv_write_slot(pos)) * hd + d);
    }
  } else {
    const uint32_t local = r - q_dim - kv_dim;
    const uint32_t g = local / hd, d = local % hd;
    from_f32(v, kv + kv_offset(m, in.layer, 1, g) + uint64_t(kv_write_slot(pos)) * hd + d);
  }
}

/// Applies the epilogue to rows [row0, row1) whose accumulated values are in s.u.rows.
__device__ __forceinline__ void gemv_epilogue(const KernelArgs& a, const Instr& in, Shared& s,
                                              uint32_t row0, uint32_t row1) {
  const uint32_t half = a.model.head_dim / 2;
  for (uint32_t r = row0 + threadIdx.x; r < row1; r += kComputeThreads) {
    const float v = s.u.rows[r - row0];
    if (in.flags & kFlagPartial) {
      a.act[in.out + r] = v;
    } else if (in.flags & kFlagResidual) {
      a.act[in.out + r] = v + act_load(a.act + in.aux + r);
    } else if (in.flags & kFlagRopeKv) {
      // Rows are head-aligned (the lowering guarantees it), so the partner is in this chunk.
      const uint32_t q_dim = a.model.heads * a.model.head_dim;
      const uint32_t local = r < q_dim ? r : r - q_dim;
      const uint32_t d = local % a.model.head_dim;
      const uint32_t partner = d < half ? r + half : r - half;
      const float pair = (partner >= row0 && partner < row1) ? s.u.rows[partner - row0] : 0.0f;
      qkv_row(a, in, r, v, pair);
    } else {
      a.act[in.out + r] = v;
    }
  }
}

/// kFlagRopePairs: the QKV epilogue of the task's local rows [j0, j1) (j0 even), whose values are
/// in s.u.rows[j - j0]; local row j is QKV row task_row(in, j) and its rotation partner is j ^ 1.
/// (Only the streamed GEMV, stream.cuh, runs tasks of RoPE pairs.)
__device__ __forceinline__ void gemv_pair_epilogue(const KernelArgs& a, const Instr& in, Shared& s,
                                                   uint32_t j0, uint32_t j1) {
  for (uint32_t j = j0 + threadIdx.x; j < j1; j += kComputeThreads)
    qkv_row(a, in, task_row(in, j, kHeadDim), s.u.rows[j - j0], s.u.rows[(j ^ 1u) - j0]);
}

// ---- argmax records (kFlagArgmaxPartial) and the block's argmax ----

/// Whether candidate (v, i) beats (best, best_i): a larger value, or an equal one at a smaller
/// index.
__device__ __forceinline__ bool argmax_beats(float v, int32_t i, float best, int32_t best_i) {
  return v > best || (v == best && i < best_i);
}

/// The block's argmax of every thread's candidate (best, best_i): thread 0 returns it (the others
/// return their own). Ends synced.
__device__ __forceinline__ void block_argmax(float* best, int32_t* best_i, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, *best, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, *best_i, o);
    if (argmax_beats(ov, oi, *best, *best_i)) {
      *best = ov;
      *best_i = oi;
    }
  }
  __shared__ int32_t idx[kComputeWarps];
  if (lane == 0) {
    s.red[warp] = *best;
    idx[warp] = *best_i;
  }
  block_sync();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kComputeWarps; ++w) {
      if (argmax_beats(s.red[w], idx[w], *best, *best_i)) {
        *best = s.red[w];
        *best_i = idx[w];
      }
    }
  }
  block_sync();
}

/// kFlagArgmaxPartial on a GEMV task: once its rows are written (and a barrier passed), its argmax
/// record {largest value, float(its smallest row)} at act[aux]. The rows are read from `rows`
/// (the streamed GEMV's s.u.rows, local row j at j) or, when null, back from act[out + r]. Every
/// GEMV path runs it at its end: ops.cuh's gemv inlines it (a call from there, or from the task
/// loop, raised the kernel's spill stores 28 -> 44 B in nvrtc_bench), the others call
/// argmax_record.
__device__ __forceinline__ void argmax_record_inline(const KernelArgs& a, const Instr& in,
                                                     Shared& s, const float* rows) {
  float best = neg_inf();
  int32_t best_i = 0x7fffffff;
  const uint32_t n = in.row_end - in.row_begin;
  const float* x = a.act + in.out + in.row_begin;
#pragma unroll 4
  for (uint32_t j = threadIdx.x; j < n; j += kComputeThreads) {
    const float v = rows != nullptr ? rows[j] : __ldcg(x + j);
    if (v > best || best_i == 0x7fffffff) {  // rows grow within a thread: > keeps the first
      best = v;
      best_i = int32_t(in.row_begin + j);
    }
  }
  block_argmax(&best, &best_i, s);
  if (threadIdx.x == 0) {
    a.act[in.aux] = best;
    a.act[in.aux + 1] = float(best_i);
  }
}

/// argmax_record_inline, not inlined: off the streamed GEMV's and the ring paths' registers.
__device__ __noinline__ void argmax_record(const KernelArgs& a, const Instr& in, Shared& s,
                                           const float* rows) {
  argmax_record_inline(a, in, s, rows);
}

// ---- kGemv ----

/// x(c): the GEMV input after its prologue.
__device__ __forceinline__ float gemv_input(const KernelArgs& a, const Instr& in, uint32_t c,
                                            float inv) {
  if (in.flags & kFlagNormPrologue) {
    return act_load(a.act + in.in + c) * inv * weight_at(a, in.weight2 + c);
  }
  if (in.flags & kFlagSiluMulPrologue) {
    return silu(act_load(a.act + in.in + c)) * act_load(a.act + in.in2 + c);
  }
  return act_load(a.act + in.in + c);
}

/// Where input column k0 + rel lives in the staged page ring. Columns are kept in blocks of
/// kXBlock (one warp-wide vector step); inside a block the element e of lane L's vector sits at
/// e * 32 + L, so the 32 lanes of a warp read 32 consecutive floats (no bank conflicts) where the
/// plain layout would have them 32 bytes apart (an 8-way conflict for bf16 vectors).
/// Both are abi/ring.h's formulas (ring_x_block, ring_x_slot), which the validator checks.
constexpr uint32_t kXBlock = ring_x_block(kVectorBytes, kWeightBytes);
__device__ __forceinline__ uint32_t x_slot(uint32_t rel) { return ring_x_slot(rel, kVecElems); }

/// Stages the GEMV input for columns [k0, k1) into x (x_slot order, relative to k0): x(c) after its
/// prologue, with the norm's inv_rms given as `inv` (1 stages act * gamma). The loads run over
/// [lo, hi) (a superset of [k0, k1)) and the sum of squares of act over it is returned, so the
/// ring path can reduce inv_rms in the same pass. Each thread issues kStageBatch independent loads
/// before it uses any: one L2 round trip per batch, not per element (the serial loop cost ~0.7 us
/// per element per thread; the down projection's 2 x 8192 inputs took ~26 us).
constexpr int kStageBatch = 8;
/// The x_slot layout as a type, so the staging can write the ring's other layout (ring.cuh).
struct XSlot {
  static __device__ __forceinline__ uint32_t at(uint32_t rel) { return x_slot(rel); }
};
template <class Slot = XSlot>
__device__ __forceinline__ float stage_input(const KernelArgs& a, const Instr& in, float* x,
                                             uint32_t k0, uint32_t k1, uint32_t lo, uint32_t hi,
                                             float inv) {
  const bool norm = (in.flags & kFlagNormPrologue) != 0;
  const bool silu_mul = (in.flags & kFlagSiluMulPrologue) != 0;
  float ss = 0.0f;
  for (uint32_t base = lo + threadIdx.x; base < hi; base += kComputeThreads * kStageBatch) {
    float v[kStageBatch], w[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const uint32_t i = base + u * kComputeThreads;
      v[u] = 0.0f;
      w[u] = 0.0f;
      if (i < hi) {
        v[u] = act_load(a.act + in.in + i);
        if (silu_mul)
          w[u] = act_load(a.act + in.in2 + i);
        else if (norm)
          w[u] = weight_at(a, in.weight2 + i);
      }
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const uint32_t i = base + u * kComputeThreads;
      if (i < hi) {
        float xv = v[u];
        if (norm) {
          ss += v[u] * v[u];
          xv = v[u] * inv * w[u];
        } else if (silu_mul) {
          xv = silu(v[u]) * w[u];
        }
        if (i >= k0 && i < k1) x[Slot::at(i - k0)] = xv;
      }
    }
  }
  return ss;
}

/// Vectors per row of one batch of the fallback GEMV (gemv_rows, double-buffered): a quarter of the
/// streamed GEMV's unroll, with which the builds of dev/perf_log.md section 54 spill in the
/// streamed GEMV what they spill without the fallback at head_dim 64, and less at 128.
constexpr int kFallbackUnroll = kUnroll > 2 ? kUnroll / 4 : 1;

/// One warp's dot products of kRowsPerWarp weight rows (first row r_first, clamped to row_last)
/// with x over columns [k0, k1). `x` is the staged chunk starting at column k0, in x_slot order;
/// when `staged` is false it is unused and the input is computed on the fly.
__device__ __forceinline__ void gemv_rows(const KernelArgs& a, const Instr& in, uint32_t r_first,
                                          uint32_t row_last, uint32_t k0, uint32_t k1, bool vec_ok,
                                          const float* x, bool staged, float inv, float* acc) {
  const int lane = threadIdx.x & 31;
  const WeightT* W = reinterpret_cast<const WeightT*>(a.weights);
  const WeightT* rowp[kRowsPerWarp];
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const uint32_t r = r_first + j <= row_last ? r_first + j : row_last;
    rowp[j] = W + in.weight + uint64_t(r) * in.ld;
    acc[j] = 0.0f;
  }
  uint32_t scalar_from = k0;
  if (vec_ok) {
    constexpr uint32_t kStep = 32 * kVecElems;
    const uint32_t vend = k0 + ((k1 - k0) / kVecElems) * kVecElems;
    uint32_t c = k0 + lane * kVecElems;
    // Batches of kFallbackUnroll vectors per row, double-buffered in registers: the next batch's
    // loads are in flight while this one is multiplied, so a warp always has two batches
    // outstanding. Fewer than the streamed GEMV's: this function's registers cost the streamed
    // GEMV, another function, its own (dev/perf_log.md section 54).
    constexpr int kU = kFallbackUnroll;
    constexpr uint32_t kBatch = kU * kStep;
    if (c + (kU - 1) * kStep + kVecElems <= vend) {
      WeightVec cur[kU][kRowsPerWarp], nxt[kU][kRowsPerWarp];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) cur[u][j] = load_weight_vec(rowp[j] + c + u * kStep);
      }
      while (true) {
        const uint32_t cn = c + kBatch;
        const bool more = cn + (kU - 1) * kStep + kVecElems <= vend;
        if (more) {
#pragma unroll
          for (int u = 0; u < kU; ++u) {
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j)
              nxt[u][j] = load_weight_vec(rowp[j] + cn + u * kStep);
          }
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
#pragma unroll
          for (int e = 0; e < kVecElems; ++e) {
            const uint32_t col = c + u * kStep + e;
            const float xv = staged ? x[(c - k0 - lane * kVecElems) + u * kStep + e * 32 + lane]
                                    : gemv_input(a, in, col, inv);
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) acc[j] += vec_elem(cur[u][j], e) * xv;
          }
        }
        c = cn;
        if (!more) break;
#pragma unroll
        for (int u = 0; u < kU; ++u) {
#pragma unroll
          for (int j = 0; j < kRowsPerWarp; ++j) cur[u][j] = nxt[u][j];
        }
      }
    }
    for (; c + kVecElems <= vend; c += kStep) {
      WeightVec v[kRowsPerWarp];
#pragma unroll
      for (int j = 0; j < kRowsPerWarp; ++j) v[j] = load_weight_vec(rowp[j] + c);
#pragma unroll
      for (int e = 0; e < kVecElems; ++e) {
        const float xv =
            staged ? x[(c - k0 - lane * kVecElems) + e * 32 + lane] : gemv_input(a, in, c + e, inv);
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) acc[j] += vec_elem(v[j], e) * xv;
      }
    }
    scalar_from = vend;
  }
  for (uint32_t c = scalar_from + lane; c < k1; c += 32) {
    const float xv = staged ? x[x_slot(c - k0)] : gemv_input(a, in, c, inv);
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) acc[j] += to_f32(rowp[j][c]) * xv;
  }
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) acc[j] = warp_sum(acc[j]);
}

/// The GEMV: rows in chunks of kEpilogueRows; the input vector staged through the page ring in
/// chunks of its capacity (no pages: computed on the fly from global memory). Never a task of RoPE
/// pairs: those take the streamed path (stream.cuh), which the validator's rule "launch" checks
/// (schedule/build_fit.h); supporting them here cost the kernel 32 B more spill stores.
/// Not inlined: its double-buffered batches (kUnroll x kRowsPerWarp vectors, twice) would otherwise
/// share the interpreter's registers and spill there.
__device__ __noinline__ void gemv(const KernelArgs& a, const Instr& in, Shared& s, float* pages,
                                  uint32_t page_floats) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float inv = 0.0f;
  if (in.flags & kFlagNormPrologue)
    inv = block_inv_rms(a.act + in.in, in.ld, a.model.rms_eps, s.red);
  const uint32_t capacity = page_floats / kXBlock * kXBlock;  // whole x_slot blocks
  const bool staged = capacity >= kXBlock;
  const uint32_t k_chunk = staged ? capacity : in.col_end - in.col_begin;
  const bool vec_ok = (in.weight + in.col_begin) % kVecElems == 0 && in.ld % kVecElems == 0;
  for (uint32_t row0 = in.row_begin; row0 < in.row_end; row0 += kEpilogueRows) {
    const uint32_t row1 = min(in.row_end, row0 + kEpilogueRows);
    const uint32_t nrows = row1 - row0;
    for (uint32_t k0 = in.col_begin; k0 < in.col_end; k0 += k_chunk) {
      const uint32_t k1 = min(in.col_end, k0 + k_chunk);
      if (staged) {
        stage_input(a, in, pages, k0, k1, k0, k1, inv);
        block_sync();
      }
      const float* x = pages;
      for (uint32_t g = warp; g * kRowsPerWarp < nrows; g += kComputeWarps) {
        const uint32_t r_first = row0 + g * kRowsPerWarp;
        float acc[kRowsPerWarp];
        gemv_rows(a, in, r_first, row1 - 1, k0, k1, vec_ok, x, staged, inv, acc);
        if (lane == 0) {
#pragma unroll
          for (int j = 0; j < kRowsPerWarp; ++j) {
            if (r_first + j < row1) {
              float* slot = &s.u.rows[r_first + j - row0];
              *slot = (k0 == in.col_begin) ? acc[j] : *slot + acc[j];
            }
          }
        }
      }
      block_sync();
    }
    gemv_epilogue(a, in, s, row0, row1);
    block_sync();
  }
  if (in.flags & kFlagArgmaxPartial) argmax_record_inline(a, in, s, nullptr);
}

// ---- kGemvReduce ----
__device__ __forceinline__ void gemv_reduce(const KernelArgs& a, const Instr& in, Shared& s) {
  for (uint32_t row0 = in.row_begin; row0 < in.row_end; row0 += kEpilogueRows) {
    const uint32_t row1 = min(in.row_end, row0 + kEpilogueRows);
    for (uint32_t r = row0 + threadIdx.x; r < row1; r += kComputeThreads) {
      float acc = 0.0f;
      for (uint32_t sp = 0; sp < in.param0; ++sp)
        acc += act_load(a.act + in.in + sp * in.param1 + r);
      s.u.rows[r - row0] = acc;
    }
    block_sync();
    gemv_epilogue(a, in, s, row0, row1);
    block_sync();
  }
  if (in.flags & kFlagArgmaxPartial) argmax_record(a, in, s, nullptr);
}

// ---- kRopeKv ----
__device__ __forceinline__ void rope_kv(const KernelArgs& a, const Instr& in, Shared& s) {
  Instr rope = in;
  rope.flags = kFlagRopeKv;
  for (uint32_t row0 = in.row_begin; row0 < in.row_end; row0 += kEpilogueRows) {
    const uint32_t row1 = min(in.row_end, row0 + kEpilogueRows);
    for (uint32_t r = row0 + threadIdx.x; r < row1; r += kComputeThreads)
      s.u.rows[r - row0] = act_load(a.act + in.in + r);
    block_sync();
    gemv_epilogue(a, rope, s, row0, row1);
    block_sync();
  }
}

// ---- kSiluMul ----
__device__ __forceinline__ void silu_mul(const KernelArgs& a, const Instr& in) {
  for (uint32_t r = in.row_begin + threadIdx.x; r < in.row_end; r += kComputeThreads) {
    a.act[in.out + r] = silu(act_load(a.act + in.in + r)) * act_load(a.act + in.in2 + r);
  }
}

// ---- kAdd ----
__device__ __forceinline__ void add(const KernelArgs& a, const Instr& in) {
  for (uint32_t r = in.row_begin + threadIdx.x; r < in.row_end; r += kComputeThreads) {
    a.act[in.out + r] = act_load(a.act + in.in + r) + act_load(a.act + in.in2 + r);
  }
}

// ---- kArgmax ----

__device__ __forceinline__ void argmax(const KernelArgs& a, const Instr& in, Shared& s) {
  float best = neg_inf();
  int32_t best_i = 0x7fffffff;
  if (in.flags & kFlagArgmaxPartial) {  // col_end records {value, float(index)}
    for (uint32_t k = threadIdx.x; k < in.col_end; k += kComputeThreads) {
      const float2 r = __ldcg(reinterpret_cast<const float2*>(a.act + in.in) + k);
      if (argmax_beats(r.x, int32_t(r.y), best, best_i) || best_i == 0x7fffffff) {
        best = r.x;
        best_i = int32_t(r.y);
      }
    }
    block_argmax(&best, &best_i, s);
    if (threadIdx.x == 0) a.step->argmax = best_i;
    return;
  }
  // Loads in flight: kStageBatch float4 per thread when the vector is 16-byte aligned (a 128K
  // vocabulary is ~6 round trips for one block), else kStageBatch scalars. Within a thread the
  // indices grow, so a strict > keeps the smallest index of a tie.
  const float* x = a.act + in.in;
  uint32_t done = 0;
  if ((reinterpret_cast<uint64_t>(x) & 15u) == 0) {
    const uint32_t n4 = in.col_end / 4;
    for (uint32_t base = threadIdx.x; base < n4; base += kComputeThreads * kStageBatch) {
      float4 v[kStageBatch];
#pragma unroll
      for (int u = 0; u < kStageBatch; ++u) {
        const uint32_t i = base + u * kComputeThreads;
        if (i < n4) {
          v[u] = __ldcg(reinterpret_cast<const float4*>(x) + i);
        } else {
          v[u].x = v[u].y = v[u].z = v[u].w = neg_inf();
        }
      }
#pragma unroll
      for (int u = 0; u < kStageBatch; ++u) {
        const uint32_t i = base + u * kComputeThreads;
        if (i >= n4) continue;
        const float e[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (e[k] > best || best_i == 0x7fffffff) {
            best = e[k];
            best_i = int32_t(4 * i + k);
          }
        }
      }
    }
    done = n4 * 4;
  }
  for (uint32_t base = done + threadIdx.x; base < in.col_end;
       base += kComputeThreads * kStageBatch) {
    float v[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const uint32_t i = base + u * kComputeThreads;
      v[u] = i < in.col_end ? act_load(a.act + in.in + i) : neg_inf();
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const uint32_t i = base + u * kComputeThreads;
      if (i < in.col_end && (v[u] > best || best_i == 0x7fffffff)) {
        best = v[u];
        best_i = int32_t(i);
      }
    }
  }
  block_argmax(&best, &best_i, s);
  if (threadIdx.x == 0) a.step->argmax = best_i;
}

}  // namespace ms_dev
