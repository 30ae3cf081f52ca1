#include "schedule/model.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <numbers>

namespace megasched::schedule {
namespace {

TEST(ModelDType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  // 1 + 2^-8 is exactly halfway between 1.0 (even mantissa) and 1 + 2^-7: ties go to 1.0.
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 0x3F81 (odd) and 0x3F82 (even): ties go up to even.
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);
  // Just above the halfway point rounds up; just below rounds down.
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F807FFFu)), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
}

TEST(ModelDType, Bf16KeepsNanInfAndTinyValues) {
  const uint16_t nan = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
  // A signalling NaN whose payload sits only in the low 16 bits must not turn into inf.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7F800001u)))));
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // The largest finite fp32 rounds up past bf16's largest finite value to inf.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  // Denormals keep their top bits: 0x00018000 is a tie between 0x0001 and 0x0002 -> 0x0002.
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00010000u)), 0x0001);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(bf16_to_f32(0x3FC0), 1.5f);
}

TEST(ModelDType, ParsesNamesAndSizes) {
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("F32"), DType::kF32);
  EXPECT_EQ(parse_dtype("fp16"), std::nullopt);
  EXPECT_STREQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_EQ(dtype_bytes(DType::kBF16), 2);
  EXPECT_EQ(dtype_bytes(DType::kF32), 4);
}

TEST(ModelPresets, Llama1bMatchesLlama32Shape) {
  const auto shape = find_preset("llama-1b");
  ASSERT_TRUE(shape.has_value());
  EXPECT_EQ(shape->hidden, 2048);
  EXPECT_EQ(shape->layers, 16);
  EXPECT_EQ(shape->heads, 32);
  EXPECT_EQ(shape->kv_heads, 8);
  EXPECT_EQ(shape->head_dim, 64);
  EXPECT_EQ(shape->ffn, 8192);
  EXPECT_EQ(shape->vocab, 128256);
  EXPECT_TRUE(shape->tied_embeddings);
  EXPECT_EQ(shape->dtype, DType::kBF16);
  EXPECT_EQ(shape->param_count(), 1235814400);
  EXPECT_EQ(shape->weight_bytes(), 2471628800);
  // 16 layers x (K + V) x 8 kv heads x 64 x 2 bytes.
  EXPECT_EQ(shape->kv_bytes_per_position(), 32768);
}

TEST(ModelPresets, AllPresetsArePresentAndConsistent) {
  for (const char* name : {"toy", "toy-2L", "small", "llama-1b", "llama-8b"}) {
    const auto shape = find_preset(name);
    ASSERT_TRUE(shape.has_value()) << name;
    EXPECT_EQ(shape->heads % shape->kv_heads, 0) << name;
    EXPECT_EQ(shape->head_dim % 2, 0) << name;
  }
  EXPECT_FALSE(find_preset("llama-70b").has_value());
  EXPECT_EQ(find_preset("toy-2L")->layers, 2);
  EXPECT_EQ(find_preset("toy")->param_count(),
            256 * 64 * 2 + 64 + 2 * 64 + 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128);
  // Llama-3.1-8B: 8,030,261,248 parameters.
  EXPECT_EQ(find_preset("llama-8b")->param_count(), 8030261248);
}

TEST(ModelRope, PlainThetaGivesGeometricFrequencies) {
  const ModelShape toy = *find_preset("toy");
  const std::vector<float> f = rope_inv_freq(toy);
  ASSERT_EQ(f.size(), 8u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_FLOAT_EQ(f[1], 1.0f / std::pow(10000.0f, 2.0f / 16.0f));
  EXPECT_FLOAT_EQ(f[7], 1.0f / std::pow(10000.0f, 14.0f / 16.0f));
}

TEST(ModelRope, Llama3ScalingMatchesTransformers) {
  const ModelShape shape = *find_preset("llama-1b");
  const std::vector<float> f = rope_inv_freq(shape);
  ASSERT_EQ(f.size(), 32u);
  // Reference values from transformers' _compute_llama3_parameters (theta 500000, d 64,
  // factor 32, low 1, high 4, original 8192), computed independently here in double:
  // wavelen = 2 pi / inv_freq; > 8192: divided by 32; < 2048: kept; between: smoothed.
  for (int i = 0; i < 32; ++i) {
    const double base = 1.0 / std::pow(500000.0, 2.0 * i / 64.0);
    const double wavelen = 2.0 * std::numbers::pi / base;
    double expected = base;
    if (wavelen > 8192.0) {
      expected = base / 32.0;
    } else if (wavelen >= 2048.0) {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      expected = (1.0 - smooth) * base / 32.0 + smooth * base;
    }
    EXPECT_NEAR(f[static_cast<size_t>(i)], expected, 1e-6 * expected) << "i=" << i;
  }
  // High frequencies are untouched, the lowest are divided by the factor exactly.
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[31], 1.0 / std::pow(500000.0, 62.0 / 64.0) / 32.0, 1e-12);
}

TEST(ModelRope, Llama3ScalingMatchesTransformersValues) {
  // inv_freq printed by transformers 5.17 (LlamaRotaryEmbedding, rope_type llama3) for theta
  // 10000, head_dim 16, factor 8, low 1, high 4, original_max_position_embeddings 64: a case where
  // the kept, smoothed and divided bands all occur.
  ModelShape shape = *find_preset("toy");
  shape.rope_scaling_factor = 8.0f;
  shape.rope_original_max_position = 64;
  const std::vector<double> hf = {1.0,
                                  0.24438458681106567,
                                  0.013042256236076355,
                                  0.0039528473280370235,
                                  0.0012499999720603228,
                                  0.00039528473280370235,
                                  0.0001250000059371814,
                                  3.9528473280370235e-05};
  const std::vector<float> f = rope_inv_freq(shape);
  ASSERT_EQ(f.size(), hf.size());
  // Bit for bit: one ulp of the smoothed band (i = 1) is 6e-5 rad of rotation at position 4096.
  for (size_t i = 0; i < hf.size(); ++i) EXPECT_EQ(f[i], static_cast<float>(hf[i])) << "i=" << i;
}

TEST(ModelLayout, TensorsAreAlignedAndQkvGateUpAdjacent) {
  ModelShape shape = *find_preset("toy-2L");
  shape.vocab = 250;  // an embed size that is not a multiple of the alignment
  shape.hidden = 72;
  shape.ffn = 100;
  const WeightLayout layout = layout_for(shape);
  ASSERT_EQ(layout.layer.size(), 2u);
  EXPECT_EQ(layout.embed, 0);
  for (const TensorInfo& t : layout.tensors) {
    const bool packed =
        t.name.ends_with(".wk") || t.name.ends_with(".wv") || t.name.ends_with(".w_up");
    if (!packed) {
      EXPECT_EQ(t.offset % kTensorAlignElements, 0) << t.name;
    }
  }
  for (const WeightLayout::Layer& l : layout.layer) {
    EXPECT_EQ(l.wk, l.wq + int64_t{shape.q_dim()} * shape.hidden);
    EXPECT_EQ(l.wv, l.wk + int64_t{shape.kv_dim()} * shape.hidden);
    EXPECT_EQ(l.w_up, l.w_gate + int64_t{shape.ffn} * shape.hidden);
  }
  // Tensors never overlap, appear in arena order, and fit in the arena.
  for (size_t i = 1; i < layout.tensors.size(); ++i) {
    const TensorInfo& a = layout.tensors[i - 1];
    EXPECT_GE(layout.tensors[i].offset, a.offset + a.rows * a.cols) << layout.tensors[i].name;
  }
  const TensorInfo& last = layout.tensors.back();
  EXPECT_EQ(last.name, "lm_head");
  EXPECT_EQ(layout.lm_head, last.offset);
  EXPECT_GE(layout.total_elements, last.offset + last.rows * last.cols);
  EXPECT_EQ(layout.tensors[0].name, "embed");
  EXPECT_EQ(layout.tensors[1].name, "layers.0.attn_norm");
  EXPECT_EQ(layout.tensors[1].offset, 250 * 72 / 64 * 64 + 64);
  EXPECT_EQ(layout.tensors.size(), 1u + 2u * 9u + 2u);
}

TEST(ModelLayout, TiedModelHasNoLmHeadTensor) {
  const ModelShape shape = *find_preset("llama-1b");
  const WeightLayout layout = layout_for(shape);
  EXPECT_EQ(layout.lm_head, layout.embed);
  EXPECT_EQ(layout.tensors.back().name, "final_norm");
  EXPECT_EQ(layout.tensors.size(), 1u + 16u * 9u + 1u);
  // Every Llama-1b tensor is a multiple of 64 elements, so the arena holds exactly the parameters.
  EXPECT_EQ(layout.total_elements, shape.param_count());
}

TEST(ModelWeights, GenerationIsDeterministicAndThreadIndependent) {
  ModelShape shape = *find_preset("toy-2L");
  shape.vocab = 8192;  // several generator chunks, so the thread split matters
  shape.hidden = 256;
  const Weights a = generate_weights(shape, 7, 1);
  const Weights b = generate_weights(shape, 7, 3);
  const Weights c = generate_weights(shape, 8, 2);
  ASSERT_EQ(a.f32.size(), static_cast<size_t>(a.layout.total_elements));
  EXPECT_EQ(a.f32, b.f32);
  EXPECT_NE(a.f32, c.f32);
  EXPECT_EQ(a.bytes(), a.layout.total_elements * 4);
  EXPECT_EQ(a.data(), static_cast<const void*>(a.f32.data()));
}

TEST(ModelWeights, ElementFollowsTheDocumentedGenerator) {
  const ModelShape shape = *find_preset("toy");
  const Weights w = generate_weights(shape, 3, 2);
  // Recompute element 5 of tensor 2 (layers.0.wq, fan-in 64) from the header's formula.
  uint64_t x = 3 + 0x9E3779B97F4A7C15ull * 3 + 5;
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  const float u = static_cast<float>(x >> 40) / 8388608.0f - 1.0f;
  const TensorInfo& wq = w.layout.tensors[2];
  ASSERT_EQ(wq.name, "layers.0.wq");
  EXPECT_EQ(w.at(wq.offset + 5), std::sqrt(3.0f / 64.0f) * u);
}

TEST(ModelWeights, ScalesGiveUnitRmsProjectionsAndGammasNearOne) {
  const Weights w = generate_weights(*find_preset("small"), 0, 0);
  ASSERT_EQ(w.bf16.size(), static_cast<size_t>(w.layout.total_elements));
  auto rms_of = [&](const TensorInfo& t) {
    double sum = 0;
    const int64_t n = std::min<int64_t>(t.rows * t.cols, 1 << 16);
    for (int64_t i = 0; i < n; ++i) sum += double(w.at(t.offset + i)) * w.at(t.offset + i);
    return std::sqrt(sum / static_cast<double>(n));
  };
  for (const TensorInfo& t : w.layout.tensors) {
    if (t.name.ends_with("norm")) {
      for (int64_t i = 0; i < t.cols; ++i) {
        ASSERT_GE(w.at(t.offset + i), 0.89f) << t.name;
        ASSERT_LE(w.at(t.offset + i), 1.11f) << t.name;
      }
    } else if (t.name == "embed" || t.name == "lm_head") {
      EXPECT_NEAR(rms_of(t) * std::sqrt(2048.0), 2.0, 0.05) << t.name;
    } else {
      EXPECT_NEAR(rms_of(t) * std::sqrt(static_cast<double>(t.cols)), 1.0, 0.03) << t.name;
    }
  }
}

TEST(ModelShapeJson, RoundTripsTheShapeARecordCarries) {
  ModelShape s;
  s.name = "small";
  s.hidden = 1024;
  s.layers = 4;
  s.heads = 16;
  s.kv_heads = 4;
  s.head_dim = 64;
  s.ffn = 2816;
  s.vocab = 32000;
  s.dtype = DType::kBF16;
  ModelShape back = shape_from_json(to_json(s));
  EXPECT_EQ(back.name, "small");
  EXPECT_EQ(back.ffn, 2816);
  EXPECT_EQ(back.kv_heads, 4);
  EXPECT_EQ(back.dtype, DType::kBF16);
}

}  // namespace
}  // namespace megasched::schedule
