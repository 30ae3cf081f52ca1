// The floor's byte count (eval/roofline.h) against a count made here from the model's dimensions
// alone, for several models (fp32 and bf16, tied and untied embeddings) and positions.
#include "eval/roofline.h"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "schedule/model.h"
#include "schedule/target.h"
#include "tests/h100_target.h"

namespace megasched::eval {
namespace {

struct Expected {
  uint64_t weights = 0;  // weights streamed once, embedding row excluded
  uint64_t row = 0;      // the one embedding row the lookup reads
  uint64_t kv_read = 0;  // KV history the attention reads
  uint64_t writes = 0;   // KV append + logits
  uint64_t total() const { return weights + row + kv_read + writes; }
};

// One decode step at `position` (0-based) of a Llama decoder, counted from the shape's fields.
//
// Weights: each layer reads its two RMSNorm vectors (2h), wq and wo (h x heads*head_dim each), wk
// and wv (h x kv_heads*head_dim each) and the MLP's gate, up and down (h x ffn each); then the
// final norm (h) and the LM head (vocab x h; with tied embeddings that is the embedding table
// itself). The embedding lookup reads one row (h) of the table, never the whole table: a second
// read of that row when the LM head is the table.
//
// KV: the token at position p attends causally to positions 0 .. p inclusive, its own included:
// p + 1 positions of K and V (2 x layers x kv_heads x head_dim elements each). Its own K and V are
// written this step (the append) and the attention reads them back from the cache with the rest
// of the history: the append (with RoPE, or fused into the QKV op) and the attention are separate
// ops of the program (schedule/program.h, OpKind), so no position's K and V reach the attention
// except through the cache. Counting only `position` positions would leave out the newest one.
// HARNESS.md's toy example shows the same: bytes_min 215552 at position 0 = 214016 weight bytes
// + 256 KV read (one position: 2 x 1 layer x 32 x 4 B) + 1280 written (256 KV + 256 logits x 4 B),
// and 241152 at position 100 (101 positions read).
//
// Writes: this position's K and V, and the logits (vocab fp32, whatever the weight dtype).
Expected count(const schedule::ModelShape& s, int position) {
  const uint64_t e = s.dtype == schedule::DType::kBF16 ? 2 : 4;  // bytes per weight / KV element
  const uint64_t h = static_cast<uint64_t>(s.hidden), ffn = static_cast<uint64_t>(s.ffn);
  const uint64_t q = static_cast<uint64_t>(s.heads) * static_cast<uint64_t>(s.head_dim);
  const uint64_t kv = static_cast<uint64_t>(s.kv_heads) * static_cast<uint64_t>(s.head_dim);
  const uint64_t layer = 2 * h + 2 * h * q + 2 * h * kv + 3 * h * ffn;
  const uint64_t lm_head = static_cast<uint64_t>(s.vocab) * h;
  const uint64_t kv_position = 2 * static_cast<uint64_t>(s.layers) * kv * e;
  Expected x;
  x.weights = (static_cast<uint64_t>(s.layers) * layer + h + lm_head) * e;
  x.row = h * e;
  x.kv_read = kv_position * (static_cast<uint64_t>(position) + 1);
  x.writes = kv_position + static_cast<uint64_t>(s.vocab) * 4;
  return x;
}

schedule::ModelShape tied_fp32() {
  schedule::ModelShape s = *schedule::find_preset("toy-2L");
  s.name = "toy-2L-tied";
  s.tied_embeddings = true;
  return s;
}

TEST(Roofline, BytesMinIsWeightsEmbeddingRowKvHistoryAndWrites) {
  const schedule::GpuTarget target = testing_support::h100_target();
  for (const schedule::ModelShape& shape :
       {*schedule::find_preset("toy"), *schedule::find_preset("small"),
        *schedule::find_preset("llama-1b"), tied_fp32()}) {
    for (const int position : {0, 1, 7, 1000}) {
      const Expected x = count(shape, position);
      const Floor f = floor_for(shape, target, position);
      const std::string at = shape.name + " at position " + std::to_string(position);
      EXPECT_EQ(f.weight_bytes, x.weights) << at;
      EXPECT_EQ(f.kv_read_bytes, x.kv_read) << at;
      EXPECT_EQ(f.write_bytes, x.writes) << at;
      EXPECT_EQ(f.bytes_min, x.total()) << at;
      // floor_us: bytes over the target's bandwidth in GB/s (1 GB/s moves 1e3 bytes per us).
      EXPECT_DOUBLE_EQ(f.floor_us, static_cast<double>(x.total()) / (target.floor_bw_gbs() * 1e3))
          << at;
    }
  }
}

TEST(Roofline, BytesMinOfTheToyModelMatchesTheDocumentedExample) {
  // HARNESS.md's `evaluate --objective 0:1,100:1` example: toy on h100 at positions 0 and 100.
  const schedule::ModelShape toy = *schedule::find_preset("toy");
  EXPECT_EQ(floor_for(toy, testing_support::h100_target(), 0).bytes_min, 215552u);
  EXPECT_EQ(floor_for(toy, testing_support::h100_target(), 100).bytes_min, 241152u);
  EXPECT_EQ(count(toy, 0).total(), 215552u);
  EXPECT_EQ(count(toy, 100).total(), 241152u);
}

TEST(Roofline, EachPositionAddsOnePositionOfKvHistory) {
  const schedule::ModelShape shape = *schedule::find_preset("small");
  const schedule::GpuTarget target = testing_support::h100_target();
  const uint64_t per_position = 2 * 4 * (4 * 128) * 2;  // K and V, 4 layers, 4 x 128, bf16
  for (const int position : {0, 1, 63, 2047}) {
    EXPECT_EQ(floor_for(shape, target, position).kv_read_bytes,
              per_position * (static_cast<uint64_t>(position) + 1))
        << position;
  }
}

}  // namespace
}  // namespace megasched::eval
