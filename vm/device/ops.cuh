// The opcodes of the megakernel: one device function per opcode, each run by the whole block, with
// exactly the semantics of abi/abi.h. Each has a CPU twin of the same name in the ReferenceVm
// (vm/reference_vm.cpp). All arithmetic is fp32; weights and KV are upcast on load; no atomics on
// data, so results are deterministic.
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

// ---- Attention partitions staged in shared memory (vm/device/attention.cuh) ----

/// Bytes of one staged key or value row, and its 16-byte chunks.
constexpr uint32_t kKvRowBytes = kHeadDim * sizeof(KvT);
constexpr int kKvChunks = int(kKvRowBytes / 16);
constexpr int kKvPerChunk = 16 / int(sizeof(KvT));  // elements of a 16-byte chunk
/// Head dims a lane owns in the value phase: kVd consecutive dims from lane * kVd.
constexpr int kVd = kHeadDim >= 32 ? kHeadDim / 32 : 1;
/// The rows' layout allows staging: whole 16-byte chunks, and head dims split evenly over lanes.
constexpr bool kAttnStageable = kKvRowBytes % 16 == 0 && kHeadDim % 32 == 0 &&
                                (kVd * sizeof(KvT)) % 4 == 0 && kKvPerChunk % 4 == 0;
/// Builds whose long attention partitions run vm/device/attention.cuh's attn_staged_partition
/// (kernel.attention = staged: MS_ATTN_STAGED registers builds on sm_90 with a head width that
/// stages; attn_partial hands them over).
#if __CUDA_ARCH__ >= 900
constexpr bool kAttnStagedBuild = MS_ATTN_STAGED && !kRing && kAttnStageable;
#else
constexpr bool kAttnStagedBuild = false;
#endif
/// Query heads a staged task computes, always all of them (heads past the task's own are zero
/// queries whose results are dropped): no branch on the head count in the inner loops, so the
/// heads' loads, FMAs and shuffles interleave. A GQA group of llama models is 4 heads; a task of
/// more takes attn_short.
constexpr int kStageHeads = 4;
/// Floats of the per-warp probability scratch: 32 keys x kStageHeads heads per warp.
constexpr uint32_t kProbFloats = uint32_t(kComputeWarps) * 32u * uint32_t(kStageHeads);
/// Fewer keys per round than this take attn_short instead.
constexpr uint32_t kStageMinKeys = 32;
static_assert(kStageHeads == 4, "the probability scratch holds one float4 of heads per key");
static_assert(kStageHeads <= kAttnHeadBatch, "staged queries fit s.u.attn.q");

/// The keys of an attention partition at this step.
struct AttnKeys {
  uint32_t t0, t1;  // keys [t0, t1)
  uint32_t pos;     // the step's position: key `pos` is written by this step's QKV
};

__device__ __forceinline__ AttnKeys attn_keys(const KernelArgs& a, const Instr& in) {
  const uint32_t pos = uint32_t(a.step->position), n = pos + 1, P = in.param2;
  const uint32_t chunk = (n + P - 1) / P;
  const uint32_t t0 = in.param1 * chunk;
  return {t0, min(n, t0 + chunk), pos};
}

/// Keys one round holds in `smem_bytes` of dynamic shared memory (K rows, V rows, then the
/// probability scratch).
__device__ __forceinline__ uint32_t attn_round_keys(uint32_t smem_bytes) {
  const uint32_t prob = kProbFloats * 4u;
  return smem_bytes > prob ? (smem_bytes - prob) / (2u * kKvRowBytes) : 0u;
}
/// Whether `smem_bytes` of dynamic shared memory can stage a partition: a round of at least
/// kStageMinKeys keys, and room for every warp's softmax state of every head at the merge.
__device__ __forceinline__ bool attn_stage_fits(uint32_t smem_bytes) {
  constexpr uint32_t kMergeBytes = 4u * kStageHeads * kComputeWarps * (kHeadDim + 2);
  return attn_round_keys(smem_bytes) >= kStageMinKeys && smem_bytes >= kMergeBytes;
}
__device__ __forceinline__ void attn_staged_partition(const KernelArgs& a, const Instr& in,
                                                      Shared& s);

// ---- kEmbed ----
__device__ __forceinline__ void embed(const KernelArgs& a, const Instr& in) {
  const uint64_t row = uint64_t(uint32_t(a.step->token)) * in.ld;
  for (uint32_t r = in.row_begin + threadIdx.x; r < in.row_end; r += kComputeThreads) {
    a.act[in.out + r] = weight_at(a, in.weight + row + r);
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
    // Batches of kUnroll vectors per row, double-buffered in registers: the next batch's loads are
    // in flight while this one is multiplied, so a warp always has two batches outstanding.
    constexpr uint32_t kBatch = kUnroll * kStep;
    if (c + (kUnroll - 1) * kStep + kVecElems <= vend) {
      WeightVec cur[kUnroll][kRowsPerWarp], nxt[kUnroll][kRowsPerWarp];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) cur[u][j] = load_weight_vec(rowp[j] + c + u * kStep);
      }
      while (true) {
        const uint32_t cn = c + kBatch;
        const bool more = cn + (kUnroll - 1) * kStep + kVecElems <= vend;
        if (more) {
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j)
              nxt[u][j] = load_weight_vec(rowp[j] + cn + u * kStep);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
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
        for (int u = 0; u < kUnroll; ++u) {
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

// ---- kAttnPartial ----

/// Dot products of one key row with the nh staged query heads (acc[j] += q_j . k).
__device__ __forceinline__ void attn_scores(const KvT* krow, const float* q, int nh, float* sc) {
  constexpr bool kVec = (kHeadDim * sizeof(KvT)) % 16 == 0;
  if (kVec) {
    // The key row in batches of kRowBatch 16-byte loads issued before any is used: one L2 round
    // trip per batch, not per load (a key written by another block this step is an L2 read).
    constexpr int kPer = 16 / sizeof(KvT);
    constexpr int kVecs = kHeadDim / kPer;
    constexpr int kRowBatch = kVecs < 4 ? kVecs : 4;
    const uint4* row = reinterpret_cast<const uint4*>(krow);
    for (int v0 = 0; v0 < kVecs; v0 += kRowBatch) {
      uint4 raw[kRowBatch];
#pragma unroll
      for (int b = 0; b < kRowBatch; ++b) {
        if (v0 + b < kVecs) raw[b] = __ldcg(row + v0 + b);
      }
#pragma unroll
      for (int b = 0; b < kRowBatch; ++b) {
        if (v0 + b >= kVecs) break;
        const uint32_t w[4] = {raw[b].x, raw[b].y, raw[b].z, raw[b].w};
        const int d0 = (v0 + b) * kPer;
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
#if MS_KV_BF16
          const float kv = bf16_pair_elem(w[e >> 1], e);
#else
          const float kv = __uint_as_float(w[e]);
#endif
#pragma unroll
          for (int j = 0; j < kAttnHeadBatch; ++j) {
            if (j < nh) sc[j] += q[j * kHeadDim + d0 + e] * kv;
          }
        }
      }
    }
  } else {
    for (int d = 0; d < kHeadDim; ++d) {
      const float kv = kv_load(krow + d);
#pragma unroll
      for (int j = 0; j < kAttnHeadBatch; ++j) {
        if (j < nh) sc[j] += q[j * kHeadDim + d] * kv;
      }
    }
  }
}

/// Head h's dim d from the warps' records {m, l, o[hd]} at `recs` (kHeadDim + 2 floats apart, M
/// their largest m), in warp order: the head's output (one partition) or its partition record.
__device__ __forceinline__ void attn_merge_dim(const KernelArgs& a, const Instr& in,
                                               const float* recs, uint32_t h, uint32_t d, float M) {
  constexpr uint32_t kRec = kHeadDim + 2;
  const uint32_t p = in.param1, P = in.param2;
  float L = 0.0f, O = 0.0f;
  for (int w = 0; w < kComputeWarps; ++w) {
    const float* r = recs + w * kRec;
    const float f = r[1] > 0.0f ? expf(r[0] - M) : 0.0f;  // warps with no keys add nothing
    L += r[1] * f;
    O += r[2 + d] * f;
  }
  if (P == 1) {
    a.act[in.out + uint64_t(h) * kHeadDim + d] = O / L;
  } else {
    float* rec = a.act + in.aux + (uint64_t(p) * a.model.heads + h) * kRec;
    if (d == 0) {
      rec[0] = M;
      rec[1] = L;
    }
    rec[2 + d] = O;
  }
}

/// Merges the warps' online-softmax states of query head h (each warp's max m, sum l and output o
/// over the lane's head dims d = lane + 32 i) in warp order, and writes the head's output (one
/// partition) or its partition record. The whole block; ends synced.
__device__ __forceinline__ void attn_merge_head(const KernelArgs& a, const Instr& in, Shared& s,
                                                uint32_t h, float m, float l,
                                                const float (&o)[kHeadDimPerLane]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t rec_len = kHeadDim + 2;
  float* mine = s.u.attn.rec + warp * rec_len;
  if (lane == 0) {
    mine[0] = m;
    mine[1] = l;
  }
#pragma unroll
  for (int i = 0; i < kHeadDimPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < kHeadDim) mine[2 + d] = o[i];
  }
  block_sync();
  float M = neg_inf();
  for (int w = 0; w < kComputeWarps; ++w) M = fmaxf(M, s.u.attn.rec[w * rec_len]);
  for (uint32_t d = threadIdx.x; d < kHeadDim; d += kComputeThreads)
    attn_merge_dim(a, in, s.u.attn.rec, h, d, M);
  block_sync();
}

/// Keys of a partition at most this long take attn_short: 16 a warp (four rounds of
/// kShortKeysInFlight) in registers builds, where a longer one takes attn_partial's key-per-lane
/// path and its seven or so dependent round trips whatever the count; 4 a warp in staged builds,
/// whose staged path was the faster at 64 and 128 keys a partition (dev/perf_log.md section 50).
constexpr uint32_t kAttnShortKeys = (kAttnStagedBuild ? 4u : 16u) * kComputeWarps;

/// Keys whose rows a warp of attn_short loads together: its next kShortKeysInFlight keys.
constexpr int kShortKeysInFlight = 4;

/// A short partition [t0, t1) (short contexts: one key at position 0): warp w takes keys
/// t0 + w, t0 + w + kComputeWarps, ...; lane L owns head dims L + 32 i of the queries, keys and
/// values. The queries and the key and value rows of the warp's next kShortKeysInFlight keys are
/// independent loads issued together (one L2 round trip for up to 32 keys of a partition, where
/// the key-per-lane path of attn_partial makes four dependent ones: the queries, the key row in
/// two batches, the values); the keys are then taken in the same order as one at a time.
__device__ __forceinline__ void attn_short(const KernelArgs& a, const Instr& in, Shared& s,
                                           const KvT* K, const KvT* V, uint32_t t0, uint32_t t1) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (uint32_t hb = in.row_begin; hb < in.row_end; hb += kAttnHeadBatch) {
    const int nh = int(min(uint32_t(kAttnHeadBatch), in.row_end - hb));
    float q[kAttnHeadBatch][kHeadDimPerLane], mx[kAttnHeadBatch], l[kAttnHeadBatch];
    float o[kAttnHeadBatch][kHeadDimPerLane];
#pragma unroll
    for (int j = 0; j < kAttnHeadBatch; ++j) {
      mx[j] = neg_inf();
      l[j] = 0.0f;
#pragma unroll
      for (int i = 0; i < kHeadDimPerLane; ++i) {
        const int d = lane + 32 * i;
        o[j][i] = 0.0f;
        q[j][i] = (j < nh && d < kHeadDim)
                      ? act_load(a.act + in.in + uint64_t(hb + j) * kHeadDim + d)
                      : 0.0f;
      }
    }
    for (uint32_t t = t0 + warp; t < t1; t += kComputeWarps * kShortKeysInFlight) {
      float kx[kShortKeysInFlight][kHeadDimPerLane], vx[kShortKeysInFlight][kHeadDimPerLane];
#pragma unroll
      for (int u = 0; u < kShortKeysInFlight; ++u) {
        const uint32_t tu = t + uint32_t(u * kComputeWarps);
#pragma unroll
        for (int i = 0; i < kHeadDimPerLane; ++i) {
          const int d = lane + 32 * i;
          const bool in_range = tu < t1 && d < kHeadDim;
          kx[u][i] = in_range ? kv_load(K + uint64_t(tu) * kHeadDim + d) : 0.0f;
          vx[u][i] = in_range ? kv_load(V + uint64_t(tu) * kHeadDim + d) : 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kShortKeysInFlight; ++u) {
        if (t + uint32_t(u * kComputeWarps) >= t1) break;  // uniform in the warp
#pragma unroll
        for (int j = 0; j < kAttnHeadBatch; ++j) {
          if (j >= nh) break;
          online_softmax_key(q[j], kx[u], vx[u], a.model.attn_scale, mx[j], l[j], o[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kAttnHeadBatch; ++j) {
      if (j < nh) attn_merge_head(a, in, s, hb + j, mx[j], l[j], o[j]);
    }
  }
}

__device__ __forceinline__ void attn_partial(const KernelArgs& a, const Instr& in, Shared& s) {
  const ModelParams& m = a.model;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t g = in.param0, p = in.param1;
  const AttnKeys keys = attn_keys(a, in);
  const uint32_t t0 = keys.t0, t1 = keys.t1;
  const uint32_t rec_len = kHeadDim + 2;
  if (t0 >= t1) {  // empty partition (only when P > 1)
    for (uint32_t h = in.row_begin; h < in.row_end; ++h) {
      float* rec = a.act + in.aux + (uint64_t(p) * m.heads + h) * rec_len;
      for (uint32_t i = threadIdx.x; i < rec_len; i += kComputeThreads)
        rec[i] = i == 0 ? neg_inf() : 0.0f;
    }
    return;
  }
  const KvT* K = reinterpret_cast<const KvT*>(a.kv) + kv_offset(m, in.layer, 0, g);
  const KvT* V = reinterpret_cast<const KvT*>(a.kv) + kv_offset(m, in.layer, 1, g);
  // Staged builds take a long partition of at most kStageHeads query heads staged through shared
  // memory (vm/device/attention.cuh) when the dynamic shared memory fits it, else attn_short.
  const bool staged = kAttnStagedBuild && in.row_end - in.row_begin <= uint32_t(kStageHeads) &&
                      attn_stage_fits(a.smem_bytes);
  if (t1 - t0 <= kAttnShortKeys || (kAttnStagedBuild && !staged)) {
    attn_short(a, in, s, K, V, t0, t1);
    return;
  }
  if constexpr (kAttnStagedBuild) {
    attn_staged_partition(a, in, s);
    return;
  }
  for (uint32_t hb = in.row_begin; hb < in.row_end; hb += kAttnHeadBatch) {
    const int nh = int(min(uint32_t(kAttnHeadBatch), in.row_end - hb));
    for (uint32_t i = threadIdx.x; i < uint32_t(nh) * kHeadDim; i += kComputeThreads) {
      s.u.attn.q[i] = act_load(a.act + in.in + uint64_t(hb) * kHeadDim + i);
    }
    block_sync();
    float mx[kAttnHeadBatch], l[kAttnHeadBatch], o[kAttnHeadBatch][kHeadDimPerLane];
#pragma unroll
    for (int j = 0; j < kAttnHeadBatch; ++j) {
      mx[j] = neg_inf();
      l[j] = 0.0f;
#pragma unroll
      for (int i = 0; i < kHeadDimPerLane; ++i) o[j][i] = 0.0f;
    }
    // Warp w takes key blocks of 32 (lane = key for the scores, lane = dim for the values).
    for (uint32_t kb = t0 + warp * 32; kb < t1; kb += kComputeWarps * 32) {
      const uint32_t t = kb + lane;
      const bool valid = t < t1;
      float sc[kAttnHeadBatch];
#pragma unroll
      for (int j = 0; j < kAttnHeadBatch; ++j) sc[j] = 0.0f;
      if (valid) attn_scores(K + uint64_t(t) * kHeadDim, s.u.attn.q, nh, sc);
      float pr[kAttnHeadBatch];
#pragma unroll
      for (int j = 0; j < kAttnHeadBatch; ++j) {
        pr[j] = 0.0f;
        if (j < nh) {
          const float sj = valid ? m.attn_scale * sc[j] : neg_inf();
          const float mnew = fmaxf(mx[j], warp_max(sj));  // finite: lane 0's key is valid
          pr[j] = valid ? expf(sj - mnew) : 0.0f;
          const float corr = expf(mx[j] - mnew);
          l[j] = l[j] * corr + warp_sum(pr[j]);
#pragma unroll
          for (int i = 0; i < kHeadDimPerLane; ++i) o[j][i] *= corr;
          mx[j] = mnew;
        }
      }
      // Values: kValueBatch keys' rows are loaded before any is used, so their latencies overlap.
      constexpr uint32_t kValueBatch = 8;
      const uint32_t keys = min(32u, t1 - kb);
      for (uint32_t k0 = 0; k0 < keys; k0 += kValueBatch) {
        float vv[kValueBatch][kHeadDimPerLane];
#pragma unroll
        for (uint32_t kk = 0; kk < kValueBatch; ++kk) {
          const KvT* vrow = V + uint64_t(kb + k0 + kk) * kHeadDim;
#pragma unroll
          for (int i = 0; i < kHeadDimPerLane; ++i) {
            const int d = lane + 32 * i;
            vv[kk][i] = (k0 + kk < keys && d < kHeadDim) ? kv_load(vrow + d) : 0.0f;
          }
        }
#pragma unroll
        for (uint32_t kk = 0; kk < kValueBatch; ++kk) {
#pragma unroll
          for (int j = 0; j < kAttnHeadBatch; ++j) {
            const float pk =
                __shfl_sync(0xffffffffu, pr[j], int(k0 + kk) & 31);  // 0 for keys past t1
            if (j < nh) {
#pragma unroll
              for (int i = 0; i < kHeadDimPerLane; ++i) o[j][i] += pk * vv[kk][i];
            }
          }
        }
      }
    }
    // Merge the warps' online-softmax states, head by head, in warp order.
#pragma unroll
    for (int j = 0; j < kAttnHeadBatch; ++j) {
      if (j < nh) attn_merge_head(a, in, s, hb + j, mx[j], l[j], o[j]);
    }
  }
}

// ---- kAttnCombine ----
/// Whether the chunk's records (P partitions x nh heads x (hd + 2) floats) can be copied into
/// `page_floats` floats of shared memory in 16-byte pieces: each partition's run of the chunk's
/// records starts on a 16-byte boundary and is a whole number of pieces.
__device__ __forceinline__ bool combine_stages(const KernelArgs& a, const Instr& in,
                                               uint32_t page_floats) {
  const uint32_t rec_len = a.model.head_dim + 2, nh = in.row_end - in.row_begin;
  const uint32_t span = nh * rec_len;
  return span % 4 == 0 && (a.model.heads * rec_len) % 4 == 0 &&
         (in.aux + in.row_begin * rec_len) % 4 == 0 && uint64_t(in.param2) * span <= page_floats;
}

/// The combine with `pages` (page_floats floats of shared memory, nullptr for none): when the
/// chunk's records fit, every partition's records are copied in by cp.async at once (one round
/// trip, no register holds them) and combined from there; otherwise read from L2 partition by
/// partition. The same arithmetic in the same order either way (abi/abi.h kAttnCombine).
__device__ __forceinline__ void attn_combine(const KernelArgs& a, const Instr& in, float* pages,
                                             uint32_t page_floats) {
  const uint32_t hd = a.model.head_dim, heads = a.model.heads, P = in.param2;
  const uint32_t rec_len = hd + 2;
  const uint32_t nh = in.row_end - in.row_begin;
  const bool staged = MS_COMBINE_TASKS && pages != nullptr && combine_stages(a, in, page_floats);
  const uint32_t span = staged ? nh * rec_len : heads * rec_len;  // floats from p to p + 1
  const float* recs = a.act + in.aux + uint64_t(in.row_begin) * rec_len;
  if (staged) {
    for (uint32_t j = 4 * threadIdx.x; j < P * span; j += 4 * kComputeThreads) {
      const uint32_t p = j / span, i = j % span;
      copy16_async(pages + j, recs + uint64_t(p) * heads * rec_len + i);
    }
    copies_landed();
    block_sync();
    recs = pages;
  }
  for (uint32_t i = threadIdx.x; i < nh * hd; i += kComputeThreads) {
    const uint32_t hl = i / hd, d = i % hd;
    float M = neg_inf();
    for (uint32_t p = 0; p < P; ++p) {
      const float* rec = recs + uint64_t(p) * span + hl * rec_len;
      M = fmaxf(M, staged ? rec[0] : act_load(rec));
    }
    float L = 0.0f, O = 0.0f;
    for (uint32_t p = 0; p < P; ++p) {
      const float* rec = recs + uint64_t(p) * span + hl * rec_len;
      const float f = expf((staged ? rec[0] : act_load(rec)) - M);
      L += (staged ? rec[1] : act_load(rec + 1)) * f;
      O += (staged ? rec[2 + d] : act_load(rec + 2 + d)) * f;
    }
    a.act[in.out + uint64_t(in.row_begin + hl) * hd + d] = O / L;
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

}  // namespace ms_dev
