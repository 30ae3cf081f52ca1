// The op-by-op baseline decode step: the same weights, one kernel per op, as a tuned conventional
// implementation would run it. GEMVs go through cuBLAS (bf16 or fp32 weights and inputs, fp32
// accumulation and output; the residual adds ride on beta = 1 into the fp32 hidden state), small
// NVRTC kernels (vm/device/baseline.cuh) do the embedding, RMSNorm, RoPE + KV append, attention,
// SiLU * up and argmax. The whole step is captured once in a CUDA graph and replayed; token and
// position live in device memory, so one graph serves every step. Without the CUDA toolkit
// eval/baseline_nocuda.cpp reports that no GPU is available.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/model.h"
#include "schedule/target.h"

namespace megasched::eval {

class CublasBaseline {
 public:
  /// Uploads (or reuses) the weights, builds the small kernels, captures the graph. nullptr and
  /// *error on failure.
  static std::unique_ptr<CublasBaseline> create(const schedule::Weights& weights,
                                                std::string* error);
  ~CublasBaseline();
  CublasBaseline(const CublasBaseline&) = delete;
  CublasBaseline& operator=(const CublasBaseline&) = delete;

  /// One step by graph replay; returns the logits (vocab floats).
  std::vector<float> step(int32_t token, int32_t position);
  /// The argmax the graph's last kernel wrote in the latest step.
  int32_t last_argmax();
  /// One timed graph replay (events around the replay only), microseconds.
  double time_step_us(int32_t token, int32_t position, bool flush_l2);
  /// Graph nodes, cuBLAS version, kernel build key.
  const nlohmann::json& info() const { return info_; }

  struct Impl;

 private:
  CublasBaseline() = default;
  std::unique_ptr<Impl> impl_;
  nlohmann::json info_;
};

struct BaselineTiming {
  int position = 0;      // position timed (the baseline fills the KV cache up to it)
  int warmup = 10;       // untimed replays
  int iterations = 100;  // timed replays
  uint64_t seed = 0;     // the token sequence's seed (evaluate's)
};

/// `megasched baseline`: the baseline checked against the eager reference at position 0, filled to
/// `position`, timed there (L2 flushed when the weights fit in twice the L2) and held to the floor
/// of `target` (the live device): {"model", "device", "position", "latency_us", "latency_p90_us",
/// "latency_spread_us", "iterations", "l2_flushed", "floor_us", "floor_datasheet_us",
/// "bytes_min", "check_position_0", "info", and "pct_of_floor" / "pct_of_datasheet", or "note"
/// without "latency_us" when the median is below the floor}. nullopt with *error when the
/// baseline cannot be built or a device call fails.
std::optional<nlohmann::json> time_baseline(const schedule::Weights& weights,
                                            const schedule::GpuTarget& target,
                                            const BaselineTiming& timing, std::string* error);

}  // namespace megasched::eval
