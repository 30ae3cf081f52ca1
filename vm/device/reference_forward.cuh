// The GPU reference forward's kernels (eval/gpu_reference_cuda.cpp): plain fp32 kernels written
// from the model definition, one thread block per row or (token, head), for T tokens at a time.
// They share no code with the megakernel (vm/device/common.cuh, ops.cuh, attention_tasks.cuh,
// ring.cuh) or the baseline: this file includes nothing, so the reference cannot inherit a kernel
// bug. The GEMMs are cuBLAS Sgemm on weights upcast to fp32 by ms_ref_upcast. Compiled by NVRTC
// like the megakernel.
#pragma once

#define MS_REF_THREADS 256

__device__ __forceinline__ float ms_ref_bf16(unsigned short b) {
  return __uint_as_float(static_cast<unsigned int>(b) << 16);
}

/// fp32 -> bf16 -> fp32, round to nearest even (the KV cache's rounding, as the CPU eager does).
__device__ __forceinline__ float ms_ref_round_bf16(float v) {
  const unsigned int u = __float_as_uint(v);
  if ((u & 0x7f800000u) == 0x7f800000u) return v;  // inf / NaN kept
  const unsigned int r = u + 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float(r & 0xffff0000u);
}

/// Weight element `i` of the arena, fp32.
__device__ __forceinline__ float ms_ref_weight(const void* w, int bf16, unsigned long long i) {
  return bf16 ? ms_ref_bf16(static_cast<const unsigned short*>(w)[i])
              : static_cast<const float*>(w)[i];
}

/// Sum over the block (every thread gets it).
__device__ float ms_ref_block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (int i = 0; i < (blockDim.x >> 5); ++i) s += red[i];
  return s;
}

__device__ float ms_ref_block_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float m = -__int_as_float(0x7f800000);
  for (int i = 0; i < (blockDim.x >> 5); ++i) m = fmaxf(m, red[i]);
  return m;
}

/// dst[i] = weights[offset + i] as fp32, i < n.
extern "C" __global__ void ms_ref_upcast(const void* w, int bf16, unsigned long long offset,
                                         unsigned long long n, float* dst) {
  for (unsigned long long i =
           blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<unsigned long long>(gridDim.x) * blockDim.x)
    dst[i] = ms_ref_weight(w, bf16, offset + i);
}

/// x[t][i] = embed[tokens[t]][i]; one block per token.
extern "C" __global__ void ms_ref_embed(const void* w, int bf16, unsigned long long embed,
                                        const int* tokens, int hidden, float* x) {
  const int t = blockIdx.x;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    x[static_cast<long long>(t) * hidden + i] =
        ms_ref_weight(w, bf16, embed + static_cast<unsigned long long>(tokens[t]) * hidden + i);
}

/// out[t] = (x[t] * inv) * gamma, inv = 1 / sqrt(mean(x[t]^2) + eps); one block per token.
extern "C" __global__ void ms_ref_rmsnorm(const float* x, const void* w, int bf16,
                                          unsigned long long gamma, int n, float eps, float* out) {
  __shared__ float red[32];
  const float* row = x + static_cast<long long>(blockIdx.x) * n;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += row[i] * row[i];
  const float inv = 1.0f / sqrtf(ms_ref_block_sum(ss, red) / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    out[static_cast<long long>(blockIdx.x) * n + i] =
        (row[i] * inv) * ms_ref_weight(w, bf16, gamma + i);
}

/// RoPE (rotate-half) on the query and key heads of qkv[t] = [q; k; v] at position pos0 + t; the
/// rotated queries to q[t], keys and values (rounded to bf16 when round_bf16) into the caches
/// k_cache / v_cache, [layer][kv head][max_seq][head_dim]. One block per token.
extern "C" __global__ void ms_ref_rope_store(const float* qkv, const float* inv_freq, int pos0,
                                             int heads, int kv_heads, int hd, int layer,
                                             int max_seq, int round_bf16, float* q, float* k_cache,
                                             float* v_cache) {
  const int t = blockIdx.x, pos = pos0 + t, half = hd / 2;
  const int q_dim = heads * hd, kv_dim = kv_heads * hd;
  const float* row = qkv + static_cast<long long>(t) * (q_dim + 2 * kv_dim);
  for (int i = threadIdx.x; i < q_dim + 2 * kv_dim; i += blockDim.x) {
    float v = row[i];
    if (i < q_dim + kv_dim) {
      const int local = i < q_dim ? i : i - q_dim;
      const int d = local % hd, base = local - d;
      const float angle = static_cast<float>(pos) * inv_freq[d % half];
      const float c = cosf(angle), s = sinf(angle);
      const float* head = row + (i < q_dim ? 0 : q_dim) + base;
      v = d < half ? head[d] * c - head[d + half] * s : head[d] * c + head[d - half] * s;
    }
    if (i < q_dim) {
      q[static_cast<long long>(t) * q_dim + i] = v;
      continue;
    }
    const bool is_v = i >= q_dim + kv_dim;
    const int local = i - q_dim - (is_v ? kv_dim : 0);
    const int g = local / hd, d = local % hd;
    const long long at = ((static_cast<long long>(layer) * kv_heads + g) * max_seq + pos) * hd + d;
    (is_v ? v_cache : k_cache)[at] = round_bf16 ? ms_ref_round_bf16(v) : v;
  }
}

/// out[t][head] = softmax(scale * K q) V over positions 0 .. pos0 + t; one block per (head,
/// token), the scores in dynamic shared memory (max_seq floats).
extern "C" __global__ void ms_ref_attention(const float* q, const float* k_cache,
                                            const float* v_cache, int pos0, int heads, int kv_heads,
                                            int hd, int layer, int max_seq, float scale,
                                            float* out) {
  extern __shared__ float score[];
  __shared__ float red[32];
  const int head = blockIdx.x, t = blockIdx.y, n = pos0 + t + 1;
  const int g = head / (heads / kv_heads);
  const float* qh = q + (static_cast<long long>(t) * heads + head) * hd;
  const long long base = (static_cast<long long>(layer) * kv_heads + g) * max_seq * hd;
  float mx = -__int_as_float(0x7f800000);
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    float dot = 0.0f;
    for (int d = 0; d < hd; ++d) dot += qh[d] * k_cache[base + static_cast<long long>(j) * hd + d];
    score[j] = scale * dot;
    mx = fmaxf(mx, score[j]);
  }
  mx = ms_ref_block_max(mx, red);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    score[j] = expf(score[j] - mx);
    sum += score[j];
  }
  sum = ms_ref_block_sum(sum, red);  // its barriers also publish score[]
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < n; ++j)
      acc += score[j] * v_cache[base + static_cast<long long>(j) * hd + d];
    out[(static_cast<long long>(t) * heads + head) * hd + d] = acc / sum;
  }
}

/// out[t][i] = silu(gu[t][i]) * gu[t][ffn + i]; one block per token.
extern "C" __global__ void ms_ref_swiglu(const float* gu, int ffn, float* out) {
  const long long t = blockIdx.x;
  for (int i = threadIdx.x; i < ffn; i += blockDim.x) {
    const float g = gu[t * 2 * ffn + i];
    out[t * ffn + i] = g / (1.0f + expf(-g)) * gu[t * 2 * ffn + ffn + i];
  }
}
