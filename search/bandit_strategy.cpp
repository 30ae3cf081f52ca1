#include "search/bandit_strategy.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "schedule/search.h"

namespace megasched::search {

AucBandit::AucBandit(int techniques, int window, double c)
    : window_(window), c_(c), recent_(techniques), uses_(techniques, 0) {}

int AucBandit::pick() const { return pick_excluding(std::vector<bool>(uses_.size(), false)); }

int AucBandit::pick_excluding(const std::vector<bool>& excluded) const {
  int best = -1;
  double best_score = 0;
  for (size_t t = 0; t < uses_.size(); ++t) {
    if (t < excluded.size() && excluded[t]) continue;
    const double s = score(static_cast<int>(t));
    if (best < 0 || s > best_score) {
      best = static_cast<int>(t);
      best_score = s;
    }
  }
  return best;
}

void AucBandit::record(int technique, bool new_best) {
  std::vector<bool>& recent = recent_[technique];
  recent.push_back(new_best);
  if (static_cast<int>(recent.size()) > window_) recent.erase(recent.begin());
  ++uses_[technique];
  ++total_;
}

double AucBandit::auc(int technique) const {
  const std::vector<bool>& recent = recent_[technique];
  if (recent.empty()) return 0.0;
  double sum = 0;
  for (size_t i = 0; i < recent.size(); ++i)
    if (recent[i]) sum += static_cast<double>(i + 1);
  const double k = static_cast<double>(recent.size());
  return sum * 2.0 / (k * (k + 1.0));
}

double AucBandit::score(int technique) const {
  if (uses_[technique] == 0) return std::numeric_limits<double>::infinity();
  return auc(technique) +
         c_ * std::sqrt(2.0 * std::log(static_cast<double>(total_)) / uses_[technique]);
}

namespace {

class BanditStrategy : public Strategy {
 public:
  BanditStrategy(std::vector<std::unique_ptr<Strategy>> techniques, int window, double c)
      : techniques_(std::move(techniques)),
        bandit_(static_cast<int>(techniques_.size()), window, c) {}
  std::string name() const override { return "bandit"; }

  std::vector<Proposal> propose(const SearchState& state, int count) override {
    // The picked technique proposes; one with nothing left is passed over for the next pick.
    std::vector<bool> exhausted(techniques_.size(), false);
    error_.clear();
    skipped_all_ = false;
    for (int t = bandit_.pick_excluding(exhausted); t >= 0; t = bandit_.pick_excluding(exhausted)) {
      Strategy& technique = *techniques_[t];
      std::vector<Proposal> out = technique.propose(state, count);
      if (out.empty()) {
        const std::string why = technique.last_error();
        if (!why.empty()) error_ += (error_.empty() ? "" : "; ") + technique.name() + ": " + why;
        skipped_all_ = skipped_all_ || technique.skipped_all();
        exhausted[t] = true;
        continue;
      }
      skipped_all_ = false;
      for (Proposal& p : out) {
        pending_[schedule::canonical_string(p.config)] = t;
        p.description = labelled(technique.name(), p.description);
      }
      return out;
    }
    return {};
  }

  void observe(const TrialOutcome& outcome) override {
    for (auto& technique : techniques_) technique->observe(outcome);
    const bool new_best = outcome.latency_us && (!best_us_ || *outcome.latency_us < *best_us_);
    if (new_best) best_us_ = outcome.latency_us;
    auto it = pending_.find(schedule::canonical_string(outcome.config));
    if (it == pending_.end()) return;  // trial 0, or a trial logged before a resume
    bandit_.record(it->second, new_best);
    pending_.erase(it);
  }

  std::string last_error() const override { return error_; }
  bool skipped_all() const override { return skipped_all_; }

 private:
  /// "bandit/elite: ..." from elite's "elite: ..." (or any other description).
  static std::string labelled(const std::string& technique, const std::string& description) {
    if (description.rfind(technique, 0) == 0) return "bandit/" + description;
    return "bandit/" + technique + ": " + description;
  }

  std::vector<std::unique_ptr<Strategy>> techniques_;
  AucBandit bandit_;
  std::map<std::string, int> pending_;  // proposed config -> technique, until observed
  std::optional<double> best_us_;
  std::string error_;
  bool skipped_all_ = false;
};

std::string check_bandit_options(int window, double c) {
  if (window < 1)
    return "bandit: the window must be at least 1 use (got " + std::to_string(window) +
           "); try --bandit-window 20";
  if (!std::isfinite(c) || c < 0)
    return "bandit: the exploration constant must be a finite number >= 0 (got " +
           std::to_string(c) + "); try --bandit-c 0.05";
  return {};
}

}  // namespace

std::unique_ptr<Strategy> make_bandit_strategy(std::vector<std::unique_ptr<Strategy>> techniques,
                                               int window, double c, std::string* error) {
  std::string why = check_bandit_options(window, c);
  if (why.empty() && techniques.empty()) why = "bandit: no techniques to choose from";
  if (!why.empty()) {
    if (error) *error = why;
    return nullptr;
  }
  return std::make_unique<BanditStrategy>(std::move(techniques), window, c);
}

std::unique_ptr<Strategy> make_bandit_strategy(const StrategyOptions& options, std::string* error) {
  std::vector<std::unique_ptr<Strategy>> techniques;
  std::set<std::string> seen;
  for (size_t i = 0; i < options.bandit_techniques.size(); ++i) {
    const std::string& name = options.bandit_techniques[i];
    std::string why;
    if (name == "bandit" || name == "proposer")
      why = "bandit: '" + name + "' cannot be one of its techniques";
    else if (!seen.insert(name).second)
      why = "bandit: technique '" + name + "' is listed twice";
    if (!why.empty()) {
      if (error) *error = why + " (e.g. --bandit-techniques random,hillclimb,elite,guided)";
      return nullptr;
    }
    StrategyOptions sub = options;
    sub.name = name;
    // Distinct, fixed seeds per technique (a splitmix64 step of the bandit's seed and the slot).
    uint64_t z = options.seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    sub.seed = z ^ (z >> 31);
    std::string sub_error;
    std::unique_ptr<Strategy> s = make_strategy(sub, &sub_error);
    if (!s) {
      if (error) *error = "bandit: technique '" + name + "': " + sub_error;
      return nullptr;
    }
    techniques.push_back(std::move(s));
  }
  return make_bandit_strategy(std::move(techniques), options.bandit_window, options.bandit_c,
                              error);
}

}  // namespace megasched::search
