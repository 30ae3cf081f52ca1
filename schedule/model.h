// The model: a Llama-family decoder (RMSNorm, GQA attention with RoPE, SwiGLU MLP, optional tied
// embeddings) described by its shape, and its weights held in one arena.
//
// The graph of one decode step is fixed by the shape: embed the token, `layers` x (RMSNorm, QKV,
// RoPE + KV append, attention, O projection + residual, RMSNorm, gate/up, SiLU * up, down
// projection + residual), final RMSNorm, LM head, argmax. Presets carry deterministic random
// weights (see generate_weights); a Hugging Face checkpoint directory imports into the same
// structures (schedule/checkpoint.h).
//
// Weight arena layout (element offsets, every tensor aligned to kTensorAlignElements, matrices
// row-major [out_features, in_features] like torch.nn.Linear):
//   embed [vocab, hidden]
//   per layer: attn_norm [hidden], wq [q_dim, hidden], wk [kv_dim, hidden], wv [kv_dim, hidden],
//              wo [hidden, q_dim], mlp_norm [hidden], w_gate [ffn, hidden], w_up [ffn, hidden],
//              w_down [hidden, ffn]
//   final_norm [hidden]
//   lm_head [vocab, hidden]   (absent when tied: the LM head reads embed)
// wq, wk, wv are adjacent (no padding between them) so Q/K/V can run as one GEMV over the
// concatenated rows; w_gate and w_up are adjacent likewise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace megasched::schedule {

/// Storage dtype of weights and the KV cache. Activations and accumulation are always fp32.
enum class DType : uint8_t { kF32 = 0, kBF16 = 1 };

const char* dtype_name(DType dtype);  // "f32" | "bf16"
int dtype_bytes(DType dtype);         // 4 | 2
std::optional<DType> parse_dtype(const std::string& name);

/// fp32 -> bf16 with round-to-nearest-even (NaN stays NaN).
uint16_t f32_to_bf16(float value);
/// bf16 -> fp32 (exact).
float bf16_to_f32(uint16_t bits);

/// Every tensor offset in the arena is a multiple of this many elements (128 B in bf16).
constexpr int64_t kTensorAlignElements = 64;

/// The shape of a Llama-family decoder.
struct ModelShape {
  std::string name;  // preset name or checkpoint directory
  int hidden = 0;    // model width
  int layers = 0;    // decoder layers
  int heads = 0;     // query heads
  int kv_heads = 0;  // key/value heads (GQA: heads % kv_heads == 0)
  int head_dim = 0;  // per head
  int ffn = 0;       // MLP intermediate size
  int vocab = 0;     // vocabulary
  int max_seq = 0;   // KV cache capacity in positions
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // LM head reuses the embedding matrix
  DType dtype = DType::kF32;     // weights and KV cache

  /// Optional Llama-3 style RoPE scaling (rope_type "llama3"); factor 0 means none.
  float rope_scaling_factor = 0.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_original_max_position = 8192;

  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
  int64_t param_count() const;            // every weight element (tied LM head counted once)
  int64_t weight_bytes() const;           // param_count() * dtype bytes
  int64_t kv_bytes_per_position() const;  // K and V, all layers, one position
};

/// The shape's identity as records carry it: name, the dimensions, tied_embeddings and dtype
/// (the corpus schema's model_shape; `megasched models` adds the RoPE theta and the sizes).
nlohmann::json to_json(const ModelShape& shape);
/// Reads to_json() back (missing fields stay zero).
ModelShape shape_from_json(const nlohmann::json& j);

/// head_dim/2 RoPE inverse frequencies (theta and the optional llama3 scaling applied).
std::vector<float> rope_inv_freq(const ModelShape& shape);

/// A named tensor in the weight arena.
struct TensorInfo {
  std::string name;    // e.g. "layers.3.wq", "embed", "final_norm"
  int64_t rows = 0;    // out features (1 for a norm vector)
  int64_t cols = 0;    // in features
  int64_t offset = 0;  // element offset in the arena
};

/// Where each tensor lives. Built by layout_for(); the same for generated and imported weights.
struct WeightLayout {
  struct Layer {
    int64_t attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;  // element offsets
  };
  int64_t embed = 0;
  std::vector<Layer> layer;
  int64_t final_norm = 0;
  int64_t lm_head = 0;         // == embed when tied
  int64_t total_elements = 0;  // arena size
  std::vector<TensorInfo> tensors;
};

WeightLayout layout_for(const ModelShape& shape);

/// The weights of one model in one arena of `shape.dtype` elements.
struct Weights {
  ModelShape shape;
  WeightLayout layout;
  std::vector<float> f32;      // used when shape.dtype == kF32
  std::vector<uint16_t> bf16;  // used when shape.dtype == kBF16 (raw bf16 bits)

  /// Element `offset` upcast to fp32.
  float at(int64_t offset) const {
    return shape.dtype == DType::kF32 ? f32[static_cast<size_t>(offset)]
                                      : bf16_to_f32(bf16[static_cast<size_t>(offset)]);
  }
  const void* data() const;
  int64_t bytes() const;
};

/// The presets: toy, toy-2L, small, llama-1b, llama-8b.
const std::vector<ModelShape>& presets();
std::optional<ModelShape> find_preset(const std::string& name);

/// Deterministic random weights. Element i of tensor k (k = index in layout.tensors) is
///   u = to_unit(splitmix64(seed + 0x9E3779B97F4A7C15 * (k + 1) + i))  in [-1, 1)
/// where splitmix64 is Vigna's finaliser (x += golden ratio, then the two xor-shift-multiply
/// rounds and a final xor-shift) and to_unit(x) = float(x >> 40) * 2^-23 - 1 (exact in fp32),
///   value = center + scale * u
/// with per-tensor (center, scale) documented in model.cpp; the result is rounded to the dtype
/// (bf16: round-to-nearest-even). Runs on `threads` threads (0: hardware concurrency); the result
/// does not depend on the thread count.
Weights generate_weights(const ModelShape& shape, uint64_t seed = 0, int threads = 0);

}  // namespace megasched::schedule
