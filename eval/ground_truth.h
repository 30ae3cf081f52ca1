// The ground truth the validator is measured against. It shares no code with validate() or the
// footprints (it includes neither): it decides safety of a small program by brute force.
//
//   - Element accesses come from the ReferenceVm itself (record_accesses: ReferenceVm::execute
//     with a recorder), element by element, at a concrete position; nothing is derived from the
//     Instr fields by hand.
//   - Every interleaving of the per-block queues under counter semantics is explored (a task may
//     start when it heads its queue, or has been claimed from the dynamic queue by one of
//     grid_blocks workers, and every wait (c, t) has counter c >= t; finishing adds its increment).
//     States are the sets of finished tasks (plus the claim cursor of a dynamic queue); a hash set
//     of visited states collapses the interleavings that reach the same state (state-hash
//     reduction), so the cost is the number of distinct states, not of orders.
//   - In every reachable state, for every task x that may start: if an unfinished task w != x
//     writes an element x reads or writes, x can run before (or during) w: a race, or a stale read
//     when w can never be co-enabled with x. A state with no task that can start and unfinished
//     work is a deadlock.
//   - Static facts: an element written by two tasks (each op output is written once per step), a
//     read of an element that no task writes and that is not an input, a counter whose declared
//     per-step total is not what its producers add (epoch scaling breaks on the next step), and
//     the launch: the grid must fit the blocks the target can hold at once given threads, shared
//     memory, registers and its block limit.
// dynamic_check is the second, independent backstop: the ReferenceVm in many random valid orders
// must give bit-identical activations and logits.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "schedule/model.h"
#include "schedule/program.h"
#include "schedule/target.h"

namespace megasched::eval {

/// Element key: (buffer << 56) | element index.
constexpr uint64_t element_key(uint32_t buffer, uint64_t index) {
  return (static_cast<uint64_t>(buffer) << 56) | index;
}

/// Per task, the sorted distinct elements it reads and writes.
struct TaskAccesses {
  std::vector<std::vector<uint64_t>> reads;
  std::vector<std::vector<uint64_t>> writes;
};

/// Runs every task once on a fresh ReferenceVm (in task-id order; values do not matter, only which
/// elements are touched) at `position` and records its accesses. False with *error when the program
/// is too malformed to execute (unknown opcode, a task out of range).
bool record_accesses(const schedule::Program& program, const schedule::Weights& weights,
                     int32_t position, TaskAccesses* out, std::string* error);

/// The positions whose accesses a safety verdict must cover: the current key is read by the
/// partition that holds it, which varies with the position; at positions 0 .. P-1 (P the largest
/// attention partition count) every partition holds it once. {0} when there is no attention.
std::vector<int32_t> ground_truth_positions(const schedule::Program& program);

struct GroundTruth {
  bool complete = true;               // false: the state limit was hit before every state was seen
  uint64_t states = 0;                // distinct states explored
  std::set<std::string> kinds;        // "deadlock", "race", "stale_read", "uninitialized_read",
                                      // "double_write", "epoch", "launch", "malformed"
  std::vector<std::string> findings;  // one line each (first few)
  bool safe() const { return complete && kinds.empty(); }
};

struct GroundTruthOptions {
  uint64_t max_states = 2'000'000;
  size_t max_tasks = 128;
  bool stop_at_first = true;  // stop exploring at the first hazard found in a state
};

/// Decides safety of `program` by exhaustive exploration, with `accesses` from record_accesses.
GroundTruth explore_ground_truth(const schedule::Program& program,
                                 const schedule::GpuTarget& target, const TaskAccesses& accesses,
                                 const GroundTruthOptions& options = {});

struct DynamicCheck {
  int orders = 0;
  bool completed = true;      // every run drained every queue
  bool deterministic = true;  // every run gave the same activations and logits, bit for bit
  std::string detail;         // the first difference or stuck report
};

/// Runs one decode step in `orders` random valid orders (seeds seed .. seed + orders - 1), each on
/// a fresh ReferenceVm, and compares every run's activations and logits bit for bit with the first.
DynamicCheck dynamic_check(const schedule::Program& program, const schedule::Weights& weights,
                           int orders, uint64_t seed, int32_t token, int32_t position);

}  // namespace megasched::eval
