// The eager reference: a plain op-by-op Llama decode step (Eigen, fp32 accumulation, weights
// upcast), written from the model definition alone, without the IR. It is the oracle both VMs are
// checked against, so it shares no code with lowering or the VMs.
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/model.h"

namespace megasched::eval {

class EagerModel {
 public:
  /// The weights must outlive the model. KV cache sized for shape.max_seq positions.
  explicit EagerModel(const schedule::Weights& weights);

  /// One decode step at `position` (0-based; positions must be fed in order 0, 1, 2 ... since the
  /// KV cache holds the history). Returns the logits (vocab floats). The KV cache stores K and V
  /// rounded to the model dtype, as the VMs do.
  std::vector<float> step(int32_t token, int32_t position);

  /// Greedy decode: feeds `prompt` one token at a time from position 0, then generates
  /// `max_new_tokens` tokens by argmax. Returns the generated tokens.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int max_new_tokens);

  /// Forgets the KV cache.
  void reset();

 private:
  const schedule::Weights& weights_;
  std::vector<float> k_cache_;  // [layer][kv_head][pos][head_dim], dtype-rounded values
  std::vector<float> v_cache_;
};

/// Smallest index of the maximum (ties go low, as kArgmax does).
int32_t argmax(const std::vector<float>& values);

}  // namespace megasched::eval
