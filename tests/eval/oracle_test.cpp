#include "eval/oracle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "eval/roofline.h"
#include "eval/timing.h"

namespace megasched::eval {
namespace {

TEST(Oracle, IdenticalLogitsPass) {
  std::vector<float> a = {0.5f, 2.0f, -1.0f};
  auto c = compare_logits(a, a, schedule::DType::kF32);
  EXPECT_TRUE(c.pass);
  EXPECT_EQ(c.max_abs_err, 0.0);
  EXPECT_EQ(c.rel_err, 0.0);
}

TEST(Oracle, DifferentArgmaxFailsEvenWithinTolerance) {
  std::vector<float> ref = {1.0f, 1.00001f, 0.0f};
  std::vector<float> out = {1.00001f, 1.0f, 0.0f};
  auto c = compare_logits(out, ref, schedule::DType::kBF16);
  EXPECT_FALSE(c.argmax_match);
  EXPECT_FALSE(c.pass);
  EXPECT_TRUE(c.near_tie) << "a swap of two logits 1e-5 apart";
  EXPECT_TRUE(step_verified(c));
}

// A generation step's near tie: the argmaxes differ on two tokens the reference all but ties
// (gap <= Tolerance::argmax_tie), every logit within tolerance. A wider gap is no tie, even within
// tolerance, and neither is a swap whose logits are out of tolerance.
TEST(Oracle, ANearTieIsAnArgmaxSwapTheErrorExplains) {
  const std::vector<float> ref = {8.4825f, 8.4797f, 1.0f};  // gap 0.0028 (llama-1b, step 10)
  std::vector<float> out = {8.4790f, 8.4830f, 1.0f};        // each off by <= 0.0035
  Comparison c = compare_logits(out, ref, schedule::DType::kBF16);
  EXPECT_FALSE(c.pass);
  EXPECT_TRUE(c.near_tie);
  EXPECT_NEAR(c.argmax_gap, 0.0028, 1e-5);
  EXPECT_TRUE(step_verified(c));

  const std::vector<float> wide = {8.4825f, 8.4325f, 1.0f};  // gap 0.05 > bf16's tie bound
  out = {8.45f, 8.46f, 1.0f};  // each within bf16's tolerance (0.25); out's argmax: 1
  c = compare_logits(out, wide, schedule::DType::kBF16);
  EXPECT_FALSE(c.argmax_match);
  EXPECT_NEAR(c.argmax_gap, 0.05, 1e-5);
  EXPECT_LE(c.max_abs_err, tolerance_for(schedule::DType::kBF16).max_abs_err);
  EXPECT_FALSE(c.near_tie);
  EXPECT_FALSE(step_verified(c));

  out = {8.4790f, 8.4830f, 1.5f};  // the third logit 0.5 off: out of bf16's tolerance
  c = compare_logits(out, ref, schedule::DType::kBF16);
  EXPECT_FALSE(c.near_tie);
  EXPECT_FALSE(step_verified(c));

  out = ref;  // agreeing argmaxes: no tie to report
  c = compare_logits(out, ref, schedule::DType::kBF16);
  EXPECT_TRUE(c.pass);
  EXPECT_FALSE(c.near_tie);
  EXPECT_EQ(c.argmax_gap, 0.0);
}

TEST(Oracle, NanNeverPasses) {
  std::vector<float> ref = {1.0f, 2.0f};
  std::vector<float> out = {1.0f, NAN};
  auto c = compare_logits(out, ref, schedule::DType::kBF16);
  EXPECT_FALSE(c.finite);
  EXPECT_FALSE(c.pass);
}

TEST(Oracle, RelativeErrorIsL2RatioAndFp32IsTighterThanBf16) {
  std::vector<float> ref = {3.0f, 4.0f};  // ||ref|| = 5
  std::vector<float> out = {3.0f, 4.01f};
  auto c = compare_logits(out, ref, schedule::DType::kF32);
  EXPECT_NEAR(c.rel_err, 0.01 / 5.0, 1e-6);
  EXPECT_FALSE(c.pass);  // 2e-3 > fp32 tolerance
  EXPECT_TRUE(compare_logits(out, ref, schedule::DType::kBF16).pass);
  EXPECT_LT(tolerance_for(schedule::DType::kF32).rel_err,
            tolerance_for(schedule::DType::kBF16).rel_err);
}

// The tolerance table, as eval/oracle.h's comment states it: fp32 logits within a relative L2
// error of 1e-4 and an absolute error of 1e-3; bf16 within 2e-2 and 0.25. Each bound is probed
// alone (the other error far inside its bound) at 0.8x (passes) and 1.25x (fails) of itself, so a
// looser table, or a check that ignores either error, fails here.
struct ToleranceCase {
  schedule::DType dtype;
  double rel_err;
  double max_abs_err;
};
const ToleranceCase kTolerances[] = {{schedule::DType::kF32, 1e-4, 1e-3},
                                     {schedule::DType::kBF16, 2e-2, 0.25}};

// 1000 logits near 1 (the first the largest) and the same logits each moved by +e: the relative
// error is e / rms(ref) (about e) and the absolute error e, so only the relative bound binds when
// e sits between them.
void spread_error(double e, std::vector<float>* ref, std::vector<float>* out) {
  for (int i = 0; i < 1000; ++i) {
    ref->push_back(i == 0 ? 2.0f : 1.0f + 1e-3f * static_cast<float>(i % 7));
    out->push_back(static_cast<float>(ref->back() + e));
  }
}

// 1000 logits of 10 (the first 12) with one non-maximal logit moved down by e: the absolute error
// is e and the relative error e / ||ref|| (||ref|| about 316), so only the absolute bound binds.
void single_error(double e, std::vector<float>* ref, std::vector<float>* out) {
  for (int i = 0; i < 1000; ++i) ref->push_back(i == 0 ? 12.0f : 10.0f);
  *out = *ref;
  (*out)[500] = static_cast<float>((*ref)[500] - e);
}

// The errors computed here from the vectors: ||out - ref||_2 / ||ref||_2 and max |out - ref|.
std::pair<double, double> errors_of(const std::vector<float>& out, const std::vector<float>& ref) {
  double d2 = 0, r2 = 0, worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(out[i]) - static_cast<double>(ref[i]);
    d2 += d * d;
    r2 += static_cast<double>(ref[i]) * ref[i];
    worst = std::max(worst, std::abs(d));
  }
  return {std::sqrt(d2 / r2), worst};
}

TEST(Oracle, RelativeErrorBoundHoldsAloneFromBothSides) {
  for (const ToleranceCase& t : kTolerances) {
    for (const double scale : {0.8, 1.25}) {
      std::vector<float> ref, out;
      spread_error(scale * t.rel_err, &ref, &out);
      const auto [rel, worst] = errors_of(out, ref);
      ASSERT_NEAR(rel / t.rel_err, scale, 0.05 * scale);
      ASSERT_LT(worst, 0.2 * t.max_abs_err) << "only the relative bound may bind";
      const Comparison c = compare_logits(out, ref, t.dtype);
      EXPECT_NEAR(c.rel_err, rel, 1e-6 * rel);
      EXPECT_NEAR(c.max_abs_err, worst, 1e-6 * worst);
      EXPECT_TRUE(c.argmax_match);
      EXPECT_EQ(c.pass, scale < 1.0) << "dtype " << static_cast<int>(t.dtype) << ", rel_err " << rel
                                     << " against the bound " << t.rel_err;
    }
  }
}

TEST(Oracle, AbsoluteErrorBoundHoldsAloneFromBothSides) {
  for (const ToleranceCase& t : kTolerances) {
    for (const double scale : {0.8, 1.25}) {
      std::vector<float> ref, out;
      single_error(scale * t.max_abs_err, &ref, &out);
      const auto [rel, worst] = errors_of(out, ref);
      ASSERT_NEAR(worst / t.max_abs_err, scale, 0.05 * scale);
      ASSERT_LT(rel, 0.2 * t.rel_err) << "only the absolute bound may bind";
      const Comparison c = compare_logits(out, ref, t.dtype);
      EXPECT_NEAR(c.rel_err, rel, 1e-6 * rel);
      EXPECT_NEAR(c.max_abs_err, worst, 1e-6 * worst);
      EXPECT_EQ(c.worst_index, 500u);
      EXPECT_TRUE(c.argmax_match);
      EXPECT_EQ(c.pass, scale < 1.0) << "dtype " << static_cast<int>(t.dtype) << ", max_abs_err "
                                     << worst << " against the bound " << t.max_abs_err;
    }
  }
}

TEST(Roofline, FloorCountsWeightsKvAndWrites) {
  schedule::ModelShape s;
  s.hidden = 8;
  s.layers = 1;
  s.heads = 2;
  s.kv_heads = 1;
  s.head_dim = 4;
  s.ffn = 16;
  s.vocab = 32;
  s.max_seq = 16;
  s.dtype = schedule::DType::kF32;
  schedule::GpuTarget t;
  t.datasheet_bw_gbs = 1000;  // 1e12 B/s = 1e6 B/us
  Floor f0 = floor_for(s, t, 0);
  Floor f9 = floor_for(s, t, 9);
  const uint64_t per_pos = static_cast<uint64_t>(s.kv_bytes_per_position());
  EXPECT_EQ(f9.kv_read_bytes - f0.kv_read_bytes, 9 * per_pos);
  EXPECT_EQ(f0.write_bytes, per_pos + 32 * 4);
  // Untied: the embedding table is not streamed, only one row of it.
  EXPECT_EQ(f0.weight_bytes, static_cast<uint64_t>(s.weight_bytes()) - 32u * 8u * 4u);
  EXPECT_DOUBLE_EQ(f0.floor_us, static_cast<double>(f0.bytes_min) / 1e6);
  EXPECT_FALSE(f0.measured_bandwidth);
  t.measured_bw_gbs = 500;
  EXPECT_DOUBLE_EQ(floor_for(s, t, 0).floor_us, 2 * f0.floor_us);
}

TEST(Timing, PercentilesInterpolate) {
  auto s = sample_stats({5, 1, 4, 2, 3});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.p10, 1.4);
  EXPECT_DOUBLE_EQ(s.p90, 4.6);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_EQ(sample_stats({}).n, 0u);
}

}  // namespace
}  // namespace megasched::eval
