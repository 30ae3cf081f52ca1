#include "eval/transformers_emulation.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "eval/eager.h"

namespace megasched::eval {
namespace {

float to_bf16(float value) { return schedule::bf16_to_f32(schedule::f32_to_bf16(value)); }

}  // namespace

TransformersLlama::TransformersLlama(const schedule::Weights& weights,
                                     TransformersPrecision precision)
    : weights_(weights), precision_(precision), inv_freq_(schedule::rope_inv_freq(weights.shape)) {
  if (precision_.inv_freq_bf16)
    for (float& f : inv_freq_) f = to_bf16(f);
  const schedule::ModelShape& s = weights_.shape;
  const size_t cache = static_cast<size_t>(s.layers) * s.kv_heads * s.max_seq * s.head_dim;
  k_cache_.assign(cache, 0.0f);
  v_cache_.assign(cache, 0.0f);
}

float TransformersLlama::round(float value) const {
  return precision_.bf16_compute ? to_bf16(value) : value;
}

void TransformersLlama::rms_norm(int64_t gamma_offset, const std::vector<float>& x,
                                 std::vector<float>& out) const {
  // The variance and the normalisation run in fp32 whatever the dtype.
  float sum_sq = 0.0f;
  for (float v : x) sum_sq += v * v;
  const float inv =
      1.0f / std::sqrt(sum_sq / static_cast<float>(x.size()) + weights_.shape.rms_eps);
  out.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = round(weights_.at(gamma_offset + static_cast<int64_t>(i)) * round(x[i] * inv));
}

void TransformersLlama::linear(int64_t offset, int64_t rows, int64_t cols,
                               const std::vector<float>& x, std::vector<float>& y) const {
  y.resize(static_cast<size_t>(rows));
  gemv(weights_, offset, rows, cols, x, y);
  for (float& v : y) v = round(v);
}

void TransformersLlama::rope(float* head, int32_t position) const {
  // LlamaRotaryEmbedding: freqs = inv_freq (fp32) x position (fp32), cos/sin in fp32 (autocast
  // off), then cast to the dtype; apply_rotary_pos_emb multiplies and adds in the dtype.
  const size_t half = inv_freq_.size();
  for (size_t d = 0; d < half; ++d) {
    const float angle = static_cast<float>(position) * inv_freq_[d];
    const float c = round(std::cos(angle));
    const float s = round(std::sin(angle));
    const float x1 = head[d];
    const float x2 = head[d + half];
    head[d] = round(round(x1 * c) + round(-x2 * s));
    head[d + half] = round(round(x2 * c) + round(x1 * s));
  }
}

void TransformersLlama::attend(const float* q, size_t cache_base, int n, float* out) const {
  // scores = (q @ k^T) * scaling in the dtype; softmax in fp32, cast to the dtype; @ v.
  const int hd = weights_.shape.head_dim;
  const float scaling = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  std::vector<float> score(static_cast<size_t>(n));
  float max_score = -INFINITY;
  for (int t = 0; t < n; ++t) {
    const float dot = Eigen::Map<const Eigen::VectorXf>(q, hd).dot(
        Eigen::Map<const Eigen::VectorXf>(k_cache_.data() + cache_base + size_t(t) * hd, hd));
    score[static_cast<size_t>(t)] = round(round(dot) * scaling);
    max_score = std::max(max_score, score[static_cast<size_t>(t)]);
  }
  float sum = 0.0f;
  for (float& s : score) {
    s = std::exp(s - max_score);
    sum += s;
  }
  std::fill(out, out + hd, 0.0f);
  for (int t = 0; t < n; ++t) {
    const float p = round(score[static_cast<size_t>(t)] / sum);
    const float* v = v_cache_.data() + cache_base + static_cast<size_t>(t) * hd;
    for (int d = 0; d < hd; ++d) out[d] += p * v[d];
  }
  for (int d = 0; d < hd; ++d) out[d] = round(out[d]);
}

std::vector<float> TransformersLlama::step(int32_t token, int32_t position) {
  const schedule::ModelShape& s = weights_.shape;
  const schedule::WeightLayout& layout = weights_.layout;
  if (token < 0 || token >= s.vocab || position < 0 || position >= s.max_seq) {
    std::fprintf(stderr, "%s:%d: TransformersLlama::step: token or position out of range\n",
                 __FILE__, __LINE__);
    std::abort();
  }
  const int64_t h = s.hidden;
  const int hd = s.head_dim, q_dim = s.q_dim(), kv_dim = s.kv_dim();
  const int group = s.heads / s.kv_heads;
  std::vector<float> x(static_cast<size_t>(h)), normed, qkv, proj, gate_up;
  std::vector<float> attn(static_cast<size_t>(q_dim)), mlp(static_cast<size_t>(s.ffn));
  for (int64_t i = 0; i < h; ++i)
    x[static_cast<size_t>(i)] = weights_.at(layout.embed + token * h + i);

  for (int l = 0; l < s.layers; ++l) {
    const schedule::WeightLayout::Layer& w = layout.layer[static_cast<size_t>(l)];
    rms_norm(w.attn_norm, x, normed);
    linear(w.wq, q_dim + 2 * kv_dim, h, normed, qkv);  // q_proj, k_proj, v_proj (adjacent)
    for (int head = 0; head < s.heads; ++head) rope(qkv.data() + head * hd, position);
    for (int g = 0; g < s.kv_heads; ++g) {
      rope(qkv.data() + q_dim + g * hd, position);
      const size_t at = ((static_cast<size_t>(l) * s.kv_heads + g) * s.max_seq + position) * hd;
      std::copy_n(qkv.data() + q_dim + g * hd, hd, k_cache_.data() + at);
      std::copy_n(qkv.data() + q_dim + kv_dim + g * hd, hd, v_cache_.data() + at);
    }
    for (int head = 0; head < s.heads; ++head) {
      const size_t base = (static_cast<size_t>(l) * s.kv_heads + head / group) * s.max_seq *
                          static_cast<size_t>(hd);
      attend(qkv.data() + head * hd, base, position + 1, attn.data() + head * hd);
    }
    linear(w.wo, h, q_dim, attn, proj);
    for (int64_t i = 0; i < h; ++i)
      x[static_cast<size_t>(i)] = round(x[static_cast<size_t>(i)] + proj[static_cast<size_t>(i)]);

    rms_norm(w.mlp_norm, x, normed);
    linear(w.w_gate, 2 * int64_t{s.ffn}, h, normed, gate_up);  // gate_proj, up_proj (adjacent)
    for (int i = 0; i < s.ffn; ++i) {
      const float g = gate_up[static_cast<size_t>(i)];
      mlp[static_cast<size_t>(i)] =
          round(round(g / (1.0f + std::exp(-g))) * gate_up[static_cast<size_t>(s.ffn + i)]);
    }
    linear(w.w_down, h, s.ffn, mlp, proj);
    for (int64_t i = 0; i < h; ++i)
      x[static_cast<size_t>(i)] = round(x[static_cast<size_t>(i)] + proj[static_cast<size_t>(i)]);
  }
  rms_norm(layout.final_norm, x, normed);
  std::vector<float> logits;
  linear(layout.lm_head, s.vocab, h, normed, logits);
  return logits;
}

}  // namespace megasched::eval
