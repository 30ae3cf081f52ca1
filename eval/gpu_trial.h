// The GPU half of a trial: build the kernel for the program (NVRTC, cached), check co-residency,
// run it over each reference window (eval/reference_cache.h: the reference KV cache of the
// positions before the window is loaded into the kernel's KV buffer, then a few consecutive steps
// run, so the kernel's own KV writes are read back) and compare with the reference logits, then
// time it (CUDA events, warm-up, many iterations, L2 flushed when the model fits in L2), re-check
// correctness after timing, and time the selected CUDA-graph baselines interleaved with it.
// Implemented in eval/gpu_trial_cuda.cpp; without the CUDA toolkit eval/gpu_trial_nocuda.cpp
// reports that no GPU is available. The device itself (is there one, its limits, its bandwidth) is
// eval/device.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/reference_cache.h"
#include "schedule/model.h"
#include "schedule/program.h"
#include "schedule/target.h"

namespace megasched::eval {

/// The baselines one evaluator's trials share (one model's weights): each kind built and checked
/// against the first window once, then timed in every trial that selects it. Trials that share
/// one run one at a time. Opaque; make_baseline_cache() creates an empty one.
struct BaselineCache;
std::shared_ptr<BaselineCache> make_baseline_cache();

struct GpuTrialOptions {
  int warmup = 10;       // untimed iterations
  int iterations = 100;  // timed iterations (>= 100 for a reported latency)
  // The baselines timed beside the megakernel, interleaved with it (eval/baselines/baseline.h
  // parse_baseline_selection: kinds, or "auto"); empty: none.
  std::vector<std::string> baselines = {"cublas", "graph-pdl"};
  // Timing stops after stop_check_iterations timed steps when their median is above
  // stop_above_us (0: never): a trial that slow is timed well enough to be judged, and its other
  // steps would cost seconds (kernel.timing_stopped says when and why).
  double stop_above_us = 0.0;
  int stop_check_iterations = 10;
  // Where the baselines are kept between trials of the same weights (null: each trial builds and
  // checks its own); eval::TrialEvaluator gives its trials one.
  std::shared_ptr<BaselineCache> baseline_cache;
  double hang_timeout_s = 5.0;  // device-side spin bound
  bool force_launch = false;    // test-only: launch even when not co-resident / not validated
  int timed_position = -1;      // position timed; -1: the last position of the last window. It
                                // must lie in a window (the windows overload says so otherwise).
  // Test-only: extra kernel defines (the MS_TEST_FAULT_* switches; vm::GpuVmOptions::test_defines).
  std::vector<std::string> test_kernel_defines;
};

struct GpuTrialResult {
  std::string status;   // "ok" | "rejected" (not co-resident) | "incorrect" | "hang" | "crash"
  std::string message;  // one line when status != "ok"
  nlohmann::json hang_dump =
      nlohmann::json::array();  // per block: queue, task, counter, value, threshold
  nlohmann::json kernel = nlohmann::json::object();  // registers, spills, smem, cache hit, build ms
  double max_abs_err = 0.0;  // worst over checked positions (and the post-timing re-check)
  double rel_err = 0.0;
  bool argmax_match = false;
  // One entry per position compared: {"path": "gpu", "position", "window_start" (the position the
  // reference KV cache was loaded for), "rel_err", "max_abs_err", "argmax_match", "kernel_argmax",
  // "pass"}.
  nlohmann::json checks = nlohmann::json::array();
  std::vector<double> samples_us;           // megakernel step latency samples
  std::vector<double> baseline_samples_us;  // the cublas baseline's samples (same run)
  struct BaselineSamples {
    std::string kind;                // one of eval::baseline_kinds()
    std::vector<double> samples_us;  // same run, interleaved with the megakernel's
  };
  std::vector<BaselineSamples> baselines;  // every baseline kind that built, in baseline_kinds()
                                           // order
  int timed_position = 0;
  // Wall time in ms of each phase run: compile_and_load (GpuVm::create: NVRTC or the cubin cache,
  // weights upload), kv_load (the reference KV caches uploaded), gpu_check (the steps, kv_load
  // excluded), baseline (its build and fill), time, recheck.
  nlohmann::json phases_ms = nlohmann::json::object();
};

/// The check from reference windows: for each window (ascending starts) its KV snapshot is loaded
/// and the kernel steps through positions start .. start + logits.size() - 1, compared with each
/// non-empty logits entry. tokens[p] is the token fed at position p (every window position).
GpuTrialResult run_gpu_trial(const schedule::Program& program, const schedule::Weights& weights,
                             const std::vector<int32_t>& tokens,
                             const std::vector<ReferenceWindow>& windows,
                             const GpuTrialOptions& options);

/// The walk from position 0 (tests and benchmarks with eager logits in hand): refs[i] holds the
/// eager logits at positions[i]; the kernel runs every position up to the largest checked (or
/// timed) one, filling its own KV cache. One window from 0 with an empty KV snapshot.
GpuTrialResult run_gpu_trial(const schedule::Program& program, const schedule::Weights& weights,
                             const std::vector<int32_t>& tokens,
                             const std::vector<std::vector<float>>& refs,
                             const std::vector<int>& positions, const GpuTrialOptions& options);

}  // namespace megasched::eval
