#include "eval/eager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

namespace megasched::eval {
namespace {

using schedule::DType;
using schedule::ModelShape;
using schedule::Weights;

TEST(EagerOps, RmsNormScalesByInverseRmsThenGamma) {
  const std::vector<float> x = {2.0f, -2.0f, 2.0f, -2.0f};  // mean square 4: inv = 1/2
  const std::vector<float> gamma = {1.0f, 0.5f, 2.0f, -1.0f};
  std::vector<float> out(4);
  rms_norm(x, gamma, 0.0f, out);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], -0.5f);
  EXPECT_FLOAT_EQ(out[2], 2.0f);
  EXPECT_FLOAT_EQ(out[3], 1.0f);
  // eps enters under the square root: mean square 1, eps 3 -> inv = 1/2.
  const std::vector<float> ones = {1.0f, 1.0f, 1.0f, 1.0f};
  rms_norm(ones, ones, 3.0f, out);
  EXPECT_FLOAT_EQ(out[2], 0.5f);
  // In place (out aliases x).
  std::vector<float> y = {3.0f, 4.0f};  // mean square 12.5
  rms_norm(y, std::vector<float>{1.0f, 1.0f}, 0.0f, y);
  EXPECT_NEAR(y[0], 3.0 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 4.0 / std::sqrt(12.5), 1e-6);
}

TEST(EagerOps, RopeRotatesHalfPairsByPositionTimesFrequency) {
  // head_dim 4: pairs (0, 2) at inv_freq 1 and (1, 3) at inv_freq 0.5; position 2 gives angles
  // 2 and 1 rad. Hand-computed: x0' = 1 cos2 - 3 sin2, x2' = 3 cos2 + 1 sin2,
  // x1' = 2 cos1 - 4 sin1, x3' = 4 cos1 + 2 sin1.
  std::vector<float> head = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<float> inv_freq = {1.0f, 0.5f};
  apply_rope(head, 2, inv_freq);
  EXPECT_NEAR(head[0], -3.144039f, 1e-5);
  EXPECT_NEAR(head[1], -2.285279f, 1e-5);
  EXPECT_NEAR(head[2], -0.339144f, 1e-5);
  EXPECT_NEAR(head[3], 3.844151f, 1e-5);
  // Position 0 is the identity.
  std::vector<float> same = {1.0f, 2.0f, 3.0f, 4.0f};
  apply_rope(same, 0, inv_freq);
  EXPECT_EQ(same, (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
}

TEST(EagerOps, RopeDotProductDependsOnlyOnRelativePosition) {
  const std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f};
  auto rotated_dot = [&](int32_t pq, int32_t pk) {
    std::vector<float> q = {0.3f, -1.0f, 0.7f, 0.2f, 0.5f, -0.4f};
    std::vector<float> k = {-0.6f, 0.8f, 0.1f, 0.9f, -0.2f, 0.4f};
    apply_rope(q, pq, inv_freq);
    apply_rope(k, pk, inv_freq);
    double dot = 0;
    for (size_t i = 0; i < q.size(); ++i) dot += double(q[i]) * k[i];
    return dot;
  };
  EXPECT_NEAR(rotated_dot(5, 2), rotated_dot(13, 10), 1e-5);
  EXPECT_GT(std::abs(rotated_dot(5, 2) - rotated_dot(5, 4)), 1e-2);
}

TEST(EagerOps, AttentionWeightsValuesBySoftmaxOfScaledScores) {
  // Scores 0 and ln 3 -> weights 1/4 and 3/4: out = (1, 2)/4 + 3 (5, 6)/4 = (4, 5).
  const std::vector<float> q = {1.0f, 0.0f};
  const std::vector<float> keys = {0.0f, 0.0f, std::log(3.0f), 0.0f};
  const std::vector<float> values = {1.0f, 2.0f, 5.0f, 6.0f};
  std::vector<float> out(2);
  attention(q, keys, values, 2, 1.0f, out);
  EXPECT_NEAR(out[0], 4.0f, 1e-5);
  EXPECT_NEAR(out[1], 5.0f, 1e-5);
  // Huge scores do not overflow (max-subtracted); the scale multiplies the scores:
  // 0.5 * (2000, 2000 + 2 ln 3) -> the same weights.
  const std::vector<float> far_keys = {2000.0f, 0.0f, 2000.0f + 2.0f * std::log(3.0f), 0.0f};
  attention(q, far_keys, values, 2, 0.5f, out);
  EXPECT_NEAR(out[0], 4.0f, 1e-3);
  EXPECT_NEAR(out[1], 5.0f, 1e-3);
  // Only the first n rows count: n = 1 returns V[0] exactly.
  attention(q, keys, values, 1, 1.0f, out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, 2.0f}));
}

TEST(EagerOps, SwigluIsSiluOfGateTimesUp) {
  EXPECT_FLOAT_EQ(silu(0.0f), 0.0f);
  EXPECT_NEAR(silu(1.0f), 0.7310586f, 1e-6);
  EXPECT_NEAR(silu(-2.0f), -0.2384058f, 1e-6);
  std::vector<float> out(3);
  swiglu(std::vector<float>{1.0f, -2.0f, 0.0f}, std::vector<float>{2.0f, 3.0f, 5.0f}, out);
  EXPECT_NEAR(out[0], 1.4621172f, 1e-6);
  EXPECT_NEAR(out[1], -0.7152175f, 1e-6);
  EXPECT_EQ(out[2], 0.0f);
}

TEST(EagerOps, ArgmaxTakesTheLowestIndexOfTies) {
  EXPECT_EQ(argmax({1.0f, 3.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(argmax({-5.0f}), 0);
  EXPECT_EQ(argmax({-1.0f, -0.5f, -2.0f}), 1);
}

TEST(EagerOps, GemvUpcastsBf16RowsAndSplitsAcrossThreads) {
  Weights w;
  w.shape.dtype = DType::kBF16;
  const int64_t rows = 600, cols = 2048;  // 1.2M weights: large enough to run on 2 threads
  w.layout.total_elements = 64 + rows * cols;
  w.bf16.resize(static_cast<size_t>(w.layout.total_elements));
  std::vector<float> x(cols);
  for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(c)] = float((c % 7) - 3) * 0.25f;
  for (int64_t i = 0; i < rows * cols; ++i) {
    w.bf16[static_cast<size_t>(64 + i)] = schedule::f32_to_bf16(float((i * 31) % 17 - 8) / 8.0f);
  }
  std::vector<float> one(rows), two(rows);
  gemv(w, 64, rows, cols, x, one, 1);
  gemv(w, 64, rows, cols, x, two, 2);
  for (int64_t r = 0; r < rows; ++r) {
    double ref = 0;
    for (int64_t c = 0; c < cols; ++c)
      ref += double(w.at(64 + r * cols + c)) * x[static_cast<size_t>(c)];
    // Every product and partial sum here is exact in fp32 (multiples of 1/32, small).
    ASSERT_EQ(one[static_cast<size_t>(r)], static_cast<float>(ref)) << "row " << r;
    ASSERT_EQ(two[static_cast<size_t>(r)], static_cast<float>(ref)) << "row " << r;
  }
}

/// An independent double-precision decode step written straight from the model definition (no
/// shared helpers), optionally rounding the KV cache to bf16 like the VMs.
class NaiveModel {
 public:
  NaiveModel(const Weights& w, bool round_kv) : w_(w), round_kv_(round_kv) {}

  std::vector<double> step(int32_t token, int32_t pos) {
    const ModelShape& s = w_.shape;
    const int h = s.hidden, hd = s.head_dim;
    auto matvec = [&](int64_t off, int rows, int cols, const std::vector<double>& in) {
      std::vector<double> out(static_cast<size_t>(rows), 0.0);
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) out[r] += double(w_.at(off + int64_t{r} * cols + c)) * in[c];
      return out;
    };
    auto norm = [&](const std::vector<double>& in, int64_t gamma) {
      double ms = 0;
      for (double v : in) ms += v * v;
      const double inv = 1.0 / std::sqrt(ms / in.size() + s.rms_eps);
      std::vector<double> out(in.size());
      for (size_t i = 0; i < in.size(); ++i) out[i] = in[i] * inv * w_.at(gamma + int64_t(i));
      return out;
    };
    const std::vector<float> inv_freq = schedule::rope_inv_freq(s);
    auto rope = [&](double* v) {
      for (int d = 0; d < hd / 2; ++d) {
        const double a = double(float(pos) * inv_freq[d]);
        const double x1 = v[d], x2 = v[d + hd / 2];
        v[d] = x1 * std::cos(a) - x2 * std::sin(a);
        v[d + hd / 2] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    };
    auto store = [&](double v) {
      return round_kv_ ? double(schedule::bf16_to_f32(schedule::f32_to_bf16(float(v)))) : v;
    };
    if (k_.empty()) {
      k_.assign(s.layers, std::vector<std::vector<double>>());
      v_.assign(s.layers, std::vector<std::vector<double>>());
    }
    std::vector<double> x(h);
    for (int i = 0; i < h; ++i) x[i] = w_.at(w_.layout.embed + int64_t{token} * h + i);
    for (int l = 0; l < s.layers; ++l) {
      const auto& L = w_.layout.layer[l];
      const auto xn = norm(x, L.attn_norm);
      auto q = matvec(L.wq, s.q_dim(), h, xn);
      auto k = matvec(L.wk, s.kv_dim(), h, xn);
      auto v = matvec(L.wv, s.kv_dim(), h, xn);
      for (int i = 0; i < s.heads; ++i) rope(q.data() + i * hd);
      for (int g = 0; g < s.kv_heads; ++g) rope(k.data() + g * hd);
      for (double& e : k) e = store(e);
      for (double& e : v) e = store(e);
      k_[l].push_back(k);
      v_[l].push_back(v);
      std::vector<double> att(s.q_dim(), 0.0);
      for (int i = 0; i < s.heads; ++i) {
        const int g = i / (s.heads / s.kv_heads);
        std::vector<double> sc(pos + 1);
        double m = -1e300, sum = 0;
        for (int t = 0; t <= pos; ++t) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += q[i * hd + d] * k_[l][t][g * hd + d];
          sc[t] = dot / std::sqrt(double(hd));
          m = std::max(m, sc[t]);
        }
        for (int t = 0; t <= pos; ++t) sum += std::exp(sc[t] - m);
        for (int t = 0; t <= pos; ++t)
          for (int d = 0; d < hd; ++d)
            att[i * hd + d] += std::exp(sc[t] - m) / sum * v_[l][t][g * hd + d];
      }
      const auto o = matvec(L.wo, h, s.q_dim(), att);
      for (int i = 0; i < h; ++i) x[i] += o[i];
      const auto xm = norm(x, L.mlp_norm);
      const auto gate = matvec(L.w_gate, s.ffn, h, xm);
      const auto up = matvec(L.w_up, s.ffn, h, xm);
      std::vector<double> act(s.ffn);
      for (int i = 0; i < s.ffn; ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const auto down = matvec(L.w_down, h, s.ffn, act);
      for (int i = 0; i < h; ++i) x[i] += down[i];
    }
    return matvec(w_.layout.lm_head, s.vocab, h, norm(x, w_.layout.final_norm));
  }

 private:
  const Weights& w_;
  bool round_kv_;
  std::vector<std::vector<std::vector<double>>> k_, v_;  // [layer][position][kv_dim]
};

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

TEST(EagerModel, MatchesNaiveDoubleReferenceOverSeveralPositions) {
  const Weights w = schedule::generate_weights(*schedule::find_preset("toy-2L"), 11, 1);
  EagerModel eager(w);
  NaiveModel naive(w, /*round_kv=*/false);
  const std::vector<int32_t> tokens = {5, 200, 17, 17, 99};
  for (int32_t pos = 0; pos < static_cast<int32_t>(tokens.size()); ++pos) {
    const std::vector<float> got = eager.step(tokens[pos], pos);
    const std::vector<double> want = naive.step(tokens[pos], pos);
    ASSERT_EQ(got.size(), 256u);
    EXPECT_LT(max_abs_diff(got, want), 1e-4) << "position " << pos;
  }
}

TEST(EagerModel, Bf16ModelStoresKvRoundedToBf16) {
  ModelShape shape = *schedule::find_preset("toy-2L");
  shape.dtype = DType::kBF16;
  const Weights w = schedule::generate_weights(shape, 4, 1);
  EagerModel eager(w);
  NaiveModel rounded(w, /*round_kv=*/true);
  NaiveModel exact(w, /*round_kv=*/false);
  double rounded_err = 0, exact_err = 0;
  const std::vector<int32_t> tokens = {1, 2, 3, 250, 77, 8};
  for (int32_t pos = 0; pos < static_cast<int32_t>(tokens.size()); ++pos) {
    const std::vector<float> got = eager.step(tokens[pos], pos);
    rounded_err = std::max(rounded_err, max_abs_diff(got, rounded.step(tokens[pos], pos)));
    exact_err = std::max(exact_err, max_abs_diff(got, exact.step(tokens[pos], pos)));
  }
  EXPECT_LT(rounded_err, 1e-4);
  // Rounding K and V to bf16 moves the logits far more than fp32 arithmetic does.
  EXPECT_GT(exact_err, 10 * rounded_err);
}

TEST(EagerModel, LogitsDependOnTheKvHistory) {
  const Weights w = schedule::generate_weights(*schedule::find_preset("toy"), 0, 1);
  EagerModel a(w);
  EagerModel b(w);
  a.step(10, 0);
  b.step(20, 0);
  const std::vector<float> la = a.step(30, 1);
  const std::vector<float> lb = b.step(30, 1);
  double diff = 0;
  for (size_t i = 0; i < la.size(); ++i) diff = std::max(diff, double(std::abs(la[i] - lb[i])));
  EXPECT_GT(diff, 1e-2);
  // reset() forgets the history: position 0 again gives the fresh logits bit for bit.
  a.reset();
  EagerModel fresh(w);
  EXPECT_EQ(a.step(7, 0), fresh.step(7, 0));
}

/// Feeds 16 tokens at position 0 and returns the distinct argmaxes and the mean logit std.
std::pair<size_t, double> argmax_spread(const Weights& w) {
  EagerModel model(w);
  std::set<int32_t> winners;
  double std_sum = 0;
  for (int32_t t = 0; t < 16; ++t) {
    model.reset();
    const std::vector<float> logits = model.step((t * 7919) % w.shape.vocab, 0);
    winners.insert(argmax(logits));
    double mean = 0, sq = 0;
    for (float v : logits) mean += v;
    mean /= double(logits.size());
    for (float v : logits) sq += (v - mean) * (v - mean);
    std_sum += std::sqrt(sq / double(logits.size()));
  }
  return {winners.size(), std_sum / 16};
}

TEST(EagerModel, ArgmaxVariesWithTheTokenAndLogitsAreWellSpread) {
  const auto [toy_distinct, toy_std] =
      argmax_spread(schedule::generate_weights(*schedule::find_preset("toy"), 0));
  EXPECT_GE(toy_distinct, 10u);
  EXPECT_GT(toy_std, 1.0);
  EXPECT_LT(toy_std, 5.0);
  // A small-ish bf16 shape with the llama-1b conventions: tied embeddings, llama3 RoPE scaling.
  ModelShape tied = *schedule::find_preset("llama-1b");
  tied.layers = 4;
  tied.hidden = 256;
  tied.heads = 8;
  tied.kv_heads = 2;
  tied.head_dim = 32;
  tied.ffn = 512;
  tied.vocab = 2048;
  tied.max_seq = 16;
  const auto [tied_distinct, tied_std] = argmax_spread(schedule::generate_weights(tied, 0));
  EXPECT_GE(tied_distinct, 12u);
  EXPECT_GT(tied_std, 1.0);
  EXPECT_LT(tied_std, 5.0);
}

TEST(EagerModel, GreedyGenerationIsDeterministicAndMatchesSteps) {
  ModelShape shape = *schedule::find_preset("small");
  shape.layers = 1;
  shape.vocab = 1024;
  shape.max_seq = 32;
  const Weights w = schedule::generate_weights(shape, 1);
  EagerModel one(w);
  one.set_threads(1);
  EagerModel two(w);
  two.set_threads(2);
  const std::vector<int32_t> prompt = {3, 141, 59};
  const std::vector<int32_t> a = one.generate(prompt, 6);
  const std::vector<int32_t> b = two.generate(prompt, 6);
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(one.generate(prompt, 6), a);
  // The same by hand: feed the prompt, then each argmax.
  EagerModel manual(w);
  std::vector<float> logits;
  int32_t pos = 0;
  for (int32_t t : prompt) logits = manual.step(t, pos++);
  for (int32_t expected : a) {
    EXPECT_EQ(argmax(logits), expected);
    logits = manual.step(argmax(logits), pos++);
  }
  // Not a constant sequence.
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 1u);
}

TEST(EagerModel, GenerationStopsWhenTheCacheIsFull) {
  ModelShape shape = *schedule::find_preset("toy");
  shape.max_seq = 6;
  const Weights w = schedule::generate_weights(shape, 2);
  EagerModel model(w);
  // 4 prompt tokens fill positions 0..3; new tokens are fed at 4 and 5, the third comes from the
  // logits of position 5 and nothing more fits.
  EXPECT_EQ(model.generate({1, 2, 3, 4}, 10).size(), 3u);
  EXPECT_TRUE(model.generate({}, 10).empty());
}

}  // namespace
}  // namespace megasched::eval
