#include "eval/oracle.h"

#include <gtest/gtest.h>

#include <cmath>

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
