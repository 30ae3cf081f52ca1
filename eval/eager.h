// The eager reference: a plain op-by-op Llama decode step (Eigen, fp32 accumulation, weights
// upcast), written from the model definition alone, without the IR. It is the oracle both VMs are
// checked against, so it shares no code with lowering or the VMs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "schedule/model.h"
#include "vm/kv_snapshot.h"

namespace megasched::eval {

/// RMSNorm: out[i] = (x[i] * inv) * gamma[i], inv = 1 / sqrt(mean(x^2) + eps). `out` may alias `x`.
void rms_norm(std::span<const float> x, std::span<const float> gamma, float eps,
              std::span<float> out);

/// RoPE, rotate-half pairing, on one head in place: for d < head_dim / 2, with
/// angle = float(position) * inv_freq[d]:
///   x'[d] = x[d] cos - x[d + hd/2] sin,   x'[d + hd/2] = x[d + hd/2] cos + x[d] sin.
void apply_rope(std::span<float> head, int32_t position, std::span<const float> inv_freq);

/// One query head attending over `n` cached positions: keys and values are n rows of head_dim
/// floats; out = softmax(scale * K q) V (max-subtracted softmax, fp32).
void attention(std::span<const float> q, std::span<const float> keys, std::span<const float> values,
               int n, float scale, std::span<float> out);

/// SiLU: x / (1 + exp(-x)).
float silu(float x);

/// SwiGLU combine: out[i] = silu(gate[i]) * up[i].
void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> out);

/// y = W x for `rows` x `cols` row-major weights at element `offset` of the arena, upcast to fp32
/// block by block (a bf16 arena is never copied whole); fp32 accumulation. Large products are
/// split over rows across `threads` threads (0: hardware concurrency).
void gemv(const schedule::Weights& weights, int64_t offset, int64_t rows, int64_t cols,
          std::span<const float> x, std::span<float> y, int threads = 0);

class EagerModel {
 public:
  /// The weights must outlive the model. KV cache sized for shape.max_seq positions.
  explicit EagerModel(const schedule::Weights& weights);

  /// One decode step at `position` (0-based; positions must be fed in order 0, 1, 2 ... since the
  /// KV cache holds the history). Returns the logits (vocab floats). The KV cache stores K and V
  /// rounded to the model dtype, as the VMs do.
  std::vector<float> step(int32_t token, int32_t position);

  /// Greedy decode: forgets the cache, feeds `prompt` one token at a time from position 0, then
  /// generates `max_new_tokens` tokens by argmax. Returns the generated tokens (fewer when the
  /// KV cache fills up at max_seq positions; none for an empty prompt).
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int max_new_tokens);

  /// Forgets the KV cache.
  void reset();

  /// The KV cache of positions [0, positions) (those stepped so far), in the model dtype and the
  /// device's order (vm/kv_snapshot.h). The cache holds dtype-rounded values, so the copy is exact.
  vm::KvSnapshot kv_snapshot(int positions) const;

  /// Threads used by the large matrix-vector products (0: hardware concurrency).
  void set_threads(int threads) { threads_ = threads; }

 private:
  /// Element offset of (layer, kv head, position 0) in k_cache_ / v_cache_.
  size_t cache_offset(int layer, int kv_head) const;
  /// Upcasts the norm vector at `offset` into `out` (hidden floats).
  void load_vector(int64_t offset, std::vector<float>& out) const;

  const schedule::Weights& weights_;
  std::vector<float> inv_freq_;  // rope_inv_freq(shape)
  int threads_ = 0;
  std::vector<float> k_cache_;  // [layer][kv_head][pos][head_dim], dtype-rounded values
  std::vector<float> v_cache_;
};

/// Smallest index of the maximum (ties go low, as kArgmax does).
int32_t argmax(const std::vector<float>& values);

}  // namespace megasched::eval
