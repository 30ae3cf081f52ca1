#include "search/strategy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "flywheel/prior.h"
#include "schedule/search.h"
#include "search/bandit_strategy.h"
#include "search/child_process.h"
#include "search/guided_strategy.h"
#include "search/moves.h"
#include "search/sweep_strategy.h"

namespace megasched::search {
namespace {

using nlohmann::json;
using schedule::ScheduleConfig;

class RandomStrategy : public Strategy {
 public:
  explicit RandomStrategy(uint64_t seed) : rng_(seed) {}
  std::string name() const override { return "random"; }
  std::vector<Proposal> propose(const SearchState& state, int count) override {
    std::vector<Proposal> out;
    std::set<std::string> taken;
    while (static_cast<int>(out.size()) < std::max(1, count)) {
      auto c = new_random(state, rng_, &taken);
      if (!c) break;
      out.push_back({*c,
                     "random: " + std::to_string(schedule::complexity(*c)) + " knobs off default",
                     std::nullopt});
    }
    return out;
  }
  void observe(const TrialOutcome&) override {}

 private:
  std::mt19937_64 rng_;
};

// hillclimb, and elite: the same climb restarting from a perturbed elite instead of at random.
class HillclimbStrategy : public Strategy {
 public:
  HillclimbStrategy(uint64_t seed, int restart_after, int elite_size)
      : rng_(seed),
        restart_after_(restart_after),
        elite_(std::max(1, elite_size)),
        use_elite_(elite_size > 0) {}
  std::string name() const override { return use_elite_ ? "elite" : "hillclimb"; }

  std::vector<Proposal> propose(const SearchState& state, int count) override {
    if (!base_) {
      base_ = state.incumbent;
      base_latency_ = state.incumbent_latency_us;
    }
    // A restart point the loop no longer holds (dropped: already evaluated, or stale) will never
    // be observed: draw another instead of waiting for it forever.
    if (pending_restart_ && state.pending == 0) pending_restart_.reset();
    // A batch: the base's untried neighbours, one per slot; when they run out (or on a plateau)
    // the rest of the batch are restart candidates (elite: perturbed elites; hillclimb: random
    // configs), the first of them the restart point.
    std::vector<Proposal> out;
    std::set<std::string> taken;
    const int want = std::max(1, count);
    if (since_improvement_ < restart_after_) {
      if (!neighbours_ready_) {
        neighbours_ = schedule::neighbours(*base_, *state.shape, *state.target);
        std::shuffle(neighbours_.begin(), neighbours_.end(), rng_);
        neighbours_ready_ = true;
      }
      while (!neighbours_.empty() && static_cast<int>(out.size()) < want) {
        ScheduleConfig c = neighbours_.back();
        neighbours_.pop_back();
        if (state.is_new && !state.is_new(c)) continue;
        if (!taken.insert(schedule::canonical_string(c)).second) continue;
        out.push_back({c, name() + ": " + describe_change(*base_, c), *base_});
      }
    }
    const std::string why = since_improvement_ >= restart_after_
                                ? std::to_string(since_improvement_) + " trials without improvement"
                                : "every neighbour tried";
    while (static_cast<int>(out.size()) < want) {
      std::string from = "random config";
      std::optional<ScheduleConfig> c;
      if (use_elite_ && !elite_.empty()) c = perturbed_elite(state, &taken, &from);
      if (!c) c = new_random(state, rng_, &taken);
      if (!c) break;
      if (!pending_restart_) {
        pending_restart_ = *c;
        out.push_back({*c, name() + " restart (" + why + "): " + from, std::nullopt});
      } else {
        out.push_back(
            {*c, name() + ": " + from + " while the restart point is judged", std::nullopt});
      }
    }
    return out;
  }

  void observe(const TrialOutcome& outcome) override {
    if (outcome.latency_us) elite_.offer(outcome.config, *outcome.latency_us);
    if (pending_restart_ && schedule::canonical_string(*pending_restart_) ==
                                schedule::canonical_string(outcome.config)) {
      move_base(outcome);
      pending_restart_.reset();
      return;
    }
    if (outcome.latency_us && (!base_latency_ || *outcome.latency_us < *base_latency_ * 0.99)) {
      move_base(outcome);
      return;
    }
    ++since_improvement_;
  }

 private:
  void move_base(const TrialOutcome& outcome) {
    base_ = outcome.config;
    base_latency_ = outcome.latency_us;
    since_improvement_ = 0;
    neighbours_ready_ = false;
    neighbours_.clear();
  }

  /// A 2-3 knob mutation of an elite (the fastest likeliest) the loop has not seen.
  std::optional<ScheduleConfig> perturbed_elite(const SearchState& state,
                                                std::set<std::string>* taken, std::string* from) {
    std::uniform_int_distribution<int> knobs(2, 3);
    for (int attempt = 0; attempt < 50; ++attempt) {
      const size_t rank = elite_.pick(rng_);
      const int k = knobs(rng_);
      ScheduleConfig c =
          schedule::mutate(elite_.members()[rank].config, *state.shape, *state.target, rng_, k);
      if (state.is_new && !state.is_new(c)) continue;
      if (!taken->insert(schedule::canonical_string(c)).second) continue;
      char text[96];
      std::snprintf(text, sizeof text, "%d-knob perturbation of elite #%zu (%.1f us)", k, rank + 1,
                    elite_.members()[rank].latency_us);
      *from = text;
      return c;
    }
    return std::nullopt;
  }

  std::mt19937_64 rng_;
  int restart_after_;
  ElitePool elite_;
  bool use_elite_;
  std::optional<ScheduleConfig> base_;
  std::optional<double> base_latency_;
  std::optional<ScheduleConfig> pending_restart_;
  int since_improvement_ = 0;
  bool neighbours_ready_ = false;
  std::vector<ScheduleConfig> neighbours_;
};

class PriorStrategy : public Strategy {
 public:
  explicit PriorStrategy(const StrategyOptions& options)
      : rng_(options.seed),
        exploration_(options.exploration),
        pool_size_(options.pool_size),
        min_samples_(options.min_prior_samples),
        samples_(flywheel::prior_samples(options.training, "", "")),
        shape_json_(schedule::to_json(options.shape)) {}
  std::string name() const override { return "prior"; }

  std::vector<Proposal> propose(const SearchState& state, int count) override {
    if (stale_) {  // retrained on the corpus and every outcome so far
      prior_.fit(samples_, min_samples_);
      stale_ = false;
    }
    // A batch: each slot is an exploration draw with probability `exploration`, else the next
    // best-ranked candidate of one pool (so k slots get k distinct candidates).
    const int want = std::max(1, count);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    int explore = 0;
    for (int i = 0; i < want; ++i) explore += !prior_.trained() || coin(rng_) < exploration_;
    std::vector<Proposal> out;
    std::set<std::string> taken;
    if (explore < want) out = ranked(state, want - explore, &taken);
    while (static_cast<int>(out.size()) < want) {
      auto c = new_random(state, rng_, &taken);
      if (!c) break;
      out.push_back({*c,
                     prior_.trained() ? "prior: exploration (random)"
                                      : "prior: random until " + std::to_string(min_samples_) +
                                            " latencies are known (" +
                                            std::to_string(prior_.latency_samples()) + " now)",
                     std::nullopt});
    }
    return out;
  }

  void observe(const TrialOutcome& outcome) override {
    std::optional<flywheel::PriorSample> s = prior_sample(outcome, shape_json_);
    if (!s) return;
    samples_.push_back(std::move(*s));
    stale_ = true;
  }

 private:
  /// The `count` best new candidates of a pool of the incumbent's neighbours, 2-4 knob mutations
  /// of it and random configs, by predicted latency and failure risk.
  std::vector<Proposal> ranked(const SearchState& state, int count, std::set<std::string>* taken) {
    const json shape = schedule::to_json(*state.shape);
    std::vector<Proposal> pool;
    for (ScheduleConfig& c : schedule::neighbours(state.incumbent, *state.shape, *state.target))
      pool.push_back({std::move(c), "neighbour of the incumbent", state.incumbent});
    // Multi-knob jumps from the incumbent let the model take several good moves at once;
    // random configs let it jump elsewhere when it predicts that is better.
    std::uniform_int_distribution<int> knobs(2, 4);
    for (int i = 0; i < pool_size_ / 2; ++i) {
      const int k = knobs(rng_);
      pool.push_back({schedule::mutate(state.incumbent, *state.shape, *state.target, rng_, k),
                      std::to_string(k) + "-knob mutation of the incumbent", state.incumbent});
    }
    for (int i = 0; i < pool_size_ - pool_size_ / 2; ++i)
      pool.push_back({schedule::random_config(*state.shape, *state.target, rng_), "random", {}});
    struct Scored {
      double score, log_latency, failure;
      size_t index;
    };
    std::vector<Scored> scored;
    for (size_t i = 0; i < pool.size(); ++i) {
      if (state.is_new && !state.is_new(pool[i].config)) continue;
      const json config = schedule::to_json(pool[i].config);
      const double log_latency = prior_.predict_log_latency(config, shape);
      const double failure = prior_.predict_failure(config, shape);
      // A likely failure costs a whole trial: rank it as if it were ~3x slower per unit risk.
      scored.push_back({log_latency + 1.1 * failure, log_latency, failure, i});
    }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const Scored& a, const Scored& b) { return a.score < b.score; });
    std::vector<Proposal> out;
    for (const Scored& s : scored) {
      if (static_cast<int>(out.size()) == count) break;
      const Proposal& p = pool[s.index];
      if (!taken->insert(schedule::canonical_string(p.config)).second) continue;
      std::ostringstream description;
      description.precision(4);
      description << "prior: " << (out.empty() ? "best" : "#" + std::to_string(out.size() + 1))
                  << " of " << pool.size() << " (" << p.description << "), predicted "
                  << std::exp(s.log_latency) << " us, failure risk " << s.failure;
      out.push_back({p.config, description.str(), p.parent});
    }
    return out;
  }

  std::mt19937_64 rng_;
  double exploration_;
  int pool_size_;
  int min_samples_;
  std::vector<flywheel::PriorSample> samples_;
  json shape_json_;
  flywheel::Prior prior_;
  bool stale_ = true;
};

class ProposerStrategy : public Strategy {
 public:
  explicit ProposerStrategy(const StrategyOptions& options)
      : command_(options.proposer_command),
        timeout_s_(options.proposer_timeout_s),
        recent_(options.recent_trials) {}
  std::string name() const override { return "proposer"; }

  std::vector<Proposal> propose(const SearchState& state, int count) override {
    error_.clear();
    skipped_all_ = false;
    ChildProcess child;
    std::string error;
    if (!child.start(command_, &error)) {
      error_ = "cannot start proposer: " + error;
      return {};
    }
    const std::string context = proposer_context(state, count, recent_).dump();
    child.write_line(context);
    child.close_stdin();
    std::string text;
    if (child.read_all(timeout_s_, &text) == ChildProcess::ReadStatus::kTimeout) {
      child.kill();
      error_ = "proposer `" + command_ + "` gave no answer within " +
               std::to_string(static_cast<int>(timeout_s_)) + " s";
      return {};
    }
    const std::string ended = child.finish(5.0);
    if (ended != "exit 0") {
      error_ = "proposer `" + command_ + "` ended with " + ended + ": " + child.stderr_tail();
      return {};
    }
    std::vector<std::string> problems;
    std::vector<Proposal> proposals = parse_proposals(text, &problems);
    for (const std::string& problem : problems) error_ += (error_.empty() ? "" : "; ") + problem;
    skipped_all_ = proposals.empty() && !problems.empty();
    if (proposals.empty() && error_.empty()) error_ = "proposer returned no candidates";
    for (Proposal& p : proposals)
      if (p.description.empty())
        p.description = "proposer: " + describe_change(state.incumbent, p.config);
    return proposals;
  }
  void observe(const TrialOutcome&) override {}
  std::string last_error() const override { return error_; }
  bool skipped_all() const override { return skipped_all_; }
  // An agent that keeps proposing what was already tried is not going to stop by itself.
  int duplicate_patience() const override { return 3; }

 private:
  std::string command_;
  double timeout_s_;
  int recent_;
  std::string error_;
  bool skipped_all_ = false;
};

}  // namespace

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"random", "hillclimb", "elite",  "sweep",
                                                 "guided", "prior",     "bandit", "proposer"};
  return names;
}

bool strategy_trains(const StrategyOptions& options) {
  auto trains = [](const std::string& name) { return name == "prior" || name == "guided"; };
  if (options.name == "bandit")
    return std::any_of(options.bandit_techniques.begin(), options.bandit_techniques.end(), trains);
  return trains(options.name);
}

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options, std::string* error) {
  if (options.name == "random") return std::make_unique<RandomStrategy>(options.seed);
  if (options.name == "hillclimb" || options.name == "elite")
    return std::make_unique<HillclimbStrategy>(options.seed, std::max(1, options.restart_after),
                                               options.name == "elite" ? options.elite_size : 0);
  if (options.name == "sweep") return make_sweep_strategy(options);
  if (options.name == "guided") return make_guided_strategy(options);
  if (options.name == "prior") return std::make_unique<PriorStrategy>(options);
  if (options.name == "bandit") return make_bandit_strategy(options, error);
  if (options.name == "proposer") {
    if (options.proposer_command.empty()) {
      if (error)
        *error = "the proposer strategy needs a command (--proposer \"python3 my_agent.py\")";
      return nullptr;
    }
    return std::make_unique<ProposerStrategy>(options);
  }
  if (error) {
    *error = "unknown strategy '" + options.name +
             "'; choose one of random, hillclimb, elite, sweep, guided, prior, bandit, proposer";
    std::string near = schedule::nearest(options.name, strategy_names());
    if (!near.empty()) *error += " (did you mean '" + near + "'?)";
  }
  return nullptr;
}

json proposer_context(const SearchState& state, int count, int recent_trials) {
  json recent = json::array();
  if (state.history) {
    const auto& h = *state.history;
    size_t first = h.size() > static_cast<size_t>(recent_trials) ? h.size() - recent_trials : 0;
    for (size_t i = first; i < h.size(); ++i) {
      recent.push_back({{"trial", h[i].trial},
                        {"schedule_id", h[i].schedule_id},
                        {"status", h[i].status},
                        {"latency_us", h[i].latency_us ? json(*h[i].latency_us) : json(nullptr)},
                        {"changed_knobs", h[i].changed_knobs},
                        {"config", schedule::to_json(h[i].config)}});
    }
  }
  return {{"model", state.identity.value("model", "")},
          {"target", state.identity.value("target", "")},
          {"device", state.identity.value("device", "")},
          {"shape", schedule::to_json(*state.shape)},
          {"search_space", schedule::search_space_json(*state.shape)},
          {"incumbent",
           {{"config", schedule::to_json(state.incumbent)},
            {"schedule_id", state.incumbent_id},
            {"latency_us",
             state.incumbent_latency_us ? json(*state.incumbent_latency_us) : json(nullptr)}}},
          {"recent_trials", recent},
          {"trials_left", state.trials_left},
          {"count", count}};
}

std::vector<Proposal> parse_proposals(const std::string& text, std::vector<std::string>* problems) {
  std::vector<json> candidates;
  const std::optional<json> whole = schedule::parse_json_text(text, nullptr);
  if (whole && whole->is_array()) {
    candidates.assign(whole->begin(), whole->end());
  } else if (whole && whole->is_object() && whole->contains("candidates") &&
             (*whole)["candidates"].is_array()) {
    candidates.assign((*whole)["candidates"].begin(), (*whole)["candidates"].end());
  } else {
    std::istringstream lines(text);
    std::string line;
    int number = 0;
    while (std::getline(lines, line)) {
      ++number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::string why;
      std::optional<json> j = schedule::parse_json_text(line, &why);
      if (!j) {
        if (problems)
          problems->push_back("proposer output line " + std::to_string(number) + " is not JSON (" +
                              why + ")");
        continue;
      }
      candidates.push_back(std::move(*j));
    }
  }
  std::vector<Proposal> proposals;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const json& c = candidates[i];
    const bool wrapped = c.is_object() && c.contains("config");
    const json& config_json = wrapped ? c["config"] : c;
    std::string error;
    auto config = schedule::parse_config(config_json, &error);
    if (!config) {
      if (problems) problems->push_back("candidate " + std::to_string(i) + ": " + error);
      continue;
    }
    Proposal p;
    p.config = *config;
    if (wrapped && c.contains("description") && c["description"].is_string())
      p.description = "proposer: " + c["description"].get<std::string>();
    proposals.push_back(std::move(p));
  }
  return proposals;
}

}  // namespace megasched::search
