// ReferenceVm: interprets any Program on the CPU, task by task, with the exact opcode semantics of
// abi/abi.h. It runs in queue order or in a seeded random valid order (any task whose waits hold
// and that heads its queue may run next), with monotone counters scaled by the step epoch just like
// the GPU. Token and position are inputs; the KV cache persists across steps. A race-free program
// gives bit-identical output in every valid order.
//
// A dynamic-queue program (launch.dynamic_queue) runs as one global queue claimed in ticket order
// by launch.grid_blocks workers: a claimed task occupies its worker until it runs, and the VM runs
// one of the claimed tasks whose waits hold (the lowest ticket in queue order, a random one in
// random order). A program that cannot finish leaves the step incomplete with the stuck tasks
// named; the epoch is bumped only after a completed step.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "schedule/model.h"
#include "schedule/program.h"
#include "vm/kv_snapshot.h"

namespace megasched::vm {

/// How the VM picks the next task.
enum class RunOrder : uint8_t {
  kQueueOrder,  // block 0's queue until it blocks, then block 1 ... (round-robin over ready heads);
                // dynamic queue: the lowest claimed ticket that is ready
  kRandomOrder,  // a uniformly random ready queue head (dynamic: claimed task) each time (seeded)
  kWaves,  // every ready queue head (dynamic: every ready claimed task) at once, on set_threads
           // threads, then their signals in block (ticket) order: a race-free program's output
           // is bit-identical to kQueueOrder's, in a fraction of the time on a large model
};

/// One element access made while executing a task (for the ground-truth race checker).
struct ElementAccess {
  uint32_t buffer;  // ms_abi::BufferId
  uint64_t index;   // element index
  bool write;
};

class WavePool;  // the threads of one kWaves step (reference_vm.cpp)

class ReferenceVm {
 public:
  /// The program and weights must outlive the VM. Allocates activations, the KV cache (zeroed)
  /// and the counters (zero, epoch 0).
  ReferenceVm(const schedule::Program& program, const schedule::Weights& weights);

  struct StepResult {
    std::vector<float> logits;  // vocab entries
    int32_t argmax = -1;        // as written by the program's kArgmax task
    bool completed = false;     // false: some queue never drained (deadlock); see stuck
    std::string stuck;          // which tasks were stuck and on what (when !completed)
    uint64_t tasks_run = 0;
  };

  /// Runs one decode step: writes the step cell {token, position, epoch}, runs every task, bumps
  /// the epoch. Logits are read from the region named "logits".
  StepResult step(int32_t token, int32_t position, RunOrder order = RunOrder::kQueueOrder,
                  uint64_t seed = 0);

  /// Executes one task's opcode on the current state (no waits checked, no signal). For tests and
  /// the ground-truth explorer; `record`, when set, sees every element access the task makes.
  void execute(uint32_t task, const std::function<void(const ElementAccess&)>* record = nullptr);

  /// Overwrites the KV cache rows of positions [0, kv.positions) with `kv` (the reference's
  /// history), so a step at position kv.positions runs without the steps before it. False when the
  /// snapshot does not fit the program's model (geometry, dtype, max_seq).
  bool load_kv(const KvSnapshot& kv);
  /// The KV cache rows of positions [0, positions) (clamped to [0, max_seq]) as a snapshot,
  /// load_kv's inverse: how `generate` hands one bucket's cache to the next bucket's program.
  KvSnapshot kv_snapshot(int positions) const;

  /// The threads a kWaves step runs a wave's tasks on (the calling thread one of them); 1 (the
  /// default) runs each wave in order on the calling thread. Clamped to [1, 256].
  void set_threads(int threads);

  /// Sets the step cell without running (for driving execute() by hand).
  void set_step(int32_t token, int32_t position);

  const std::vector<float>& activations() const { return act_; }
  const std::vector<uint32_t>& counters() const { return counters_; }
  /// Decode steps completed so far (the epoch the next step runs at), modulo 2^32 like the
  /// device's.
  int32_t epoch() const { return cell_.epoch; }
  /// Puts the counters and the epoch where `epoch` completed steps leave them (every counter at
  /// epoch x its per-step total, modulo 2^32), so a test can run the steps around a counter's wrap
  /// without running the billions before it. Activations and the KV cache are left as they are.
  void resume_at_epoch(uint32_t epoch);

 private:
  /// The value wait `w`'s counter must reach at this step (ms_abi::wait_target, 32-bit).
  uint32_t wait_target(const ms_abi::Wait& w) const;
  bool ready(uint32_t task) const;
  /// Runs a task and signals; when its signal is the last arrival a chained task waits for, runs
  /// and signals that one too (abi/abi.h, Last arrivers). Returns the tasks run (1 or 2).
  uint32_t run_task(uint32_t task);
  /// Adds `task`'s signal to its counter; returns the chained task whose one wait this arrival
  /// completes (abi/abi.h, Last arrivers), if any.
  std::optional<uint32_t> signal(uint32_t task);
  /// A chained task's signal (its own chain field is not followed: one level only).
  void signal_chained(uint32_t task);
  /// execute() with the scratch vector `scratch` (one per thread of a wave).
  void execute_with(uint32_t task, std::vector<float>& scratch,
                    const std::function<void(const ElementAccess&)>* record);
  /// Runs the tasks of one wave (each ready, none ordered before another), then signals them in
  /// the order given and runs, as a second wave, the chained tasks those signals complete.
  /// Returns the tasks run.
  uint64_t run_wave(const std::vector<uint32_t>& wave);
  std::string describe_wait(uint32_t task) const;
  bool run_static(RunOrder order, uint64_t seed, uint64_t* tasks_run, std::string* stuck);
  bool run_dynamic(RunOrder order, uint64_t seed, uint64_t* tasks_run, std::string* stuck);

  const schedule::Program& program_;
  const schedule::Weights& weights_;
  std::vector<float> act_;
  std::vector<float> kv_f32_;      // KV when the model is fp32
  std::vector<uint16_t> kv_bf16_;  // KV when the model is bf16
  std::vector<uint32_t> counters_;
  ms_abi::StepCell cell_{};
  std::vector<float> scratch_;                    // GEMV input vector and tile results
  int threads_ = 1;                               // kWaves: the threads a wave runs on
  std::vector<std::vector<float>> wave_scratch_;  // kWaves: one scratch per thread
  WavePool* wave_pool_ = nullptr;                 // kWaves: the step's threads, while it runs
  uint64_t logits_begin_ = 0;                     // the "logits" region
  uint64_t logits_end_ = 0;
};

}  // namespace megasched::vm
