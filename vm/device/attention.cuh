// Attention partitions with their KV history staged in shared memory (kernel.attention = staged:
// registers builds on sm_90, where the dynamic shared memory only stages GEMV inputs between
// tasks). A partition's keys [t0, t1) are copied into shared memory in rounds of whole key and
// value rows, two bulk copies per round (the K rows and the V rows of one KV head are contiguous),
// so every byte of a round is in flight at once: one round trip where the register path of
// attention_tasks.cuh's attn_partial makes a dependent one per key-row batch and per value batch.
// The copies are issued after the task's wait, like every read of attn_partial. Only the history
// (keys before this step's position, written by earlier steps) is copied; the current token's row,
// written by this step's QKV, is read from L2. The arithmetic runs from shared memory with the
// semantics of attn_partial (fp32 online softmax, the same record) in a different order of
// additions. ARCHITECTURE.md, "The megakernel", has the map; dev/perf_log.md section 16 the
// measurements.
#pragma once

#include "vm/device/attention_tasks.cuh"
#include "vm/device/ring.cuh"

namespace ms_dev {

/// Thread 0 sets up the barriers the staged rounds' K and V copies complete on (the caller's
/// barrier publishes them before the first task).
__device__ __forceinline__ void attn_stage_init(Shared& s) {
  if (threadIdx.x != 0) return;
  mbar_init(&s.kv_bar, 1);
  mbar_init(&s.kv_bar_v, 1);
  s.kv_phase = 0;
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/// Thread 0 issues the copies of the history keys [rb, min(re, pos)) of one round into the K and V
/// areas (one bulk copy each), counted on s.kv_bar (K) and s.kv_bar_v (V), so the scores can start
/// while the values still land. Returns whether it issued any (every thread
/// computes the same answer). The caller's barrier orders the area's earlier generic accesses
/// before these async writes; the proxy fence makes that order hold for the async proxy.
__device__ __forceinline__ bool attn_issue_round(const KernelArgs& a, const Instr& in, Shared& s,
                                                 float* pages, uint32_t R, uint32_t rb, uint32_t re,
                                                 uint32_t pos) {
  const uint32_t he = min(re, pos);
  if (he <= rb) return false;
  if (threadIdx.x == 0) {
    const ModelParams& m = a.model;
    const uint32_t bytes = (he - rb) * kKvRowBytes;
    const KvT* kv = reinterpret_cast<const KvT*>(a.kv);
    char* area = reinterpret_cast<char*>(pages);
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
    mbar_expect_tx(&s.kv_bar, bytes);
    bulk_copy(area, kv + kv_offset(m, in.layer, 0, in.param0) + uint64_t(rb) * kHeadDim, bytes,
              &s.kv_bar);
    mbar_expect_tx(&s.kv_bar_v, bytes);
    bulk_copy(area + R * kKvRowBytes,
              kv + kv_offset(m, in.layer, 1, in.param0) + uint64_t(rb) * kHeadDim, bytes,
              &s.kv_bar_v);
  }
  return true;
}

/// Query heads [row_begin, row_begin + nh) into s.u.attn.q in the layout the scores read, zeros
/// for heads nh .. kStageHeads-1: chunk c of head j (kKvPerChunk dims from c * kKvPerChunk) as
/// kKvPerChunk / 4 float4 at (j * parts + part) * kKvChunks + c, so the 8 lanes of a quarter warp,
/// reading 8 different chunks, hit 8 different 16-byte bank groups.
__device__ __forceinline__ void attn_stage_queries(const KernelArgs& a, const Instr& in, Shared& s,
                                                   uint32_t nh) {
  constexpr int kParts = kKvPerChunk / 4;
  float4* q = reinterpret_cast<float4*>(s.u.attn.q);
  for (uint32_t i = threadIdx.x; i < kStageHeads * kHeadDim / 4; i += kComputeThreads) {
    const uint32_t j = i / (kHeadDim / 4), d = (i % (kHeadDim / 4)) * 4;
    const uint32_t c = d / kKvPerChunk, part = (d % kKvPerChunk) / 4;
    const float* src = a.act + in.in + uint64_t(in.row_begin + j) * kHeadDim + d;
    q[(j * kParts + part) * kKvChunks + c] =
        j < nh ? make_float4(act_load(src), act_load(src + 1), act_load(src + 2), act_load(src + 3))
               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

/// Element e of a 16-byte chunk of KV, upcast.
__device__ __forceinline__ float chunk_elem(const uint4& raw, int e) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#if MS_KV_BF16
  return bf16_pair_elem(w[e >> 1], e);
#else
  return __uint_as_float(w[e]);
#endif
}

/// kWords 32-bit words from shared memory in the widest loads their count allows (a warp reading
/// consecutive lanes' words stays free of bank conflicts).
template <int kWords>
__device__ __forceinline__ void load_words(const uint32_t* p, uint32_t (&w)[kWords]) {
  if constexpr (kWords % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = v.x;
      w[4 * i + 1] = v.y;
      w[4 * i + 2] = v.z;
      w[4 * i + 3] = v.w;
    }
  } else if constexpr (kWords % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kWords / 2; ++i) {
      const uint2 v = reinterpret_cast<const uint2*>(p)[i];
      w[2 * i] = v.x;
      w[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = p[i];
  }
}

/// The online-softmax state of one warp over its keys: per query head the running max, the sum of
/// probabilities and the output over the lane's dims lane * kVd + i.
struct AttnState {
  float m[kStageHeads], l[kStageHeads], o[kStageHeads][kVd];
};

/// One warp's pass over 32 staged keys [k0, k0 + keys) of the round: lane k scores key k0 + k
/// against the kStageHeads query heads (its row's chunks in a lane-rotated order: no bank
/// conflicts; a lane past `keys` scores the last key and is masked), the softmax state is
/// rescaled, the probabilities go through the warp's scratch, and each lane adds the value rows
/// over its own dims.
__device__ __forceinline__ void attn_pass(const char* krows, const char* vrows, float4* prob,
                                          const float4* q, uint32_t k0, uint32_t keys, float scale,
                                          uint64_t* vbar, uint32_t vphase, AttnState& st) {
  constexpr int kParts = kKvPerChunk / 4;
  const int lane = threadIdx.x & 31;
  const bool valid = uint32_t(lane) < keys;
  float sc[kStageHeads];
#pragma unroll
  for (int j = 0; j < kStageHeads; ++j) sc[j] = 0.0f;
  const uint4* row =
      reinterpret_cast<const uint4*>(krows + (k0 + min(uint32_t(lane), keys - 1)) * kKvRowBytes);
#pragma unroll
  for (int c0 = 0; c0 < kKvChunks; ++c0) {
    const int c = (c0 + lane) % kKvChunks;
    const uint4 raw = row[c];
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      float kx[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) kx[e] = chunk_elem(raw, part * 4 + e);
#pragma unroll
      for (int j = 0; j < kStageHeads; ++j) {
        const float4 qv = q[(j * kParts + part) * kKvChunks + c];
        sc[j] = fmaf(qv.x, kx[0], fmaf(qv.y, kx[1], fmaf(qv.z, kx[2], fmaf(qv.w, kx[3], sc[j]))));
      }
    }
  }
  float pr[kStageHeads], mx[kStageHeads], sum[kStageHeads];
#pragma unroll
  for (int j = 0; j < kStageHeads; ++j) mx[j] = valid ? scale * sc[j] : neg_inf();
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int j = 0; j < kStageHeads; ++j)
      mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], o));
  }
#pragma unroll
  for (int j = 0; j < kStageHeads; ++j) {
    const float mnew = fmaxf(st.m[j], mx[j]);  // finite: lane 0's key is valid
    pr[j] = valid ? expf(scale * sc[j] - mnew) : 0.0f;
    sum[j] = pr[j];
    const float corr = expf(st.m[j] - mnew);
    st.l[j] *= corr;
#pragma unroll
    for (int i = 0; i < kVd; ++i) st.o[j][i] *= corr;
    st.m[j] = mnew;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int j = 0; j < kStageHeads; ++j) sum[j] += __shfl_xor_sync(0xffffffffu, sum[j], o);
  }
#pragma unroll
  for (int j = 0; j < kStageHeads; ++j) st.l[j] += sum[j];
  prob[lane] = make_float4(pr[0], pr[1], pr[2], pr[3]);
  if (vbar != nullptr) {  // the round's value rows (a no-op once they have landed)
    while (!mbar_try_wait(vbar, vphase)) {
    }
  }
  __syncwarp();
  // 32-bit words of the lane's dims in a row (kAttnStageable builds: kVd elements exactly).
  constexpr int kWords = (kVd * int(sizeof(KvT)) + 3) / 4;
  constexpr int kElems = kWords * 4 / int(sizeof(KvT));
#pragma unroll 4
  for (uint32_t k = 0; k < keys; ++k) {
    const uint32_t* vrow = reinterpret_cast<const uint32_t*>(vrows + (k0 + k) * kKvRowBytes);
    uint32_t words[kWords];
    load_words(vrow + lane * kWords, words);
    float vx[kElems];
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
#if MS_KV_BF16
      vx[2 * w] = bf16_pair_elem(words[w], 0);
      vx[2 * w + 1] = bf16_pair_elem(words[w], 1);
#else
      vx[w] = __uint_as_float(words[w]);
#endif
    }
    const float4 p4 = prob[k];
    const float p[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
    for (int j = 0; j < kStageHeads; ++j) {
#pragma unroll
      for (int i = 0; i < kVd; ++i) st.o[j][i] = fmaf(p[j], vx[i], st.o[j][i]);
    }
  }
  __syncwarp();  // the scratch is read before the next pass writes it
}

/// Merges the warps' online-softmax states of all the task's query heads at once (in warp order,
/// as attn_merge_head does one head at a time): every warp writes its {m, l, o[hd]} of each head
/// into `area` (the staged rows' space, free by then), one barrier, then thread i < nh x hd takes
/// head i / hd, dim i % hd, and writes the head's output (one partition) or its record.
__device__ __forceinline__ void attn_merge_heads(const KernelArgs& a, const Instr& in, float* area,
                                                 int nh, const AttnState& st) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr uint32_t kRec = kHeadDim + 2;
#pragma unroll
  for (int j = 0; j < kStageHeads; ++j) {
    float* mine = area + (j * kComputeWarps + warp) * kRec;
    if (lane == 0) {
      mine[0] = st.m[j];
      mine[1] = st.l[j];
    }
#pragma unroll
    for (int i = 0; i < kVd; ++i) mine[2 + lane * kVd + i] = st.o[j][i];
  }
  block_sync();
  for (uint32_t i = threadIdx.x; i < uint32_t(nh) * kHeadDim; i += kComputeThreads) {
    const uint32_t j = i / kHeadDim, d = i % kHeadDim, h = in.row_begin + j;
    const float* recs = area + j * kComputeWarps * kRec;
    float M = neg_inf();
    for (int w = 0; w < kComputeWarps; ++w) M = fmaxf(M, recs[w * kRec]);
    attn_merge_dim(a, in, recs, h, d, M);
  }
}

/// Runs staged partition task `in` after its wait (attn_staged_partition issued its first round).
/// Rounds of R keys: history rows by bulk copy, the current token's row (written by this step's
/// QKV, now visible) by the threads; within a round warp w takes the 32-key passes w, w +
/// kComputeWarps, ...; the warps' states merge as attn_partial's do.
__device__ __forceinline__ void attn_staged(const KernelArgs& a, const Instr& in, Shared& s,
                                            float* pages) {
  const AttnKeys k = attn_keys(a, in);
  const uint32_t R = attn_round_keys(a.smem_bytes);
  const int nh = int(in.row_end - in.row_begin);
  const int warp = threadIdx.x >> 5;
  char* krows = reinterpret_cast<char*>(pages);
  char* vrows = krows + R * kKvRowBytes;
  float4* prob = reinterpret_cast<float4*>(vrows + R * kKvRowBytes) + warp * 32;
  uint32_t phase = s.kv_phase;
  attn_stage_queries(a, in, s, uint32_t(nh));
  AttnState st;
#pragma unroll
  for (int j = 0; j < kStageHeads; ++j) {
    st.m[j] = neg_inf();
    st.l[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < kVd; ++i) st.o[j][i] = 0.0f;
  }
  for (uint32_t rb = k.t0; rb < k.t1; rb += R) {
    const uint32_t re = min(k.t1, rb + R);
    bool copied = true;  // the first round's copies were issued by the caller
    if (rb != k.t0) {
      block_sync();  // every warp is done with the previous round's rows
      copied = attn_issue_round(a, in, s, pages, R, rb, re, k.pos);
    } else {
      copied = min(re, k.pos) > rb;
    }
    if (k.pos >= rb && k.pos < re) {  // the current token's row, from L2
      const KvT* kv = reinterpret_cast<const KvT*>(a.kv);
      const ModelParams& m = a.model;
      for (uint32_t i = threadIdx.x; i < 2u * kKvChunks; i += kComputeThreads) {
        const uint32_t which = i / kKvChunks, c = i % kKvChunks;
        const uint4* src =
            reinterpret_cast<const uint4*>(kv + kv_offset(m, in.layer, which, in.param0) +
                                           uint64_t(k.pos) * kHeadDim) +
            c;
        reinterpret_cast<uint4*>(krows + which * R * kKvRowBytes + (k.pos - rb) * kKvRowBytes)[c] =
            __ldcg(src);
      }
    }
    if (copied) {  // copies from global memory always complete: every thread waits them out
      while (!mbar_try_wait(&s.kv_bar, phase)) {
      }
    }
    block_sync();  // the key rows, the current row and the queries are in place
    const uint32_t keys = re - rb;
    for (uint32_t k0 = uint32_t(warp) * 32; k0 < keys; k0 += kComputeWarps * 32) {
      attn_pass(krows, vrows, prob, reinterpret_cast<const float4*>(s.u.attn.q), k0,
                min(32u, keys - k0), a.model.attn_scale, copied ? &s.kv_bar_v : nullptr, phase, st);
    }
    if (copied) phase ^= 1u;
  }
  block_sync();  // every warp is done with the rows: the merge reuses the area
  attn_merge_heads(a, in, reinterpret_cast<float*>(pages), nh, st);
  if (threadIdx.x == 0) s.kv_phase = phase;  // every thread read s.kv_phase before the barriers
}

/// A staged partition (attention_tasks.cuh's attn_partial hands over the long ones): issues the
/// first round's copies and runs the rounds.
__device__ __forceinline__ void attn_staged_partition(const KernelArgs& a, const Instr& in,
                                                      Shared& s) {
  extern __shared__ __align__(16) float pages[];  // the dynamic shared memory: the rounds
  const AttnKeys k = attn_keys(a, in);
  const uint32_t R = attn_round_keys(a.smem_bytes);
  attn_issue_round(a, in, s, pages, R, k.t0, min(k.t1, k.t0 + R), k.pos);
  attn_staged(a, in, s, pages);
}

}  // namespace ms_dev
