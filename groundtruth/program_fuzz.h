// Adversarial programs for the validator (the scorecard that holds validate() to the ground truth
// on them: groundtruth/scorecard.h).
//
// Three sources of programs:
//   - ProgramBuilder: small hand-built element-wise programs (kAdd tasks over activation slots),
//     for unit tests that pin one rule each and as the base of random DAGs;
//   - random_dag_program: random small task DAGs on a few queues, safe or unsafe (dependencies
//     dropped, thresholds perturbed, queues shuffled, counters shared, a dynamic queue);
//   - mutate: one labelled defect injected into a valid program (a real lowering or a safe random
//     DAG), in the named classes of MutationClass.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "schedule/program.h"
#include "schedule/target.h"

namespace megasched::groundtruth {

/// A small target (H100 per-SM limits, `num_sms` SMs) so hand-built programs have few queues.
schedule::GpuTarget fuzz_target(int num_sms = 4);

/// Builds element-wise programs: every task is `act[out + r] = act[in + r] + act[in2 + r]` for r
/// in [0, rows). Activations [0, input_elements) are the inputs: the rope table (model.rope_table
/// 0, head_dim 2 x input_elements; at most 128 inputs, since the kernel builds head dimensions up
/// to 256), the only activations the loader writes before a step. The rest is written by tasks.
/// Launch shape: 256 threads, 1 block per SM, grid = target.num_sms, one queue per block.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(const schedule::GpuTarget& target, uint32_t act_elements = 4096,
                          uint32_t input_elements = 128);

  /// A counter; its declared per-step total is filled in by finish() from its producers unless
  /// `declared_total` is given.
  uint32_t counter(const std::string& name, std::optional<uint32_t> declared_total = std::nullopt);
  /// A logical op (for labels); tasks name it by id.
  uint32_t op(const std::string& name);
  /// Appends a kAdd task to `queue` (created on demand); returns its id.
  uint32_t add(int queue, uint32_t op, uint32_t in, uint32_t in2, uint32_t out, uint32_t rows,
               std::vector<ms_abi::Wait> waits = {}, uint32_t signal_counter = 0,
               uint32_t increment = 0);
  /// Uses one global dynamic queue instead of per-block queues (tasks go to queue 0 in add order).
  void set_dynamic(bool dynamic) { program_.launch.dynamic_queue = dynamic; }
  schedule::Program finish() const;

 private:
  schedule::Program program_;
  std::vector<std::optional<uint32_t>> declared_;
};

/// The defect classes of mutate().
enum class MutationClass : uint8_t {
  kDropWait,              // remove one wait from a task
  kLowerThreshold,        // lower one threshold (still > 0)
  kRaiseThreshold,        // raise one threshold past what its counter can reach
  kSwapInQueue,           // swap two tasks of one queue
  kMoveToQueue,           // move a task to another queue
  kOverlapOutputs,        // shift one tile's output onto part of another's
  kRemoveSignal,          // a producer stops signalling
  kCrossQueueCycle,       // a producer additionally waits for one of its own consumers
  kPartialMultiProducer,  // a full wait on a multi-producer counter becomes partial
  kTooManyThreads,        // threads per block or per SM beyond the limits
  kSmemOverCap,           // dynamic shared memory over the opt-in cap
  kGridNotCoResident,     // more blocks than can be resident at once
  // Beyond the dependency graph (groundtruth/fuzz_mutations.h):
  kCounterTotalWrap,        // a counter's per-step total passes 2^31 (32-bit counter arithmetic)
  kRingStagingOverflow,     // weight-ring staging not a whole number of blocks (into page 0)
  kRingPageBelowPiece,      // weight-ring pages smaller than one row piece (the loader never ends)
  kNormGammaBeyondTile,     // the ring reads the norm gamma over the whole row, past the weights
  kKvNeverAppended,         // attention reads a K/V head that no task appends
  kProgramMarkedInput,      // a task reads fresh activations the program itself marks input
  kSmemAllocationUnit,      // shared memory that fits only without the 128-byte allocation unit
  kSharedCounterAcrossOps,  // two ops signal one counter (documented rejection when safe)
  kCount,
};
const char* mutation_class_name(MutationClass c);

/// Injects one defect of class `c` into a copy of `base`; nullopt when `base` has no site for it
/// (e.g. no multi-producer counter). `rng` picks the site.
std::optional<schedule::Program> mutate(const schedule::Program& base,
                                        const schedule::GpuTarget& target, MutationClass c,
                                        std::mt19937_64& rng);

/// A random small DAG program (4-20 tasks, 1-4 queues), safe or unsafe; `label` gets the recipe
/// ("dag/safe", "dag/missing_dep", ...).
schedule::Program random_dag_program(const schedule::GpuTarget& target, std::mt19937_64& rng,
                                     std::string* label);
/// A random DAG program built safe (every dependency waited on, queues in topological order).
schedule::Program random_safe_dag_program(const schedule::GpuTarget& target, std::mt19937_64& rng);

}  // namespace megasched::groundtruth
