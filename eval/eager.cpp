#include "eval/eager.h"

#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace megasched::eval {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A broken precondition is a bug in the caller: stop with the place, never continue.
void require(bool ok, const char* what, const char* file, int line) {
  if (ok) return;
  std::fprintf(stderr, "%s:%d: eager model: %s\n", file, line, what);
  std::abort();
}
#define MS_EAGER_REQUIRE(cond, what) require((cond), (what), __FILE__, __LINE__)

/// Upcast block size: small enough that the fp32 copy stays in L2 while it is consumed.
constexpr int64_t kBlockElements = 16 * 1024;
/// Products smaller than this many weights run on the calling thread.
constexpr int64_t kParallelElements = int64_t{1} << 20;

void gemv_rows(const schedule::Weights& weights, int64_t offset, int64_t row_begin, int64_t row_end,
               int64_t cols, const float* x, float* y) {
  const Eigen::Map<const Eigen::VectorXf> xv(x, cols);
  if (weights.shape.dtype == schedule::DType::kF32) {
    const Eigen::Map<const RowMatrix> w(weights.f32.data() + offset + row_begin * cols,
                                        row_end - row_begin, cols);
    Eigen::Map<Eigen::VectorXf>(y + row_begin, row_end - row_begin).noalias() = w * xv;
    return;
  }
  const int64_t block_rows = std::max<int64_t>(1, kBlockElements / cols);
  std::vector<float> scratch(static_cast<size_t>(block_rows * cols));
  for (int64_t r = row_begin; r < row_end; r += block_rows) {
    const int64_t n = std::min(block_rows, row_end - r);
    const uint16_t* src = weights.bf16.data() + offset + r * cols;
    for (int64_t i = 0; i < n * cols; ++i) {
      scratch[static_cast<size_t>(i)] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
    }
    const Eigen::Map<const RowMatrix> w(scratch.data(), n, cols);
    Eigen::Map<Eigen::VectorXf>(y + r, n).noalias() = w * xv;
  }
}

/// The value the KV cache holds for `value`: rounded to the model dtype.
float round_to_dtype(float value, schedule::DType dtype) {
  return dtype == schedule::DType::kBF16 ? schedule::bf16_to_f32(schedule::f32_to_bf16(value))
                                         : value;
}

}  // namespace

void rms_norm(std::span<const float> x, std::span<const float> gamma, float eps,
              std::span<float> out) {
  MS_EAGER_REQUIRE(gamma.size() == x.size() && out.size() == x.size(), "rms_norm: size mismatch");
  float sum_sq = 0.0f;
  for (float v : x) sum_sq += v * v;
  const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(x.size()) + eps);
  for (size_t i = 0; i < x.size(); ++i) out[i] = (x[i] * inv) * gamma[i];
}

void apply_rope(std::span<float> head, int32_t position, std::span<const float> inv_freq) {
  const size_t half = head.size() / 2;
  MS_EAGER_REQUIRE(inv_freq.size() == half && head.size() % 2 == 0, "apply_rope: size mismatch");
  for (size_t d = 0; d < half; ++d) {
    const float angle = static_cast<float>(position) * inv_freq[d];
    const float c = std::cos(angle);
    const float s = std::sin(angle);
    const float x1 = head[d];
    const float x2 = head[d + half];
    head[d] = x1 * c - x2 * s;
    head[d + half] = x2 * c + x1 * s;
  }
}

void attention(std::span<const float> q, std::span<const float> keys, std::span<const float> values,
               int n, float scale, std::span<float> out) {
  const size_t hd = q.size();
  MS_EAGER_REQUIRE(n >= 1 && keys.size() >= static_cast<size_t>(n) * hd &&
                       values.size() >= static_cast<size_t>(n) * hd && out.size() == hd,
                   "attention: size mismatch");
  std::vector<float> score(static_cast<size_t>(n));
  float max_score = -INFINITY;
  for (int t = 0; t < n; ++t) {
    float dot = 0.0f;
    const float* k = keys.data() + static_cast<size_t>(t) * hd;
    for (size_t d = 0; d < hd; ++d) dot += q[d] * k[d];
    score[static_cast<size_t>(t)] = scale * dot;
    max_score = std::max(max_score, scale * dot);
  }
  float sum = 0.0f;
  std::fill(out.begin(), out.end(), 0.0f);
  for (int t = 0; t < n; ++t) {
    const float p = std::exp(score[static_cast<size_t>(t)] - max_score);
    sum += p;
    const float* v = values.data() + static_cast<size_t>(t) * hd;
    for (size_t d = 0; d < hd; ++d) out[d] += p * v[d];
  }
  for (float& o : out) o /= sum;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> out) {
  MS_EAGER_REQUIRE(up.size() == gate.size() && out.size() == gate.size(), "swiglu: size mismatch");
  for (size_t i = 0; i < gate.size(); ++i) out[i] = silu(gate[i]) * up[i];
}

void gemv(const schedule::Weights& weights, int64_t offset, int64_t rows, int64_t cols,
          std::span<const float> x, std::span<float> y, int threads) {
  MS_EAGER_REQUIRE(x.size() == static_cast<size_t>(cols) && y.size() == static_cast<size_t>(rows),
                   "gemv: size mismatch");
  MS_EAGER_REQUIRE(offset >= 0 && offset + rows * cols <= weights.layout.total_elements,
                   "gemv: weights out of the arena");
  int n_threads = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  n_threads = static_cast<int>(
      std::clamp<int64_t>(rows * cols / kParallelElements, 1, std::min<int64_t>(n_threads, rows)));
  if (n_threads == 1) {
    gemv_rows(weights, offset, 0, rows, cols, x.data(), y.data());
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < n_threads; ++t) {
    const int64_t begin = rows * t / n_threads;
    const int64_t end = rows * (t + 1) / n_threads;
    pool.emplace_back(
        [&, begin, end] { gemv_rows(weights, offset, begin, end, cols, x.data(), y.data()); });
  }
  for (std::thread& t : pool) t.join();
}

EagerModel::EagerModel(const schedule::Weights& weights)
    : weights_(weights), inv_freq_(schedule::rope_inv_freq(weights.shape)) {
  const schedule::ModelShape& s = weights_.shape;
  const size_t cache = static_cast<size_t>(s.layers) * s.kv_heads * s.max_seq * s.head_dim;
  k_cache_.assign(cache, 0.0f);
  v_cache_.assign(cache, 0.0f);
}

size_t EagerModel::cache_offset(int layer, int kv_head) const {
  const schedule::ModelShape& s = weights_.shape;
  return (static_cast<size_t>(layer) * s.kv_heads + kv_head) * s.max_seq * s.head_dim;
}

void EagerModel::load_vector(int64_t offset, std::vector<float>& out) const {
  out.resize(static_cast<size_t>(weights_.shape.hidden));
  for (size_t i = 0; i < out.size(); ++i) out[i] = weights_.at(offset + static_cast<int64_t>(i));
}

std::vector<float> EagerModel::step(int32_t token, int32_t position) {
  const schedule::ModelShape& s = weights_.shape;
  const schedule::WeightLayout& layout = weights_.layout;
  MS_EAGER_REQUIRE(token >= 0 && token < s.vocab, "step: token out of the vocabulary");
  MS_EAGER_REQUIRE(position >= 0 && position < s.max_seq, "step: position beyond max_seq");
  const int64_t h = s.hidden;
  const int hd = s.head_dim;
  const int q_dim = s.q_dim();
  const int kv_dim = s.kv_dim();
  const int group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int n_keys = position + 1;

  std::vector<float> x(static_cast<size_t>(h));
  for (int64_t i = 0; i < h; ++i)
    x[static_cast<size_t>(i)] = weights_.at(layout.embed + token * h + i);
  std::vector<float> gamma, normed(static_cast<size_t>(h)), proj(static_cast<size_t>(h));
  std::vector<float> qkv(static_cast<size_t>(q_dim + 2 * kv_dim)), attn(static_cast<size_t>(q_dim));
  std::vector<float> gate_up(static_cast<size_t>(2) * s.ffn), mlp(static_cast<size_t>(s.ffn));

  for (int l = 0; l < s.layers; ++l) {
    const schedule::WeightLayout::Layer& w = layout.layer[static_cast<size_t>(l)];
    load_vector(w.attn_norm, gamma);
    rms_norm(x, gamma, s.rms_eps, normed);
    // wq, wk, wv are adjacent in the arena: one product gives [q; k; v].
    gemv(weights_, w.wq, q_dim + 2 * kv_dim, h, normed, qkv, threads_);
    std::span<float> q(qkv.data(), static_cast<size_t>(q_dim));
    std::span<float> k(qkv.data() + q_dim, static_cast<size_t>(kv_dim));
    std::span<float> v(qkv.data() + q_dim + kv_dim, static_cast<size_t>(kv_dim));
    for (int head = 0; head < s.heads; ++head)
      apply_rope(q.subspan(static_cast<size_t>(head) * hd, hd), position, inv_freq_);
    for (int g = 0; g < s.kv_heads; ++g) {
      apply_rope(k.subspan(static_cast<size_t>(g) * hd, hd), position, inv_freq_);
      const size_t at = cache_offset(l, g) + static_cast<size_t>(position) * hd;
      for (int d = 0; d < hd; ++d) {
        k_cache_[at + d] = round_to_dtype(k[static_cast<size_t>(g * hd + d)], s.dtype);
        v_cache_[at + d] = round_to_dtype(v[static_cast<size_t>(g * hd + d)], s.dtype);
      }
    }
    for (int head = 0; head < s.heads; ++head) {
      const size_t base = cache_offset(l, head / group);
      const size_t span = static_cast<size_t>(n_keys) * hd;
      attention(q.subspan(static_cast<size_t>(head) * hd, hd),
                std::span<const float>(k_cache_.data() + base, span),
                std::span<const float>(v_cache_.data() + base, span), n_keys, scale,
                std::span<float>(attn.data() + static_cast<size_t>(head) * hd, hd));
    }
    gemv(weights_, w.wo, h, q_dim, attn, proj, threads_);
    for (int64_t i = 0; i < h; ++i) x[static_cast<size_t>(i)] += proj[static_cast<size_t>(i)];

    load_vector(w.mlp_norm, gamma);
    rms_norm(x, gamma, s.rms_eps, normed);
    // w_gate and w_up are adjacent: one product gives [gate; up].
    gemv(weights_, w.w_gate, 2 * int64_t{s.ffn}, h, normed, gate_up, threads_);
    swiglu(std::span<const float>(gate_up.data(), static_cast<size_t>(s.ffn)),
           std::span<const float>(gate_up.data() + s.ffn, static_cast<size_t>(s.ffn)), mlp);
    gemv(weights_, w.w_down, h, s.ffn, mlp, proj, threads_);
    for (int64_t i = 0; i < h; ++i) x[static_cast<size_t>(i)] += proj[static_cast<size_t>(i)];
  }

  load_vector(layout.final_norm, gamma);
  rms_norm(x, gamma, s.rms_eps, normed);
  std::vector<float> logits(static_cast<size_t>(s.vocab));
  gemv(weights_, layout.lm_head, s.vocab, h, normed, logits, threads_);
  return logits;
}

std::vector<int32_t> EagerModel::generate(const std::vector<int32_t>& prompt, int max_new_tokens) {
  reset();
  std::vector<int32_t> out;
  if (prompt.empty() || max_new_tokens <= 0) return out;
  const int32_t max_seq = weights_.shape.max_seq;
  std::vector<float> logits;
  int32_t position = 0;
  for (int32_t token : prompt) {
    if (position >= max_seq) return out;
    logits = step(token, position++);
  }
  while (true) {
    out.push_back(argmax(logits));
    if (static_cast<int>(out.size()) == max_new_tokens || position >= max_seq) break;
    logits = step(out.back(), position++);
  }
  return out;
}

vm::KvSnapshot EagerModel::kv_snapshot(int positions) const {
  const schedule::ModelShape& s = weights_.shape;
  MS_EAGER_REQUIRE(positions >= 0 && positions <= s.max_seq, "kv_snapshot: positions out of range");
  vm::KvSnapshot kv = vm::KvSnapshot::zeros(s, positions);
  for (int l = 0; l < s.layers; ++l)
    for (int g = 0; g < s.kv_heads; ++g) {
      const size_t base = cache_offset(l, g);
      for (int p = 0; p < positions; ++p)
        for (int d = 0; d < s.head_dim; ++d) {
          const size_t at = base + static_cast<size_t>(p) * s.head_dim + d;
          kv.set(kv.index(l, 0, g, p, d), k_cache_[at]);
          kv.set(kv.index(l, 1, g, p, d), v_cache_[at]);
        }
    }
  return kv;
}

void EagerModel::reset() {
  std::fill(k_cache_.begin(), k_cache_.end(), 0.0f);
  std::fill(v_cache_.begin(), v_cache_.end(), 0.0f);
}

int32_t argmax(const std::vector<float>& values) {
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace megasched::eval
