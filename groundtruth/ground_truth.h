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
//   - A wait holds as the device tests it (groundtruth/device_model.h device_wait_holds): 32-bit
//   counters
//     and targets, which wrap. The true target epoch x total + threshold is a 64-bit number; the
//     interleavings are explored at step epoch 0 and again at the first epoch at which the largest
//     counter's targets pass 2^32, where a comparison that is not wrap-safe goes wrong.
//   - Static facts: an element written by two tasks (each op output is written once per step), a
//     read of an element that no task writes and that is not an input, a counter whose declared
//     per-step total is not what its producers add (epoch scaling breaks on the next step), and
//     the launch: the grid must fit the blocks the target can hold at once given threads, shared
//     memory (dynamic + the kernel's static + the runtime's reserve, in whole allocation units),
//     registers and its block limit.
//   - Inputs come from the model and the loader, never from the program's region flags: the
//     weights, the step cell's token / position / epoch, the rope table (head_dim / 2 floats at
//     model.rope_table), and the KV history: a K/V row of an earlier position is an input exactly
//     when this step's appends write the same head's row at the current position (an append
//     writes the row of the step's position, so earlier steps wrote the earlier rows).
//   - The kernel build (groundtruth/device_model.h, transcribed from the device code): a build that
//   does
//     not compile ("build"), a weight-ring task whose input staging runs past the staging area into
//     ring page 0 or whose pages overflow ("smem_overflow"), a loader or compute loop that never
//     advances ("hang"), and a device read beyond its buffer that the ReferenceVm does not make
//     (the ring paths read the norm gamma over the whole row: "out_of_bounds"). It cannot judge
//     registers per thread (only the compiled kernel knows them): it takes the floor of 32.
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

namespace megasched::groundtruth {

/// Element key: (buffer << 56) | element index.
constexpr uint64_t element_key(uint32_t buffer, uint64_t index) {
  return (static_cast<uint64_t>(buffer) << 56) | index;
}

/// Per task, the sorted distinct elements it reads and writes.
struct TaskAccesses {
  std::vector<std::vector<uint64_t>> reads;
  std::vector<std::vector<uint64_t>> writes;
  int32_t position = 0;  // the step position they were recorded at (which KV rows are history)
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
  bool complete = true;         // false: the state limit was hit and the closures could not decide
  bool by_closure = false;      // the state limit was hit and the closures decided (closure.h)
  uint64_t states = 0;          // distinct states explored
  std::set<std::string> kinds;  // "deadlock", "race", "stale_read", "uninitialized_read",
                                // "double_write", "epoch", "launch", "malformed", "build",
                                // "smem_overflow", "hang", "out_of_bounds"
  std::vector<std::string> findings;  // one line each (first few)
  bool safe() const { return complete && kinds.empty(); }
};

struct GroundTruthOptions {
  uint64_t max_states = 2'000'000;
  size_t max_tasks = 128;
  bool stop_at_first = true;  // stop exploring at the first hazard found in a state
  bool wrap_epoch = true;     // explore again at the epoch where the largest counter wraps
  // At the state limit, decide by closures when the step is persistent (groundtruth/closure.h).
  bool closure_at_limit = true;
  bool closure_only = false;  // tests: decide every epoch by closures, exploring nothing
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

}  // namespace megasched::groundtruth
