// Search strategies: where the loop's next candidate comes from. One interface, eight
// implementations:
//   random     a fresh random config from the search space each trial (the yardstick)
//   hillclimb  one-knob moves around a local base; the base moves on every improvement beyond 1%;
//              after `restart_after` trials without one (or when every neighbour is tried) it
//              restarts from a random config
//   elite      hillclimb whose restarts are 2-3 knob perturbations of an elite (one of the
//              `elite_size` fastest configs seen, the fastest likeliest) instead of random configs,
//              and so are the proposals that fill a batch while the restart point is judged
//   sweep      screen, combine, move (search/sweep_strategy.h): every one-knob neighbour of the
//              base is measured, then the base with its best 2, 3, ... faster moves applied
//              together; the fastest config of the round is the next base
//   guided     model-guided, after TVM's auto-scheduler (search/guided_strategy.h): the prior,
//              refit on this run's trials, ranks `candidates` mutations and crossovers of the
//              elites; the best few are measured, an `exploration` share are random picks, and a
//              candidate predicted more than `guard` x the incumbent is measured only as one
//   prior      the learned prior (flywheel/prior.h) ranks a pool of the incumbent's neighbours,
//              2-4 knob mutations of it and random configs; an `exploration` share of trials is
//              random; retrained after each trial
//   bandit     each proposal from one of several of the above (random, hillclimb, elite, guided),
//              picked by an upper-confidence rule on each one's recent new bests, after
//              OpenTuner's AUC bandit (search/bandit_strategy.h)
//   proposer   an external command (an agent): the search context as JSON on its stdin, candidate
//              configs on its stdout (HARNESS.md, "The proposer seam")
// The loop owns keep/revert and dedup; a strategy only proposes and learns from outcomes. A loop
// over many workers (run_loop_on_pool) asks for a batch, `count` > 1: random, hillclimb and prior
// return up to `count` distinct candidates, none of which state.is_new rejects (already logged or
// in flight); hillclimb fills a batch with the base's neighbours, then random configs; prior with
// its best-ranked candidates (retrained before each batch on the corpus and every outcome so far).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flywheel/corpus.h"
#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/target.h"

namespace megasched::search {

/// One candidate with the reason it was proposed.
struct Proposal {
  schedule::ScheduleConfig config;
  std::string description;                         // one line: what is tried and why
  std::optional<schedule::ScheduleConfig> parent;  // derived from (default: the incumbent)
};

/// What one trial came to, as strategies see it.
struct TrialOutcome {
  int trial = 0;
  schedule::ScheduleConfig config;
  std::string schedule_id;
  std::string status;                // the loop's status vocabulary
  std::optional<double> latency_us;  // when correct
  std::vector<std::string> changed_knobs;
};

/// The loop's state when it asks for candidates.
struct SearchState {
  const schedule::ModelShape* shape = nullptr;
  const schedule::GpuTarget* target = nullptr;
  nlohmann::json identity;  // evaluator identity: model, target, device
  schedule::ScheduleConfig incumbent;
  std::string incumbent_id;
  std::optional<double> incumbent_latency_us;
  const std::vector<TrialOutcome>* history = nullptr;  // this run, in trial order
  int trials_left = 0;
  /// False when the config's schedule id is already known (any run) or queued.
  std::function<bool(const schedule::ScheduleConfig&)> is_new;
  /// Proposals the loop holds that are not yet observed (queued, building or running). A
  /// strategy waiting for its outcomes may return nothing while this is above 0; at 0 nothing it
  /// proposed is still coming (the loop may have dropped a proposal: already evaluated, stale).
  int pending = 0;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  /// Up to `count` distinct candidates (1 for a loop with one evaluator, a batch for a pool; a
  /// proposer may return more). Empty: nothing left to propose (the loop stops with the message
  /// from last_error() if any).
  virtual std::vector<Proposal> propose(const SearchState& state, int count) = 0;
  /// Called after every trial of this run (and, on --resume, for each trial already logged).
  virtual void observe(const TrialOutcome& outcome) = 0;
  /// Why propose() came back empty, when it was a failure ("proposer exited 1: ..."), or which
  /// candidates it skipped.
  virtual std::string last_error() const { return {}; }
  /// True when the last propose() came back empty only because every candidate was skipped (did
  /// not parse): the loop says why and asks again, up to duplicate_patience() rounds in a row.
  virtual bool skipped_all() const { return false; }
  /// Proposals in a row that may all be already-evaluated schedules before the loop gives up.
  virtual int duplicate_patience() const { return 50; }
  /// False (the default): a proposal is a move from the incumbent it was made against, so the
  /// serial loop drops queued proposals once the incumbent changes. True for a strategy that
  /// walks from a base of its own and needs every outcome it asked for (sweep).
  virtual bool proposals_outlive_incumbent() const { return false; }
};

struct StrategyOptions {
  std::string name = "sweep";  // random | hillclimb | elite | sweep (default) | guided | prior |
                               // bandit | proposer
  uint64_t seed = 0;
  int restart_after = 8;  // hillclimb, elite: trials without a local improvement
  int elite_size = 8;     // elite, sweep, guided: the fastest configs kept to restart or breed from
  double exploration = 0.1;   // prior, guided: share of random trials
  int candidates = 2048;      // guided: candidates the model ranks per proposal
  double guard = 1.5;         // guided: predicted latency over the incumbent's beyond which a
                              // candidate is measured only as exploration
  int pool_size = 256;        // prior: candidates ranked per trial
  int min_prior_samples = 8;  // prior, guided: latencies before the model ranks anything
  std::vector<flywheel::CorpusRecord> training;  // prior, guided: corpus records (same target and
                                                 // device, judged alike: eval::judged_alike) and
                                                 // on a GPU the shared corpus's rows of this model
                                                 // and build (flywheel::training_records)
  schedule::ModelShape
      shape;  // prior, guided: the shape of this run's model (features of outcomes)
  std::string proposer_command;     // proposer: run with /bin/sh -c
  double proposer_timeout_s = 120;  // proposer: per call
  int recent_trials = 20;           // proposer: trials sent in the context
  std::vector<std::string> bandit_techniques = {"random", "hillclimb", "elite", "guided"};
  int bandit_window = 20;  // bandit: a technique's last uses its credit is computed over
  double bandit_c = 0.05;  // bandit: exploration constant of the upper-confidence pick
};

/// The strategy names make_strategy accepts.
const std::vector<std::string>& strategy_names();
/// True when the strategy ranks by the learned prior, so the loop passes it training records
/// (prior, guided, and a bandit with either among its techniques).
bool strategy_trains(const StrategyOptions& options);
/// nullptr (with *error naming the valid strategies) for an unknown name or a missing option.
std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options, std::string* error);

/// The context a proposer receives (HARNESS.md documents it): model, target, device, shape,
/// search space, incumbent (config, schedule id, latency), recent trials, trials left, count.
nlohmann::json proposer_context(const SearchState& state, int count, int recent_trials);
/// Parses proposer output: a JSON array of candidates, or JSON lines of candidates, where a
/// candidate is a config object or {"config": {...}, "description": "..."}. Bad candidates are
/// skipped and described in *problems.
std::vector<Proposal> parse_proposals(const std::string& text, std::vector<std::string>* problems);

}  // namespace megasched::search
