// The sweep strategy (`--strategy sweep`): screen, combine, move. A climb that looks at the whole
// neighbourhood before it commits, so an early mode switch that pays a little (a weight stream
// through shared memory, say) does not lock the run into that mode's basin while the moves that
// pay more in the other mode are never tried together.
//   - Screen: every one-knob neighbour of the base is measured, except moves an earlier screen saw
//     fail or run at least `kDisasterRatio` (1.5x) its base's latency (a thread count of 1024
//     stays a disaster whatever else changed).
//   - Combine: the screened moves that made the base faster (by more than 0.3%), fastest first,
//     one per knob; the base with the best 2, 3, ... up to 8 of them applied together is measured,
//     all at once (a combination that does not fit the shape leaves that move out).
//   - Swap: from the fastest set of moves measured so far (a chain or a single move), each faster
//     move left out of it is measured added to it and in place of each of its moves (up to 16
//     configs a stage; again while the fastest set gets faster, 3 stages at most). A move that
//     made the chain slower usually clashes with one move of it: a swap finds which.
//   - Move: the fastest config measured in the round becomes the next base. A round with nothing
//     faster than its base by more than 0.5% ends the climb: the next base is a 2-3 knob
//     perturbation of an elite (one of the `elite_size` fastest configs seen), measured first
//     (one per slot the loop asks for: the first measured is the base).
// While a phase waits for its trials (state.pending > 0) it proposes nothing, except that the chain
// does not wait for the screen's last few (max(4, an eighth of it): they join the swap stages), so
// the chain's kernels build while those run, and that the idle slots of a screen's last trials or
// of a combining stage (more GPUs than its configs, or a queue to keep full while the next stage
// cannot be known) screen the round's fastest config so far ahead of its round: if the round moves
// there, those outcomes are the next screen's first (so stages no longer leave GPUs idle); when the
// loop holds none of them any more (pending 0: a proposal was dropped as already evaluated) it goes
// on with what it has. Its proposals are moves from its own base, so they outlive the loop's
// incumbent.
#pragma once

#include <memory>

#include "search/strategy.h"

namespace megasched::search {

std::unique_ptr<Strategy> make_sweep_strategy(const StrategyOptions& options);

}  // namespace megasched::search
