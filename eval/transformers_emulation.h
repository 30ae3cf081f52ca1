// transformers' LlamaForCausalLM decode step, emulated on the CPU with its rounding points: the
// yardstick for megasched's bf16 accuracy (dev/bf16_precision.md). Three references come out of
// one implementation:
//   - fp32 compute on the (bf16) weights: transformers run with dtype float32, the fp32 reference
//     both megasched's bf16 path and transformers' own bf16 are measured against;
//   - bf16 compute: transformers' bf16 eager path, where every op's output is a bf16 tensor (q, k,
//     v, the RoPE cos/sin and products, scores, probabilities, residual stream, MLP, logits);
//     its error against the fp32 one is the budget megasched's bf16 path is held to;
//   - either with the RoPE inverse frequencies rounded to bf16, which is what `model.to(bfloat16)`
//     does to the rotary embedding's `inv_freq` buffer (from_pretrained keeps it fp32). A later
//     `.to(float32)` cannot restore the lost bits, so an "fp32" reference built that way rotates
//     by a slightly different angle, an error that grows with position.
// Written from transformers' modeling_llama (LlamaRMSNorm, LlamaRotaryEmbedding,
// apply_rotary_pos_emb, eager_attention_forward, LlamaMLP), not from megasched's IR.
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/model.h"

namespace megasched::eval {

/// How the emulated transformers model computes.
struct TransformersPrecision {
  bool bf16_compute = false;   // false: dtype float32 (no rounding); true: dtype bfloat16
  bool inv_freq_bf16 = false;  // the rotary inv_freq as a `.to(bfloat16)` cast leaves it
};

class TransformersLlama {
 public:
  /// The weights must outlive the model. KV cache sized for shape.max_seq positions.
  TransformersLlama(const schedule::Weights& weights, TransformersPrecision precision);

  /// One decode step at `position` (positions fed in order from 0, as EagerModel::step); returns
  /// the logits (vocab floats; bf16 values under bf16 compute, as transformers returns them).
  std::vector<float> step(int32_t token, int32_t position);

  /// The inverse frequencies this model rotates by (head_dim / 2).
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  /// `value` as the compute dtype holds it: rounded to bf16 under bf16 compute, else unchanged.
  float round(float value) const;
  /// LlamaRMSNorm: weight * (x * rsqrt(mean(x^2) + eps)).to(dtype), both products rounded.
  void rms_norm(int64_t gamma_offset, const std::vector<float>& x, std::vector<float>& out) const;
  /// nn.Linear: fp32 accumulation, output rounded to the dtype.
  void linear(int64_t offset, int64_t rows, int64_t cols, const std::vector<float>& x,
              std::vector<float>& y) const;
  /// apply_rotary_pos_emb on one head: q * cos + rotate_half(q) * sin with cos/sin in the dtype.
  void rope(float* head, int32_t position) const;
  /// eager_attention_forward for one query head over positions [0, n) of its KV head.
  void attend(const float* q, size_t cache_base, int n, float* out) const;

  const schedule::Weights& weights_;
  TransformersPrecision precision_;
  std::vector<float> inv_freq_;
  std::vector<float> k_cache_;  // [layer][kv_head][pos][head_dim], values as the dtype holds them
  std::vector<float> v_cache_;
};

}  // namespace megasched::eval
