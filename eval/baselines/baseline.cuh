// Small kernels of the op-by-op baseline decode step (eval/baselines/baseline_cuda.cpp): the GEMVs run
// through cuBLAS, these do the rest (embedding, RMSNorm, RoPE + KV append, attention, SiLU * up),
// and `ms_stream_read` is the read-only kernel `megasched doctor --measure` times for the
// streaming-read bandwidth. Token and position are read from the step cell in device memory, so
// one captured CUDA graph serves every step. Built with the same dtype knobs as the megakernel.
#pragma once

#include "vm/device/common.cuh"

namespace ms_dev {

/// Baseline activations that feed a cuBLAS GEMV have the weight dtype (cuBLAS takes A and x in one
/// type); accumulation and the residual stream stay fp32.
__device__ __forceinline__ void store_weight_dtype(float v, WeightT* dst) { from_f32(v, dst); }

}  // namespace ms_dev

/// hidden[r] = embed[token][r]
extern "C" __global__ void ms_bl_embed(const ms_dev::WeightT* W, uint64_t embed, uint32_t hidden,
                                       const ms_abi::StepCell* step, float* out) {
  const uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < hidden) out[r] = ms_dev::to_f32(W[embed + uint64_t(uint32_t(step->token)) * hidden + r]);
}

/// out[r] = x[r] * rsqrt(mean(x^2) + eps) * gamma[r], one block of MS_THREADS threads.
extern "C" __global__ void __launch_bounds__(MS_THREADS)
    ms_bl_rmsnorm(const float* x, const ms_dev::WeightT* W, uint64_t gamma, uint32_t n, float eps,
                  ms_dev::WeightT* out) {
  __shared__ float red[ms_dev::kWarps];
  float ss = 0.0f;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  const float inv = rsqrtf(ms_dev::block_sum(ss, red) / float(n) + eps);
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    ms_dev::store_weight_dtype(x[i] * inv * ms_dev::to_f32(W[gamma + i]), out + i);
  }
}

/// RoPE on the q and k rows of qkv (rotate-half), q written to q_out, k and v appended to the cache
/// at the step's position. One thread per (row of the first half of a head) or per value row.
extern "C" __global__ void ms_bl_rope_kv(const float* qkv, const float* inv_freq,
                                         const ms_abi::StepCell* step, ms_abi::ModelParams m,
                                         uint32_t layer, ms_dev::KvT* kv, float* q_out) {
  const uint32_t hd = m.head_dim, half = hd / 2;
  const uint32_t q_dim = m.heads * hd, kv_dim = m.kv_heads * hd;
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t pos = uint32_t(step->position);
  const uint32_t rot_pairs = (q_dim + kv_dim) / 2;
  if (i < rot_pairs) {
    const uint32_t head = i / half, d = i % half;
    const uint32_t r = head * hd + d;  // row in the q/k block; partner r + half
    const float angle = float(pos) * inv_freq[d];
    const float c = cosf(angle), s = sinf(angle);
    const float x0 = qkv[r], x1 = qkv[r + half];
    const float y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s;
    if (r < q_dim) {
      q_out[r] = y0;
      q_out[r + half] = y1;
    } else {
      const uint32_t g = (r - q_dim) / hd;
      ms_dev::KvT* k = kv + ms_abi::kv_offset(m, layer, 0, g) + uint64_t(pos) * hd;
      ms_dev::from_f32(y0, k + d);
      ms_dev::from_f32(y1, k + d + half);
    }
  } else if (i < rot_pairs + kv_dim) {
    const uint32_t local = i - rot_pairs;
    const uint32_t g = local / hd, d = local % hd;
    ms_dev::from_f32(qkv[q_dim + kv_dim + local],
                     kv + ms_abi::kv_offset(m, layer, 1, g) + uint64_t(pos) * hd + d);
  }
}

/// One block per query head: scores of keys 0 .. position in dynamic shared memory, softmax, then
/// threads split over (dim, key slice) for the weighted sum of values. out has the weight dtype.
extern "C" __global__ void __launch_bounds__(MS_THREADS)
    ms_bl_attention(const float* q, const ms_dev::KvT* kv, const ms_abi::StepCell* step,
                    ms_abi::ModelParams m, uint32_t layer, ms_dev::WeightT* out) {
  extern __shared__ float scores[];  // max_seq floats, then MS_THREADS partial sums
  __shared__ float red[ms_dev::kWarps];
  const uint32_t h = blockIdx.x, hd = m.head_dim;
  const uint32_t g = h / (m.heads / m.kv_heads);
  const uint32_t n = uint32_t(step->position) + 1;
  const ms_dev::KvT* K = kv + ms_abi::kv_offset(m, layer, 0, g);
  const ms_dev::KvT* V = kv + ms_abi::kv_offset(m, layer, 1, g);
  const float* qh = q + uint64_t(h) * hd;
  float mx = -3.0e38f;
  for (uint32_t t = threadIdx.x; t < n; t += blockDim.x) {
    float s = 0.0f;
    if ((ms_dev::kHeadDim * sizeof(ms_dev::KvT)) % 16 == 0) {  // 16-byte key loads
      constexpr int kPer = 16 / sizeof(ms_dev::KvT);
      const uint4* k4 = reinterpret_cast<const uint4*>(K + uint64_t(t) * hd);
#pragma unroll
      for (int i = 0; i < ms_dev::kHeadDim / kPer; ++i) {
        const uint4 raw = k4[i];
        const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
#if MS_KV_BF16
          const float kv = ms_dev::bf16_pair_elem(w[e >> 1], e);
#else
          const float kv = __uint_as_float(w[e]);
#endif
          s += qh[i * kPer + e] * kv;
        }
      }
    } else {
      for (uint32_t d = 0; d < hd; ++d) s += qh[d] * ms_dev::to_f32(K[uint64_t(t) * hd + d]);
    }
    s *= m.attn_scale;
    scores[t] = s;
    mx = fmaxf(mx, s);
  }
  mx = ms_dev::warp_max(mx);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
  __syncthreads();
  float M = red[0];
  for (int w = 1; w < ms_dev::kWarps; ++w) M = fmaxf(M, red[w]);
  __syncthreads();
  float l = 0.0f;
  for (uint32_t t = threadIdx.x; t < n; t += blockDim.x) {
    const float p = expf(scores[t] - M);
    scores[t] = p;
    l += p;
  }
  const float L = ms_dev::block_sum(l, red);
  float* part = scores + m.max_seq;
  const uint32_t slices = blockDim.x / hd;
  if (threadIdx.x < slices * hd) {
    const uint32_t d = threadIdx.x % hd, slice = threadIdx.x / hd;
    float o = 0.0f;
#pragma unroll 8
    for (uint32_t t = slice; t < n; t += slices)
      o += scores[t] * ms_dev::to_f32(V[uint64_t(t) * hd + d]);
    part[threadIdx.x] = o;
  }
  __syncthreads();
  for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (uint32_t sl = 0; sl < slices; ++sl) o += part[sl * hd + d];
    ms_dev::store_weight_dtype(o / L, out + uint64_t(h) * hd + d);
  }
}

/// out[r] = silu(gu[r]) * gu[ffn + r]
extern "C" __global__ void ms_bl_silu_mul(const float* gu, uint32_t ffn, ms_dev::WeightT* out) {
  const uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < ffn) ms_dev::store_weight_dtype(ms_dev::silu(gu[r]) * gu[ffn + r], out + r);
}

/// out = the argmax of logits (smallest index of the maximum), one block.
extern "C" __global__ void __launch_bounds__(MS_THREADS)
    ms_bl_argmax(const float* logits, uint32_t n, ms_abi::StepCell* step) {
  __shared__ float bv[ms_dev::kWarps];
  __shared__ int32_t bi[ms_dev::kWarps];
  float best = -3.4e38f;
  int32_t best_i = 0x7fffffff;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (logits[i] > best || best_i == 0x7fffffff) {
      best = logits[i];
      best_i = int32_t(i);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (ov > best || (ov == best && oi < best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    bv[threadIdx.x >> 5] = best;
    bi[threadIdx.x >> 5] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < ms_dev::kWarps; ++w) {
      if (bv[w] > bv[0] || (bv[w] == bv[0] && bi[w] < bi[0])) {
        bv[0] = bv[w];
        bi[0] = bi[w];
      }
    }
    step->argmax = bi[0];
  }
}

/// Streaming read of n 16-byte vectors (grid-stride, read-only path, no L1 allocation). The xor of
/// everything read goes to *sink only when it equals a value no buffer produces, so the loads
/// cannot be optimised away and nothing is written in practice.
extern "C" __global__ void ms_stream_read(const uint4* p, uint64_t n, uint32_t never,
                                          uint32_t* sink) {
  uint32_t acc = 0;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(p + i + u * stride));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == never) *sink = acc;
}
