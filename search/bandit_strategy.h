// The bandit strategy (`--strategy bandit`), after OpenTuner's AUC bandit meta-technique: each
// proposal comes from one of several techniques (other strategies: by default random, hillclimb,
// elite and guided), picked by an upper-confidence rule on each technique's credit.
//   - A use of a technique is one of its proposals whose outcome the loop reported; it succeeds
//     when that outcome's latency beats every latency of this run before it (a new best).
//   - Credit: the area under the curve of the technique's last `window` uses, the i-th oldest of
//     k weighted i, normalised to [0, 1]: sum(i * success_i) * 2 / (k (k + 1)).
//   - The pick: argmax of credit + C * sqrt(2 ln(total uses) / uses of the technique), a
//     technique never used first (the list's order breaks ties). C defaults to 0.05, OpenTuner's:
//     new bests are rare, so credits are small and a larger C turns the pick into a round robin.
//   - Every technique observes every outcome (each keeps its own state: hillclimb's base, the
//     elite pool, guided's model); only the picked one proposes, the whole batch of a pool.
//   - Each technique gets its own seed derived from the bandit's, so a run is deterministic.
// Proposals read "bandit/<technique>: ...".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "search/strategy.h"

namespace megasched::search {

/// The bookkeeping of the pick: uses and successes per technique, no knowledge of configs.
class AucBandit {
 public:
  AucBandit(int techniques, int window, double c);
  /// The technique to use next: one never used (lowest index), else the highest score.
  int pick() const;
  /// Like pick(), skipping the techniques marked in `excluded`; -1 when every one is.
  int pick_excluding(const std::vector<bool>& excluded) const;
  void record(int technique, bool new_best);
  /// Recency-weighted share of successes over the technique's last `window` uses (0 unused).
  double auc(int technique) const;
  /// auc + C * sqrt(2 ln(total uses) / uses); +infinity for an unused technique.
  double score(int technique) const;
  int uses(int technique) const { return uses_[technique]; }
  int total_uses() const { return total_; }

 private:
  int window_;
  double c_;
  std::vector<std::vector<bool>> recent_;  // per technique, oldest first, at most window_
  std::vector<int> uses_;
  int total_ = 0;
};

/// The bandit over strategies built from `options` (bandit_techniques, bandit_window, bandit_c);
/// nullptr with *error for a bad option or technique.
std::unique_ptr<Strategy> make_bandit_strategy(const StrategyOptions& options, std::string* error);

/// The bandit over given techniques (tests inject their own), labelled by their name().
std::unique_ptr<Strategy> make_bandit_strategy(std::vector<std::unique_ptr<Strategy>> techniques,
                                               int window, double c, std::string* error);

}  // namespace megasched::search
