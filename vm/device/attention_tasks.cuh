// The attention opcodes of the megakernel: kAttnPartial (a KV head's query heads over a partition
// of its keys: the short path with a warp's keys in flight, the key-per-lane path, or the staged
// path of vm/device/attention.cuh in staged builds) and kAttnCombine (the partitions' records
// merged), each run by the whole block with exactly the semantics of abi/abi.h; their CPU twins
// are in the ReferenceVm (vm/reference_vm.cpp). All arithmetic is fp32; KV is upcast on load.
#pragma once

#include "vm/device/ops.cuh"

namespace ms_dev {

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

}  // namespace ms_dev
