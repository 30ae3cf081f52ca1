#include "search/loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>

#include "flywheel/corpus.h"
#include "flywheel/results.h"
#include "search/compile_ahead.h"
#include "search/keep_rule.h"
#include "search/loop_context.h"
#include "search/loop_logs.h"
#include "search/loop_schedule.h"

namespace megasched::search {

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

namespace {

using flywheel::CorpusRecord;
using nlohmann::json;
using schedule::ScheduleConfig;

// One invocation of the loop: the coordinator of its parts. The context (loop_context.h) holds
// the inputs and the run's state, the logs (loop_logs.h) what earlier runs left behind and each
// trial's record, the keep rule (keep_rule.h) the incumbents, and the schedule (loop_schedule.h)
// the order of the trials; run() is the whole loop.
class LoopRun : public TrialSink {
 public:
  LoopRun(eval::Evaluator& evaluator, const schedule::ModelShape& shape,
          const schedule::GpuTarget& target, Strategy& strategy, Clock& clock,
          const LoopOptions& options, TrialPool* pool = nullptr)
      : ctx_(evaluator, shape, target, strategy, clock, options, pool),
        keep_(options.min_gain, options.sigmas, options.confirm),
        logs_(ctx_, keep_) {
    if (pool) pool_schedule_.emplace(ctx_, *pool, keep_, *this);
  }

  LoopResult run() {
    if (!logs_.open() || !logs_.resume()) return std::move(ctx_.result);
    if (ctx_.next_trial == 0 && ctx_.history.empty() && !seed_trial())
      return std::move(ctx_.result);
    if (pool_schedule_)
      pool_schedule_->search();
    else
      search_serially(ctx_, *this);
    ctx_.result.summary = summary();
    return std::move(ctx_.result);
  }

  SearchState search_state(const std::set<std::string>* queued) override {
    SearchState state;
    state.shape = &ctx_.shape;
    state.target = &ctx_.target;
    state.identity = ctx_.identity;
    state.incumbent = keep_.incumbent().config;
    state.incumbent_id = keep_.incumbent().id;
    state.incumbent_latency_us = keep_.incumbent().latency();
    state.history = &ctx_.history;
    state.trials_left = ctx_.options.budget - ctx_.next_trial;
    state.is_new = [this, queued](const ScheduleConfig& c) {
      const std::string id = ctx_.evaluator.schedule_id(c);
      return !logs_.known(id) && !(queued && queued->count(id));
    };
    state.pending = queued ? static_cast<int>(queued->size()) : 0;
    return state;
  }

  bool known(const std::string& id) const override { return logs_.known(id); }

  std::string incumbent_id() const override { return keep_.incumbent().id; }

  std::optional<eval::Verdict> evaluate(const ScheduleConfig& config) override {
    std::string why;
    eval::Verdict v = pool_schedule_ ? pool_schedule_->evaluate_now(config, &why)
                                     : ctx_.evaluator.evaluate(config);
    if (!pool_schedule_) why = ctx_.evaluator.harness_failure();
    ++ctx_.evaluations;
    if (ctx_.cancelled()) return std::nullopt;  // a cancelled trial is abandoned, not a failure
    if (!why.empty()) {
      ctx_.fail("the trial of schedule " + ctx_.evaluator.schedule_id(config) +
                " could not run, so nothing is logged for it: " + why);
      return std::nullopt;
    }
    return v;
  }

  /// The keep rule (the incumbent re-measured on the same evaluator when measured), the
  /// incumbent, the record.
  bool conclude(const Proposal& proposal, const std::string& id, const eval::Verdict& v, double t0,
                const json* slot) override {
    const ScheduleConfig parent = proposal.parent ? *proposal.parent : keep_.incumbent().config;
    const std::string parent_id = ctx_.evaluator.schedule_id(parent);
    CorpusRecord r = logs_.make_record(ctx_.next_trial, ctx_.strategy.name(), proposal.config, id,
                                       &parent, parent_id, v);
    if (slot) {
      r.target = (*slot)["identity"].value("target", r.target);
      r.device = (*slot)["identity"].value("device", r.device);
      r.timed_on = (*slot)["label"].get<std::string>();
    }
    const std::string decision = keep_.judge(
        proposal.config, v, &r, [this](const ScheduleConfig& c) { return evaluate(c); });
    if (ctx_.abandoned(ctx_.next_trial)) return false;  // during the incumbent's re-measurement
    if (!ctx_.result.ok) return false;  // the incumbent's re-measurement failed on the harness side
    if (r.status == flywheel::kStatusKept) {
      keep_.adopt(proposal.config, id, v, r.complexity);
      ctx_.since_keep = 0;
    } else {
      ++ctx_.since_keep;
    }
    const double t1 = ctx_.clock.now_s();
    r.default_us = keep_.default_us();
    r.best_us = keep_.incumbent().latency();
    r.timestamp = flywheel::utc_timestamp(t1);
    r.description = proposal.description + "; " + r.status + ": " + decision;
    return logs_.log_trial(r, proposal.config, t1 - t0);
  }

 private:
  /// Trial 0: the default config, the best known one (--warm-start) or --start. A schedule some
  /// run already logged is adopted, not re-run. False when its record cannot be written.
  bool seed_trial() {
    const auto [seed_config, seed_source] = logs_.seed_choice();
    const std::string seed_id = ctx_.evaluator.schedule_id(seed_config);
    const int complexity = schedule::complexity(seed_config);
    if (const auto logged = logs_.logged(seed_id)) {
      const eval::Verdict& v = logged->first;
      keep_.adopt(seed_config, seed_id, has_latency(v) ? std::optional(v) : std::nullopt,
                  complexity);
      if (seed_source == "default" && has_latency(v)) keep_.set_default_us(v.latency_us);
      if (seed_source == "warm-start") {
        const CorpusRecord* def = logs_.record(ctx_.evaluator.schedule_id(ScheduleConfig{}));
        if (def && has_latency(def->verdict)) keep_.set_default_us(def->verdict.latency_us);
      }
      seed_ = {{"source", seed_source},
               {"schedule_id", seed_id},
               {"from_run", logged->second},
               {"latency_us", v.latency_us ? json(*v.latency_us) : json(nullptr)},
               {"evaluated", false}};
      if (ctx_.options.progress)
        *ctx_.options.progress << "trial 0 seed (" << seed_source << ") " << seed_id
                               << " is known from run " << logged->second
                               << ": adopted without re-evaluating\n";
      return true;
    }
    if ((ctx_.options.stop && ctx_.options.stop->load()) || ctx_.options.budget <= 0) return true;
    const double t0 = ctx_.clock.now_s();
    const std::optional<eval::Verdict> judged = evaluate(seed_config);
    if (ctx_.abandoned(0)) return true;
    if (!judged) return false;
    const eval::Verdict& v = *judged;
    const double t1 = ctx_.clock.now_s();
    CorpusRecord r = logs_.make_record(0, seed_source, seed_config, seed_id, nullptr, "", v);
    if (pool_schedule_) r.timed_on = pool_schedule_->last_label();
    std::string status = failure_status(v);
    if (status.empty())
      status = has_latency(v) ? flywheel::kStatusKept : flywheel::kStatusDiscarded;
    r.status = status;
    keep_.adopt(seed_config, seed_id, has_latency(v) ? std::optional(v) : std::nullopt, complexity);
    if (has_latency(v)) {
      if (seed_source == "default") keep_.set_default_us(v.latency_us);
      r.keep = {{"reason", "trial 0: the baseline"}};
      r.description = seed_source + ": baseline";
    } else {
      r.keep = {{"reason", "trial 0 has no latency: " +
                               (v.rejected_reason.empty() ? v.status : v.rejected_reason)}};
      r.description =
          seed_source + ": " + status + (v.notes.empty() ? "" : " (" + v.notes.front() + ")");
    }
    r.default_us = keep_.default_us();
    r.best_us = keep_.incumbent().latency();
    r.timestamp = flywheel::utc_timestamp(t1);
    seed_ = {{"source", seed_source}, {"schedule_id", seed_id}, {"evaluated", true}};
    if (!logs_.log_trial(r, seed_config, t1 - t0)) return false;
    ctx_.since_keep = 0;
    ctx_.next_trial = 1;
    return true;
  }

  // ---- after the last trial ---------------------------------------------------------------

  json summary() {
    const int kept = ctx_.counts[flywheel::kStatusKept];
    const int trials = static_cast<int>(ctx_.history.size());
    json out = {
        {"run_id", ctx_.run_id},
        {"model", ctx_.model},
        {"target", ctx_.target_name},
        {"device", ctx_.device},
        {"strategy", ctx_.strategy.name()},
        {"resumed", ctx_.resumed},
        {"seed", seed_},
        {"stop_reason", ctx_.result.ok ? ctx_.stop_reason : "error: " + ctx_.result.error},
        {"trials", trials},
        {"trials_this_invocation", ctx_.trials_this_invocation},
        {"evaluations", ctx_.evaluations},
        {"skipped_known", ctx_.skipped_known},
        {"status_counts", ctx_.counts},
        {"keep_rate", trials > 0 ? json(static_cast<double>(kept) / trials) : json(nullptr)},
        {"default_us", keep_.default_us() ? json(*keep_.default_us()) : json(nullptr)},
        {"best", keep_.best_summary()},
        {"confirm", keep_.confirm_summary()},
        {"elapsed_s", ctx_.clock.now_s() - ctx_.start_s},
        {"problems", ctx_.problems}};
    logs_.add_to_summary(out);
    out["compile_ahead"] = nullptr;
    if (CompileAhead* builds = ctx_.options.compile_pool) {
      out["compile_ahead"] = builds->summary();
      out["compile_ahead"]["ahead"] = ctx_.options.compile_ahead;
      out["compile_ahead"]["stale_proposals"] = ctx_.stale_proposals;
    }
    if (pool_schedule_) {
      out["workers"] = pool_schedule_->workers_summary();
      out["other_device_types"] = keep_.others_summary();
    }
    return out;
  }

  LoopContext ctx_;
  KeepRule keep_;
  LoopLogs logs_;
  std::optional<PoolSchedule> pool_schedule_;  // with a pool: many trials at once
  json seed_ = nullptr;                        // trial 0: where it came from
};

}  // namespace

LoopResult run_loop(eval::Evaluator& evaluator, const schedule::ModelShape& shape,
                    const schedule::GpuTarget& target, Strategy& strategy, Clock& clock,
                    const LoopOptions& options) {
  return LoopRun(evaluator, shape, target, strategy, clock, options).run();
}

namespace {

// The loop's view of a pool as one evaluator: the first slot's identity and schedule ids (the
// primary device type). LoopRun evaluates through PoolSchedule::evaluate_now (which keeps the
// verdicts of other slots for their turn); this evaluate() is for an idle pool: the first live
// slot, at once.
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
