#include "search/sweep_strategy.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "schedule/search.h"
#include "search/moves.h"

namespace megasched::search {
namespace {

using schedule::ScheduleConfig;

constexpr double kDisasterRatio = 1.5;  // a screened move at least this slow is not screened again
constexpr double kCombineGain = 0.003;  // a move joins the combinations when this much faster
constexpr double kRoundGain = 0.005;    // a round moves the base when its best is this much faster
constexpr int kMaxCombined = 8;         // the most moves applied together

/// One knob change (or the few a neighbour changes together), as "path=value" pairs.
struct Move {
  std::vector<std::pair<std::string, nlohmann::json>> knobs;
  std::string key() const {
    std::string k;
    for (const auto& [path, value] : knobs) k += (k.empty() ? "" : ",") + path + "=" + value.dump();
    return k;
  }
};

Move move_between(const ScheduleConfig& from, const ScheduleConfig& to) {
  Move m;
  for (const std::string& path : schedule::changed_knobs(from, to))
    m.knobs.emplace_back(path, schedule::get_knob(to, path));
  return m;
}

class SweepStrategy : public Strategy {
 public:
  explicit SweepStrategy(const StrategyOptions& options)
      : rng_(options.seed), elite_(std::max(1, options.elite_size)) {}
  std::string name() const override { return "sweep"; }
  bool proposals_outlive_incumbent() const override { return true; }

  std::vector<Proposal> propose(const SearchState& state, int count) override {
    if (!base_) {
      base_ = state.incumbent;
      base_latency_ = state.incumbent_latency_us;
      phase_ = Phase::kScreen;
    }
    const int want = std::max(1, count);
    std::vector<Proposal> out;
    std::set<std::string> taken;
    // Each pass either hands out proposals, waits, or moves to the next phase; a few phase changes
    // at most per call (a screen with nothing new leads to a combination, then to a restart).
    for (int pass = 0; pass < 8 && static_cast<int>(out.size()) < want; ++pass) {
      if (phase_ == Phase::kScreen) {
        if (!screen_ready_) build_screen(state);
        while (!to_screen_.empty() && static_cast<int>(out.size()) < want) {
          ScheduleConfig c = std::move(to_screen_.back());
          to_screen_.pop_back();
          const Move m = move_between(*base_, c);
          if (disasters_.count(m.key())) continue;
          if (!admit(state, c, &taken)) continue;
          ask(c, Kind::kScreen, m);
          out.push_back({c,
                         "sweep: round " + std::to_string(round_) + " screen (" +
                             std::to_string(++screened_asked_) + " of " +
                             std::to_string(screen_size_) + "): " + describe_change(*base_, c),
                         *base_});
        }
        if (!out.empty() || waiting(state)) break;
        begin_combine(state);
        continue;
      }
      if (phase_ == Phase::kCombine) {
        while (!combos_.empty() && static_cast<int>(out.size()) < want) {
          auto [c, moves] = std::move(combos_.front());
          combos_.erase(combos_.begin());
          if (!admit(state, c, &taken)) continue;
          ask(c, Kind::kCombine, {});
          out.push_back({c,
                         "sweep: round " + std::to_string(round_) + ", its best " +
                             std::to_string(moves) +
                             " moves together: " + describe_change(*base_, c),
                         *base_});
        }
        if (!out.empty() || waiting(state)) break;
        end_round();
        continue;
      }
      // kRestart: one perturbed elite at a time; it becomes the base once measured.
      if (waiting(state)) break;
      std::optional<Proposal> p = restart(state, &taken);
      if (p) out.push_back(std::move(*p));
      break;
    }
    return out;
  }

  void observe(const TrialOutcome& outcome) override {
    if (outcome.latency_us) elite_.offer(outcome.config, *outcome.latency_us);
    const std::string key = schedule::canonical_string(outcome.config);
    if (base_ && !base_latency_ && outcome.latency_us && key == schedule::canonical_string(*base_))
      base_latency_ = outcome.latency_us;
    auto it = outstanding_.find(key);
    if (it == outstanding_.end()) return;
    const Asked asked = it->second;
    outstanding_.erase(it);
    if (outcome.latency_us) round_results_.push_back({outcome.config, *outcome.latency_us});
    switch (asked.kind) {
      case Kind::kScreen:
        if (outcome.latency_us) screened_.push_back({asked.move, *outcome.latency_us});
        if (!outcome.latency_us ||
            (base_latency_ && *outcome.latency_us >= kDisasterRatio * *base_latency_))
          disasters_.insert(asked.move.key());
        break;
      case Kind::kCombine:
        break;
      case Kind::kRestart:
        if (!outcome.latency_us) break;  // a failed restart point: the next call draws another
        base_ = outcome.config;
        base_latency_ = outcome.latency_us;
        start_round();
        break;
    }
  }

 private:
  enum class Phase { kScreen, kCombine, kRestart };
  enum class Kind { kScreen, kCombine, kRestart };
  struct Asked {
    Kind kind;
    Move move;
  };
  struct Screened {
    Move move;
    double latency_us;
  };
  struct Measured {
    ScheduleConfig config;
    double latency_us;
  };

  /// New to the loop and to this batch.
  static bool admit(const SearchState& state, const ScheduleConfig& c,
                    std::set<std::string>* taken) {
    if (state.is_new && !state.is_new(c)) return false;
    return taken->insert(schedule::canonical_string(c)).second;
  }

  void ask(const ScheduleConfig& c, Kind kind, Move move) {
    outstanding_[schedule::canonical_string(c)] = {kind, std::move(move)};
  }

  /// True while outcomes this phase asked for may still come.
  bool waiting(const SearchState& state) {
    if (outstanding_.empty()) return false;
    if (state.pending > 0) return true;
    outstanding_.clear();  // the loop holds none of them: they were dropped, not coming
    return false;
  }

  void start_round() {
    ++round_;
    phase_ = Phase::kScreen;
    screen_ready_ = false;
    to_screen_.clear();
    screened_.clear();
    round_results_.clear();
    combos_.clear();
  }

  void build_screen(const SearchState& state) {
    if (round_ == 0) ++round_;
    to_screen_ = schedule::neighbours(*base_, *state.shape, *state.target);
    std::shuffle(to_screen_.begin(), to_screen_.end(), rng_);
    screen_size_ = static_cast<int>(to_screen_.size());
    screened_asked_ = 0;
    screen_ready_ = true;
  }

  /// The base with its best 2, 3, ... faster moves, one per knob, fastest first.
  void begin_combine(const SearchState& state) {
    phase_ = Phase::kCombine;
    combos_.clear();
    std::vector<Screened> faster;
    for (const Screened& s : screened_)
      if (!base_latency_ || s.latency_us < *base_latency_ * (1.0 - kCombineGain))
        faster.push_back(s);
    std::stable_sort(faster.begin(), faster.end(), [](const Screened& a, const Screened& b) {
      return a.latency_us < b.latency_us;
    });
    ScheduleConfig combined = *base_;
    std::set<std::string> knobs_used;
    int applied = 0;
    std::string ignored;
    for (const Screened& s : faster) {
      if (applied == kMaxCombined) break;
      bool clash = false;
      for (const auto& [path, value] : s.move.knobs) clash = clash || knobs_used.count(path);
      if (clash) continue;
      ScheduleConfig next = combined;
      for (const auto& [path, value] : s.move.knobs)
        schedule::set_knob(&next, path, value, &ignored);
      if (!schedule::config_fits(next, *state.shape, *state.target)) continue;
      combined = next;
      for (const auto& [path, value] : s.move.knobs) knobs_used.insert(path);
      if (++applied >= 2) combos_.emplace_back(combined, applied);
    }
  }

  void end_round() {
    const Measured* best = nullptr;
    for (const Measured& m : round_results_)
      if (!best || m.latency_us < best->latency_us) best = &m;
    if (best && (!base_latency_ || best->latency_us < *base_latency_ * (1.0 - kRoundGain))) {
      base_ = best->config;
      base_latency_ = best->latency_us;
      start_round();
      return;
    }
    phase_ = Phase::kRestart;
    why_restart_ = "round " + std::to_string(round_) + " found nothing 0.5% faster than its base";
  }

  std::optional<Proposal> restart(const SearchState& state, std::set<std::string>* taken) {
    std::uniform_int_distribution<int> knobs(2, 3);
    for (int attempt = 0; attempt < 50 && !elite_.empty(); ++attempt) {
      const size_t rank = elite_.pick(rng_);
      const int k = knobs(rng_);
      const ScheduleConfig& from = elite_.members()[rank].config;
      std::optional<ScheduleConfig> c = quick_mutation(from, *state.shape, *state.target, rng_, k);
      if (!c || !admit(state, *c, taken)) continue;
      ask(*c, Kind::kRestart, {});
      char text[128];
      std::snprintf(text, sizeof text, "%d-knob perturbation of elite #%zu (%.1f us)", k, rank + 1,
                    elite_.members()[rank].latency_us);
      return Proposal{
          *c, "sweep restart (" + why_restart_ + "): " + text + ": " + describe_change(from, *c),
          from};
    }
    std::optional<ScheduleConfig> c = new_random(state, rng_, taken);
    if (!c) return std::nullopt;
    ask(*c, Kind::kRestart, {});
    return Proposal{*c, "sweep restart (" + why_restart_ + "): random config", std::nullopt};
  }

  std::mt19937_64 rng_;
  ElitePool elite_;
  Phase phase_ = Phase::kScreen;
  int round_ = 0;
  std::optional<ScheduleConfig> base_;
  std::optional<double> base_latency_;
  bool screen_ready_ = false;
  std::vector<ScheduleConfig> to_screen_;
  int screen_size_ = 0, screened_asked_ = 0;
  std::map<std::string, Asked> outstanding_;  // canonical config -> why it was asked
  std::vector<Screened> screened_;            // this round's screened moves with a latency
  std::vector<Measured> round_results_;       // every latency this round asked for
  std::vector<std::pair<ScheduleConfig, int>> combos_;  // (config, moves applied) to hand out
  std::set<std::string> disasters_;                     // move keys not screened again
  std::string why_restart_;
};

}  // namespace

std::unique_ptr<Strategy> make_sweep_strategy(const StrategyOptions& options) {
  return std::make_unique<SweepStrategy>(options);
}

}  // namespace megasched::search
