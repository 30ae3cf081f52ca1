#include "search/sweep_strategy.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
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
constexpr int kMaxSwaps = 16;           // the most configs of one swap stage
constexpr int kMaxStages = 4;           // combining stages a round: the chain, then swap stages

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

/// A screened move and its latency.
struct Screened {
  Move move;
  double latency_us;
};

/// Screens run ahead of their round: one-knob neighbours of a config the round may move to,
/// measured in the slots the round's own phase leaves idle while it waits for its trials.
class ScreensAhead {
 public:
  /// Hands out up to `count` neighbours of `base` (measured at base_us) not yet handed out, moves
  /// in `disasters` left out and configs `admit` refuses skipped.
  void hand_out(const ScheduleConfig& base, double base_us, int count, const SearchState& state,
                const std::set<std::string>& disasters,
                const std::function<bool(const ScheduleConfig&)>& admit, std::mt19937_64& rng,
                int round, std::vector<Proposal>* out) {
    const std::string key = schedule::canonical_string(base);
    Ahead& ahead = by_base_[key];
    if (!ahead.base) {
      ahead.base = base;
      ahead.base_us = base_us;
      ahead.queue = schedule::neighbours(base, *state.shape, *state.target);
      std::shuffle(ahead.queue.begin(), ahead.queue.end(), rng);
      ahead.size = static_cast<int>(ahead.queue.size());
    }
    while (!ahead.queue.empty() && count > 0) {
      ScheduleConfig c = std::move(ahead.queue.back());
      ahead.queue.pop_back();
      const Move m = move_between(base, c);
      if (disasters.count(m.key()) || !admit(c)) continue;
      const std::string ck = schedule::canonical_string(c);
      ahead.running[ck] = m;
      base_of_[ck] = key;
      --count;
      out->push_back({c,
                      "sweep: round " + std::to_string(round) + ", ahead of round " +
                          std::to_string(round + 1) + ": screen of the round's best so far (" +
                          std::to_string(++ahead.asked) + " of " + std::to_string(ahead.size) +
                          "): " + describe_change(base, c),
                      base});
    }
  }

  /// The outcome of a config handed out here: its move, latency and whether it was a disaster
  /// (failed, or at least kDisasterRatio its base's latency). Nullopt for any other config.
  struct Outcome {
    Move move;
    std::optional<double> latency_us;
    bool disaster;
  };
  std::optional<Outcome> observe(const std::string& key, const TrialOutcome& outcome) {
    auto by = base_of_.find(key);
    if (by == base_of_.end()) return std::nullopt;
    Ahead& ahead = by_base_.at(by->second);
    base_of_.erase(by);
    auto run = ahead.running.find(key);
    Outcome o{run->second, outcome.latency_us,
              !outcome.latency_us || *outcome.latency_us >= kDisasterRatio * ahead.base_us};
    ahead.running.erase(run);
    if (outcome.latency_us) ahead.measured.push_back({o.move, *outcome.latency_us});
    return o;
  }

  /// What was screened ahead of `base` (measured, and handed out but not yet observed: canonical
  /// config -> move); every other screen ahead is forgotten.
  std::pair<std::vector<Screened>, std::map<std::string, Move>> take(const ScheduleConfig& base) {
    std::pair<std::vector<Screened>, std::map<std::string, Move>> out;
    auto it = by_base_.find(schedule::canonical_string(base));
    if (it != by_base_.end()) out = {std::move(it->second.measured), std::move(it->second.running)};
    by_base_.clear();
    base_of_.clear();
    return out;
  }

 private:
  struct Ahead {
    std::optional<ScheduleConfig> base;
    double base_us = 0.0;
    std::vector<ScheduleConfig> queue;    // its neighbours not yet handed out
    std::map<std::string, Move> running;  // canonical config -> move, handed out, not observed
    std::vector<Screened> measured;
    int size = 0, asked = 0;
  };
  std::map<std::string, Ahead> by_base_;        // canonical base -> its screen ahead
  std::map<std::string, std::string> base_of_;  // canonical config -> its base's key
};

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
        if (!out.empty() || !screen_nearly_done(state)) break;
        begin_combine(state);
        continue;
      }
      if (phase_ == Phase::kCombine) {
        while (!combos_.empty() && static_cast<int>(out.size()) < want) {
          Combo combo = std::move(combos_.front());
          combos_.erase(combos_.begin());
          if (!admit(state, combo.config, &taken)) continue;
          ask(combo.config, Kind::kCombine, {});
          asked_combos_[schedule::canonical_string(combo.config)] = combo.members;
          out.push_back({combo.config,
                         "sweep: round " + std::to_string(round_) + ", " + combo.what + ": " +
                             describe_change(*base_, combo.config),
                         *base_});
        }
        if (!out.empty() || waiting(state)) break;
        if (begin_swaps(state)) continue;
        end_round();
        continue;
      }
      // kRestart: perturbed elites, one per slot asked for; the first measured becomes the base.
      if (waiting(state)) break;
      while (static_cast<int>(out.size()) < want) {
        std::optional<Proposal> p = restart(state, &taken);
        if (!p) break;
        out.push_back(std::move(*p));
      }
      break;
    }
    // The screen's last trials or a combining stage still run: the slots the phase leaves idle
    // screen the round's best so far, the likeliest next base, ahead of its round.
    const bool phase_waits = (phase_ == Phase::kScreen && screen_ready_ && to_screen_.empty()) ||
                             (phase_ == Phase::kCombine && combos_.empty());
    if (phase_waits && static_cast<int>(out.size()) < want && !outstanding_.empty() &&
        state.pending > 0)
      speculate(state, want - static_cast<int>(out.size()), &taken, &out);
    return out;
  }

  void observe(const TrialOutcome& outcome) override {
    if (outcome.latency_us) elite_.offer(outcome.config, *outcome.latency_us);
    const std::string key = schedule::canonical_string(outcome.config);
    if (base_ && !base_latency_ && outcome.latency_us && key == schedule::canonical_string(*base_))
      base_latency_ = outcome.latency_us;
    auto it = outstanding_.find(key);
    if (it == outstanding_.end()) {
      observe_speculation(key, outcome);
      return;
    }
    const Asked asked = it->second;
    outstanding_.erase(it);
    if (outcome.latency_us) round_results_.push_back({outcome.config, *outcome.latency_us});
    switch (asked.kind) {
      case Kind::kScreen:
        if (outcome.latency_us) {
          screened_.push_back({asked.move, *outcome.latency_us});
          // Late for the chain (it began with the last few screens in flight): the swap stages
          // still try it. Appended, so the chain's member indexes keep their meaning.
          if (phase_ == Phase::kCombine && faster(*outcome.latency_us))
            faster_.push_back(screened_.back());
        }
        if (!outcome.latency_us ||
            (base_latency_ && *outcome.latency_us >= kDisasterRatio * *base_latency_))
          disasters_.insert(asked.move.key());
        break;
      case Kind::kCombine:
        break;
      case Kind::kRestart:
        // A failed restart point: the next call draws another. Of several, the first measured is
        // the base; the later ones were measurements of an elite's surroundings.
        if (!outcome.latency_us || phase_ != Phase::kRestart) break;
        base_ = outcome.config;
        base_latency_ = outcome.latency_us;
        std::erase_if(outstanding_,
                      [](const auto& entry) { return entry.second.kind == Kind::kRestart; });
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

  /// A screened latency that makes the move one to combine.
  bool faster(double latency_us) const {
    return !base_latency_ || latency_us < *base_latency_ * (1.0 - kCombineGain);
  }

  /// The screen is as good as done when nothing more is coming, or only its last few trials
  /// (max(4, an eighth of the screen)) are still queued or running: the chain is built from the
  /// rest, so its kernels build while those run instead of after (the GPUs would idle through the
  /// builds); the late ones join the swap stages.
  bool screen_nearly_done(const SearchState& state) {
    if (!waiting(state)) return true;
    return static_cast<int>(outstanding_.size()) <= std::max(4, screen_size_ / 8);
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
    carried_moves_.clear();
    // The new base's neighbours screened ahead of the round count as its screen (those still
    // running are waited for like the rest); a screen ahead of any other config is dropped.
    auto [measured, running] = ahead_.take(*base_);
    screened_ = std::move(measured);
    for (auto& [key, move] : running) outstanding_[key] = {Kind::kScreen, move};
    for (const Screened& sc : screened_) carried_moves_.insert(sc.move.key());
    for (const auto& [key, move] : running) carried_moves_.insert(move.key());
  }

  void build_screen(const SearchState& state) {
    if (round_ == 0) ++round_;
    to_screen_ = schedule::neighbours(*base_, *state.shape, *state.target);
    std::erase_if(to_screen_, [&](const ScheduleConfig& c) {
      return carried_moves_.count(move_between(*base_, c).key()) > 0;
    });
    std::shuffle(to_screen_.begin(), to_screen_.end(), rng_);
    const int carried = static_cast<int>(carried_moves_.size());
    screen_size_ = static_cast<int>(to_screen_.size()) + carried;
    screened_asked_ = carried;
    screen_ready_ = true;
  }

  /// The round's fastest measured config when it beats the base by the round's margin: the
  /// config the round will most likely move to.
  const Measured* likely_next_base() const {
    const Measured* best = nullptr;
    for (const Measured& m : round_results_)
      if (!best || m.latency_us < best->latency_us) best = &m;
    if (!best || (base_latency_ && best->latency_us >= *base_latency_ * (1.0 - kRoundGain)))
      return nullptr;
    return best;
  }

  /// Up to `count` one-knob neighbours of the likely next base, screened ahead of its round.
  /// When the round does move there they are its screen's first results; when it moves
  /// elsewhere they were measurements of a fast config's neighbourhood (the elite pool and the
  /// corpus keep them).
  void speculate(const SearchState& state, int count, std::set<std::string>* taken,
                 std::vector<Proposal>* out) {
    const Measured* next = likely_next_base();
    if (!next) return;
    ahead_.hand_out(
        next->config, next->latency_us, count, state, disasters_,
        [&](const ScheduleConfig& c) { return admit(state, c, taken); }, rng_, round_, out);
  }

  void observe_speculation(const std::string& key, const TrialOutcome& outcome) {
    std::optional<ScreensAhead::Outcome> o = ahead_.observe(key, outcome);
    if (!o) return;
    if (o->latency_us) round_results_.push_back({outcome.config, *o->latency_us});
    if (o->disaster) disasters_.insert(o->move.key());
  }

  /// The base with `members` (indexes into faster_) applied, in order; nullopt when two of them
  /// change one knob or the result does not fit.
  std::optional<ScheduleConfig> combined(const std::vector<int>& members,
                                         const SearchState& state) const {
    ScheduleConfig c = *base_;
    std::set<std::string> knobs_used;
    std::string ignored;
    for (int i : members)
      for (const auto& [path, value] : faster_[i].move.knobs) {
        if (!knobs_used.insert(path).second) return std::nullopt;
        schedule::set_knob(&c, path, value, &ignored);
      }
    if (!schedule::config_fits(c, *state.shape, *state.target)) return std::nullopt;
    return c;
  }

  /// Stage 1: the base with its best 2, 3, ... faster moves, one per knob, fastest first (a move
  /// that clashes with the chain or does not fit is left out of it).
  void begin_combine(const SearchState& state) {
    phase_ = Phase::kCombine;
    combine_stage_ = 1;
    combos_.clear();
    asked_combos_.clear();
    faster_.clear();
    for (const Screened& s : screened_)
      if (faster(s.latency_us)) faster_.push_back(s);
    std::stable_sort(faster_.begin(), faster_.end(), [](const Screened& a, const Screened& b) {
      return a.latency_us < b.latency_us;
    });
    std::vector<int> chain;
    for (int i = 0; i < static_cast<int>(faster_.size()); ++i) {
      if (static_cast<int>(chain.size()) == kMaxCombined) break;
      chain.push_back(i);
      std::optional<ScheduleConfig> c = combined(chain, state);
      if (!c) {
        chain.pop_back();
        continue;
      }
      if (chain.size() >= 2)
        combos_.push_back(
            {*c, chain, "its best " + std::to_string(chain.size()) + " moves together"});
    }
  }

  /// Stage 2 and on, once the previous stage is measured: from the fastest set of moves measured
  /// so far (a chain, a swap or a single move), each faster move left out of it is tried added
  /// to it and in place of each of its moves, up to kMaxSwaps configs; again while the fastest
  /// set gets faster, at most kMaxStages stages a round. A move that made the chain slower often
  /// clashes with one earlier move of it (more rows per warp and a deeper unroll, each faster
  /// alone); a swap finds which.
  bool begin_swaps(const SearchState& state) {
    if (combine_stage_ >= kMaxStages) return false;
    ++combine_stage_;
    std::vector<int> best_set;
    double best_us = 0.0;
    for (int i = 0; i < static_cast<int>(faster_.size()); ++i)
      if (best_set.empty() || faster_[i].latency_us < best_us) {
        best_set = {i};
        best_us = faster_[i].latency_us;
      }
    for (const Measured& m : round_results_) {
      auto it = asked_combos_.find(schedule::canonical_string(m.config));
      if (it != asked_combos_.end() && m.latency_us < best_us) {
        best_set = it->second;
        best_us = m.latency_us;
      }
    }
    if (best_set.empty()) return false;
    if (combine_stage_ > 2 && best_us >= set_us_ * (1.0 - kCombineGain)) return false;
    set_us_ = best_us;
    std::set<std::string> seen;
    auto offer = [&](std::vector<int> members, const std::string& what) {
      if (static_cast<int>(combos_.size()) >= kMaxSwaps || members.size() < 2) return;
      std::optional<ScheduleConfig> c = combined(members, state);
      if (!c || !seen.insert(schedule::canonical_string(*c)).second) return;
      if (asked_combos_.count(schedule::canonical_string(*c))) return;
      combos_.push_back({*c, std::move(members), what});
    };
    for (int m = 0; m < static_cast<int>(faster_.size()); ++m) {
      if (std::find(best_set.begin(), best_set.end(), m) != best_set.end()) continue;
      std::vector<int> added = best_set;
      added.push_back(m);
      offer(added, "its best set with one more move");
      for (size_t e = 0; e < best_set.size(); ++e) {
        std::vector<int> swapped = best_set;
        swapped[e] = m;
        offer(swapped, "its best set with one move swapped");
      }
    }
    return !combos_.empty();
  }

  void end_round() {
    if (const Measured* next = likely_next_base()) {
      base_ = next->config;
      base_latency_ = next->latency_us;
      start_round();
      return;
    }
    phase_ = Phase::kRestart;
    why_restart_ = "round " + std::to_string(round_) + " found nothing 0.5% faster than its base";
  }

  std::optional<Proposal> restart(const SearchState& state, std::set<std::string>* taken) {
    if (std::optional<ElitePerturbation> p = perturb_elite(elite_, state, rng_, 2, 3, taken)) {
      const ElitePool::Member& from = elite_.members()[p->rank];
      ask(p->config, Kind::kRestart, {});
      char text[128];
      std::snprintf(text, sizeof text, "%d-knob perturbation of elite #%zu (%.1f us)", p->knobs,
                    p->rank + 1, from.latency_us);
      return Proposal{p->config,
                      "sweep restart (" + why_restart_ + "): " + text + ": " +
                          describe_change(from.config, p->config),
                      from.config};
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
  struct Combo {
    ScheduleConfig config;
    std::vector<int> members;  // indexes into faster_
    std::string what;
  };
  std::vector<Screened> faster_;  // this round's faster moves, fastest first
  int combine_stage_ = 1;         // 1: the chain, 2 and on: additions and swaps
  double set_us_ = 0.0;           // the fastest set's latency when the last swap stage began
  std::vector<Combo> combos_;     // to hand out
  std::map<std::string, std::vector<int>> asked_combos_;  // canonical config -> members
  std::set<std::string> disasters_;                       // move keys not screened again
  ScreensAhead ahead_;  // neighbours of the likely next base, screened in idle slots
  std::set<std::string> carried_moves_;  // the new round's moves screened or running ahead of it
  std::string why_restart_;
};

}  // namespace

std::unique_ptr<Strategy> make_sweep_strategy(const StrategyOptions& options) {
  return std::make_unique<SweepStrategy>(options);
}

}  // namespace megasched::search
