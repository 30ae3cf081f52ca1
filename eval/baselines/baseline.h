// The op-by-op baselines of a decode step: the same weights run the way a conventional
// implementation would run them, each captured once in a CUDA graph and replayed. Two kinds:
//
// "cublas" (CublasBaseline): GEMVs go through cuBLAS (bf16 or fp32 weights and inputs, fp32
// accumulation and output; the residual adds ride on beta = 1 into the fp32 hidden state), small
// NVRTC kernels (eval/baselines/baseline.cuh) do the embedding, RMSNorm, RoPE + KV append,
// attention, SiLU * up and argmax. The whole step is captured once in a CUDA graph and replayed;
// token and position live in device memory, so one graph serves every step. Without the CUDA
// toolkit eval/baselines/baseline_nocuda.cpp reports that no GPU is available.
//
// "graph-pdl" (GraphPdlBaseline, eval/baselines/baseline_pdl_cuda.cpp, kernels in
// eval/baselines/pdl_baseline.cuh): the pipeline done well: hand-written bf16/fp32 GEMVs in one
// wave of persistent blocks, each warp streaming its row pairs' 16-byte vectors double-buffered in
// registers with fp32 accumulation, RMSNorm fused into the next GEMV's prologue, RoPE + KV append
// in the QKV epilogue, residual adds in epilogues, split-KV attention whose splits are combined by
// the last split block to finish, the argmax over the LM head's blocks, and programmatic dependent
// launch on sm_90 (each kernel's first weights load while its predecessor finishes): 2 + 5 x
// layers kernels per step. Each GEMV's blocks per SM (one or two) is chosen by measurement when
// the baseline is created (info: gemv_blocks_per_sm, and gemv_tuning with every geometry tried).
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

/// One baseline decode step replayed from a CUDA graph. Token and position live in device memory,
/// so one graph serves every step; the KV cache fills as steps run.
class Baseline {
 public:
  virtual ~Baseline() = default;
  /// "cublas" | "graph-pdl"
  virtual const char* kind() const = 0;
  /// One step by graph replay; returns the logits (vocab floats).
  virtual std::vector<float> step(int32_t token, int32_t position) = 0;
  /// The argmax the graph's last kernel wrote in the latest step.
  virtual int32_t last_argmax() = 0;
  /// One step by graph replay that copies back only its argmax (the step cell), not the logits:
  /// what greedy generation feeds to the next step.
  virtual int32_t step_argmax(int32_t token, int32_t position) = 0;
  /// One timed graph replay (events around the replay only), microseconds.
  virtual double time_step_us(int32_t token, int32_t position, bool flush_l2) = 0;
  /// Graph nodes, kernel build key and what the kind adds.
  virtual const nlohmann::json& info() const = 0;
  /// One replay at (token, position) with each kernel's start, passage of its wait for the
  /// predecessors and end stamped by the GPU's global timer, for the kinds whose kernels are the
  /// project's own (nullopt otherwise). See GraphPdlBaseline::timeline.
  virtual std::optional<nlohmann::json> timeline(int32_t /*token*/, int32_t /*position*/) {
    return std::nullopt;
  }
};

/// Every baseline kind, in the order they are built and timed: {"cublas", "graph-pdl"}.
const std::vector<std::string>& baseline_kinds();

/// Builds the baseline of `kind` (one of baseline_kinds()). nullptr and *error on failure (an
/// unknown kind names the known ones).
std::unique_ptr<Baseline> create_baseline(const std::string& kind, const schedule::Weights& weights,
                                          std::string* error);

class CublasBaseline : public Baseline {
 public:
  /// Uploads (or reuses) the weights, builds the small kernels, captures the graph. nullptr and
  /// *error on failure.
  static std::unique_ptr<CublasBaseline> create(const schedule::Weights& weights,
                                                std::string* error);
  ~CublasBaseline() override;
  CublasBaseline(const CublasBaseline&) = delete;
  CublasBaseline& operator=(const CublasBaseline&) = delete;

  const char* kind() const override { return "cublas"; }
  std::vector<float> step(int32_t token, int32_t position) override;
  int32_t last_argmax() override;
  int32_t step_argmax(int32_t token, int32_t position) override;
  double time_step_us(int32_t token, int32_t position, bool flush_l2) override;
  /// Graph nodes, cuBLAS version, kernel build key.
  const nlohmann::json& info() const override { return info_; }

  struct Impl;

 private:
  CublasBaseline() = default;
  std::unique_ptr<Impl> impl_;
  nlohmann::json info_;
};

/// The graph-pdl baseline (see the header comment).
class GraphPdlBaseline : public Baseline {
 public:
  /// Uploads (or reuses) the weights, builds the kernels (NVRTC, cached), captures the graph.
  /// nullptr and *error on failure, also for a shape the kernels do not serve (odd row counts,
  /// rows that are not whole 16-byte vectors).
  static std::unique_ptr<GraphPdlBaseline> create(const schedule::Weights& weights,
                                                  std::string* error);
  ~GraphPdlBaseline() override;
  GraphPdlBaseline(const GraphPdlBaseline&) = delete;
  GraphPdlBaseline& operator=(const GraphPdlBaseline&) = delete;

  const char* kind() const override { return "graph-pdl"; }
  std::vector<float> step(int32_t token, int32_t position) override;
  int32_t last_argmax() override;
  int32_t step_argmax(int32_t token, int32_t position) override;
  double time_step_us(int32_t token, int32_t position, bool flush_l2) override;
  /// Graph nodes, kernels per step, whether PDL is on, the attention splits, the GEMV geometry
  /// and its tuning, the build key.
  const nlohmann::json& info() const override { return info_; }
  /// {"step_us", "kernels": [{"kernel", "start_us", "first_wait_us", "last_wait_us", "end_us"}]
  /// (from the first kernel's start, in launch order), "by_kernel": {name: {"launches",
  /// "critical_us" (the sum of each launch's end minus its predecessor's end: the step's time
  /// spent on it), "released_us" (the sum of first wait passed minus predecessor's end: the
  /// dependency hop), "after_wait_us" (the sum of end minus last wait passed)}}}. The replay runs
  /// a second graph with the stamps on (a null test per block when off).
  std::optional<nlohmann::json> timeline(int32_t token, int32_t position) override;

  struct Impl;

 private:
  GraphPdlBaseline() = default;
  std::unique_ptr<Impl> impl_;
  nlohmann::json info_;
};

/// Why the graph-pdl kernels cannot serve `shape` (empty when they can): every GEMV row is whole
/// 16-byte vectors and its input fits in shared memory.
std::string graph_pdl_misfit(const schedule::ModelShape& shape);

/// Which baselines a GPU trial times beside the megakernel (`--baselines`): a comma-separated list
/// of baseline_kinds(), or "all", "none", or "auto" (graph-pdl, or cuBLAS where graph-pdl cannot
/// run the model's shape: graph-pdl has been the faster of the two in every measurement,
/// BENCHMARKS.md, and speedup_vs_baseline is against the faster one timed). nullopt with *error
/// (naming the text and the choices) for anything else. "auto" stays as written: it is resolved per
/// model by baselines_for.
std::optional<std::vector<std::string>> parse_baseline_selection(const std::string& text,
                                                                 std::string* error);
/// The selection's text as `--baselines` takes it ("none" when empty).
std::string baseline_selection_text(const std::vector<std::string>& selection);
/// The kinds a trial of `shape` times: the selection with "auto" resolved (graph-pdl, or cublas
/// when graph_pdl_misfit(shape) says why not).
std::vector<std::string> baselines_for(const std::vector<std::string>& selection,
                                       const schedule::ModelShape& shape);

/// One baseline kind's median latency in a run.
struct BaselineMedian {
  std::string kind;
  double median_us = 0.0;
};

/// The strongest baseline: the lowest positive median (the earlier kind on a tie); nullopt when
/// none was measured. speedup_vs_baseline is always against this one.
std::optional<BaselineMedian> strongest_baseline(const std::vector<BaselineMedian>& measured);

struct BaselineTiming {
  std::string kind = "cublas";  // one of baseline_kinds()
  int position = 0;             // position timed (the baseline fills the KV cache up to it)
  int warmup = 10;              // untimed replays
  int iterations = 100;         // timed replays
  uint64_t seed = 0;            // the token sequence's seed (evaluate's)
  bool timeline = false;        // add the per-kernel timeline of one replay (graph-pdl only)
};

/// `megasched baseline`: the baseline of timing.kind checked against the eager reference at
/// position 0, filled to `position`, timed there (L2 flushed when the weights fit in twice the L2)
/// and held to the floor of `target` (the live device): {"model", "device", "position",
/// "latency_us", "latency_p90_us", "latency_spread_us", "iterations", "l2_flushed", "floor_us",
/// "floor_datasheet_us", "bytes_min", "check_position_0", "kind", "info", and "pct_of_floor" /
/// "pct_of_datasheet", or "note" without "latency_us" when the median is below the floor, and
/// "timeline" when asked}. nullopt with *error when the baseline cannot be built, has no timeline
/// when one is asked for, or a device call fails. `samples_us`, when given, receives the timed
/// replays' latencies.
std::optional<nlohmann::json> time_baseline(const schedule::Weights& weights,
                                            const schedule::GpuTarget& target,
                                            const BaselineTiming& timing, std::string* error,
                                            std::vector<double>* samples_us = nullptr);

}  // namespace megasched::eval
