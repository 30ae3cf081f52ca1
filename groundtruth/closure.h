// The ground truth's second decision procedure, for programs whose interleavings outgrow the
// explorer's state limit (groundtruth/ground_truth.h, GroundTruthOptions::max_states). A step of a
// program is a transition system whose transitions are "task t finishes" (and, with the dynamic
// queue, "the next ticket is claimed"). When every wait, as its counter grows through the step,
// turns true at most once and never back (checked per wait at the epoch: no counter crosses the
// int32 boundary of its target), no transition ever disables another: the system is persistent.
// Then every maximal run that never fires a chosen set of transitions ends in the same state (the
// closure), so
//   - the step deadlocks iff the closure of all transitions leaves a task unfinished;
//   - task x can run while task w has not finished iff x finishes in the closure that holds w
//     back (x != w); both can be enabled at once iff both are enabled at the closure that holds
//     both back.
// These are the explorer's hazards (a deadlock, and an access by an enabled x to what an
// unfinished w writes: a race when both are enabled, else a stale read), decided in a few
// closures per writer instead of every interleaving. It shares nothing with the explorer but the
// wait model of groundtruth/device_model.h (device_waits_hold); tests/groundtruth/closure_test.cpp
// holds it to the explorer on every program the explorer completes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "schedule/program.h"

namespace megasched::groundtruth {

struct ClosureHazard {
  std::string kind;     // "deadlock", "race" or "stale_read"
  std::string message;  // one line
};

/// The hazards of `program`'s step at `epoch` by closures (see above), or nullopt when the system
/// is not persistent at that epoch (some wait can turn false again as its counter grows), where the
/// closures decide nothing. `conflicts(x, w)`: task w writes an element task x accesses.
/// `chained[t]`: task t runs on its chain's last arriver, in no queue. With `stop_at_first` the
/// list ends at the first hazard.
std::optional<std::vector<ClosureHazard>> closure_hazards(
    const schedule::Program& program, uint32_t epoch, const std::vector<char>& chained,
    const std::function<bool(uint32_t x, uint32_t w)>& conflicts, bool stop_at_first);

}  // namespace megasched::groundtruth
