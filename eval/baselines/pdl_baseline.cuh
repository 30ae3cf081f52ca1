// Kernels of the graph-pdl baseline decode step (eval/baselines/baseline_pdl_cuda.cpp): the op-by-op pipeline
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
//   ms_pdl_down_residual down projection, residual added in the epilogue
//   ms_pdl_lm_head       final RMSNorm prologue, LM head GEMV, one (max, index) per block; the
//                        last block to finish writes the argmax over them into the step cell
//
// Every kernel is launched with programmatic stream serialization (sm_90): it first lets its
// successor launch (griddepcontrol.launch_dependents, what cudaTriggerProgrammaticLaunchCompletion
// compiles to), then loads the weights it needs into registers, and only then waits for its
// predecessor (griddepcontrol.wait, what cudaGridDependencySynchronize compiles to) before it reads
// an activation or writes anything. Every block of every kernel passes the wait, so a kernel's
// completion implies its predecessors' completion and reads two kernels back are ordered too.
//
// The combine of the attention splits (and the LM head's argmax) runs in the block that arrives
// last at a counter (threadfence + atomic ticket, as CUDA's threadFenceReduction sample):
// deterministic (the partials are merged in split order) and one kernel boundary fewer each. The
// last block resets its counter for the next use.
//
// GEMV: every GEMV kernel is one wave of persistent blocks of 256 threads (8 warps); warp w of
// the grid owns the row pairs w, w + warps, ... (the tasks) and streams each pair's rows in chunks
// of kCv 16-byte vectors per lane and row, double-buffered in registers: while it multiplies one
// chunk, the next is in flight. Before griddepcontrol.wait every warp already loads its first two
// chunks, so a kernel's first weights stream while its predecessor finishes. The input is staged
// once per block (RMSNorm applied there when the op has one) in shared memory as fp32; accumulation
// is fp32. The multi-wave grids of one pair per warp that this replaces left the memory pipe idle
// between a block's last load and its successor's first (dev/benchmarks_history.md, "2026-11-23, H100: a graph-pdl baseline").
// Activations, the residual stream and the logits are fp32; weights and KV have the model's dtype.
// Everything another block or kernel wrote (activations, the step cell, partials) is read at L2
// (ld.global.cg): with programmatic launch a block may start before its predecessors end, and an
// SM's L1 is not coherent with other SMs' writes.
#pragma once

#include "vm/device/common.cuh"

namespace ms_dev {
namespace pdl {

constexpr int kBlock = 256;  // threads per block of every kernel but embed and argmax
constexpr int kBlockWarps = kBlock / 32;
static_assert(MS_THREADS == kBlock, "the graph-pdl kernels are built with MS_THREADS=256");
constexpr int kRowElems = 16 / sizeof(WeightT);  // weight elements per 16-byte vector
constexpr int kCv = 4;                           // vectors per lane and row in one chunk
constexpr uint32_t kChunkVecs = 32u * kCv;       // vectors per row in one chunk of a warp
constexpr int kMaxGroup = 8;                     // query heads per KV head the attention serves
constexpr uint32_t kMinKeysPerSplit = 32;        // attention: fewer keys than this share a split

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

/// The timeline of one launch, when the host asks for it (trace != nullptr): four globaltimer
/// stamps (ns) per launch slot: the first block's start, the first and the last block past the
/// wait for the predecessors, the last block's end. Off, it costs a null test per block.
struct TraceScope {
  unsigned long long* t;
  __device__ static unsigned long long now() {
    unsigned long long v;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
    return v;
  }
  __device__ TraceScope(unsigned long long* trace, uint32_t slot)
      : t(trace ? trace + 4ull * slot : nullptr) {
    if (t && threadIdx.x == 0) atomicMin(t, now());
  }
  __device__ void waited() const {
    if (!t || threadIdx.x != 0) return;
    const unsigned long long n = now();
    atomicMin(t + 1, n);
    atomicMax(t + 2, n);
  }
  /// Every return of a kernel is taken by the whole block, so the barrier is safe.
  __device__ ~TraceScope() {
    if (!t) return;
    __syncthreads();
    if (threadIdx.x == 0) atomicMax(t + 3, now());
  }
};

/// One chunk of a row pair in registers: kCv vectors per lane of each row.
struct Chunk {
  uint4 w[2][kCv];
};

/// Rows of task t: a pair (r0, r1); r1 == r0 marks a lone last row.
struct PairRows {  // rows 2t and 2t + 1
  uint32_t rows;
  __device__ uint2 operator()(uint32_t t) const {
    const uint32_t r0 = 2 * t;
    return make_uint2(r0, r0 + 1 < rows ? r0 + 1 : r0);
  }
};
struct GateUpRows {  // row t of w_gate and row t of w_up (which follows w_gate)
  uint32_t ffn;
  __device__ uint2 operator()(uint32_t t) const { return make_uint2(t, ffn + t); }
};
struct RopeRows {  // rows d and d + hd/2 of "head" t / (hd/2) of [wq; wk; wv]: a rotation pair
  uint32_t head_dim;
  __device__ uint2 operator()(uint32_t t) const {
    const uint32_t half = head_dim / 2, r0 = (t / half) * head_dim + t % half;
    return make_uint2(r0, r0 + half);
  }
};

/// One warp's share of a GEMV y = W . x over `tasks` row pairs of `vecs` 16-byte vectors each:
/// tasks first, first + stride, ...; item j is chunk j % chunks of the warp's task j / chunks.
template <class Rows>
struct WarpGemv {
  const WeightT* W;
  uint64_t row_elems;
  Rows rows;
  uint32_t first, stride, chunks, items, vecs;
  int lane;

  __device__ WarpGemv(const WeightT* W_, uint64_t row_elems_, Rows rows_, uint32_t tasks,
                      uint32_t k_elems)
      : W(W_), row_elems(row_elems_), rows(rows_) {
    lane = int(threadIdx.x & 31);
    first = blockIdx.x * kBlockWarps + (threadIdx.x >> 5);
    stride = gridDim.x * kBlockWarps;
    vecs = k_elems / kRowElems;
    chunks = (vecs + kChunkVecs - 1) / kChunkVecs;
    items = first < tasks ? (tasks - first + stride - 1) / stride * chunks : 0;
  }
  __device__ uint32_t task(uint32_t item) const { return first + item / chunks * stride; }

  __device__ void load(Chunk& c, uint32_t item) const {
    const uint2 r = rows(task(item));
    const uint4* p0 = reinterpret_cast<const uint4*>(W + uint64_t(r.x) * row_elems);
    const uint4* p1 = reinterpret_cast<const uint4*>(W + uint64_t(r.y) * row_elems);
    const uint32_t base = item % chunks * kChunkVecs + uint32_t(lane);
#pragma unroll
    for (int i = 0; i < kCv; ++i) {
      const uint32_t v = base + uint32_t(i * 32);
      c.w[0][i] = v < vecs ? load_stream(p0 + v) : make_uint4(0, 0, 0, 0);
      c.w[1][i] = v < vecs ? load_stream(p1 + v) : make_uint4(0, 0, 0, 0);
    }
  }
  /// acc[r] += chunk `item` of row r times x (fp32 in shared memory, 16-byte aligned).
  __device__ void fma(const Chunk& c, uint32_t item, const float* x, float acc[2]) const {
    const uint32_t base = item % chunks * kChunkVecs + uint32_t(lane);
#pragma unroll
    for (int i = 0; i < kCv; ++i) {
      const uint32_t v = base + uint32_t(i * 32);
      if (v >= vecs) break;
      const float4* xv = reinterpret_cast<const float4*>(x + uint64_t(v) * kRowElems);
#pragma unroll
      for (int q = 0; q < kRowElems / 4; ++q) {
        const float4 x4 = xv[q];
        const float xs[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[0] += elem(c.w[0][i], 4 * q + e) * xs[e];
          acc[1] += elem(c.w[1][i], 4 * q + e) * xs[e];
        }
      }
    }
  }
  /// Loads the warp's first two chunks (before the wait for the predecessors).
  __device__ void preload(Chunk& a, Chunk& b) const {
    if (items > 0) load(a, 0);
    if (items > 1) load(b, 1);
  }
  /// Streams every item; after a task's last chunk calls epi(task, y0, y1) in every lane with the
  /// warp-reduced dot products of its two rows.
  template <class Epi>
  __device__ void run(Chunk& a, Chunk& b, const float* x, Epi epi) const {
    float acc[2] = {0.0f, 0.0f};
    auto step = [&](Chunk& c, uint32_t j) {
      fma(c, j, x, acc);
      if (j + 2 < items) load(c, j + 2);
      if (j % chunks == chunks - 1) {
        epi(task(j), warp_sum(acc[0]), warp_sum(acc[1]));
        acc[0] = acc[1] = 0.0f;
      }
    };
    for (uint32_t j = 0; j < items; j += 2) {
      step(a, j);
      if (j + 1 < items) step(b, j + 1);
    }
  }
};

/// x_s[i] = x[i] for i < n (n a multiple of 4; 16-byte loads, all issued before any is used).
/// Returns this thread's sum of squares. Does not sync.
__device__ __forceinline__ float stage_raw(const float* x, uint32_t n, float* x_s) {
  float ss = 0.0f;
#pragma unroll 4
  for (uint32_t i = 4 * threadIdx.x; i < n; i += 4 * kBlock) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(x + i));
    *reinterpret_cast<float4*>(x_s + i) = v;
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  return ss;
}

/// g_s[i] = gamma[i] for i < n, upcast (weights: staged before the wait for the predecessors).
__device__ __forceinline__ void stage_gamma(const WeightT* gamma, uint32_t n, float* g_s) {
  for (uint32_t i = threadIdx.x; i < n; i += kBlock) g_s[i] = to_f32(gamma[i]);
  __syncthreads();
}

/// RMSNorm with the scale applied last: x_s[i] = x[i] * g_s[i] for i < n, and the return value is
/// rsqrt(mean(x^2) + eps), by which the caller multiplies each dot product with x_s (one barrier
/// after the wait instead of a second pass over x_s). The whole block; ends synced.
__device__ __forceinline__ float stage_normed(const float* x, const float* g_s, uint32_t n,
                                              float eps, float* x_s, float* scratch) {
  float ss = 0.0f;
#pragma unroll 4
  for (uint32_t i = 4 * threadIdx.x; i < n; i += 4 * kBlock) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(x + i));
    const float4 g = *reinterpret_cast<const float4*>(g_s + i);
    *reinterpret_cast<float4*>(x_s + i) = make_float4(v.x * g.x, v.y * g.y, v.z * g.z, v.w * g.w);
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kBlockWarps; ++w) total += scratch[w];
  return rsqrtf(total / float(n) + eps);
}

/// x_s[i] = x[i] for i < n (ends synced).
__device__ __forceinline__ void stage_plain(const float* x, uint32_t n, float* x_s) {
  stage_raw(x, n, x_s);
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

/// An argmax candidate: the largest value seen, the smallest index among equals (kNone: none yet).
struct Best {
  static constexpr int32_t kNone = 0x7fffffff;
  float v = -3.402823466e38f;
  int32_t i = kNone;
  __device__ void offer(float ov, int32_t oi) {
    if (oi != kNone && (i == kNone || ov > v || (ov == v && oi < i))) v = ov, i = oi;
  }
  /// The block's best over every thread's candidate, valid in thread 0 (the whole block; `warp_v`
  /// and `warp_i` hold kBlockWarps entries).
  __device__ Best block_best(float* warp_v, int32_t* warp_i) const {
    Best b = *this;
    for (int o = 16; o > 0; o >>= 1)
      b.offer(__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o));
    if ((threadIdx.x & 31) == 0) {
      warp_v[threadIdx.x >> 5] = b.v;
      warp_i[threadIdx.x >> 5] = b.i;
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 1; w < kBlockWarps; ++w) b.offer(warp_v[w], warp_i[w]);
    return b;
  }
};

/// The argmax of n (value, index) candidates (index Best::kNone: none), by the whole block; the
/// result is valid in thread 0.
__device__ __forceinline__ int32_t block_argmax(const float* cand_v, const int32_t* cand_i,
                                                uint32_t n) {
  __shared__ float warp_v[kBlockWarps];
  __shared__ int32_t warp_i[kBlockWarps];
  Best b;
  for (uint32_t i = threadIdx.x; i < n; i += kBlock)
    b.offer(__ldcg(cand_v + i), __ldcg(cand_i + i));
  return b.block_best(warp_v, warp_i).i;
}

/// The residual add of a GEMV over PairRows: hidden[2t, 2t + 1] += (y0, y1) by lane 0 of the
/// task's warp (each row has one writer). The rows of the warp's first task are read right after
/// the wait, beside the input's staging, so the epilogue of a warp with one task waits on no
/// further round trip.
struct ResidualPairs {
  float* hidden;
  uint32_t rows, first;
  float2 h_first;
  __device__ float2 read(uint32_t t) const {
    return make_float2(__ldcg(hidden + 2 * t),
                       2 * t + 1 < rows ? __ldcg(hidden + 2 * t + 1) : 0.0f);
  }
  template <class G>
  __device__ ResidualPairs(float* hidden_, uint32_t rows_, const G& g)
      : hidden(hidden_), rows(rows_), first(g.first), h_first(make_float2(0.0f, 0.0f)) {
    if (g.lane == 0 && g.items > 0) h_first = read(first);
  }
  __device__ void add(uint32_t t, float y0, float y1) const {
    const float2 h = t == first ? h_first : read(t);
    hidden[2 * t] = h.x + y0;
    if (2 * t + 1 < rows) hidden[2 * t + 1] = h.y + y1;
  }
};

/// The attention combine of KV head g's query heads over `splits` key splits (gridDim.x slots per
/// head in part_o / part_ml): warp j turns head j's (max, sum) pairs into weights e^(m_s - M) / L
/// in w_s, then thread (j, d) sums the weighted outputs with the loads of eight splits in flight at
/// a time into attn. The whole block.
__device__ __forceinline__ void combine_splits(const float* part_o, const float* part_ml,
                                               uint32_t g, uint32_t group, uint32_t splits,
                                               float* w_s, float* attn) {
  constexpr int kHd = kHeadDim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (uint32_t j = warp; j < group; j += kBlockWarps) {
    const float* ml = part_ml + uint64_t(g * group + j) * gridDim.x * 2;
    float M = neg_inf();
    for (uint32_t sp = lane; sp < splits; sp += 32)
      if (__ldcg(ml + 2 * sp + 1) > 0.0f) M = fmaxf(M, __ldcg(ml + 2 * sp));
    M = warp_max(M);
    float L = 0.0f;
    for (uint32_t sp = lane; sp < splits; sp += 32) {
      const float l = __ldcg(ml + 2 * sp + 1);
      const float w = l > 0.0f ? __expf(__ldcg(ml + 2 * sp) - M) : 0.0f;
      w_s[j * gridDim.x + sp] = w;
      L += w * l;
    }
    L = warp_sum(L);
    for (uint32_t sp = lane; sp < splits; sp += 32) w_s[j * gridDim.x + sp] /= L;
  }
  __syncthreads();
  for (uint32_t idx = threadIdx.x; idx < group * kHd; idx += kBlock) {
    const uint32_t j = idx / kHd, d = idx % kHd, h = g * group + j;
    const float* po = part_o + uint64_t(h) * gridDim.x * kHd + d;
    float o = 0.0f;
#pragma unroll 8
    for (uint32_t sp = 0; sp < splits; ++sp) o += w_s[j * gridDim.x + sp] * __ldcg(po + sp * kHd);
    attn[uint64_t(h) * kHd + d] = o;
  }
}

/// The dynamic shared memory of a GEMV kernel, 16-byte aligned.
__device__ __forceinline__ float* gemv_smem() {
  extern __shared__ float4 smem4[];
  return reinterpret_cast<float*>(smem4);
}

}  // namespace pdl
}  // namespace ms_dev

/// hidden[r] = embed[token][r]
extern "C" __global__ void __launch_bounds__(256)
    ms_pdl_embed(const ms_dev::WeightT* W, uint64_t embed, uint32_t hidden,
                 const ms_abi::StepCell* step, float* out, unsigned long long* trace,
                 uint32_t slot) {
  ms_dev::pdl::launch_dependents();
  ms_dev::pdl::TraceScope trace_scope(trace, slot);
  ms_dev::pdl::wait_predecessors();
  trace_scope.waited();
  const uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < hidden)
    out[r] = ms_dev::to_f32(W[embed + uint64_t(uint32_t(__ldcg(&step->token))) * hidden + r]);
}

/// RMSNorm(hidden) x [wq; wk; wv] (rows from `wqkv`), then RoPE and the KV append. Task t is a
/// rotation pair: rows (h * hd + d, h * hd + d + hd/2) of "head" h of the q, k, v row blocks, so
/// the rotation happens in the lane that holds both dot products. q goes to q_out (fp32), k and v
/// to the cache at the step's position. Dynamic shared memory: 2 x hidden floats (x, gamma).
extern "C" __global__ void __launch_bounds__(256, 2)
    ms_pdl_qkv_rope(const ms_dev::WeightT* W, uint64_t wqkv, uint64_t gamma, const float* hidden_in,
                    const float* inv_freq, const ms_abi::StepCell* step, ms_abi::ModelParams m,
                    uint32_t layer, ms_dev::KvT* kv, float* q_out, unsigned long long* trace,
                    uint32_t slot) {
  using namespace ms_dev;
  pdl::launch_dependents();
  pdl::TraceScope trace_scope(trace, slot);
  float* x_s = pdl::gemv_smem();
  __shared__ float scratch[pdl::kBlockWarps];
  const uint32_t hd = m.head_dim, half = hd / 2;
  const uint32_t q_dim = m.heads * hd, kv_dim = m.kv_heads * hd;
  const pdl::WarpGemv<pdl::RopeRows> g(W + wqkv, m.hidden, pdl::RopeRows{hd},
                                       (q_dim + 2 * kv_dim) / 2, m.hidden);
  pdl::Chunk a, b;
  g.preload(a, b);
  pdl::stage_gamma(W + gamma, m.hidden, x_s + m.hidden);
  pdl::wait_predecessors();
  trace_scope.waited();
  const float inv = pdl::stage_normed(hidden_in, x_s + m.hidden, m.hidden, m.rms_eps, x_s, scratch);
  const uint32_t pos = uint32_t(__ldcg(&step->position));
  g.run(a, b, x_s, [&](uint32_t t, float y0, float y1) {
    if (g.lane != 0) return;
    y0 *= inv;
    y1 *= inv;
    const uint32_t r0 = (t / half) * hd + t % half, d = t % half;
    if (r0 < q_dim + kv_dim) {  // q or k: rotate-half RoPE
      const float angle = float(pos) * inv_freq[d];
      const float c = cosf(angle), s = sinf(angle);
      const float x0 = y0;
      y0 = x0 * c - y1 * s;
      y1 = y1 * c + x0 * s;
    }
    if (r0 < q_dim) {
      q_out[r0] = y0;
      q_out[r0 + half] = y1;
      return;
    }
    const uint32_t which = r0 < q_dim + kv_dim ? 0u : 1u;  // 0: k, 1: v
    const uint32_t kvh = (r0 - q_dim - which * kv_dim) / hd;
    KvT* dst = kv + ms_abi::kv_offset(m, layer, which, kvh) + uint64_t(pos) * hd;
    from_f32(y0, dst + d);
    from_f32(y1, dst + d + half);
  });
}

/// Split-KV attention, one block per (KV head g = blockIdx.y, key split s = blockIdx.x): the
/// group's query heads against keys [s * chunk, min(n, (s + 1) * chunk)) with n = position + 1,
/// over the splits in use, eff = min(gridDim.x, ceil(n / kMinKeysPerSplit)), and chunk =
/// ceil(n / eff); blocks past eff leave at once. With one split in use the block writes attn;
/// otherwise it writes per (query head, split) the unnormalised output and (max, sum) of the
/// scaled scores, and the KV head's last block to finish (counters[g] counts the arrivals) merges
/// them: attn[h * hd + d] = sum_s e^(m_s - M) o_s[d] / sum_s e^(m_s - M) l_s. Dynamic shared
/// memory: (group * head_dim + group * chunk_max + kBlock * group * (16 / sizeof(KvT)) + group *
/// gridDim.x) floats.
extern "C" __global__ void __launch_bounds__(256)
    ms_pdl_attention(const float* q, const ms_dev::KvT* kv, const ms_abi::StepCell* step,
                     ms_abi::ModelParams m, uint32_t layer, uint32_t chunk_max, float* part_o,
                     float* part_ml, uint32_t* counters, float* attn, unsigned long long* trace,
                     uint32_t slot) {
  using namespace ms_dev;
  pdl::launch_dependents();
  pdl::TraceScope trace_scope(trace, slot);
  pdl::wait_predecessors();
  trace_scope.waited();
  extern __shared__ float smem[];
  constexpr int kHd = kHeadDim;
  constexpr int kKvVecs = kHd * int(sizeof(KvT)) / 16;
  constexpr int kPer = 16 / int(sizeof(KvT));
  constexpr int kSlices = pdl::kBlock / kKvVecs;
  static_assert(kHd * sizeof(KvT) % 16 == 0, "a key row is whole 16-byte vectors");
  static_assert(pdl::kBlock % kKvVecs == 0, "a block covers whole value rows");
  const uint32_t group = m.heads / m.kv_heads, g = blockIdx.y, s = blockIdx.x;
  // Every load is issued as early as its address allows, the scaled query beside the position and
  // each thread's key row beside its first value vector, so the block waits on two round trips to
  // L2 before the scores rather than four (they are slow while the next kernels' weights stream).
  float* q_s = smem;                          // group x hd
  float* p_s = smem + group * kHd;            // group x chunk_max
  float* red = p_s + group * chunk_max;       // kSlices x group x hd
  float* w_s = red + kSlices * group * kHd;   // group x gridDim.x (the combine's weights)
  __shared__ float ml_s[2 * pdl::kMaxGroup];  // per query head of the group: max, sum
  const uint32_t n = uint32_t(__ldcg(&step->position)) + 1;
  for (uint32_t i = threadIdx.x; i < group * kHd; i += pdl::kBlock)
    q_s[i] = __ldcg(q + uint64_t(g) * group * kHd + i) * m.attn_scale;
  const uint32_t by_keys = (n + pdl::kMinKeysPerSplit - 1) / pdl::kMinKeysPerSplit;
  const uint32_t splits = by_keys < gridDim.x ? by_keys : gridDim.x;
  if (s >= splits) return;
  const uint32_t chunk = (n + splits - 1) / splits;
  const uint32_t t0 = s * chunk < n ? s * chunk : n;
  const uint32_t t1 = t0 + chunk < n ? t0 + chunk : n;
  const KvT* K = kv + ms_abi::kv_offset(m, layer, 0, g);
  const KvT* V = kv + ms_abi::kv_offset(m, layer, 1, g);
  const int vec = threadIdx.x % kKvVecs, slice = threadIdx.x / kKvVecs;
  auto v_at = [&](uint32_t t) {
    return __ldcg(reinterpret_cast<const uint4*>(V + uint64_t(t) * kHd) + vec);
  };
  const uint32_t tk = t0 + threadIdx.x;  // this thread's first key (scores)
  uint4 k4[kKvVecs];
  if (tk < t1) {
#pragma unroll
    for (int i = 0; i < kKvVecs; ++i)
      k4[i] = __ldcg(reinterpret_cast<const uint4*>(K + uint64_t(tk) * kHd) + i);
  }
  uint4 v_next = t0 + slice < t1 ? v_at(t0 + slice) : make_uint4(0, 0, 0, 0);  // P.V's first
  __syncthreads();
  for (uint32_t t = tk; t < t1; t += pdl::kBlock) {
    if (t != tk) {
#pragma unroll
      for (int i = 0; i < kKvVecs; ++i)
        k4[i] = __ldcg(reinterpret_cast<const uint4*>(K + uint64_t(t) * kHd) + i);
    }
    for (uint32_t j = 0; j < group; ++j) {
      float acc = 0.0f;
#pragma unroll
      for (int i = 0; i < kKvVecs; ++i) {
        const uint32_t w[4] = {k4[i].x, k4[i].y, k4[i].z, k4[i].w};
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
  {
    float acc[pdl::kMaxGroup][kPer];
#pragma unroll
    for (int j = 0; j < pdl::kMaxGroup; ++j)
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[j][e] = 0.0f;
#pragma unroll 2
    for (uint32_t t = t0 + slice; t < t1; t += kSlices) {
      const uint4 raw = v_next;  // this key's vector, loaded one iteration ahead
      if (t + kSlices < t1) v_next = v_at(t + kSlices);
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
    if (splits == 1) {
      attn[uint64_t(h) * kHd + d] = o / ml_s[2 * j + 1];
      continue;
    }
    part_o[(uint64_t(h) * gridDim.x + s) * kHd + d] = o;
    if (d == 0) {
      part_ml[(uint64_t(h) * gridDim.x + s) * 2] = ml_s[2 * j];
      part_ml[(uint64_t(h) * gridDim.x + s) * 2 + 1] = ml_s[2 * j + 1];
    }
  }
  if (splits == 1 || !pdl::last_arrival(counters + g, splits)) return;
  pdl::combine_splits(part_o, part_ml, g, group, splits, w_s, attn);
}

/// hidden[r] += W[r] . attn, a pair of rows per task. Dynamic shared memory: k floats.
extern "C" __global__ void __launch_bounds__(256, 2)
    ms_pdl_o_residual(const ms_dev::WeightT* W, uint64_t wo, uint32_t rows, uint32_t k,
                      const float* attn, float* hidden, unsigned long long* trace, uint32_t slot) {
  using namespace ms_dev;
  pdl::launch_dependents();
  pdl::TraceScope trace_scope(trace, slot);
  float* x_s = pdl::gemv_smem();
  const pdl::WarpGemv<pdl::PairRows> g(W + wo, k, pdl::PairRows{rows}, (rows + 1) / 2, k);
  pdl::Chunk a, b;
  g.preload(a, b);
  pdl::wait_predecessors();
  trace_scope.waited();
  const pdl::ResidualPairs res(hidden, rows, g);
  pdl::stage_plain(attn, k, x_s);
  g.run(a, b, x_s, [&](uint32_t t, float y0, float y1) {
    if (g.lane == 0) res.add(t, y0, y1);
  });
}

/// out[i] = silu(gate_i . x) * (up_i . x), x = RMSNorm(hidden); rows i of w_gate and ffn + i (w_up
/// follows w_gate). Dynamic shared memory: 2 x hidden floats (x, gamma).
extern "C" __global__ void __launch_bounds__(256, 2)
    ms_pdl_gate_up(const ms_dev::WeightT* W, uint64_t w_gate, uint64_t gamma, uint32_t hidden,
                   uint32_t ffn, float eps, const float* hidden_in, float* out,
                   unsigned long long* trace, uint32_t slot) {
  using namespace ms_dev;
  pdl::launch_dependents();
  pdl::TraceScope trace_scope(trace, slot);
  float* x_s = pdl::gemv_smem();
  __shared__ float scratch[pdl::kBlockWarps];
  const pdl::WarpGemv<pdl::GateUpRows> g(W + w_gate, hidden, pdl::GateUpRows{ffn}, ffn, hidden);
  pdl::Chunk a, b;
  g.preload(a, b);
  pdl::stage_gamma(W + gamma, hidden, x_s + hidden);
  pdl::wait_predecessors();
  trace_scope.waited();
  const float inv = pdl::stage_normed(hidden_in, x_s + hidden, hidden, eps, x_s, scratch);
  g.run(a, b, x_s, [&](uint32_t t, float y0, float y1) {
    if (g.lane == 0) out[t] = silu(y0 * inv) * (y1 * inv);
  });
}

/// hidden[r] += W[r] . x (x: the ffn activations), a pair of rows per task. Dynamic shared
/// memory: k floats.
extern "C" __global__ void __launch_bounds__(256, 2)
    ms_pdl_down_residual(const ms_dev::WeightT* W, uint64_t w_down, uint32_t rows, uint32_t k,
                         const float* x, float* hidden, unsigned long long* trace, uint32_t slot) {
  using namespace ms_dev;
  pdl::launch_dependents();
  pdl::TraceScope trace_scope(trace, slot);
  float* x_s = pdl::gemv_smem();
  const pdl::WarpGemv<pdl::PairRows> g(W + w_down, k, pdl::PairRows{rows}, (rows + 1) / 2, k);
  pdl::Chunk a, b;
  g.preload(a, b);
  pdl::wait_predecessors();
  trace_scope.waited();
  const pdl::ResidualPairs res(hidden, rows, g);
  pdl::stage_plain(x, k, x_s);
  g.run(a, b, x_s, [&](uint32_t t, float y0, float y1) {
    if (g.lane == 0) res.add(t, y0, y1);
  });
}

/// logits[r] = W[r] . RMSNorm(hidden), a pair of rows per task, and the block's (max, smallest
/// index of the max) to cand_v / cand_i; the block that finishes last (*counter counts the
/// arrivals) writes the argmax over the blocks' candidates to step->argmax. Dynamic shared memory:
/// 2 x hidden floats (x, gamma).
extern "C" __global__ void __launch_bounds__(256, 2)
    ms_pdl_lm_head(const ms_dev::WeightT* W, uint64_t lm_head, uint64_t gamma, uint32_t hidden,
                   uint32_t vocab, float eps, const float* hidden_in, float* logits, float* cand_v,
                   int32_t* cand_i, uint32_t* counter, ms_abi::StepCell* step,
                   unsigned long long* trace, uint32_t slot) {
  using namespace ms_dev;
  pdl::launch_dependents();
  pdl::TraceScope trace_scope(trace, slot);
  float* x_s = pdl::gemv_smem();
  __shared__ float scratch[pdl::kBlockWarps];
  __shared__ float warp_v[pdl::kBlockWarps];
  __shared__ int32_t warp_i[pdl::kBlockWarps];
  const pdl::WarpGemv<pdl::PairRows> g(W + lm_head, hidden, pdl::PairRows{vocab}, (vocab + 1) / 2,
                                       hidden);
  pdl::Chunk a, b;
  g.preload(a, b);
  pdl::stage_gamma(W + gamma, hidden, x_s + hidden);
  pdl::wait_predecessors();
  trace_scope.waited();
  const float inv = pdl::stage_normed(hidden_in, x_s + hidden, hidden, eps, x_s, scratch);
  pdl::Best best;  // lane 0's rows
  g.run(a, b, x_s, [&](uint32_t t, float y0, float y1) {
    if (g.lane != 0) return;
    y0 *= inv;
    y1 *= inv;
    const uint32_t r = 2 * t;
    logits[r] = y0;
    best.offer(y0, int32_t(r));
    if (r + 1 < vocab) {
      logits[r + 1] = y1;
      best.offer(y1, int32_t(r + 1));
    }
  });
  const pdl::Best block = best.block_best(warp_v, warp_i);
  if (threadIdx.x == 0) {
    cand_v[blockIdx.x] = block.v;
    cand_i[blockIdx.x] = block.i;
  }
  if (!pdl::last_arrival(counter, gridDim.x)) return;
  const int32_t arg = pdl::block_argmax(cand_v, cand_i, gridDim.x);
  if (threadIdx.x == 0) step->argmax = arg;
}
