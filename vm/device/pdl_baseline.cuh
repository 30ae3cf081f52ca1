// Kernels of the graph-pdl baseline decode step (eval/baseline_pdl_cuda.cpp): the op-by-op pipeline
// done the way a tuned CUDA-graph implementation does it, one fused kernel per step of the layer:
//
//   ms_pdl_embed         hidden = embed[token]
//   per layer:
//   ms_pdl_qkv_rope      RMSNorm prologue, Q/K/V GEMV, RoPE on q and k, k and v into the cache
//   ms_pdl_attention     split-KV (flash-decoding) attention, a block per (KV head, key split);
//                        the last split block of a KV head to finish merges the splits' (max, sum,
//                        output) for the head's query heads (the combine step)
//   ms_pdl_o_residual    O projection, residual added in the epilogue
//   ms_pdl_gate_up       RMSNorm prologue, gate and up GEMV, SiLU(gate) * up in the epilogue
//   ms_pdl_down_residual down projection split along K into fp32 partials; the last split block of
//                        a row block to finish adds the partials (in split order) to hidden
//   ms_pdl_lm_head       final RMSNorm prologue, LM head GEMV, one (max, index) per block
//   ms_pdl_argmax        the argmax over the blocks' candidates into the step cell
//
// Every kernel is launched with programmatic stream serialization (sm_90): it first lets its
// successor launch (griddepcontrol.launch_dependents, what cudaTriggerProgrammaticLaunchCompletion
// compiles to), then loads the weights it needs into registers, and only then waits for its
// predecessor (griddepcontrol.wait, what cudaGridDependencySynchronize compiles to) before it reads
// an activation or writes anything. Every block of every kernel passes the wait, so a kernel's
// completion implies its predecessors' completion and reads two kernels back are ordered too.
//
// The combine of the attention splits and the reduction of the down projection's K splits run in
// the block that arrives last at a per-group counter (threadfence + atomic ticket, as CUDA's
// threadFenceReduction sample): deterministic (the partials are summed in split order) and one
// kernel boundary fewer each per layer. The last block resets its counter for the next layer.
//
// GEMV: blocks of 128 threads (4 warps); a warp computes a pair of rows, each lane holding its
// slice of both rows as 16-byte vectors in registers (kChunkVecs per row; longer rows stream
// further chunks after the wait), fp32 accumulation against the fp32 input staged in shared memory.
// Activations, the residual stream and the logits are fp32; weights and KV have the model's dtype.
// Everything another block or kernel wrote (activations, the step cell, partials) is read at L2
// (ld.global.cg): with programmatic launch a block may start before its predecessors end, and an
// SM's L1 is not coherent with other SMs' writes.
#pragma once

#include "vm/device/common.cuh"

namespace ms_dev {
namespace pdl {

constexpr int kBlock = 128;  // threads per block of every GEMV and attention kernel
constexpr int kBlockWarps = kBlock / 32;
static_assert(MS_THREADS == kBlock, "the graph-pdl kernels are built with MS_THREADS=128");
constexpr int kRowElems = 16 / sizeof(WeightT);  // weight elements per 16-byte vector
constexpr int kChunkVecs = 8;                    // vectors per lane per row held in registers
constexpr int kMaxGroup = 8;                     // query heads per KV head the attention serves

/// -infinity (NVRTC has no math.h INFINITY).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

/// griddepcontrol (sm_90+): on older GPUs the launches carry no programmatic attribute and plain
/// stream order already serialises the kernels.
__device__ __forceinline__ void launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_predecessors() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// Element e (0 .. kRowElems-1) of a 16-byte weight vector, upcast.
__device__ __forceinline__ float elem(const uint4& v, int e) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#if MS_WEIGHT_BF16
  return bf16_pair_elem(w[e >> 1], e);
#else
  return __uint_as_float(w[e]);
#endif
}

/// One warp's two rows: the current chunk of each lane's slice, in registers.
struct RowPair {
  const uint4* row[2];  // the rows' first vectors (inside the K slice)
  uint32_t vecs;        // vectors per row in the slice
  uint4 w[2][kChunkVecs];

  /// Loads chunk `base` (a multiple of 32 * kChunkVecs vectors); vectors past the row read zero.
  __device__ __forceinline__ void load(uint32_t base, int lane) {
#pragma unroll
    for (int c = 0; c < kChunkVecs; ++c) {
      const uint32_t v = base + uint32_t(c * 32 + lane);
#pragma unroll
      for (int r = 0; r < 2; ++r)
        w[r][c] = v < vecs ? load_stream(row[r] + v) : make_uint4(0, 0, 0, 0);
    }
  }
  /// acc[r] += chunk `base` of row r times x (shared memory, fp32, indexed from the slice start).
  __device__ __forceinline__ void fma(uint32_t base, int lane, const float* x, float acc[2]) const {
#pragma unroll
    for (int c = 0; c < kChunkVecs; ++c) {
      const uint32_t v = base + uint32_t(c * 32 + lane);
      if (v >= vecs) break;
      const float* xv = x + uint64_t(v) * kRowElems;
#pragma unroll
      for (int e = 0; e < kRowElems; ++e) {
        const float xe = xv[e];
        acc[0] += elem(w[0][c], e) * xe;
        acc[1] += elem(w[1][c], e) * xe;
      }
    }
  }
  /// The rest of the dot products once x is staged: the chunk already held, then every further one.
  /// Returns the warp-reduced sums in every lane.
  __device__ __forceinline__ float2 finish(int lane, const float* x) {
    float acc[2] = {0.0f, 0.0f};
    constexpr uint32_t kStep = 32u * kChunkVecs;
    for (uint32_t base = 0;;) {
      fma(base, lane, x, acc);
      base += kStep;
      if (base >= vecs) break;
      load(base, lane);
    }
    return make_float2(warp_sum(acc[0]), warp_sum(acc[1]));
  }
};

__device__ __forceinline__ RowPair row_pair(const WeightT* W, uint64_t r0, uint64_t r1,
                                            uint64_t row_elems, uint64_t k0, uint32_t k_elems) {
  RowPair p;
  p.row[0] = reinterpret_cast<const uint4*>(W + r0 * row_elems + k0);
  p.row[1] = reinterpret_cast<const uint4*>(W + r1 * row_elems + k0);
  p.vecs = k_elems / kRowElems;
  return p;
}

/// x_s[i] = x[i] * rsqrt(mean(x^2) + eps) * gamma[i] for i < n (the whole block; ends synced).
__device__ __forceinline__ void stage_normed(const float* x, const WeightT* gamma, uint32_t n,
                                             float eps, float* x_s, float* scratch) {
  float ss = 0.0f;
  for (uint32_t i = threadIdx.x; i < n; i += kBlock) {
    const float v = __ldcg(x + i);
    x_s[i] = v;
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / float(n) + eps);
  for (uint32_t i = threadIdx.x; i < n; i += kBlock) x_s[i] = x_s[i] * inv * to_f32(gamma[i]);
  __syncthreads();
}

/// x_s[i] = x[i] for i < n (ends synced).
__device__ __forceinline__ void stage_plain(const float* x, uint32_t n, float* x_s) {
  for (uint32_t i = threadIdx.x; i < n; i += kBlock) x_s[i] = __ldcg(x + i);
  __syncthreads();
}

/// True in every thread of the block that arrives last of `arrivals` blocks at *counter, after
/// which the other blocks' writes (made before their arrival) are visible to it. Every thread
/// must call it once, after its last global write; the last block resets the counter to 0.
__device__ __forceinline__ bool last_arrival(uint32_t* counter, uint32_t arrivals) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == arrivals - 1;
    if (last) *counter = 0;
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

}  // namespace pdl
}  // namespace ms_dev

/// hidden[r] = embed[token][r]
extern "C" __global__ void __launch_bounds__(128)
    ms_pdl_embed(const ms_dev::WeightT* W, uint64_t embed, uint32_t hidden,
                 const ms_abi::StepCell* step, float* out) {
  ms_dev::pdl::launch_dependents();
  ms_dev::pdl::wait_predecessors();
  const uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < hidden)
    out[r] = ms_dev::to_f32(W[embed + uint64_t(uint32_t(__ldcg(&step->token))) * hidden + r]);
}

/// RMSNorm(hidden) x [wq; wk; wv] (rows from `wqkv`), then RoPE and the KV append. Warp task t is a
/// rotation pair: rows (h * hd + d, h * hd + d + hd/2) of "head" h of the q, k, v row blocks, so
/// the rotation happens in the lane that holds both dot products. q goes to q_out (fp32), k and v
/// to the cache at the step's position. Dynamic shared memory: hidden floats.
extern "C" __global__ void __launch_bounds__(128)
    ms_pdl_qkv_rope(const ms_dev::WeightT* W, uint64_t wqkv, uint64_t gamma, const float* hidden_in,
                    const float* inv_freq, const ms_abi::StepCell* step, ms_abi::ModelParams m,
                    uint32_t layer, ms_dev::KvT* kv, float* q_out) {
  using namespace ms_dev;
  ms_dev::pdl::launch_dependents();
  extern __shared__ float x_s[];
  __shared__ float scratch[kWarps];
  const int lane = threadIdx.x & 31;
  const uint32_t hd = m.head_dim, half = hd / 2;
  const uint32_t q_dim = m.heads * hd, kv_dim = m.kv_heads * hd;
  const uint32_t pairs = (q_dim + 2 * kv_dim) / 2;
  const uint32_t t = blockIdx.x * pdl::kBlockWarps + (threadIdx.x >> 5);
  const uint32_t tt = t < pairs ? t : pairs - 1;
  const uint32_t r0 = (tt / half) * hd + tt % half;
  pdl::RowPair rp = pdl::row_pair(W + wqkv, r0, r0 + half, m.hidden, 0, m.hidden);
  rp.load(0, lane);
  pdl::wait_predecessors();
  pdl::stage_normed(hidden_in, W + gamma, m.hidden, m.rms_eps, x_s, scratch);
  const float2 y = rp.finish(lane, x_s);
  if (t >= pairs || lane != 0) return;
  const uint32_t pos = uint32_t(__ldcg(&step->position));
  const uint32_t d = t % half;
  float y0 = y.x, y1 = y.y;
  if (r0 < q_dim + kv_dim) {  // q or k: rotate-half RoPE
    const float angle = float(pos) * inv_freq[d];
    const float c = cosf(angle), s = sinf(angle);
    y0 = y.x * c - y.y * s;
    y1 = y.y * c + y.x * s;
  }
  if (r0 < q_dim) {
    q_out[r0] = y0;
    q_out[r0 + half] = y1;
    return;
  }
  const uint32_t which = r0 < q_dim + kv_dim ? 0u : 1u;  // 0: k, 1: v
  const uint32_t g = (r0 - q_dim - which * kv_dim) / hd;
  KvT* dst = kv + ms_abi::kv_offset(m, layer, which, g) + uint64_t(pos) * hd;
  from_f32(y0, dst + d);
  from_f32(y1, dst + d + half);
}

/// Split-KV attention, one block per (KV head g = blockIdx.y, key split s = blockIdx.x): the
/// group's query heads against keys [s * chunk, min(n, (s + 1) * chunk)), chunk = ceil(n / splits)
/// with n = position + 1. Writes per (query head, split) the unnormalised output and (max, sum) of
/// the scaled scores; an empty split writes (-inf, 0) and zeros. The KV head's last block to finish
/// then writes attn[h * hd + d] = sum_s e^(m_s - M) o_s[d] / sum_s e^(m_s - M) l_s for the group's
/// query heads (counters[g] counts the arrivals). Dynamic shared memory: group * head_dim + group *
/// chunk_max + 128 * group * (16 / sizeof(KvT)) floats.
extern "C" __global__ void __launch_bounds__(128)
    ms_pdl_attention(const float* q, const ms_dev::KvT* kv, const ms_abi::StepCell* step,
                     ms_abi::ModelParams m, uint32_t layer, uint32_t chunk_max, float* part_o,
                     float* part_ml, uint32_t* counters, float* attn) {
  using namespace ms_dev;
  pdl::launch_dependents();
  pdl::wait_predecessors();
  extern __shared__ float smem[];
  constexpr int kHd = kHeadDim;
  constexpr int kKvVecs = kHd * int(sizeof(KvT)) / 16;
  static_assert(kHd * sizeof(KvT) % 16 == 0, "a key row is whole 16-byte vectors");
  const uint32_t group = m.heads / m.kv_heads, g = blockIdx.y, s = blockIdx.x, splits = gridDim.x;
  float* q_s = smem;                          // group x hd
  float* p_s = smem + group * kHd;            // group x chunk_max
  __shared__ float ml_s[2 * pdl::kMaxGroup];  // per query head of the group: max, sum
  const uint32_t n = uint32_t(__ldcg(&step->position)) + 1;
  const uint32_t chunk = (n + splits - 1) / splits;
  const uint32_t t0 = s * chunk < n ? s * chunk : n;
  const uint32_t t1 = t0 + chunk < n ? t0 + chunk : n;
  for (uint32_t i = threadIdx.x; i < group * kHd; i += pdl::kBlock)
    q_s[i] = __ldcg(q + uint64_t(g) * group * kHd + i) * m.attn_scale;
  __syncthreads();
  const KvT* K = kv + ms_abi::kv_offset(m, layer, 0, g);
  const KvT* V = kv + ms_abi::kv_offset(m, layer, 1, g);
  for (uint32_t t = t0 + threadIdx.x; t < t1; t += pdl::kBlock) {
    uint4 k4[kKvVecs];
#pragma unroll
    for (int i = 0; i < kKvVecs; ++i)
      k4[i] = __ldcg(reinterpret_cast<const uint4*>(K + uint64_t(t) * kHd) + i);
    for (uint32_t j = 0; j < group; ++j) {
      float acc = 0.0f;
#pragma unroll
      for (int i = 0; i < kKvVecs; ++i) {
        const uint32_t w[4] = {k4[i].x, k4[i].y, k4[i].z, k4[i].w};
        constexpr int kPer = 16 / int(sizeof(KvT));
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
#if MS_KV_BF16
          const float kval = bf16_pair_elem(w[e >> 1], e);
#else
          const float kval = __uint_as_float(w[e]);
#endif
          acc += q_s[j * kHd + i * kPer + e] * kval;
        }
      }
      p_s[j * chunk_max + (t - t0)] = acc;
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (uint32_t j = warp; j < group; j += pdl::kBlockWarps) {
    float mx = pdl::neg_inf();
    for (uint32_t i = lane; i < t1 - t0; i += 32) mx = fmaxf(mx, p_s[j * chunk_max + i]);
    mx = warp_max(mx);
    float l = 0.0f;
    for (uint32_t i = lane; i < t1 - t0; i += 32) {
      const float p = __expf(p_s[j * chunk_max + i] - mx);
      p_s[j * chunk_max + i] = p;
      l += p;
    }
    l = warp_sum(l);
    if (lane == 0) {
      ml_s[2 * j] = mx;
      ml_s[2 * j + 1] = l;
    }
  }
  __syncthreads();
  // P.V: thread (slice, vec) accumulates its 16-byte column vector of V over keys t0 + slice,
  // + kSlices, ... for every query head of the group; the slices are then summed through red.
  constexpr int kSlices = pdl::kBlock / kKvVecs;
  static_assert(pdl::kBlock % kKvVecs == 0, "a block covers whole value rows");
  constexpr int kPer = 16 / int(sizeof(KvT));
  float* red = p_s + group * chunk_max;  // kSlices x group x hd
  {
    const int vec = threadIdx.x % kKvVecs, slice = threadIdx.x / kKvVecs;
    float acc[pdl::kMaxGroup][kPer];
#pragma unroll
    for (int j = 0; j < pdl::kMaxGroup; ++j)
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[j][e] = 0.0f;
#pragma unroll 4
    for (uint32_t t = t0 + slice; t < t1; t += kSlices) {
      const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(V + uint64_t(t) * kHd) + vec);
      const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
      float v[kPer];
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
#if MS_KV_BF16
        v[e] = bf16_pair_elem(w[e >> 1], e);
#else
        v[e] = __uint_as_float(w[e]);
#endif
      }
#pragma unroll
      for (int j = 0; j < pdl::kMaxGroup; ++j) {
        if (j >= int(group)) break;
        const float p = p_s[j * chunk_max + (t - t0)];
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[j][e] += p * v[e];
      }
    }
#pragma unroll
    for (int j = 0; j < pdl::kMaxGroup; ++j) {
      if (j >= int(group)) break;
#pragma unroll
      for (int e = 0; e < kPer; ++e) red[(slice * group + j) * kHd + vec * kPer + e] = acc[j][e];
    }
  }
  __syncthreads();
  for (uint32_t idx = threadIdx.x; idx < group * kHd; idx += pdl::kBlock) {
    const uint32_t j = idx / kHd, d = idx % kHd;
    float o = 0.0f;
    for (int sl = 0; sl < kSlices; ++sl) o += red[(sl * group + j) * kHd + d];
    const uint32_t h = g * group + j;
    part_o[(uint64_t(h) * splits + s) * kHd + d] = o;
    if (d == 0) {
      part_ml[(uint64_t(h) * splits + s) * 2] = ml_s[2 * j];
      part_ml[(uint64_t(h) * splits + s) * 2 + 1] = ml_s[2 * j + 1];
    }
  }
  if (!pdl::last_arrival(counters + g, splits)) return;
  for (uint32_t idx = threadIdx.x; idx < group * kHd; idx += pdl::kBlock) {
    const uint32_t h = g * group + idx / kHd, d = idx % kHd;
    const float* ml = part_ml + uint64_t(h) * splits * 2;
    float M = pdl::neg_inf();
    for (uint32_t sp = 0; sp < splits; ++sp)
      if (__ldcg(ml + 2 * sp + 1) > 0.0f) M = fmaxf(M, __ldcg(ml + 2 * sp));
    float o = 0.0f, L = 0.0f;
    for (uint32_t sp = 0; sp < splits; ++sp) {
      const float l = __ldcg(ml + 2 * sp + 1);
      if (l <= 0.0f) continue;
      const float w = __expf(__ldcg(ml + 2 * sp) - M);
      L += w * l;
      o += w * __ldcg(part_o + (uint64_t(h) * splits + sp) * kHd + d);
    }
    attn[uint64_t(h) * kHd + d] = o / L;
  }
}

/// hidden[r] += W[r] . attn, one pair of rows per warp. Dynamic shared
/// memory: k floats. rows is even (every GEMV here computes whole pairs).
extern "C" __global__ void __launch_bounds__(128)
    ms_pdl_o_residual(const ms_dev::WeightT* W, uint64_t wo, uint32_t rows, uint32_t k,
                      const float* attn, float* hidden) {
  using namespace ms_dev;
  pdl::launch_dependents();
  extern __shared__ float x_s[];
  const int lane = threadIdx.x & 31;
  const uint32_t r0 = 2 * (blockIdx.x * pdl::kBlockWarps + (threadIdx.x >> 5));
  const uint32_t rr = r0 + 1 < rows ? r0 : rows - 2;
  pdl::RowPair rp = pdl::row_pair(W + wo, rr, rr + 1, k, 0, k);
  rp.load(0, lane);
  pdl::wait_predecessors();
  pdl::stage_plain(attn, k, x_s);
  const float2 y = rp.finish(lane, x_s);
  if (r0 >= rows || lane != 0) return;
  hidden[r0] = __ldcg(hidden + r0) + y.x;
  hidden[r0 + 1] = __ldcg(hidden + r0 + 1) + y.y;
}

/// out[i] = silu(gate_i . x) * (up_i . x), x = RMSNorm(hidden); rows i of w_gate and ffn + i (w_up
/// follows w_gate). One output per warp. Dynamic shared memory: hidden floats.
extern "C" __global__ void __launch_bounds__(128)
    ms_pdl_gate_up(const ms_dev::WeightT* W, uint64_t w_gate, uint64_t gamma, uint32_t hidden,
                   uint32_t ffn, float eps, const float* hidden_in, float* out) {
  using namespace ms_dev;
  pdl::launch_dependents();
  extern __shared__ float x_s[];
  __shared__ float scratch[kWarps];
  const int lane = threadIdx.x & 31;
  const uint32_t i = blockIdx.x * pdl::kBlockWarps + (threadIdx.x >> 5);
  const uint32_t ii = i < ffn ? i : ffn - 1;
  pdl::RowPair rp = pdl::row_pair(W + w_gate, ii, uint64_t(ffn) + ii, hidden, 0, hidden);
  rp.load(0, lane);
  pdl::wait_predecessors();
  pdl::stage_normed(hidden_in, W + gamma, hidden, eps, x_s, scratch);
  const float2 y = rp.finish(lane, x_s);
  if (i < ffn && lane == 0) out[i] = silu(y.x) * y.y;
}

/// Down projection split along K: block (row block blockIdx.x, split blockIdx.y) computes its
/// rows of W[:, k0 .. k0 + k_split) . x[k0 ..) into part[split][row]; the row block's last split
/// block to finish adds sum_split part[split][row] to hidden[row] (counters[blockIdx.x] counts the
/// arrivals). Dynamic shared memory: k_split floats.
extern "C" __global__ void __launch_bounds__(128)
    ms_pdl_down_residual(const ms_dev::WeightT* W, uint64_t w_down, uint32_t rows, uint32_t k,
                         uint32_t k_split, const float* x, float* part, uint32_t* counters,
                         float* hidden) {
  using namespace ms_dev;
  pdl::launch_dependents();
  extern __shared__ float x_s[];
  const int lane = threadIdx.x & 31;
  const uint32_t r0 = 2 * (blockIdx.x * pdl::kBlockWarps + (threadIdx.x >> 5));
  const uint32_t rr = r0 + 1 < rows ? r0 : rows - 2;
  const uint32_t k0 = blockIdx.y * k_split;
  pdl::RowPair rp = pdl::row_pair(W + w_down, rr, rr + 1, k, k0, k_split);
  rp.load(0, lane);
  pdl::wait_predecessors();
  pdl::stage_plain(x + k0, k_split, x_s);
  const float2 y = rp.finish(lane, x_s);
  if (r0 < rows && lane == 0) {
    float* dst = part + uint64_t(blockIdx.y) * rows;
    dst[r0] = y.x;
    dst[r0 + 1] = y.y;
  }
  if (!pdl::last_arrival(counters + blockIdx.x, gridDim.y)) return;
  const uint32_t first = blockIdx.x * 2 * pdl::kBlockWarps;
  for (uint32_t r = first + threadIdx.x; r < first + 2 * pdl::kBlockWarps && r < rows;
       r += pdl::kBlock) {
    float acc = __ldcg(hidden + r);
    for (uint32_t sp = 0; sp < gridDim.y; ++sp) acc += __ldcg(part + uint64_t(sp) * rows + r);
    hidden[r] = acc;
  }
}

/// logits[r] = W[r] . RMSNorm(hidden) for pairs_per_warp pairs of rows per warp, and the block's
/// (max, smallest index of the max) to cand_v / cand_i. The pairs after the first are prefetched
/// into L2 before the wait. Dynamic shared memory: hidden floats.
extern "C" __global__ void __launch_bounds__(128)
    ms_pdl_lm_head(const ms_dev::WeightT* W, uint64_t lm_head, uint64_t gamma, uint32_t hidden,
                   uint32_t vocab, float eps, uint32_t pairs_per_warp, const float* hidden_in,
                   float* logits, float* cand_v, int32_t* cand_i) {
  using namespace ms_dev;
  pdl::launch_dependents();
  extern __shared__ float x_s[];
  __shared__ float scratch[kWarps];
  __shared__ float best_v[pdl::kBlockWarps];
  __shared__ int32_t best_i[pdl::kBlockWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t first = 2 * pairs_per_warp * (blockIdx.x * pdl::kBlockWarps + warp);
  auto pair_at = [&](uint32_t p) {
    const uint32_t r = first + 2 * p;
    const uint32_t rr = r + 1 < vocab ? r : vocab - 2;
    return pdl::row_pair(W + lm_head, rr, rr + 1, hidden, 0, hidden);
  };
  pdl::RowPair rp = pair_at(0);
  rp.load(0, lane);
  if (first + 2 < vocab) {
    const uint32_t last = first + 2 * pairs_per_warp < vocab ? first + 2 * pairs_per_warp : vocab;
    prefetch_l2(W + lm_head + uint64_t(first + 2) * hidden,
                uint64_t(last - first - 2) * hidden * sizeof(WeightT), lane, 32);
  }
  pdl::wait_predecessors();
  pdl::stage_normed(hidden_in, W + gamma, hidden, eps, x_s, scratch);
  float bv = pdl::neg_inf();
  int32_t bi = 0x7fffffff;
  for (uint32_t p = 0; p < pairs_per_warp; ++p) {
    const uint32_t r = first + 2 * p;
    if (r >= vocab) break;
    if (p > 0) {
      rp = pair_at(p);
      rp.load(0, lane);
    }
    const float2 y = rp.finish(lane, x_s);
    if (lane == 0) {
      logits[r] = y.x;
      logits[r + 1] = y.y;
    }
    if (y.x > bv || bi == 0x7fffffff) bv = y.x, bi = int32_t(r);
    if (y.y > bv) bv = y.y, bi = int32_t(r + 1);
  }
  if (lane == 0) {
    best_v[warp] = bv;
    best_i[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < pdl::kBlockWarps; ++w) {
      if (best_i[w] == 0x7fffffff) continue;
      if (best_i[0] == 0x7fffffff || best_v[w] > best_v[0] ||
          (best_v[w] == best_v[0] && best_i[w] < best_i[0])) {
        best_v[0] = best_v[w];
        best_i[0] = best_i[w];
      }
    }
    cand_v[blockIdx.x] = best_v[0];
    cand_i[blockIdx.x] = best_i[0];
  }
}

/// step->argmax = the candidate with the largest value (smallest index among equals), one block.
extern "C" __global__ void __launch_bounds__(128)
    ms_pdl_argmax(const float* cand_v, const int32_t* cand_i, uint32_t n, ms_abi::StepCell* step) {
  using namespace ms_dev;
  pdl::launch_dependents();
  pdl::wait_predecessors();
  __shared__ float bv[pdl::kBlockWarps];
  __shared__ int32_t bi[pdl::kBlockWarps];
  float best = pdl::neg_inf();
  int32_t best_i = 0x7fffffff;
  for (uint32_t i = threadIdx.x; i < n; i += pdl::kBlock) {
    const float v = __ldcg(cand_v + i);
    const int32_t vi = __ldcg(cand_i + i);
    if (vi == 0x7fffffff) continue;
    if (best_i == 0x7fffffff || v > best || (v == best && vi < best_i)) best = v, best_i = vi;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (oi != 0x7fffffff && (best_i == 0x7fffffff || ov > best || (ov == best && oi < best_i)))
      best = ov, best_i = oi;
  }
  if ((threadIdx.x & 31) == 0) {
    bv[threadIdx.x >> 5] = best;
    bi[threadIdx.x >> 5] = best_i;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < pdl::kBlockWarps; ++w) {
    if (bi[w] != 0x7fffffff &&
        (bi[0] == 0x7fffffff || bv[w] > bv[0] || (bv[w] == bv[0] && bi[w] < bi[0]))) {
      bv[0] = bv[w];
      bi[0] = bi[w];
    }
  }
  step->argmax = bi[0];
}
