// The GPU reference forward against the CPU eager forward (every test GTEST_SKIP()s where there is
// no device): toy in fp32 and bf16, small, a Hugging Face checkpoint fixture, and a long prompt fed
// in several chunks; logits at several positions and the KV cache each leaves.
#include "eval/gpu_reference.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "eval/device.h"
#include "eval/evaluate.h"
#include "schedule/checkpoint.h"

namespace megasched::eval {
namespace {

#define MS_REQUIRE_GPU()                                   \
  do {                                                     \
    std::string why_;                                      \
    if (!eval::gpu_available(&why_)) GTEST_SKIP() << why_; \
  } while (0)

/// The GPU engine and the CPU one agree at `positions` and on the KV cache.
void expect_gpu_matches_cpu(const schedule::Weights& w, const std::vector<int>& positions) {
  std::string error;
  auto gpu = make_gpu_reference(w, &error);
  ASSERT_TRUE(gpu) << error;
  CpuEagerForward cpu(w);
  const auto tokens = trial_tokens(w.shape.vocab, positions.back() + 1, 9);
  const CrossCheck c = cross_check(*gpu, cpu, tokens, positions, w.shape.dtype);
  EXPECT_TRUE(c.pass) << w.shape.name << " " << schedule::dtype_name(w.shape.dtype) << ": "
                      << c.message << "\n"
                      << to_json(c).dump(1);
  EXPECT_EQ(c.logits.size(), positions.size());
}

TEST(GpuReference, MatchesCpuEagerOnToyFp32AndBf16) {
  MS_REQUIRE_GPU();
  for (schedule::DType dtype : {schedule::DType::kF32, schedule::DType::kBF16}) {
    schedule::ModelShape s = *schedule::find_preset("toy-2L");
    s.dtype = dtype;
    expect_gpu_matches_cpu(schedule::generate_weights(s, 2), {0, 1, 9, 127});
  }
}

TEST(GpuReference, MatchesCpuEagerOnSmall) {
  MS_REQUIRE_GPU();
  expect_gpu_matches_cpu(schedule::generate_weights(*schedule::find_preset("small"), 1), {0, 17});
}

TEST(GpuReference, MatchesCpuEagerOnACheckpoint) {
  MS_REQUIRE_GPU();
  for (const char* fixture : {"llama3_f32_untied", "plain_bf16_tied"}) {
    std::string error;
    const auto w =
        schedule::load_checkpoint(std::string(MS_SOURCE_DIR) + "/tests/data/hf/" + fixture, &error);
    ASSERT_TRUE(w) << error;
    expect_gpu_matches_cpu(*w, {0, 3, std::min(40, w->shape.max_seq - 1)});
  }
}

TEST(GpuReference, LongPromptInSeveralChunksMatchesCpuEager) {
  MS_REQUIRE_GPU();
  schedule::ModelShape s = *schedule::find_preset("toy-2L");
  s.dtype = schedule::DType::kBF16;
  s.max_seq = 4 * kChunkTokens + 40;
  expect_gpu_matches_cpu(schedule::generate_weights(s, 8),
                         {0, kChunkTokens - 1, kChunkTokens, 3 * kChunkTokens + 17});
}

}  // namespace
}  // namespace megasched::eval
