// Hugging Face Llama checkpoints: a directory holding config.json and one or more *.safetensors
// files (with model.safetensors.index.json when sharded) imports into the same ModelShape and
// Weights arena as the presets, so every later stage treats a real model and a preset alike.
//
// Import reads config.json (LlamaForCausalLM / model_type "llama" only; rope_scaling "llama3"
// honoured, max_position_embeddings capped at kCheckpointMaxSeq) and memory-maps the safetensors
// files (schedule/safetensors.h). Tensor dtypes F32, F16 and BF16 are accepted; the arena dtype
// follows the checkpoint's torch_dtype: bfloat16 -> bf16, float16 and float32 -> f32 (F16 widens
// exactly). Every failure (missing file, missing field, missing tensor, wrong shape, unsupported
// dtype or architecture) is a false / nullopt return with a one-line message naming the culprit;
// nothing throws.
//
// Export writes config.json and one model.safetensors in Hugging Face naming, the inverse of import
// (used by tests and `--save`).
#pragma once

#include <optional>
#include <string>

#include "schedule/model.h"

namespace megasched::schedule {

/// KV-cache capacity given to an imported model: min(max_position_embeddings, this).
constexpr int kCheckpointMaxSeq = 8192;

/// The shape described by `dir`/config.json (name = dir). On failure returns nullopt and sets
/// *error (when non-null) to one line naming the field.
std::optional<ModelShape> read_checkpoint_config(const std::string& dir, std::string* error);

/// The shape and every weight of the checkpoint in `dir`. On failure returns nullopt and sets
/// *error (when non-null) to one line naming the file, field or tensor.
std::optional<Weights> load_checkpoint(const std::string& dir, std::string* error);

/// Writes `dir`/config.json and `dir`/model.safetensors (creating `dir`). Tensors are stored in the
/// arena dtype (BF16 or F32). Returns false with *error set on an I/O failure.
bool save_checkpoint(const Weights& weights, const std::string& dir, std::string* error);

/// The Hugging Face name of an arena tensor: "layers.3.wq" ->
/// "model.layers.3.self_attn.q_proj.weight", "embed" -> "model.embed_tokens.weight", "final_norm"
/// -> "model.norm.weight", "lm_head" -> "lm_head.weight". Empty for an unknown name.
std::string hf_tensor_name(const std::string& arena_name);

}  // namespace megasched::schedule
