#include "schedule/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

namespace megasched::schedule {
namespace {

TEST(Safetensors, F16DecodesExactly) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), 1023.0f * std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7C00), INFINITY);
  EXPECT_EQ(f16_to_f32(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
}

TEST(Safetensors, WrittenTensorsReadBackByNameWithTheirBytes) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("megasched_st_" + std::to_string(::getpid()) + ".safetensors");
  const float a[3] = {1.0f, -2.0f, 3.5f};
  const uint16_t b[4] = {0x3F80, 0x4000, 0x4040, 0x4080};
  std::string error;
  ASSERT_TRUE(write_safetensors(path,
                                {{"a", "F32", {3}, reinterpret_cast<const char*>(a), sizeof a},
                                 {"b", "BF16", {2, 2}, reinterpret_cast<const char*>(b), sizeof b}},
                                &error))
      << error;
  MappedFile file;
  ASSERT_TRUE(file.open(path, &error)) << error;
  std::map<std::string, TensorRef> tensors;
  ASSERT_TRUE(index_safetensors(file, "t.safetensors", tensors, &error)) << error;
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors["a"].dtype, "F32");
  EXPECT_EQ(tensors["a"].shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(tensors["a"].bytes, sizeof a);
  EXPECT_EQ(std::memcmp(tensors["a"].data, a, sizeof a), 0);
  EXPECT_EQ(tensors["b"].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(std::memcmp(tensors["b"].data, b, sizeof b), 0);
  EXPECT_EQ(*safetensors_dtype_bytes("BF16"), 2);
  EXPECT_FALSE(safetensors_dtype_bytes("I8").has_value());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace megasched::schedule
