#include "search/guided_strategy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "flywheel/prior.h"
#include "schedule/search.h"
#include "search/moves.h"

namespace megasched::search {
namespace {

using nlohmann::json;
using schedule::ScheduleConfig;

// Ranking bonus per knob value the run has not tried yet (log units: ~3% of predicted latency).
constexpr double kNoveltyBonus = 0.03;

class GuidedStrategy : public Strategy {
 public:
  explicit GuidedStrategy(const StrategyOptions& options)
      : rng_(options.seed),
        exploration_(options.exploration),
        candidates_(std::max(1, options.candidates)),
        guard_(options.guard),
        min_samples_(options.min_prior_samples),
        elite_(std::max(1, options.elite_size)),
        samples_(flywheel::prior_samples(options.training, "", "")),
        shape_json_(schedule::to_json(options.shape)) {}
  std::string name() const override { return "guided"; }

  std::vector<Proposal> propose(const SearchState& state, int count) override {
    if (stale_) {
      prior_.fit(samples_, min_samples_);
      stale_ = false;
    }
    const int want = std::max(1, count);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    int explore = 0;
    for (int i = 0; i < want; ++i) explore += !prior_.trained() || coin(rng_) < exploration_;
    std::set<std::string> taken;
    std::vector<Proposal> out;
    if (explore < want) out = ranked(state, want - explore, &taken);
    while (static_cast<int>(out.size()) < want) {
      std::optional<Proposal> p = exploration(state, &taken);
      if (!p) break;
      out.push_back(std::move(*p));
    }
    return out;
  }

  void observe(const TrialOutcome& outcome) override {
    if (outcome.latency_us) elite_.offer(outcome.config, *outcome.latency_us);
    const auto& specs = schedule::knob_specs();
    for (size_t k = 0; k < specs.size(); ++k)
      tried_.insert(specs[k].path + "=" + schedule::get_knob(outcome.config, specs[k].path).dump());
    std::optional<flywheel::PriorSample> s = prior_sample(outcome, shape_json_);
    if (!s) return;
    samples_.push_back(std::move(*s));
    stale_ = true;
  }

 private:
  struct Candidate {
    ScheduleConfig config;
    std::string origin;
    std::optional<ScheduleConfig> parent;
  };

  /// The population: mutations and crossovers of the elites, and random configs.
  std::vector<Candidate> population(const SearchState& state) {
    std::vector<Candidate> pool;
    const auto& members = elite_.members();
    std::uniform_real_distribution<double> kind(0.0, 1.0);
    std::uniform_int_distribution<int> knobs(1, 3);
    for (int i = 0; i < candidates_; ++i) {
      const double k = kind(rng_);
      if (members.empty() || k >= 0.9) {
        pool.push_back({schedule::random_config(*state.shape, *state.target, rng_), "random", {}});
        continue;
      }
      const size_t a = elite_.pick(rng_);
      if (k >= 0.6 && members.size() >= 2) {
        const size_t b = elite_.pick(rng_);
        auto child = b == a ? std::nullopt
                            : crossover(members[a].config, members[b].config, *state.shape,
                                        *state.target, rng_);
        if (child) {
          pool.push_back(
              {*child,
               "crossover of elites #" + std::to_string(a + 1) + " and #" + std::to_string(b + 1),
               members[a].config});
          continue;
        }
      }
      const int n = knobs(rng_);
      auto mutant = quick_mutation(members[a].config, *state.shape, *state.target, rng_, n);
      if (!mutant) continue;
      pool.push_back({*mutant,
                      std::to_string(n) + "-knob mutation of elite #" + std::to_string(a + 1),
                      members[a].config});
    }
    return pool;
  }

  /// The `count` best-ranked new candidates within the guard.
  std::vector<Proposal> ranked(const SearchState& state, int count, std::set<std::string>* taken) {
    const json shape = schedule::to_json(*state.shape);
    const double incumbent_log =
        prior_.predict_log_latency(schedule::to_json(state.incumbent), shape);
    const double guard_log = incumbent_log + std::log(guard_);
    std::vector<Candidate> pool = population(state);
    struct Scored {
      double score, log_latency, failure;
      size_t index;
    };
    std::vector<Scored> scored;
    int guarded = 0;
    for (size_t i = 0; i < pool.size(); ++i) {
      if (state.is_new && !state.is_new(pool[i].config)) continue;
      const json config = schedule::to_json(pool[i].config);
      const double log_latency = prior_.predict_log_latency(config, shape);
      if (log_latency > guard_log) {
        ++guarded;
        continue;
      }
      const double failure = prior_.predict_failure(config, shape);
      // A likely failure costs a whole trial: rank it as if it were ~3x slower per unit risk.
      // Optimism for knob values this run has not tried: the model knows nothing of them (its
      // weights for them are 0), so without a bonus it keeps refining the noise of tried ones.
      scored.push_back(
          {log_latency + 1.1 * failure - kNoveltyBonus * untried(config), log_latency, failure, i});
    }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const Scored& a, const Scored& b) { return a.score < b.score; });
    std::vector<Proposal> out;
    for (const Scored& s : scored) {
      if (static_cast<int>(out.size()) == count) break;
      const Candidate& c = pool[s.index];
      if (!taken->insert(schedule::canonical_string(c.config)).second) continue;
      char text[256];
      std::snprintf(text, sizeof text,
                    "guided: #%zu of %zu (%s), predicted %.1f us (incumbent %.1f), failure risk "
                    "%.2f, %d over the guard",
                    out.size() + 1, pool.size(), c.origin.c_str(), std::exp(s.log_latency),
                    std::exp(incumbent_log), s.failure, guarded);
      out.push_back({c.config, text, c.parent});
    }
    return out;
  }

  /// Knobs of `config` (canonical JSON) at a value no trial of this run had.
  int untried(const json& config) const {
    int n = 0;
    for (const auto& [group, knobs] : config.items())
      for (const auto& [knob, value] : knobs.items())
        n += !tried_.count(group + "." + knob + "=" + value.dump());
    return n;
  }

  /// A perturbed elite (1-3 knobs), or a random config while there is none.
  std::optional<Proposal> exploration(const SearchState& state, std::set<std::string>* taken) {
    const std::string why = prior_.trained() ? "exploration"
                                             : "exploring until " + std::to_string(min_samples_) +
                                                   " latencies are known";
    if (std::optional<ElitePerturbation> p = perturb_elite(elite_, state, rng_, 1, 3, taken)) {
      const ScheduleConfig& base = elite_.members()[p->rank].config;
      return Proposal{p->config,
                      "guided: " + why + ", " + std::to_string(p->knobs) +
                          "-knob mutation of elite #" + std::to_string(p->rank + 1) + " (" +
                          describe_change(base, p->config) + ")",
                      base};
    }
    auto c = new_random(state, rng_, taken);
    if (!c) return std::nullopt;
    return Proposal{*c, "guided: " + why + ", random config", std::nullopt};
  }

  std::mt19937_64 rng_;
  double exploration_;
  int candidates_;
  double guard_;
  int min_samples_;
  ElitePool elite_;
  std::vector<flywheel::PriorSample> samples_;
  json shape_json_;
  flywheel::Prior prior_;
  bool stale_ = true;
  std::set<std::string> tried_;  // "path=value" of every knob value a trial of this run had
};

}  // namespace

std::unique_ptr<Strategy> make_guided_strategy(const StrategyOptions& options) {
  return std::make_unique<GuidedStrategy>(options);
}

}  // namespace megasched::search
