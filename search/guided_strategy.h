// The model-guided strategy (`--strategy guided`), after TVM's auto-scheduler: a cost model ranks
// many generated candidates and only the best few are measured.
//   - The model is the learned prior (flywheel/prior.h): ridge regression on knob indicators and
//     their pairwise products, fitted on the corpus records the loop passes in (training: its
//     own corpus and, on a GPU, the shared corpus of flywheel/shared_corpus.h) and
//     refitted on every outcome of this run before each proposal.
//   - Candidates: `candidates` configs bred from the elite pool (the `elite_size` fastest configs
//     seen): 1-3 knob mutations of an elite (60%), crossovers of two elites (30%), random configs
//     (10%), each ranked by predicted log latency plus a failure-risk penalty, minus a bonus of
//     0.03 per knob value no trial of this run has had (the model has no weight for those: without
//     the bonus it refines the noise of the values it knows).
//   - Each proposal is, with probability `exploration` (or until the model has
//     `min_prior_samples` latencies), exploration: a perturbed elite or, with none yet, a random
//     config; else the best-ranked untried candidate.
//   - The guard: a candidate predicted slower than `guard` x the model's prediction for the
//     incumbent is never an exploitation pick (when every candidate is, the proposal explores).
#pragma once

#include <memory>

#include "search/strategy.h"

namespace megasched::search {

std::unique_ptr<Strategy> make_guided_strategy(const StrategyOptions& options);

}  // namespace megasched::search
