// GpuVm: the loader and runner of the persistent megakernel. It builds the kernel for a program
// (NVRTC, cached on disk and per process), uploads the model's weights once per process (shared by
// every trial of that model and by the cuBLAS baseline), uploads the program's tables, checks
// co-residency with the occupancy API before any launch, and runs decode steps: write the step
// cell {token, position, epoch}, launch, read the logits. A step that hits the kernel's spin bound
// comes back as `hang` with a per-block dump; a failed driver call throws vm::GpuError.
// The process-wide runtime it shares with the baseline (the context, the stream, the weights, the
// module cache) is vm/cuda_runtime.h. No CUDA types appear here, so the header compiles without the
// toolkit (vm/gpu_vm_nocuda.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/model.h"
#include "schedule/program.h"
#include "vm/kv_snapshot.h"

namespace megasched::vm {

struct GpuVmOptions {
  double hang_timeout_s = 5.0;  // device spin bound of one wait
  bool force_launch = false;    // test-only: launch even when the grid is not co-resident
  std::string cache_dir;        // cubin cache; empty: vm::default_cache_dir()
  bool profile = false;         // build with MS_PROFILE=1: every task stamps its times (slower)
  // Test-only: extra "NAME=VALUE" kernel defines (the fault-injection switches MS_TEST_FAULT_* of
  // vm/device/common.cuh). No config, flag or MCP argument reaches this field.
  std::vector<std::string> test_defines;
};

/// What one step came to.
struct StepOutput {
  std::string status;  // "ok" | "hang" (spin bound hit) | "timeout" (host watchdog)
  std::string message;
  std::vector<float> logits;  // the "logits" region (status ok)
  int32_t argmax = -1;        // written by the program's kArgmax task
  nlohmann::json hang_dump = nlohmann::json::array();
};

/// One task's times in a profiled step (globaltimer ns, relative to the earliest `start` of the
/// step). start: the block took the task; ready: its waits held; done: the op's writes finished
/// (block barrier); signalled: its signal was published. block/order: who ran it and its place in
/// that block's run (0-based). Tasks the step did not run keep block = -1.
struct TaskStamp {
  int32_t task = -1;
  int32_t block = -1;
  int32_t order = -1;
  uint64_t start_ns = 0;
  uint64_t ready_ns = 0;
  uint64_t done_ns = 0;
  uint64_t signal_ns = 0;
  // A streamed GEMV's input staged and weights multiplied (before its epilogue); 0 for any other
  // task (abi/kernel_args.h kStampWords).
  uint64_t staged_ns = 0;
  uint64_t streamed_ns = 0;
};

/// A profiled step: the step's own output and one stamp per task (indexed by task id).
struct ProfileOutput {
  StepOutput step;
  std::vector<TaskStamp> stamps;
  double wall_us = 0.0;  // CUDA-event time of the profiled launch (stamping included)
};

class GpuVm {
 public:
  /// Builds, loads and uploads. Returns nullptr with *error when the build or a check fails;
  /// *rejected is set when the only problem is that the grid is not co-resident (never launched).
  static std::unique_ptr<GpuVm> create(const schedule::Program& program,
                                       const schedule::Weights& weights,
                                       const GpuVmOptions& options, std::string* error,
                                       bool* rejected);
  /// As create, but the VM's steps read and write `kv_owner`'s KV cache (one device buffer, never
  /// copied, kept alive by both VMs) instead of a cache of its own: the plans of schedule/plan.h
  /// switch program at a bucket boundary on the cache the steps before it wrote. The two programs
  /// must lay the cache out alike (eval::kv_layout_difference); a cache of another size is an
  /// error.
  static std::unique_ptr<GpuVm> create_sharing_kv(const schedule::Program& program,
                                                  const schedule::Weights& weights,
                                                  const GpuVmOptions& options, GpuVm& kv_owner,
                                                  std::string* error, bool* rejected);
  ~GpuVm();
  GpuVm(const GpuVm&) = delete;
  GpuVm& operator=(const GpuVm&) = delete;

  /// One decode step, synchronously: logits and argmax, or a hang dump.
  StepOutput step(int32_t token, int32_t position);
  /// As step, but only the argmax comes back (no logits): what greedy generation feeds to the
  /// next step. The host learns of the step's end by polling without sleeping, so the per-token
  /// wall time is the kernel plus a launch and a 20-byte copy.
  StepOutput step_argmax(int32_t token, int32_t position);

  /// Overwrites the device KV cache rows of positions [0, kv.positions) with `kv` (one strided
  /// copy), so a step at position kv.positions runs from the reference's history without the steps
  /// before it. False with *error when the snapshot does not fit the program's model.
  bool load_kv(const KvSnapshot& kv, std::string* error);

  /// One timed step (CUDA events around the launch only; the step cell is written and, when
  /// `flush_l2`, the L2 is flushed before the start event). Microseconds. Check hung() after a
  /// batch of timed steps.
  double time_step_us(int32_t token, int32_t position, bool flush_l2);

  /// One step of a VM created with GpuVmOptions::profile, with every task's stamps. Throws
  /// vm::GpuError when the VM was not built for profiling.
  ProfileOutput profile_step(int32_t token, int32_t position);

  /// True once a launch hit the spin bound (the abort flag is set): the VM is dead.
  bool hung();

  /// Registers, spills, shared memory, occupancy, cache hit, build time: goes into the verdict.
  const nlohmann::json& kernel_info() const { return kernel_info_; }

  struct Impl;

 private:
  GpuVm() = default;
  /// create and create_sharing_kv: the KV cache of `kv_owner` when given, else one of its own.
  static std::unique_ptr<GpuVm> create_vm(const schedule::Program& program,
                                          const schedule::Weights& weights,
                                          const GpuVmOptions& options, GpuVm* kv_owner,
                                          std::string* error, bool* rejected);
  std::unique_ptr<Impl> impl_;
  nlohmann::json kernel_info_;
};

}  // namespace megasched::vm
