// The mutation classes of groundtruth/program_fuzz.h that go beyond the dependency graph: the
// counter arithmetic, the kernel build and its shared memory, what the device reads, what counts as
// an input, and counters shared by ops. Each injects one defect the validator must reject (or, for
// a shared counter, one it documents rejecting; dev/validator_notes.md) and the ground truth
// (groundtruth/ground_truth.h, groundtruth/device_model.h) must be able to judge. mutate()
// dispatches to these.
#pragma once

#include <cstdint>
#include <optional>
#include <random>

#include "schedule/program.h"
#include "schedule/target.h"

namespace megasched::groundtruth {

/// The fuzzer's draws (program_fuzz.cpp, fuzz_mutations.cpp, scorecard.cpp): an index below n
/// (0 when n is 0), and true with probability p. The scorecard's pinned figures depend on them.
inline uint64_t pick(std::mt19937_64& rng, uint64_t n) { return n == 0 ? 0 : rng() % n; }
inline bool chance(std::mt19937_64& rng, double p) {
  return std::uniform_real_distribution<double>(0, 1)(rng) < p;
}

/// Every increment and threshold of one counter scaled so that its per-step total passes 2^31.
std::optional<schedule::Program> mutate_counter_total_wrap(schedule::Program p,
                                                           std::mt19937_64& rng);
/// A weight-ring build whose staging area is exactly one ring task's columns: not a whole number
/// of staging blocks (when the columns are not), so the staging writes into ring page 0.
std::optional<schedule::Program> mutate_ring_staging_overflow(schedule::Program p,
                                                              const schedule::GpuTarget& target,
                                                              std::mt19937_64& rng);
/// A weight-ring build with pages smaller than one row piece (the loader's step is zero).
std::optional<schedule::Program> mutate_ring_page_below_piece(schedule::Program p,
                                                              const schedule::GpuTarget& target,
                                                              std::mt19937_64& rng);
/// A weight-ring build in which a norm-prologue GEMV covers part of its row and its gamma sits at
/// the end of the weights: in bounds for the task's columns, not for the whole row the ring reads.
std::optional<schedule::Program> mutate_norm_gamma_beyond_tile(schedule::Program p,
                                                               const schedule::GpuTarget& target,
                                                               std::mt19937_64& rng);
/// A K/V append that drops the V (or K) rows of its tile: attention reads a cache nobody writes.
std::optional<schedule::Program> mutate_kv_never_appended(schedule::Program p,
                                                          std::mt19937_64& rng);
/// A task's input moved to fresh activations that the program marks `input: true` itself.
std::optional<schedule::Program> mutate_program_marked_input(schedule::Program p,
                                                             std::mt19937_64& rng);
/// An odd number of blocks per SM whose shared memory fits without the 128-byte allocation unit
/// and (mostly) not with it.
std::optional<schedule::Program> mutate_smem_allocation_unit(schedule::Program p,
                                                             const schedule::GpuTarget& target,
                                                             std::mt19937_64& rng);
/// Two ops' counters merged into one (the waits on the second re-based after the first's total).
std::optional<schedule::Program> mutate_shared_counter_across_ops(schedule::Program p,
                                                                  std::mt19937_64& rng);

}  // namespace megasched::groundtruth
