#include "search/loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <random>
#include <set>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "flywheel/corpus.h"
#include "flywheel/dedup.h"
#include "flywheel/locked_file.h"
#include "flywheel/results.h"
#include "flywheel/run_dir.h"
#include "schedule/format.h"

namespace megasched::search {
namespace {

using flywheel::CorpusRecord;
using nlohmann::json;
using schedule::fmt;
using schedule::ScheduleConfig;

// The loop's status for a verdict before the keep rule (kept / discarded decided later).
std::string failure_status(const eval::Verdict& v) {
  if (v.status == "crash") return flywheel::kStatusCrash;
  if (v.status == "timeout" || v.status == "hang") return flywheel::kStatusTimeout;
  if (v.status == "rejected" || !v.valid) return flywheel::kStatusRejected;
  if (v.status == "incorrect" || !v.correct) return flywheel::kStatusIncorrect;
  return "";
}

bool has_latency(const eval::Verdict& v) {
  return failure_status(v).empty() && v.correct && v.latency_us && *v.latency_us > 0;
}

struct Incumbent {
  ScheduleConfig config;
  std::string id;
  std::optional<eval::Verdict> verdict;  // with a latency, once one is known
  int complexity = 0;
  std::optional<double> latency() const { return verdict ? verdict->latency_us : std::nullopt; }
};

// A verdict rebuilt from a results row (a schedule known only from results.tsv).
eval::Verdict verdict_from_row(const flywheel::ResultRow& row) {
  eval::Verdict v;
  v.valid = row.status != flywheel::kStatusRejected;
  v.correct = row.correct;
  v.latency_us = row.latency_us;
  v.latency_kind = row.latency_kind;
  v.floor_us = row.floor_us;
  v.schedule_id = row.schedule_id;
  v.status = row.correct ? "ok" : row.status;
  return v;
}

}  // namespace

double SystemClock::now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string format_duration(double seconds) {
  long total = std::lround(std::max(0.0, seconds));
  long h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char buffer[32];
  if (h > 0)
    std::snprintf(buffer, sizeof buffer, "%ld:%02ld:%02ld", h, m, s);
  else
    std::snprintf(buffer, sizeof buffer, "%ld:%02ld", m, s);
  return buffer;
}

double latency_sigma_us(const eval::Verdict& v) {
  if (v.samples_us.size() >= 2) {
    double mean = 0;
    for (double s : v.samples_us) mean += s;
    mean /= static_cast<double>(v.samples_us.size());
    double var = 0;
    for (double s : v.samples_us) var += (s - mean) * (s - mean);
    return std::sqrt(var / static_cast<double>(v.samples_us.size() - 1));
  }
  if (v.latency_spread_us > 0) return v.latency_spread_us / 2.563;
  return 0.0;
}

KeepDecision decide_keep(const eval::Verdict& candidate, int candidate_complexity,
                         const eval::Verdict& incumbent, int incumbent_complexity, double min_gain,
                         double sigmas) {
  KeepDecision d;
  const double cand = *candidate.latency_us, inc = *incumbent.latency_us;
  const double sc = latency_sigma_us(candidate), si = latency_sigma_us(incumbent);
  const double noise = sigmas * std::sqrt(sc * sc + si * si);
  d.margin_us = std::max(min_gain * inc, noise);
  d.gain_us = inc - cand;
  const std::string pct = fmt("%.2f%%", 100.0 * d.gain_us / inc);
  const std::string margin = fmt("%.3f us", d.margin_us) +
                             (noise > min_gain * inc ? " (" + fmt("%.1f", sigmas) + " sigma)"
                                                     : " (" + fmt("%.0f%%", 100 * min_gain) + ")");
  if (d.gain_us > d.margin_us) {
    d.keep = true;
    d.reason = "faster by " + fmt("%.3f us", d.gain_us) + " (" + pct + ") > margin " + margin;
  } else if (std::abs(d.gain_us) <= d.margin_us && candidate_complexity < incumbent_complexity) {
    d.keep = true;
    d.reason = "near-tie (" + pct + ", margin " + margin +
               "), simpler: " + std::to_string(candidate_complexity) + " knobs off default vs " +
               std::to_string(incumbent_complexity);
  } else if (std::abs(d.gain_us) < 5e-4) {
    d.reason = "as fast as the incumbent, and not simpler (" +
               std::to_string(candidate_complexity) + " knobs off default vs " +
               std::to_string(incumbent_complexity) + ")";
  } else if (std::abs(d.gain_us) <= d.margin_us) {
    d.reason = (d.gain_us > 0 ? "faster by " + fmt("%.3f us", d.gain_us) + " (" + pct + ") but"
                              : "slower by " + fmt("%.3f us", -d.gain_us) + " (" +
                                    fmt("%.2f%%", -100.0 * d.gain_us / inc) + "),") +
               " within margin " + margin + ", and not simpler (" +
               std::to_string(candidate_complexity) + " knobs off default vs " +
               std::to_string(incumbent_complexity) + ")";
  } else {
    d.reason = "slower by " + fmt("%.3f us", -d.gain_us) + " (" +
               fmt("%.2f%%", -100.0 * d.gain_us / inc) + ")";
  }
  return d;
}

namespace {

// One invocation of the loop: what earlier runs left behind, the run it continues or starts, the
// incumbent, and the trials of this invocation. run() is the whole loop; each step is a method.
class LoopRun {
 public:
  LoopRun(eval::Evaluator& evaluator, const schedule::ModelShape& shape,
          const schedule::GpuTarget& target, Strategy& strategy, Clock& clock,
          const LoopOptions& options, TrialPool* pool = nullptr)
      : pool_(pool),
        evaluator_(evaluator),
        shape_(shape),
        target_(target),
        strategy_(strategy),
        clock_(clock),
        options_(options),
        start_s_(clock.now_s()),
        identity_(evaluator.identity()),
        model_(identity_.value("model", shape.name)),
        target_name_(identity_.value("target", target.name)),
        device_(identity_.value("device", "cpu")),
        primary_type_(device_type(identity_)) {}

  LoopResult run() {
    if (const std::string why = check_log_paths(options_.results_path, options_.corpus_path);
        !why.empty()) {
      result_.bad_arguments = true;
      fail(why);
      return std::move(result_);
    }
    const std::string workload = model_ + " / " + target_name_ + " / " + device_;
    std::string error;
    std::string unguarded;
    if (!corpus_lock_.acquire(options_.corpus_path, workload, &error, &unguarded) ||
        !results_lock_.acquire(options_.results_path, workload, &error, &unguarded)) {
      fail(error);
      return std::move(result_);
    }
    if (!unguarded.empty()) warn(unguarded);
    // A torn last line (a kill mid-write) leaves the logs now, before anyone reads past it.
    for (const std::string* path : {&options_.corpus_path, &options_.results_path}) {
      bool repaired = false;
      if (!flywheel::repair_torn_tail(*path, &repaired, &error)) {
        fail(error);
        return std::move(result_);
      }
      if (repaired)
        warn(*path + ": its torn last line (a write cut short) was moved to " +
             flywheel::quarantine_path(*path));
    }
    read_logs();
    for (const std::string* why : {&corpus_.error, &results_.error})
      if (!why->empty()) {
        fail(*why);
        return std::move(result_);
      }
    describe_trials();
    if (pool_) {
      busy_.assign(pool_->size(), std::nullopt);
      slot_trials_.assign(pool_->size(), 0);
    }
    if (!resume()) return std::move(result_);
    if (next_trial_ == 0 && history_.empty() && !seed_trial()) return std::move(result_);
    if (pool_)
      search_parallel();
    else
      search();
    result_.summary = summary();
    return std::move(result_);
  }

 private:
  // ---- before the first trial -------------------------------------------------------------

  /// What every earlier run left behind: the corpus, the results and the index over both.
  void read_logs() {
    corpus_ = flywheel::read_corpus(options_.corpus_path);
    results_ = flywheel::read_results(options_.results_path);
    for (const auto& p : corpus_.problems) warn(p);
    for (const auto& p : results_.problems) warn(p);
    index_.add_corpus(corpus_.records);
    index_.add_results(results_.rows);
    for (const auto& row : results_.rows) row_of_.emplace(row.schedule_id, &row);
  }

  /// What every record of this invocation carries: versions, the device fingerprint, the shape.
  void describe_trials() {
    versions_ = eval::trial_versions(identity_);
    fingerprint_ = identity_;
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) == 0) fingerprint_["host"] = host;
    fingerprint_["target_name"] = target_.name;
    fingerprint_["num_sms"] = target_.num_sms;
    fingerprint_["sm_arch"] = target_.sm_arch;
    fingerprint_["target_source"] = target_.source;
    shape_json_ = schedule::to_json(shape_);
  }

  /// The run: a new one, or with --resume the last one of this model / target / device, whose
  /// trials are replayed into the counts, the incumbent, the history and the strategy. False when
  /// a results row lost to a kill cannot be restored.
  bool resume() {
    std::vector<CorpusRecord> previous;
    if (options_.resume) {
      for (const CorpusRecord& r : corpus_.records)
        if (r.model == model_ && r.target == target_name_ && r.device == device_)
          run_id_ = r.run_id;
      for (const CorpusRecord& r : corpus_.records)
        if (!run_id_.empty() && r.run_id == run_id_) previous.push_back(r);
      std::sort(previous.begin(), previous.end(),
                [](const CorpusRecord& a, const CorpusRecord& b) { return a.trial < b.trial; });
    }
    resumed_ = !run_id_.empty();
    if (!resumed_) run_id_ = flywheel::new_run_id(start_s_);
    // The run id first (its rows, corpus records and run directory carry it).
    if (options_.progress)
      *options_.progress << "megasched loop: run " << run_id_ << (resumed_ ? " (resumed)" : "")
                         << "\n";

    for (const std::string& s : flywheel::status_vocabulary()) counts_[s] = 0;
    incumbent_.config = ScheduleConfig{};
    incumbent_.id = evaluator_.schedule_id(incumbent_.config);

    std::set<int> logged_trials;
    for (const auto& row : results_.rows)
      if (row.run_id == run_id_) logged_trials.insert(row.trial);
    for (const CorpusRecord& r : previous) {
      std::string error;
      auto config = schedule::parse_config(r.config, &error);
      if (!config) {
        problems_.push_back("run " + run_id_ + " trial " + std::to_string(r.trial) + ": " + error);
        continue;
      }
      // A kill between the corpus append and the results append: restore the row.
      if (!logged_trials.count(r.trial)) {
        if (!flywheel::append_result(options_.results_path, flywheel::row_from_record(r), &error))
          return fail(error);
        ++restored_rows_;
      }
      ++counts_[r.status];
      if (r.default_us) default_us_ = r.default_us;
      if (r.status == flywheel::kStatusKept) {
        incumbent_.config = *config;
        incumbent_.id = r.schedule_id;
        incumbent_.verdict = r.verdict;
        incumbent_.complexity = r.complexity;
        since_keep_ = 0;
      } else {
        ++since_keep_;
      }
      next_trial_ = std::max(next_trial_, r.trial + 1);
      history_.push_back(outcome_of(r, *config));
      strategy_.observe(history_.back());
    }
    for (const auto& o : history_) this_run_ids_.insert(o.schedule_id);
    return true;
  }

  /// Trial 0: the default config, the best known one (--warm-start) or --start. A schedule some
  /// run already logged is adopted, not re-run. False when its record cannot be written.
  bool seed_trial() {
    const auto [seed_config, seed_source] = seed_choice();
    const std::string seed_id = evaluator_.schedule_id(seed_config);
    const CorpusRecord* known = index_.record(seed_id);
    const auto row_it = row_of_.find(seed_id);
    if (known || row_it != row_of_.end()) {
      const eval::Verdict v = known ? known->verdict : verdict_from_row(*row_it->second);
      incumbent_.config = seed_config;
      incumbent_.id = seed_id;
      incumbent_.complexity = schedule::complexity(seed_config);
      if (has_latency(v)) incumbent_.verdict = v;
      if (seed_source == "default" && has_latency(v)) default_us_ = v.latency_us;
      if (seed_source == "warm-start") {
        const CorpusRecord* def = index_.record(evaluator_.schedule_id(ScheduleConfig{}));
        if (def && has_latency(def->verdict)) default_us_ = def->verdict.latency_us;
      }
      seed_ = {{"source", seed_source},
               {"schedule_id", seed_id},
               {"from_run", known ? json(known->run_id) : json(row_it->second->run_id)},
               {"latency_us", v.latency_us ? json(*v.latency_us) : json(nullptr)},
               {"evaluated", false}};
      if (options_.progress)
        *options_.progress << "trial 0 seed (" << seed_source << ") " << seed_id
                           << " is known from run " << seed_["from_run"].get<std::string>()
                           << ": adopted without re-evaluating\n";
      return true;
    }
    if ((options_.stop && options_.stop->load()) || options_.budget <= 0) return true;
    const double t0 = clock_.now_s();
    const std::optional<eval::Verdict> judged = evaluate(seed_config);
    if (abandoned(0)) return true;
    if (!judged) return false;
    const eval::Verdict& v = *judged;
    const double t1 = clock_.now_s();
    CorpusRecord r = make_record(0, seed_source, seed_config, seed_id, nullptr, "", v);
    if (pool_) r.timed_on = pool_->label(last_slot_);
    std::string status = failure_status(v);
    if (status.empty())
      status = has_latency(v) ? flywheel::kStatusKept : flywheel::kStatusDiscarded;
    r.status = status;
    incumbent_.config = seed_config;
    incumbent_.id = seed_id;
    incumbent_.complexity = schedule::complexity(seed_config);
    if (has_latency(v)) {
      incumbent_.verdict = v;
      if (seed_source == "default") default_us_ = v.latency_us;
      r.keep = {{"reason", "trial 0: the baseline"}};
      r.description = seed_source + ": baseline";
    } else {
      r.keep = {{"reason", "trial 0 has no latency: " +
                               (v.rejected_reason.empty() ? v.status : v.rejected_reason)}};
      r.description =
          seed_source + ": " + status + (v.notes.empty() ? "" : " (" + v.notes.front() + ")");
    }
    r.default_us = default_us_;
    r.best_us = incumbent_.latency();
    r.timestamp = flywheel::utc_timestamp(t1);
    seed_ = {{"source", seed_source}, {"schedule_id", seed_id}, {"evaluated", true}};
    if (!log_trial(r, seed_config, t1 - t0)) return false;
    since_keep_ = 0;
    next_trial_ = 1;
    return true;
  }

  /// The config of trial 0 and where it comes from ("default", "warm-start", "start").
  std::pair<ScheduleConfig, std::string> seed_choice() const {
    ScheduleConfig config{};
    std::string source = "default";
    if (options_.warm_start) {
      const CorpusRecord* best = nullptr;
      for (const CorpusRecord& r : corpus_.records) {
        if (r.model != model_ || r.target != target_name_ || r.device != device_) continue;
        if (!has_latency(r.verdict)) continue;
        if (!eval::judged_alike(r.verdict.timed_position, r.verdict.objective,
                                options_.timed_position, options_.objective))
          continue;  // another position or objective
        if (!best || *r.verdict.latency_us < *best->verdict.latency_us) best = &r;
      }
      if (best) {
        std::string error;
        if (auto c = schedule::parse_config(best->config, &error)) {
          config = *c;
          source = "warm-start";
        }
      }
    }
    if (options_.start) {
      config = *options_.start;
      source = "start";
    }
    return {config, source};
  }

  // ---- the trials -------------------------------------------------------------------------

  /// Propose, skip what is known, evaluate, keep or revert, log; until a stop condition.
  void search() {
    std::vector<Proposal> queue;
    int duplicate_rounds = 0, unusable_rounds = 0;
    while (result_.ok) {
      if (const std::string why = stop_condition(); !why.empty()) {
        stop_reason_ = why;
        break;
      }
      if (queue.empty()) {
        queue = strategy_.propose(search_state(), 1);
        std::reverse(queue.begin(), queue.end());
        const std::string problem = strategy_.last_error();
        if (!problem.empty() && (!queue.empty() || strategy_.skipped_all()))
          warn(strategy_.name() + ": skipped: " + problem);
        if (queue.empty() && strategy_.skipped_all() &&
            ++unusable_rounds < strategy_.duplicate_patience())
          continue;  // every candidate was skipped: ask again
        if (queue.empty()) {
          stop_reason_ = problem.empty() ? "exhausted: the strategy has nothing new"
                                         : "strategy failed: " + problem;
          break;
        }
        unusable_rounds = 0;
      }
      Proposal proposal = std::move(queue.back());
      queue.pop_back();
      const std::string id = evaluator_.schedule_id(proposal.config);
      if (index_.contains(id) || this_run_ids_.count(id)) {
        ++skipped_known_;
        if (++duplicate_rounds >= strategy_.duplicate_patience()) {
          stop_reason_ = "exhausted: " + std::to_string(strategy_.duplicate_patience()) +
                         " proposals in a row were already evaluated";
          break;
        }
        continue;
      }
      duplicate_rounds = 0;
      if (!trial(proposal, id)) break;
      ++next_trial_;
    }
  }

  /// Why the loop stops before the next trial ("" to go on).
  std::string stop_condition() const {
    if (cancelled()) return "cancelled";
    if (next_trial_ >= options_.budget) return "budget";
    if (options_.stop && options_.stop->load()) return "interrupted";
    if (options_.minutes > 0 && clock_.now_s() - start_s_ >= options_.minutes * 60.0)
      return "minutes";
    if (options_.plateau > 0 && since_keep_ >= options_.plateau) return "plateau";
    return "";
  }

  SearchState search_state() {
    SearchState state;
    state.shape = &shape_;
    state.target = &target_;
    state.identity = identity_;
    state.incumbent = incumbent_.config;
    state.incumbent_id = incumbent_.id;
    state.incumbent_latency_us = incumbent_.latency();
    state.history = &history_;
    state.trials_left = options_.budget - next_trial_;
    state.is_new = [this](const ScheduleConfig& c) {
      const std::string id = evaluator_.schedule_id(c);
      return !index_.contains(id) && !this_run_ids_.count(id) && !queued_ids_.count(id);
    };
    return state;
  }

  /// One trial of a new proposal: evaluate, decide, log. False when its record cannot be written.
  bool trial(const Proposal& proposal, const std::string& id) {
    const double t0 = clock_.now_s();
    const std::optional<eval::Verdict> judged = evaluate(proposal.config);
    if (abandoned(next_trial_)) return false;
    if (!judged) return false;
    return conclude(proposal, id, *judged, t0, nullptr);
  }

  /// Decides and logs a judged proposal: the keep rule (the incumbent re-measured on the same
  /// evaluator when measured), the incumbent, the record. `slot`: the pool slot that judged it.
  bool conclude(const Proposal& proposal, const std::string& id, const eval::Verdict& v, double t0,
                const json* slot) {
    const ScheduleConfig parent = proposal.parent ? *proposal.parent : incumbent_.config;
    const std::string parent_id = evaluator_.schedule_id(parent);
    CorpusRecord r =
        make_record(next_trial_, strategy_.name(), proposal.config, id, &parent, parent_id, v);
    if (slot) {
      r.target = (*slot)["identity"].value("target", r.target);
      r.device = (*slot)["identity"].value("device", r.device);
      r.timed_on = (*slot)["label"].get<std::string>();
    }
    const std::string decision = judge(v, &r);
    if (abandoned(next_trial_)) return false;  // during the incumbent's re-measurement
    if (!result_.ok) return false;  // the incumbent's re-measurement failed on the harness side
    if (r.status == flywheel::kStatusKept) {
      incumbent_.config = proposal.config;
      incumbent_.id = id;
      incumbent_.verdict = v;
      incumbent_.complexity = r.complexity;
      since_keep_ = 0;
    } else {
      ++since_keep_;
    }
    const double t1 = clock_.now_s();
    r.default_us = default_us_;
    r.best_us = incumbent_.latency();
    r.timestamp = flywheel::utc_timestamp(t1);
    r.description = proposal.description + "; " + r.status + ": " + decision;
    return log_trial(r, proposal.config, t1 - t0);
  }

  // ---- the trials, on a pool of evaluators (loop --gpus / --workers / --mpi) -------------
  //
  // Proposals get a ticket (their sequence number) and are dispatched to idle slots in ticket
  // order; verdicts are decided (keep rule, log) in ticket order as they arrive, so the decisions
  // do not depend on which worker finished first. The strategy proposes a batch (one candidate
  // per live slot) at the start, a second one right after, and a new one each time every ticket
  // of a batch is decided, before any later ticket is: what it sees at each call is a function of
  // the seed and the verdicts, not of the timing, while the batch queued behind keeps every slot
  // busy.

  struct Ticket {
    Proposal proposal;
    std::string id;  // schedule id for the primary device type (the dedup key)
    int slot = -1;   // the slot it runs or ran on
    int lost = 0;    // times its slot stopped answering
    double t0 = 0;   // dispatch time
    std::optional<eval::Verdict> verdict;
  };
  static constexpr uint64_t kRemeasureTicket = ~uint64_t{0};

  void search_parallel() {
    if (stop_condition().empty()) propose_batch();
    if (stop_condition().empty()) propose_batch();
    while (result_.ok) {
      if (cancelled()) {
        stop_reason_ = "cancelled";
        if (options_.progress && in_flight() > 0)
          *options_.progress << in_flight() << " trials cancelled in flight: not logged\n";
        break;
      }
      if (!stopping_) {
        if (const std::string why = stop_condition(); !why.empty()) {
          stop_reason_ = why;
          stopping_ = true;
          drop_pending();
        }
      }
      if (!stopping_) dispatch();
      if (in_flight() == 0) {
        if (stopping_) break;
        if (live_slots() == 0) {
          fail("every worker stopped answering; " + std::to_string(tickets_.size()) +
               " trials are left untried (run again with --resume)");
          break;
        }
        if (pending_.empty() && !propose_batch()) break;
        continue;
      }
      std::optional<PoolEvent> event = pool_->wait(0.5);
      if (!event) continue;
      on_event(std::move(*event));
      decide_ready();
    }
    print_rates();
  }

  int in_flight() const {
    int n = 0;
    for (const auto& b : busy_) n += b.has_value();
    return n;
  }
  int live_slots() const {
    int n = 0;
    for (int s = 0; s < pool_->size(); ++s) n += pool_->alive(s);
    return n;
  }

  /// Queues up to one candidate per live slot (never past the budget). False when the strategy
  /// has nothing and nothing is outstanding: the loop stops (stop_reason_ says why).
  bool propose_batch() {
    const int count =
        std::min(live_slots(), options_.budget - next_trial_ - static_cast<int>(tickets_.size()));
    if (count <= 0) return true;
    int got = 0, duplicate_rounds = 0, unusable_rounds = 0;
    std::string why_none;
    while (got < count && result_.ok) {
      std::vector<Proposal> batch = strategy_.propose(search_state(), count - got);
      const std::string problem = strategy_.last_error();
      if (!problem.empty() && (!batch.empty() || strategy_.skipped_all()))
        warn(strategy_.name() + ": skipped: " + problem);
      if (batch.empty() && strategy_.skipped_all() &&
          ++unusable_rounds < strategy_.duplicate_patience())
        continue;
      if (batch.empty()) {
        why_none = problem.empty() ? "exhausted: the strategy has nothing new"
                                   : "strategy failed: " + problem;
        break;
      }
      unusable_rounds = 0;
      for (Proposal& p : batch) {
        const std::string id = evaluator_.schedule_id(p.config);
        if (index_.contains(id) || this_run_ids_.count(id) || queued_ids_.count(id)) {
          ++skipped_known_;
          ++duplicate_rounds;
          continue;
        }
        if (got == count) break;
        duplicate_rounds = 0;
        queued_ids_.insert(id);
        Ticket t;
        t.proposal = std::move(p);
        t.id = id;
        tickets_.emplace(next_seq_, std::move(t));
        pending_.push_back(next_seq_++);
        ++got;
      }
      if (duplicate_rounds >= strategy_.duplicate_patience()) {
        why_none = "exhausted: " + std::to_string(strategy_.duplicate_patience()) +
                   " proposals in a row were already evaluated";
        break;
      }
    }
    if (got > 0) batch_ends_.push_back(next_seq_);
    if (got == 0 && tickets_.empty() && !why_none.empty()) {
      stop_reason_ = why_none;
      return false;
    }
    return true;
  }

  /// Hands queued tickets to idle live slots, lowest ticket first.
  void dispatch() {
    for (int s = 0; s < pool_->size() && !pending_.empty(); ++s) {
      if (busy_[s] || !pool_->alive(s)) continue;
      const uint64_t seq = pending_.front();
      pending_.pop_front();
      Ticket& t = tickets_.at(seq);
      t.slot = s;
      t.t0 = clock_.now_s();
      busy_[s] = seq;
      pool_->submit(s, seq, t.proposal.config);
    }
  }

  /// A stop: queued tickets are dropped (never tried, so a later run may propose them again).
  void drop_pending() {
    for (uint64_t seq : pending_) {
      queued_ids_.erase(tickets_.at(seq).id);
      tickets_.erase(seq);
    }
    pending_.clear();
  }

  /// A verdict, or a slot that stopped answering: its trial is requeued once, then logged as a
  /// timeout (two workers went silent on it).
  void on_event(PoolEvent event) {
    if (event.slot >= 0 && event.slot < pool_->size()) busy_[event.slot].reset();
    if (event.ticket == kRemeasureTicket) {
      remeasure_event_ = std::move(event);
      return;
    }
    auto it = tickets_.find(event.ticket);
    if (it == tickets_.end()) return;
    Ticket& t = it->second;
    if (event.lost) {
      const bool requeue = ++t.lost == 1;
      warn("worker " + pool_->label(event.slot) + " stopped answering (" + event.lost_reason +
           ") on schedule " + t.id + ": " +
           (requeue ? "the trial is requeued" : "a second worker lost on it, logged as a timeout"));
      if (requeue) {
        pending_.push_front(event.ticket);
        return;
      }
      eval::Verdict v;
      v.status = "timeout";
      v.schedule_id = t.id;
      v.notes.push_back("two workers stopped answering on this trial (" + event.lost_reason + ")");
      t.verdict = v;
      return;
    }
    if (!event.harness_failure.empty()) {
      fail("the trial of schedule " + t.id + " on " + pool_->label(event.slot) +
           " could not run, so nothing is logged for it: " + event.harness_failure);
      return;
    }
    ++evaluations_;
    ++slot_trials_[event.slot];
    t.verdict = std::move(event.verdict);
  }

  /// Decides every ticket whose verdict is in and all of whose predecessors are decided.
  void decide_ready() {
    while (result_.ok && !tickets_.empty() && tickets_.begin()->second.verdict) {
      Ticket t = std::move(tickets_.begin()->second);
      tickets_.erase(tickets_.begin());
      queued_ids_.erase(t.id);
      if (!decide_ticket(t)) return;
      ++next_trial_;
      while (!batch_ends_.empty() &&
             (tickets_.empty() || tickets_.begin()->first >= batch_ends_.front())) {
        batch_ends_.pop_front();
        print_rates();
        if (!stopping_ && stop_condition().empty()) propose_batch();
      }
    }
  }

  /// The keep rule for one ticket against the incumbent of its slot's device type.
  bool decide_ticket(const Ticket& t) {
    const json slot = {{"identity", pool_->identity(t.slot)}, {"label", pool_->label(t.slot)}};
    const std::string type = device_type(slot["identity"]);
    const bool primary = type == primary_type_;
    const std::string id = primary ? t.id : pool_->schedule_id(t.slot, t.proposal.config);
    if (!primary) std::swap(incumbent_, other_incumbents_[type]);
    remeasure_slot_ = t.slot;
    const bool logged = conclude(t.proposal, id, *t.verdict, t.t0, &slot);
    if (!primary) std::swap(incumbent_, other_incumbents_[type]);
    return logged;
  }

  /// One evaluation on `slot` now (trial 0, an incumbent's re-measurement): waits for the slot to
  /// be idle, keeping every other verdict that comes meanwhile for its turn.
  eval::Verdict evaluate_on_slot(int slot, const ScheduleConfig& config, std::string* failure) {
    if (slot < 0 || !pool_->alive(slot))
      for (slot = 0; slot < pool_->size() && !pool_->alive(slot); ++slot) {
      }
    if (slot >= pool_->size()) {
      *failure = "every worker stopped answering";
      return {};
    }
    while (busy_[slot] && !cancelled())
      if (std::optional<PoolEvent> e = pool_->wait(0.5)) on_event(std::move(*e));
    remeasure_event_.reset();
    last_slot_ = slot;
    busy_[slot] = kRemeasureTicket;
    pool_->submit(slot, kRemeasureTicket, config);
    while (!remeasure_event_ && !cancelled())
      if (std::optional<PoolEvent> e = pool_->wait(0.5)) on_event(std::move(*e));
    if (!remeasure_event_) return {};  // cancelled: the caller checks the flag
    PoolEvent e = std::move(*remeasure_event_);
    remeasure_event_.reset();
    if (e.lost) {
      eval::Verdict v;
      v.status = "timeout";
      v.notes.push_back("worker " + pool_->label(slot) + " stopped answering: " + e.lost_reason);
      return v;
    }
    *failure = e.harness_failure;
    return e.verdict;
  }

  /// Trials done, trials/min in all and per worker, best so far (on the progress stream).
  void print_rates() {
    if (!options_.progress || !pool_ || trials_this_invocation_ == 0) return;
    if (rates_printed_at_ == next_trial_) return;
    rates_printed_at_ = next_trial_;
    const double minutes = std::max(1e-9, (clock_.now_s() - start_s_) / 60.0);
    std::string line = "progress: " + std::to_string(next_trial_) + "/" +
                       std::to_string(options_.budget) + " trials, " +
                       fmt("%.2f", trials_this_invocation_ / minutes) + " trials/min (";
    for (int s = 0; s < pool_->size(); ++s)
      line += (s ? ", " : "") + pool_->label(s) + " " + fmt("%.2f", slot_trials_[s] / minutes) +
              (pool_->alive(s) ? "" : " lost");
    line += "), best " + (incumbent_.latency() ? fmt("%.3f us", *incumbent_.latency()) : "-");
    *options_.progress << line << "\n" << std::flush;
  }

  json workers_summary() const {
    const double minutes = std::max(1e-9, (clock_.now_s() - start_s_) / 60.0);
    json workers = json::array();
    for (int s = 0; s < pool_->size(); ++s)
      workers.push_back({{"slot", s},
                         {"timed_on", pool_->label(s)},
                         {"device_type", device_type(pool_->identity(s))},
                         {"trials", slot_trials_[s]},
                         {"trials_per_min", slot_trials_[s] / minutes},
                         {"alive", pool_->alive(s)}});
    return workers;
  }

  bool cancelled() const { return options_.cancel && options_.cancel->load(); }

  /// After a cancellation the trial in flight is dropped, not logged (its verdict is the
  /// evaluator's placeholder). True when that is the case.
  bool abandoned(int trial) {
    if (!cancelled()) return false;
    stop_reason_ = "cancelled";
    if (options_.progress)
      *options_.progress << "trial " << trial << " cancelled in flight: not logged\n";
    return true;
  }

  /// The keep rule (search/loop.h) for a candidate's verdict: sets the record's status and keep
  /// evidence and returns the decision in words. A measured candidate that would be kept is judged
  /// again against the incumbent re-measured back to back.
  std::string judge(const eval::Verdict& v, CorpusRecord* r) {
    std::string status = failure_status(v);
    std::string decision;
    if (status.empty() && !has_latency(v)) {
      status = flywheel::kStatusDiscarded;
      decision = "correct but no latency reported" +
                 (v.notes.empty() ? std::string() : ": " + v.notes.front());
    } else if (status.empty() && !incumbent_.latency()) {
      status = flywheel::kStatusKept;
      decision = "first correct latency of the run";
      r->keep = {{"incumbent_id", incumbent_.id}, {"incumbent_us", nullptr}, {"reason", decision}};
    } else if (status.empty()) {
      KeepDecision d = decide_keep(v, r->complexity, *incumbent_.verdict, incumbent_.complexity,
                                   options_.min_gain, options_.sigmas);
      r->keep = {{"incumbent_id", incumbent_.id},
                 {"incumbent_us", *incumbent_.latency()},
                 {"margin_us", d.margin_us},
                 {"gain_us", d.gain_us}};
      if (d.keep && v.latency_kind == "measured-gpu") d = judge_again(v, *r, std::move(d));
      r->keep["reason"] = d.reason;
      status = d.keep ? flywheel::kStatusKept : flywheel::kStatusDiscarded;
      decision = d.reason;
    } else {
      decision = v.rejected_reason.empty() ? (v.notes.empty() ? v.status : v.notes.front())
                                           : v.rejected_reason;
    }
    r->status = status;
    return decision;
  }

  /// Back to back: time the incumbent again now and judge the candidate against that.
  KeepDecision judge_again(const eval::Verdict& v, CorpusRecord& r, KeepDecision d) {
    const std::optional<eval::Verdict> remeasured = evaluate(incumbent_.config);
    if (!remeasured) return {};
    const eval::Verdict& again = *remeasured;
    if (has_latency(again)) {
      r.keep["remeasured_incumbent_us"] = *again.latency_us;
      incumbent_.verdict = again;
      d = decide_keep(v, r.complexity, again, incumbent_.complexity, options_.min_gain,
                      options_.sigmas);
      r.keep["margin_us"] = d.margin_us;
      r.keep["gain_us"] = d.gain_us;
      d.reason +=
          " (against the incumbent re-measured at " + fmt("%.3f us", *again.latency_us) + ")";
    } else {
      r.keep["remeasured_incumbent_status"] = again.status;
      d.reason += " (the incumbent's re-measurement failed: " + again.status + ")";
    }
    return d;
  }

  /// The evaluator's verdict on `config`; nullopt when the harness failed to judge it at all: then
  /// nothing is logged for it (it stays untried) and the loop stops with the error.
  std::optional<eval::Verdict> evaluate(const ScheduleConfig& config) {
    std::string why;
    eval::Verdict v =
        pool_ ? evaluate_on_slot(remeasure_slot_, config, &why) : evaluator_.evaluate(config);
    if (!pool_) why = evaluator_.harness_failure();
    ++evaluations_;
    if (cancelled()) return std::nullopt;  // a cancelled trial is abandoned, not a failure
    if (!why.empty()) {
      fail("the trial of schedule " + evaluator_.schedule_id(config) +
           " could not run, so nothing is logged for it: " + why);
      return std::nullopt;
    }
    return v;
  }

  CorpusRecord make_record(int trial, const std::string& strategy_name,
                           const ScheduleConfig& config, const std::string& id,
                           const ScheduleConfig* parent, const std::string& parent_id,
                           const eval::Verdict& verdict) const {
    CorpusRecord r;
    r.trial = trial;
    r.run_id = run_id_;
    r.strategy = strategy_name;
    r.schedule_id = id;
    r.parent_id = parent_id;
    r.config = schedule::to_json(config);
    r.changed_knobs =
        parent ? schedule::changed_knobs(*parent, config) : std::vector<std::string>{};
    r.complexity = schedule::complexity(config);
    r.verdict = verdict;
    r.model = model_;
    r.target = target_name_;
    r.device = device_;
    r.model_shape = shape_json_;
    r.device_fingerprint = fingerprint_;
    r.versions = versions_;
    return r;
  }

  /// Appends the record and its row, updates the state, prints the progress line.
  bool log_trial(CorpusRecord& record, const ScheduleConfig& config, double trial_s) {
    std::string error;
    if (!flywheel::append_corpus(options_.corpus_path, record, &error) ||
        !flywheel::append_result(options_.results_path, flywheel::row_from_record(record), &error))
      return fail(error);
    index_.add(record);
    this_run_ids_.insert(record.schedule_id);
    ++counts_[record.status];
    history_.push_back(outcome_of(record, config));
    strategy_.observe(history_.back());
    ++trials_this_invocation_;
    trial_time_total_ += trial_s;
    if (options_.progress || options_.on_trial) {
      const std::string line = progress_line(record);
      if (options_.progress) *options_.progress << line << "\n" << std::flush;
      if (options_.on_trial) options_.on_trial(record.trial + 1, options_.budget, line);
    }
    return true;
  }

  /// The progress line of a logged trial (no newline).
  std::string progress_line(const CorpusRecord& record) const {
    const int done = record.trial + 1;
    const double elapsed = clock_.now_s() - start_s_;
    // With a pool, trials overlap: the rate so far, not the mean trial time, says what is left.
    double eta = (pool_ ? elapsed : trial_time_total_) / trials_this_invocation_ *
                 std::max(0, options_.budget - done);
    if (options_.minutes > 0) eta = std::min(eta, std::max(0.0, options_.minutes * 60 - elapsed));
    std::string latency =
        record.verdict.correct && record.verdict.latency_us
            ? fmt("%10.3f us", *record.verdict.latency_us) + " " +
                  (record.verdict.latency_kind == "measured-gpu" ? "measured " : "predicted")
            : std::string(23, ' ');
    std::string best = incumbent_.latency() ? fmt("%.3f us", *incumbent_.latency()) : "-";
    if (incumbent_.latency() && default_us_)
      best += fmt(" (%.2fx)", *default_us_ / *incumbent_.latency());
    char head[64];
    std::snprintf(head, sizeof head, "trial %3d/%d  %-9s", record.trial, options_.budget,
                  record.status.c_str());
    return std::string(head) + " " + latency + "  best " + best + "  elapsed " +
           format_duration(elapsed) + "  eta " + format_duration(eta) +
           (record.timed_on.empty() ? "" : "  on " + record.timed_on) + "  " + record.description;
  }

  /// A problem the run goes on after: on the progress stream and in the summary's problems.
  void warn(const std::string& message) {
    problems_.push_back(message);
    if (options_.progress) *options_.progress << "warning: " << message << "\n";
  }

  bool fail(const std::string& error) {
    result_.ok = false;
    result_.error = error;
    return false;
  }

  static TrialOutcome outcome_of(const CorpusRecord& r, const ScheduleConfig& config) {
    TrialOutcome o;
    o.trial = r.trial;
    o.config = config;
    o.schedule_id = r.schedule_id;
    o.status = r.status;
    if (r.verdict.correct) o.latency_us = r.verdict.latency_us;
    o.changed_knobs = r.changed_knobs;
    return o;
  }

  // ---- after the last trial ---------------------------------------------------------------

  json summary() {
    json best = nullptr;
    if (incumbent_.verdict) {
      const eval::Verdict& v = *incumbent_.verdict;
      best = {
          {"schedule_id", incumbent_.id},
          {"latency_us", *v.latency_us},
          {"latency_kind", v.latency_kind},
          {"pct_of_floor",
           v.floor_us > 0 ? json(100.0 * v.floor_us / *v.latency_us) : json(nullptr)},
          {"speedup_vs_default", default_us_ ? json(*default_us_ / *v.latency_us) : json(nullptr)},
          {"complexity", incumbent_.complexity},
          {"config", schedule::to_json(incumbent_.config)},
          {"verdict", eval::to_json(v)}};
    }
    const int kept = counts_[flywheel::kStatusKept];
    const int trials = static_cast<int>(history_.size());
    json out = {
        {"run_id", run_id_},
        {"model", model_},
        {"target", target_name_},
        {"device", device_},
        {"strategy", strategy_.name()},
        {"resumed", resumed_},
        {"seed", seed_},
        {"stop_reason", result_.ok ? stop_reason_ : "error: " + result_.error},
        {"trials", trials},
        {"trials_this_invocation", trials_this_invocation_},
        {"evaluations", evaluations_},
        {"skipped_known", skipped_known_},
        {"restored_rows", restored_rows_},
        {"status_counts", counts_},
        {"keep_rate", trials > 0 ? json(static_cast<double>(kept) / trials) : json(nullptr)},
        {"default_us", default_us_ ? json(*default_us_) : json(nullptr)},
        {"best", best},
        {"results", options_.results_path},
        {"corpus", options_.corpus_path},
        {"elapsed_s", clock_.now_s() - start_s_},
        {"problems", problems_}};
    if (pool_) {
      out["workers"] = workers_summary();
      json others = json::object();
      for (const auto& [type, inc] : other_incumbents_)
        others[type] = {{"schedule_id", inc.id},
                        {"latency_us", inc.latency() ? json(*inc.latency()) : json(nullptr)},
                        {"config", schedule::to_json(inc.config)}};
      out["other_device_types"] = others;
    }
    return out;
  }

  // Inputs.
  TrialPool* pool_;  // nullptr: one evaluator, one trial at a time
  eval::Evaluator& evaluator_;
  const schedule::ModelShape& shape_;
  const schedule::GpuTarget& target_;
  Strategy& strategy_;
  Clock& clock_;
  const LoopOptions& options_;
  const double start_s_;
  const json identity_;
  const std::string model_, target_name_, device_;
  const std::string primary_type_;  // device type of the evaluator (a pool's first slot)
  // The logs, held for the run against a second loop of this workload.
  flywheel::WorkloadLock corpus_lock_, results_lock_;
  // What earlier runs left behind.
  flywheel::CorpusRead corpus_;
  flywheel::ResultsRead results_;
  flywheel::ScheduleIndex index_;
  std::map<std::string, const flywheel::ResultRow*> row_of_;
  json problems_ = json::array();
  // What every record carries.
  json versions_, fingerprint_, shape_json_;
  // This run.
  std::string run_id_;
  bool resumed_ = false;
  json seed_ = nullptr;
  Incumbent incumbent_;
  std::optional<double> default_us_;
  std::vector<TrialOutcome> history_;
  std::set<std::string> this_run_ids_;
  std::map<std::string, int> counts_;
  int next_trial_ = 0;
  int since_keep_ = 0;
  // This invocation.
  int evaluations_ = 0;
  int skipped_known_ = 0;
  int restored_rows_ = 0;
  int trials_this_invocation_ = 0;
  double trial_time_total_ = 0.0;
  std::string stop_reason_;
  LoopResult result_;
  // A pool's trials (search_parallel).
  std::map<uint64_t, Ticket> tickets_;         // proposed and not yet decided, by ticket
  std::deque<uint64_t> pending_;               // not yet dispatched, in dispatch order
  std::vector<std::optional<uint64_t>> busy_;  // slot -> its ticket
  std::deque<uint64_t> batch_ends_;            // one past the last ticket of each outstanding batch
  std::set<std::string> queued_ids_;           // ids of the tickets not yet decided
  uint64_t next_seq_ = 0;
  int remeasure_slot_ = -1;    // where evaluate() runs: the slot of the ticket being decided
  int last_slot_ = 0;          // where evaluate() ran last
  int rates_printed_at_ = -1;  // next_trial_ at the last progress: line
  std::optional<PoolEvent> remeasure_event_;
  bool stopping_ = false;
  std::vector<int> slot_trials_;
  std::map<std::string, Incumbent> other_incumbents_;  // device types other than the primary
};

}  // namespace

namespace {

// The first line of a file, and whether it ended in a newline (read at most `limit` bytes).
std::pair<std::string, bool> first_line(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  char c = 0;
  while (line.size() < limit && in.get(c)) {
    if (c == '\n') return {line, true};
    line += c;
  }
  return {line, false};
}

std::string check_results_file(const std::string& path) {
  const auto [line, complete] = first_line(path, 1 << 16);
  if (line.empty() && !complete) return "";  // new or empty
  const std::string header = flywheel::results_header();
  if (!complete && header.rfind(line, 0) == 0) return "";  // a torn first write
  std::set<std::string> cells;
  for (size_t start = 0;;) {
    const size_t tab = line.find('\t', start);
    cells.insert(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  if (cells.count("trial") && cells.count("status") && cells.count("schedule_id")) return "";
  return "--results " + path +
         " is not a results.tsv: its first line is not the header (trial, timestamp, run_id, "
         "...); name a new or existing results file (--corpus takes the .jsonl)";
}

std::string check_corpus_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // the last line without its newline: a torn write, not evidence
    if (line.empty()) continue;
    ++lines;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::string error;
    if (!j.is_discarded() && flywheel::corpus_record_from_json(j, &error)) return "";
  }
  if (lines == 0) return "";
  return "--corpus " + path + " is not a corpus.jsonl: none of its " + std::to_string(lines) +
         " lines is a trial record; name a new or existing corpus (--results takes the .tsv)";
}

}  // namespace

std::string check_log_paths(const std::string& results, const std::string& corpus) {
  if (flywheel::same_file(results, corpus))
    return "--results and --corpus both name " + results + ": give each log its own file";
  for (const auto& [flag, path] :
       {std::pair<std::string, std::string>{"--results", results}, {"--corpus", corpus}}) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      return flag + " " + path + " is " +
             (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
             " (a device or a pipe): name a log file";
  }
  if (std::string why = check_results_file(results); !why.empty()) return why;
  return check_corpus_file(corpus);
}

LoopResult run_loop(eval::Evaluator& evaluator, const schedule::ModelShape& shape,
                    const schedule::GpuTarget& target, Strategy& strategy, Clock& clock,
                    const LoopOptions& options) {
  return LoopRun(evaluator, shape, target, strategy, clock, options).run();
}

namespace {

// The loop's view of a pool as one evaluator: the first slot's identity and schedule ids (the
// primary device type). LoopRun evaluates through evaluate_on_slot (which keeps the verdicts of
// other slots for their turn); this evaluate() is for an idle pool: the first live slot, at once.
class PoolFront : public eval::Evaluator {
 public:
  explicit PoolFront(TrialPool& pool) : pool_(pool) {}
  eval::Verdict evaluate(const schedule::ScheduleConfig& config) override {
    failure_.clear();
    int slot = 0;
    while (slot < pool_.size() && !pool_.alive(slot)) ++slot;
    if (slot == pool_.size()) {
      failure_ = "every worker stopped answering";
      return {};
    }
    pool_.submit(slot, 0, config);
    for (;;)
      if (std::optional<PoolEvent> e = pool_.wait(1.0); e && e->slot == slot) {
        failure_ = e->lost ? e->lost_reason : e->harness_failure;
        return e->verdict;
      }
  }
  json identity() const override { return pool_.identity(0); }
  std::string schedule_id(const schedule::ScheduleConfig& config) const override {
    return pool_.schedule_id(0, config);
  }
  std::string harness_failure() const override { return failure_; }

 private:
  TrialPool& pool_;
  std::string failure_;
};

}  // namespace

LoopResult run_loop_on_pool(TrialPool& pool, const schedule::ModelShape& shape,
                            const schedule::GpuTarget& target, Strategy& strategy, Clock& clock,
                            const LoopOptions& options) {
  PoolFront front(pool);
  return LoopRun(front, shape, target, strategy, clock, options, &pool).run();
}

}  // namespace megasched::search
