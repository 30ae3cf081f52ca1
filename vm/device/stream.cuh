// The streamed GEMV of a registers build (kernel.weight_stream "registers"): the way of streaming
// that the graph-pdl baseline (eval/baselines/pdl_baseline.cuh) showed reaches the HBM floor, done
// inside the megakernel's task loop (ARCHITECTURE.md, "Where each concept lives").
//
// A task's rows are cut into groups of kRowsPerWarp rows; warp w of the block owns groups
// w, w + kComputeWarps, ... and streams each group's rows in chunks of kUnroll vectors per lane and
// row, kStreamDepth chunks in registers (kernel.stream_depth: while one chunk is multiplied, the
// next kStreamDepth - 1 are in flight), across group boundaries. Weights depend on nothing, so
// every warp issues its first kStreamDepth chunks BEFORE the task's dependency wait: a block that
// reaches a task early streams its weights while the producers finish. kernel.stream_held
// (kStreamHeld) of them wait until the wait holds instead, on every kernel.stream_held_every-th
// block (kStreamHeldEvery): a block's poll and staging reads queue behind its weight requests, so
// those blocks reach their stream sooner when they reach a task late, while the others keep every
// chunk in flight as they wait (dev/perf_log.md section 42; ARCHITECTURE.md, "Where each concept
// lives"). After the wait the input is staged once, in fp32, in column order, with its prologue
// (RMSNorm with the scale applied to the dot products at the end, or SiLU(gate) * up); the
// residual row a thread will add is read beside it. Each group's sums go to Shared::u.rows, and
// the usual epilogue (residual, RoPE + KV append, plain) writes them.
//
// It takes GEMV tasks of whole rows (col_begin 0, col_end ld) with at most kEpilogueRows rows
// (task_rows: a task of RoPE pairs has two rows per pair, mapped by task_row),
// 16-byte aligned activations and an input that fits the dynamic shared memory; any other GEMV
// task runs ops.cuh's gemv. Reads and writes are the same as gemv's (the validator's footprint of
// a registers-path GEMV: input columns [0, ld), the norm over [0, ld), rows [row_begin, row_end)).
#pragma once

#include "vm/device/ops.cuh"

namespace ms_dev {

/// Whether GEMV task `in` takes the streamed path (a registers build only).
__device__ __forceinline__ bool stream_fits(const KernelArgs& a, const Instr& in) {
  if constexpr (kRing) {
    return false;
  } else {
    // A prologue this build was compiled without takes no path (unreachable: kernel_defines
    // compiles it into every build whose program has such a task).
    if ((!MS_COMBINE_IN_O && (in.flags & kFlagCombinePrologue)) ||
        (!MS_ATTENTION_IN_O && (in.flags & kFlagAttentionPrologue)) ||
        (!MS_TAGGED && (in.flags & (kFlagTagIn | kFlagTagOut))))
      return false;
    return stream_misfit(in, kVecElems, kEpilogueRows, a.smem_bytes, kHeadDim, a.model.heads) ==
           kStreamFits;
  }
}

/// One chunk of a row group in registers: kUnroll vectors per lane of each of its rows.
struct StreamChunk {
  WeightVec w[kUnroll][kRowsPerWarp];
};

/// One warp's share of a streamed task: item i is chunk i % chunks of the warp's group i / chunks.
struct WarpStream {
  const WeightT* W;  // the task's first row
  uint32_t ld, rows, vecs, chunks, items, first;
  uint32_t pair0;  // kFlagRopePairs: the first pair (local row j is task_row of it); else ~0u
  int lane;

  __device__ WarpStream(const KernelArgs& a, const Instr& in) {
    const bool pairs = (in.flags & kFlagRopePairs) != 0;
    pair0 = pairs ? in.row_begin : ~0u;
    W = reinterpret_cast<const WeightT*>(a.weights) + in.weight +
        (pairs ? 0 : uint64_t(in.row_begin) * in.ld);
    ld = in.ld;
    rows = task_rows(in);
    lane = int(threadIdx.x & 31);
    first = threadIdx.x >> 5;
    vecs = ld / kVecElems;
    chunks = (vecs + 32u * kUnroll - 1) / (32u * kUnroll);
    const uint32_t groups = (rows + kRowsPerWarp - 1) / kRowsPerWarp;
    items = first < groups ? (groups - first + kComputeWarps - 1) / kComputeWarps * chunks : 0;
  }
  /// Local row j's offset in rows from W.
  __device__ uint32_t row_at(uint32_t j) const {
    return pair0 == ~0u ? j : pair_row(pair0 + j / 2, j & 1u, kHeadDim);
  }
  /// The task-local first row of item i's group.
  __device__ uint32_t group_row(uint32_t i) const {
    return (first + i / chunks * kComputeWarps) * kRowsPerWarp;
  }
  __device__ void load(StreamChunk& c, uint32_t i) const {
    const uint32_t r0 = group_row(i), base = i % chunks * 32u * kUnroll + uint32_t(lane);
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const uint32_t r = min(r0 + j, rows - 1);  // a short last group repeats its last row
      const WeightT* row = W + uint64_t(row_at(r)) * ld;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t v = base + 32u * u;
        if (v < vecs) {
          c.w[u][j] = load_weight_vec(row + uint64_t(v) * kVecElems);
        } else {
#pragma unroll
          for (int q = 0; q < kVectorBytes / 4; ++q) c.w[u][j].w[q] = 0;
        }
      }
    }
  }
  /// acc[j] += chunk i of row j times x (staged in column order).
  __device__ void fma(const StreamChunk& c, uint32_t i, const float* x, float* acc) const {
    const uint32_t base = i % chunks * 32u * kUnroll + uint32_t(lane);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t v = base + 32u * u;
      if (v >= vecs) break;
      const float* xv = x + uint64_t(v) * kVecElems;
      float xs[kVecElems];
      if constexpr (kVecElems % 4 == 0) {
#pragma unroll
        for (int q = 0; q < kVecElems / 4; ++q) {
          const float4 x4 = reinterpret_cast<const float4*>(xv)[q];
          xs[4 * q] = x4.x, xs[4 * q + 1] = x4.y, xs[4 * q + 2] = x4.z, xs[4 * q + 3] = x4.w;
        }
      } else {
#pragma unroll
        for (int e = 0; e < kVecElems; ++e) xs[e] = xv[e];
      }
#pragma unroll
      for (int e = 0; e < kVecElems; ++e) {
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) acc[j] += vec_elem(c.w[u][j], e) * xs[e];
      }
    }
  }
};

/// Elements [at, at + 4) of the weights (the norm prologue's gamma), as fp32.
__device__ __forceinline__ float4 gamma4(const KernelArgs& a, uint64_t at) {
  return make_float4(weight_at(a, at), weight_at(a, at + 1), weight_at(a, at + 2),
                     weight_at(a, at + 3));
}

/// Float4 groups of the input a thread stages per batch (all loads of a batch issued before any is
/// used: one L2 round trip per batch). Fewer as the chunks in flight hold more registers
/// (kStreamChunkRegs: kStreamDepth chunks of kRowsPerWarp x kUnroll vectors): a batch's float4
/// pairs are live beside them, and past 64 registers a batch of 8 spills the staging (ptxas, the
/// position-0 record's build at 255 registers: 128 B of spill stores in gemv_stream at depth 3 with
/// 8 and at depth 4 with 4; none at depth 3 with 4, at depth 4 with 2, or at three rows a warp and
/// depth 2 with 4).
constexpr int kStreamChunkRegs = kStreamDepth * kRowsPerWarp * kUnroll * kVectorBytes / 4;
constexpr int kStreamStageBatch = kStreamChunkRegs <= 64 ? 8 : kStreamChunkRegs <= 96 ? 4 : 2;

/// After the wait: x[i] = the input after its prologue (the norm's gamma is read in the same batch
/// as the activations, and its rsqrt is applied to the dot products later). Returns the thread's
/// sum of squares of act (the norm's). Does not sync. (Staging gamma before the wait cost a round
/// trip queued behind the block's preloaded weights: ~3 us hops instead of ~2 on the H100.)
__device__ __forceinline__ float stream_stage_input(const KernelArgs& a, const Instr& in,
                                                    float* x) {
  const bool norm = (in.flags & kFlagNormPrologue) != 0;
  const bool silu_mul = (in.flags & kFlagSiluMulPrologue) != 0;
  const float* src = a.act + in.in;
  const float* src2 = a.act + in.in2;
  float ss = 0.0f;
  for (uint32_t base = 4 * threadIdx.x; base < in.ld;
       base += 4 * kComputeThreads * kStreamStageBatch) {
    float4 v[kStreamStageBatch], w[kStreamStageBatch];
#pragma unroll
    for (int u = 0; u < kStreamStageBatch; ++u) {
      const uint32_t i = base + 4u * kComputeThreads * u;
      if (i < in.ld) {
        v[u] = __ldcg(reinterpret_cast<const float4*>(src + i));
        if (silu_mul) {
          w[u] = __ldcg(reinterpret_cast<const float4*>(src2 + i));
        } else if (norm) {
          w[u] = gamma4(a, in.weight2 + i);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kStreamStageBatch; ++u) {
      const uint32_t i = base + 4u * kComputeThreads * u;
      if (i >= in.ld) break;
      float4 o = v[u];
      if (norm) {
        const float4 g = w[u];
        ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
        o = make_float4(v[u].x * g.x, v[u].y * g.y, v[u].z * g.z, v[u].w * g.w);
      } else if (silu_mul) {
        o = make_float4(silu(v[u].x) * w[u].x, silu(v[u].y) * w[u].y, silu(v[u].z) * w[u].z,
                        silu(v[u].w) * w[u].w);
      }
      *reinterpret_cast<float4*>(x + i) = o;
    }
  }
  return ss;
}

#if MS_SILU_COPIES
/// stream_stage_input of a SiLU x up task whose two inputs fit the dynamic shared memory
/// (abi/ring.h stream_silu_copies): each thread copies its float4 groups of gate into x and of up
/// after it by cp.async, every copy in flight at once and in no register (the register batches
/// took a round trip each: four for llama-8b's 14336-float down input), then computes
/// x[i] = silu(gate) x up in place over its own groups (no barrier: its own copies). The same
/// arithmetic as stream_stage_input. Returns 0 (no norm). Does not sync.
__device__ __forceinline__ float stream_stage_silu_copied(const KernelArgs& a, const Instr& in,
                                                          float* x) {
  const float* src = a.act + in.in;
  const float* src2 = a.act + in.in2;
  float* up = x + in.ld;  // in.ld % 4 == 0: 16-byte aligned
  for (uint32_t i = 4 * threadIdx.x; i < in.ld; i += 4 * kComputeThreads) {
    copy16_async(x + i, src + i);
    copy16_async(up + i, src2 + i);
  }
  copies_landed();
  for (uint32_t i = 4 * threadIdx.x; i < in.ld; i += 4 * kComputeThreads) {
    const float4 g = *reinterpret_cast<const float4*>(x + i);
    const float4 u = *reinterpret_cast<const float4*>(up + i);
    *reinterpret_cast<float4*>(x + i) =
        make_float4(silu(g.x) * u.x, silu(g.y) * u.y, silu(g.z) * u.z, silu(g.w) * u.w);
  }
  return 0.0f;
}
#endif

/// Float4 groups of the norm's gamma a thread loads at once in stream_stage_tagged (a hidden size
/// of 2048 over 256 threads is one batch; 8, kStreamStageBatch, spilled 80 B in gemv_stream; with 2
/// the kernel spills 80 B, with 1 24 B but a hidden size of 2048 takes two round trips).
constexpr int kTaggedGammaBatch = 2;

/// stream_stage_input of a kFlagTagIn task: the input (both inputs of SiLU x up) from the tagged
/// mirror (abi/abi.h, Tagged words). Each thread copies the words of its float4 groups into the
/// shared memory after x (abi/ring.h stream_stage_bytes) by cp.async, all in flight at once and in
/// no register (staging them in registers spilled the streamed GEMV's chunks, and staging fewer
/// at a time cost a round trip per batch: +137 us a step), reads them back (its own copies: no
/// barrier), and re-reads from global memory any word whose tag is not yet this step's. Does not
/// sync.
__device__ __forceinline__ float stream_stage_tagged(const KernelArgs& a, const Instr& in, float* x,
                                                     uint32_t tag) {
  const bool norm = (in.flags & kFlagNormPrologue) != 0;
  const uint64_t* src = a.tagged + in.in;
  const uint64_t* src2 = a.tagged + in.in2;
  uint64_t* words = reinterpret_cast<uint64_t*>(x + in.ld);  // in.ld % 4 == 0: 16-byte aligned
  uint64_t* words2 = words + in.ld;
  for (uint32_t i = 4 * threadIdx.x; i < in.ld; i += 4 * kComputeThreads) {
    copy16_async(words + i, src + i);
    copy16_async(words + i + 2, src + i + 2);
    if (!norm) {
      copy16_async(words2 + i, src2 + i);
      copy16_async(words2 + i + 2, src2 + i + 2);
    }
  }
  copies_landed();
  float ss = 0.0f;
  for (uint32_t base = 4 * threadIdx.x; base < in.ld;
       base += 4 * kComputeThreads * kTaggedGammaBatch) {
    float4 g[kTaggedGammaBatch];  // the norm's gamma: every load of the batch in flight at once
    if (norm) {
#pragma unroll
      for (int u = 0; u < kTaggedGammaBatch; ++u) {
        const uint32_t i = base + 4u * kComputeThreads * u;
        if (i < in.ld) g[u] = gamma4(a, in.weight2 + i);
      }
    }
#pragma unroll
    for (int u = 0; u < kTaggedGammaBatch; ++u) {
      const uint32_t i = base + 4u * kComputeThreads * u;
      if (i >= in.ld) break;
      const float gs[4] = {g[u].x, g[u].y, g[u].z, g[u].w};
      float o[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint64_t v = words[i + q];
        uint64_t start = 0;
        for (uint32_t spins = 1; !tag_is(v, tag) && tagged_spin_on(a, spins, &start); ++spins)
          v = tagged_load(src + i + q);
        const float xv = __uint_as_float(uint32_t(v));
        if (norm) {
          ss += xv * xv;
          o[q] = xv * gs[q];
        } else {
          uint64_t w = words2[i + q];
          start = 0;
          for (uint32_t spins = 1; !tag_is(w, tag) && tagged_spin_on(a, spins, &start); ++spins)
            w = tagged_load(src2 + i + q);
          o[q] = silu(xv) * __uint_as_float(uint32_t(w));
        }
      }
      *reinterpret_cast<float4*>(x + i) = make_float4(o[0], o[1], o[2], o[3]);
    }
  }
  return ss;
}

/// Heads whose partition weights a warp computes at once in stream_stage_combine (their loads
/// issued together).
constexpr uint32_t kCombineHeadsPerWarp = 4;

/// Copies floats [0, n) of src into dst (both 16-byte aligned, n a multiple of 4) by 16-byte
/// cp.async pieces spread over the compute threads.
__device__ __forceinline__ void combine_copy(float* dst, const float* src, uint32_t n) {
  for (uint32_t i = 4 * threadIdx.x; i < n; i += 4 * kComputeThreads)
    copy16_async(dst + i, src + i);
}

/// After the wait, with kFlagCombinePrologue (abi/abi.h): x[c] = the flash-decoding combine of
/// dim c mod hd of head c / hd over the task's P = param2 partial records. The records of every
/// head are copied into the shared memory in rounds of whole partitions (abi/ring.h
/// stream_combine_round; cp.async, so no register holds them), the first round issued before the
/// weights are computed: each warp takes heads, a lane per partition, and writes the head's
/// exp(m_p - M) and their sum L (p in increasing order) beside x. Each thread then accumulates its
/// column pairs in x, partition by partition in increasing order, and divides by L after the last.
/// Ends synced.
__device__ __forceinline__ void stream_stage_combine(const KernelArgs& a, const Instr& in,
                                                     float* x) {
  const uint32_t P = in.param2, heads = a.model.heads, rec = kHeadDim + 2, span = heads * rec;
  const uint32_t per_round = stream_combine_round(in.ld, heads, kHeadDim, P, a.smem_bytes);
  const float* recs = a.act + in.in;
  float* fl = x + in.ld;
  float* staged = x + stream_combine_stage(in.ld, heads, P);
  combine_copy(staged, recs, (per_round < P ? per_round : P) * span);
  const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  for (uint32_t h0 = warp; h0 < heads; h0 += kCombineHeadsPerWarp * kComputeWarps) {
    float2 ml[kCombineHeadsPerWarp];
#pragma unroll
    for (uint32_t u = 0; u < kCombineHeadsPerWarp; ++u) {
      const uint32_t h = h0 + u * kComputeWarps;
      ml[u] = make_float2(neg_inf(), 0.0f);
      if (h < heads && lane < P)
        ml[u] = __ldcg(reinterpret_cast<const float2*>(recs + (lane * heads + h) * rec));
    }
#pragma unroll
    for (uint32_t u = 0; u < kCombineHeadsPerWarp; ++u) {
      const uint32_t h = h0 + u * kComputeWarps;
      if (h >= heads) break;
      const float M = warp_max(ml[u].x);
      const float f = lane < P ? expf(ml[u].x - M) : 0.0f;
      const float lf = ml[u].y * f;
      float L = 0.0f;
      for (uint32_t p = 0; p < P; ++p) L += __shfl_sync(0xffffffffu, lf, int(p));
      if (lane < P) fl[h * (P + 1) + lane] = f;
      if (lane == 0) fl[h * (P + 1) + P] = L;
    }
  }
  for (uint32_t p0 = 0; p0 < P; p0 += per_round) {
    const uint32_t p1 = p0 + per_round < P ? p0 + per_round : P;
    if (p0 > 0) {
      block_sync();  // every thread is done with the previous round
      combine_copy(staged, recs + uint64_t(p0) * span, (p1 - p0) * span);
    }
    copies_landed();
    block_sync();
    for (uint32_t c = 2 * threadIdx.x; c < in.ld; c += 2 * kComputeThreads) {
      const uint32_t h = c / kHeadDim;
      const float* f = fl + h * (P + 1);
      const float* o = staged + h * rec + 2 + c % kHeadDim;
      float2 acc = p0 == 0 ? make_float2(0.0f, 0.0f) : *reinterpret_cast<const float2*>(x + c);
      for (uint32_t p = p0; p < p1; ++p) {
        const float2 v = *reinterpret_cast<const float2*>(o + (p - p0) * span);
        acc.x += v.x * f[p];
        acc.y += v.y * f[p];
      }
      if (p1 == P) acc = make_float2(acc.x / f[P], acc.y / f[P]);
      *reinterpret_cast<float2*>(x + c) = acc;
    }
  }
  block_sync();
}

/// Query heads of one KV head whose online-softmax states a warp of stream_stage_attention carries
/// at once, and keys whose key and value loads it issues together.
constexpr int kPrologueHeads = 4;
constexpr uint32_t kPrologueKeys = 2;

/// After the wait, with kFlagAttentionPrologue (abi/abi.h): x[h * hd + d] = the attention output
/// of query head h (queries at act[in]) over keys [0, position] of its KV head in the task's
/// layer, for every head. Warp w takes KV heads w, w + kComputeWarps, ... and their query heads
/// kPrologueHeads at a time (no merge between warps); lane L owns dims L + 32 i, as in
/// attn_short. The queries and the first keys' K and V loads are independent, so at position 0
/// the whole prologue is one L2 round trip. Does not sync.
__device__ __forceinline__ void stream_stage_attention(const KernelArgs& a, const Instr& in,
                                                       float* x) {
  const ModelParams& m = a.model;
  const uint32_t n = uint32_t(a.step->position) + 1, group = m.heads / m.kv_heads;
  const int lane = int(threadIdx.x & 31);
  const KvT* kv = reinterpret_cast<const KvT*>(a.kv);
  for (uint32_t g = threadIdx.x >> 5; g < m.kv_heads; g += kComputeWarps) {
    const KvT* K = kv + kv_offset(m, in.layer, 0, g);
    const KvT* V = kv + kv_offset(m, in.layer, 1, g);
    for (uint32_t hb = g * group; hb < (g + 1) * group; hb += kPrologueHeads) {
      const int nh = int(min(uint32_t(kPrologueHeads), (g + 1) * group - hb));
      float q[kPrologueHeads][kHeadDimPerLane], o[kPrologueHeads][kHeadDimPerLane];
      float mx[kPrologueHeads], l[kPrologueHeads];
#pragma unroll
      for (int j = 0; j < kPrologueHeads; ++j) {
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
      for (uint32_t t0 = 0; t0 < n; t0 += kPrologueKeys) {
        float kx[kPrologueKeys][kHeadDimPerLane], vx[kPrologueKeys][kHeadDimPerLane];
#pragma unroll
        for (uint32_t b = 0; b < kPrologueKeys; ++b) {
          const uint64_t t = min(t0 + b, n - 1);  // past the last key: a repeat, not used
#pragma unroll
          for (int i = 0; i < kHeadDimPerLane; ++i) {
            const int d = lane + 32 * i;
            kx[b][i] = d < kHeadDim ? kv_load(K + t * kHeadDim + d) : 0.0f;
            vx[b][i] = d < kHeadDim ? kv_load(V + t * kHeadDim + d) : 0.0f;
          }
        }
#pragma unroll
        for (uint32_t b = 0; b < kPrologueKeys; ++b) {
          if (t0 + b >= n) break;
#pragma unroll
          for (int j = 0; j < kPrologueHeads; ++j) {
            if (j >= nh) break;
            online_softmax_key(q[j], kx[b], vx[b], m.attn_scale, mx[j], l[j], o[j]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kPrologueHeads; ++j) {
        if (j >= nh) break;
#pragma unroll
        for (int i = 0; i < kHeadDimPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < kHeadDim) x[(hb + j) * kHeadDim + d] = o[j][i] / l[j];
        }
      }
    }
  }
}

/// Streams every item of the warp; each group's sums, times `scale`, go to s.u.rows. c holds items
/// 0 .. kStreamDepth - 1 (loaded before the wait); item i + kStreamDepth is loaded into the chunk
/// of item i as soon as i is multiplied. With `peek` (kFlagTagIn: lane i of warp 0 and its wait
/// i's counter), *seen gets the counter's value, read with no ordering once the warp has issued its
/// last weight load (about one HBM round trip before its stream ends).
__device__ __forceinline__ void stream_run(const WarpStream& ws, StreamChunk (&c)[kStreamDepth],
                                           const float* x, float scale, Shared& s,
                                           const uint32_t* peek, uint32_t* seen) {
  float acc[kRowsPerWarp];
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) acc[j] = 0.0f;
  const uint32_t depth = kStreamDepth;
  const uint32_t peek_item = ws.items > depth ? ws.items - depth : 0;
  auto step = [&](StreamChunk& chunk, uint32_t i) {
    if (MS_TAGGED && peek != nullptr && i == peek_item) *seen = counter_peek(peek);
    ws.fma(chunk, i, x, acc);
    if (i + depth < ws.items) ws.load(chunk, i + depth);
    if (i % ws.chunks == ws.chunks - 1) {
      const uint32_t r0 = ws.group_row(i);
#pragma unroll
      for (int j = 0; j < kRowsPerWarp; ++j) {
        const float y = warp_sum(acc[j]);
        if (ws.lane == 0 && r0 + j < ws.rows) s.u.rows[r0 + j] = y * scale;
        acc[j] = 0.0f;
      }
    }
  };
  for (uint32_t i = 0; i < ws.items; i += depth) {
#pragma unroll
    for (uint32_t d = 0; d < depth; ++d)
      if (i + d < ws.items) step(c[d], i + d);
  }
}

/// The streamed GEMV task, its dependency wait included (see the file comment). Returns the wait's
/// outcome; the task ran when it is kExitRunning. Profile builds stamp the end of the wait in
/// s.ready_ns, the staged input in s.staged_ns and the multiplied weights in s.streamed_ns (thread
/// 0, after the block barriers that end each phase). Ends with the epilogue's writes issued; the
/// caller's signal() syncs.
__device__ __noinline__ WaitOutcome gemv_stream(const KernelArgs& a, const Instr& in, Shared& s,
                                                uint32_t epoch, const WaitHead& head) {
  extern __shared__ __align__(16) float stream_x[];  // the dynamic shared memory: the input
  const WarpStream ws(a, in);
  StreamChunk c[kStreamDepth];
  // The blocks that hold chunks back (kernel.stream_held_every N): block b when b % N == N - 1.
  const uint32_t held =
      blockIdx.x % kStreamHeldEvery == kStreamHeldEvery - 1 ? uint32_t(kStreamHeld) : 0u;
#pragma unroll
  for (uint32_t d = 0; d < uint32_t(kStreamDepth); ++d)
    if (d < uint32_t(kStreamDepth) - held && d < ws.items) ws.load(c[d], d);
  // kFlagTagIn: the waits to within their slack now, in full before the first write (below).
  const bool tag_in = MS_TAGGED && (in.flags & kFlagTagIn) != 0;
  const uint32_t tag = tagged_word_tag(epoch);
  WaitOutcome w = wait_all(a, in, epoch, &s.wait, head, tag_in);
  if (w.exit != kExitRunning) return w;
#if MS_PROFILE
  if (threadIdx.x == 0) s.ready_ns = global_ns();
#endif
    // The chunks held back (kernel.stream_held): issued once the poll has seen the waits hold.
#pragma unroll
  for (uint32_t d = 0; d < uint32_t(kStreamDepth); ++d)
    if (d >= uint32_t(kStreamDepth) - held && d < ws.items) ws.load(c[d], d);
  const uint32_t rows = in.row_end - in.row_begin;
  const bool residual = (in.flags & kFlagResidual) && !(in.flags & kFlagPartial);
  float res = 0.0f;  // the residual of row row_begin + threadIdx.x, read beside the staging
  uint64_t res_word = 0;
  const uint64_t* res_at = MS_TAGGED ? a.tagged + in.aux + in.row_begin + threadIdx.x : nullptr;
  if (residual && threadIdx.x < rows) {
    if (tag_in)
      res_word = tagged_load(res_at);
    else
      res = act_load(a.act + in.aux + in.row_begin + threadIdx.x);
  }
  float scale = 1.0f;
  if (MS_COMBINE_IN_O && (in.flags & kFlagCombinePrologue)) {
    stream_stage_combine(a, in, stream_x);  // ends synced
  } else if (MS_ATTENTION_IN_O && (in.flags & kFlagAttentionPrologue)) {
    stream_stage_attention(a, in, stream_x);
    block_sync();
  } else {
    // One staging and one norm reduction in the code, whichever the source (a second inlined
    // copy of either made ptxas spill the streamed GEMV's chunks: 384 B, NVRTC).
#if MS_SILU_COPIES
    const float ss = tag_in ? stream_stage_tagged(a, in, stream_x, tag)
                     : stream_silu_copies(in, a.smem_bytes)
                         ? stream_stage_silu_copied(a, in, stream_x)
                         : stream_stage_input(a, in, stream_x);
#else
    const float ss =
        tag_in ? stream_stage_tagged(a, in, stream_x, tag) : stream_stage_input(a, in, stream_x);
#endif
    if (tag_in && residual && threadIdx.x < rows) {
      uint64_t start = 0;
      for (uint32_t spins = 1; !tag_is(res_word, tag) && tagged_spin_on(a, spins, &start); ++spins)
        res_word = tagged_load(res_at);
      res = __uint_as_float(uint32_t(res_word));
    }
    if (in.flags & kFlagNormPrologue) {
      scale = rsqrtf(block_sum(ss, s.red) / float(in.ld) + a.model.rms_eps);  // ends synced
    } else {
      block_sync();
    }
  }
#if MS_PROFILE
  if (threadIdx.x == 0) s.staged_ns = global_ns();
#endif
  // kFlagTagIn: lane i of warp 0 reads wait i's counter (relaxed) while its weights stream; when
  // every wait holds, a fence makes those reads the acquire, with no round trip after the stream.
  uint32_t seen = 0;
  const bool heads_only = in.wait_count <= kWaitHeads;
  const bool peeks = tag_in && heads_only && threadIdx.x < in.wait_count;
  stream_run(ws, c, stream_x, scale, s, peeks ? a.counters + head.counter : nullptr, &seen);
  if (peeks && ws.items == 0) seen = counter_peek(a.counters + head.counter);
  if (tag_in) {
    if (threadIdx.x < 32) {
      const bool mine = heads_only && threadIdx.x < in.wait_count;
      const bool held = __all_sync(
          0xffffffffu,
          !mine || counter_reached(seen, wait_target(epoch, head.total, head.threshold)));
      if (held && mine) fence_acq_rel_gpu();
      if (threadIdx.x == 0) s.tag_acquired = heads_only && held ? 1u : 0u;
    }
    block_sync();
    if (!s.tag_acquired) {
      w = wait_all(a, in, epoch, &s.wait, head);  // ends synced
      if (w.exit != kExitRunning) return w;
    }
  } else {
    block_sync();
  }
#if MS_PROFILE
  if (threadIdx.x == 0) s.streamed_ns = global_ns();
#endif
  if (residual) {
    const bool tag_out = MS_TAGGED && (in.flags & kFlagTagOut) != 0;
    for (uint32_t r = threadIdx.x; r < rows; r += kComputeThreads) {
      const float add = r == threadIdx.x ? res : act_load(a.act + in.aux + in.row_begin + r);
      const float y = s.u.rows[r] + add;
      a.act[in.out + in.row_begin + r] = y;
      if (tag_out) tagged_store(a.tagged + in.out + in.row_begin + r, y, tag);
    }
  } else if (MS_TAGGED && (in.flags & kFlagTagOut)) {  // the plain epilogue, tagged
    for (uint32_t r = threadIdx.x; r < rows; r += kComputeThreads) {
      const float y = s.u.rows[r];
      a.act[in.out + in.row_begin + r] = y;
      tagged_store(a.tagged + in.out + in.row_begin + r, y, tag);
    }
  } else if (in.flags & kFlagRopePairs) {
    gemv_pair_epilogue(a, in, s, 0, ws.rows);  // task_rows: two per pair
  } else {
    gemv_epilogue(a, in, s, in.row_begin, in.row_end);
    if (in.flags & kFlagArgmaxPartial) {  // from the rows still in shared memory
      block_sync();
      argmax_record(a, in, s, s.u.rows);
    }
  }
  return w;
}

}  // namespace ms_dev
