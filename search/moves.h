// Candidate moves the built-in strategies share (search/strategy.cpp, search/guided_strategy.cpp,
// search/sweep_strategy.cpp): describing a change, drawing an untried random config, crossing two
// configs, the elite pool (the best configs a run has seen, to restart or breed from instead of
// uniform random configs) and perturbing one of its members.
#pragma once

#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "flywheel/prior.h"
#include "schedule/config.h"
#include "search/strategy.h"

namespace megasched::search {

/// "tiling.gemv_rows_per_task 64->128, launch.blocks_per_sm 1->2" ("no change" when equal).
std::string describe_change(const schedule::ScheduleConfig& from,
                            const schedule::ScheduleConfig& to);

/// A random config the loop has not seen (nor one in `taken`, this batch's canonical configs,
/// which it joins); nullopt after 200 draws (the space is exhausted).
std::optional<schedule::ScheduleConfig> new_random(const SearchState& state, std::mt19937_64& rng,
                                                   std::set<std::string>* taken = nullptr);

/// Each knob from `a` or `b` at random; nullopt when no mix of them that differs from both fits
/// the shape and target (schedule::config_fits) within a few draws.
std::optional<schedule::ScheduleConfig> crossover(const schedule::ScheduleConfig& a,
                                                  const schedule::ScheduleConfig& b,
                                                  const schedule::ModelShape& shape,
                                                  const schedule::GpuTarget& target,
                                                  std::mt19937_64& rng);

/// `config` with `knobs` distinct random knobs set to other choices that fit the shape, the whole
/// fitting (schedule::config_fits); nullopt after 16 draws that did not fit. One fit check per
/// draw (schedule::mutate checks every neighbour), so a strategy can breed thousands per trial.
std::optional<schedule::ScheduleConfig> quick_mutation(const schedule::ScheduleConfig& config,
                                                       const schedule::ModelShape& shape,
                                                       const schedule::GpuTarget& target,
                                                       std::mt19937_64& rng, int knobs);

/// What a model-driven strategy learns from one trial: its config with its latency, or with none
/// for a failure (the prior's failure class); nullopt for a correct trial without a latency.
std::optional<flywheel::PriorSample> prior_sample(const TrialOutcome& outcome,
                                                  const nlohmann::json& shape_json);

/// The `capacity` fastest distinct configs seen, fastest first.
class ElitePool {
 public:
  explicit ElitePool(int capacity) : capacity_(capacity) {}
  struct Member {
    schedule::ScheduleConfig config;
    double latency_us = 0.0;
  };

  /// Offers a correct trial's config and latency (a config seen again keeps its faster time).
  void offer(const schedule::ScheduleConfig& config, double latency_us);
  const std::vector<Member>& members() const { return members_; }
  bool empty() const { return members_.empty(); }
  /// A member index, the fastest the likeliest (rank r drawn with weight 1 / (r + 1)).
  size_t pick(std::mt19937_64& rng) const;

 private:
  int capacity_;
  std::vector<Member> members_;
};

/// A mutation of an elite: `knobs` knobs of the pool member at `rank`.
struct ElitePerturbation {
  schedule::ScheduleConfig config;
  size_t rank = 0;
  int knobs = 0;
};

/// A `min_knobs`-`max_knobs` knob quick_mutation of an elite (the fastest likeliest) that the
/// loop has not seen and `taken` does not hold (it joins `taken`); nullopt after 50 draws or with
/// no elite. Each draw takes the rank, then the knob count, then the mutation from `rng`.
std::optional<ElitePerturbation> perturb_elite(const ElitePool& elite, const SearchState& state,
                                               std::mt19937_64& rng, int min_knobs, int max_knobs,
                                               std::set<std::string>* taken);

}  // namespace megasched::search
