#include "search/loop_schedule.h"

#include <algorithm>
#include <utility>

#include "schedule/format.h"

namespace megasched::search {

using nlohmann::json;
using schedule::fmt;
using schedule::ScheduleConfig;

namespace {

/// One trial of a new proposal: evaluate, decide, log. False when the loop cannot go on.
bool serial_trial(LoopContext& ctx, TrialSink& sink, const Proposal& proposal,
                  const std::string& id) {
  const double t0 = ctx.clock.now_s();
  const std::optional<eval::Verdict> judged = sink.evaluate(proposal.config);
  if (ctx.abandoned(ctx.next_trial)) return false;
  if (!judged) return false;
  return sink.conclude(proposal, id, *judged, t0, nullptr);
}

}  // namespace

void search_serially(LoopContext& ctx, TrialSink& sink) {
  Strategy& strategy = ctx.strategy;
  std::vector<Proposal> queue;
  int duplicate_rounds = 0, unusable_rounds = 0;
  while (ctx.result.ok) {
    if (const std::string why = ctx.stop_condition(); !why.empty()) {
      ctx.stop_reason = why;
      break;
    }
    if (queue.empty()) {
      queue = strategy.propose(sink.search_state(nullptr), 1);
      std::reverse(queue.begin(), queue.end());
      const std::string problem = strategy.last_error();
      if (!problem.empty() && (!queue.empty() || strategy.skipped_all()))
        ctx.warn(strategy.name() + ": skipped: " + problem);
      if (queue.empty() && strategy.skipped_all() &&
          ++unusable_rounds < strategy.duplicate_patience())
        continue;  // every candidate was skipped: ask again
      if (queue.empty()) {
        ctx.stop_reason = problem.empty() ? "exhausted: the strategy has nothing new"
                                          : "strategy failed: " + problem;
        break;
      }
      unusable_rounds = 0;
    }
    Proposal proposal = std::move(queue.back());
    queue.pop_back();
    const std::string id = ctx.evaluator.schedule_id(proposal.config);
    if (sink.known(id)) {
      ++ctx.skipped_known;
      if (++duplicate_rounds >= strategy.duplicate_patience()) {
        ctx.stop_reason = "exhausted: " + std::to_string(strategy.duplicate_patience()) +
                          " proposals in a row were already evaluated";
        break;
      }
      continue;
    }
    duplicate_rounds = 0;
    if (!serial_trial(ctx, sink, proposal, id)) break;
    ++ctx.next_trial;
  }
}

PoolSchedule::PoolSchedule(LoopContext& ctx, TrialPool& pool, KeepRule& keep, TrialSink& sink)
    : ctx_(ctx),
      pool_(pool),
      keep_(keep),
      sink_(sink),
      busy_(static_cast<size_t>(pool.size())),
      slot_trials_(static_cast<size_t>(pool.size()), 0) {}

void PoolSchedule::search() {
  if (ctx_.stop_condition().empty()) propose_batch();
  if (ctx_.stop_condition().empty()) propose_batch();
  while (ctx_.result.ok) {
    if (ctx_.cancelled()) {
      ctx_.stop_reason = "cancelled";
      if (ctx_.options.progress && in_flight() > 0)
        *ctx_.options.progress << in_flight() << " trials cancelled in flight: not logged\n";
      break;
    }
    if (!stopping_) {
      if (const std::string why = ctx_.stop_condition(); !why.empty()) {
        ctx_.stop_reason = why;
        stopping_ = true;
        drop_pending();
      }
    }
    if (!stopping_) dispatch();
    if (in_flight() == 0) {
      if (stopping_) break;
      if (live_slots() == 0) {
        ctx_.fail("every worker stopped answering; " + std::to_string(tickets_.size()) +
                  " trials are left untried (run again with --resume)");
        break;
      }
      if (pending_.empty() && !propose_batch()) break;
      continue;
    }
    std::optional<PoolEvent> event = pool_.wait(0.5);
    if (!event) continue;
    on_event(std::move(*event));
    decide_ready();
  }
  print_rates();
}

int PoolSchedule::in_flight() const {
  int n = 0;
  for (const auto& b : busy_) n += b.has_value();
  return n;
}

int PoolSchedule::live_slots() const {
  int n = 0;
  for (int s = 0; s < pool_.size(); ++s) n += pool_.alive(s);
  return n;
}

bool PoolSchedule::propose_batch() {
  const int count = std::min(
      live_slots(), ctx_.options.budget - ctx_.next_trial - static_cast<int>(tickets_.size()));
  if (count <= 0) return true;
  int got = 0, duplicate_rounds = 0, unusable_rounds = 0;
  std::string why_none;
  while (got < count && ctx_.result.ok) {
    std::vector<Proposal> batch =
        ctx_.strategy.propose(sink_.search_state(&queued_ids_), count - got);
    const std::string problem = ctx_.strategy.last_error();
    if (!problem.empty() && (!batch.empty() || ctx_.strategy.skipped_all()))
      ctx_.warn(ctx_.strategy.name() + ": skipped: " + problem);
    if (batch.empty() && ctx_.strategy.skipped_all() &&
        ++unusable_rounds < ctx_.strategy.duplicate_patience())
      continue;
    if (batch.empty()) {
      why_none = problem.empty() ? "exhausted: the strategy has nothing new"
                                 : "strategy failed: " + problem;
      break;
    }
    unusable_rounds = 0;
    for (Proposal& p : batch) {
      const std::string id = ctx_.evaluator.schedule_id(p.config);
      if (sink_.known(id) || queued_ids_.count(id)) {
        ++ctx_.skipped_known;
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
    if (duplicate_rounds >= ctx_.strategy.duplicate_patience()) {
      why_none = "exhausted: " + std::to_string(ctx_.strategy.duplicate_patience()) +
                 " proposals in a row were already evaluated";
      break;
    }
  }
  if (got > 0) batch_ends_.push_back(next_seq_);
  if (got == 0 && tickets_.empty() && !why_none.empty()) {
    ctx_.stop_reason = why_none;
    return false;
  }
  return true;
}

void PoolSchedule::dispatch() {
  for (int s = 0; s < pool_.size() && !pending_.empty(); ++s) {
    if (busy_[s] || !pool_.alive(s)) continue;
    const uint64_t seq = pending_.front();
    pending_.pop_front();
    Ticket& t = tickets_.at(seq);
    t.slot = s;
    t.t0 = ctx_.clock.now_s();
    busy_[s] = seq;
    pool_.submit(s, seq, t.proposal.config);
  }
}

void PoolSchedule::drop_pending() {
  for (uint64_t seq : pending_) {
    queued_ids_.erase(tickets_.at(seq).id);
    tickets_.erase(seq);
  }
  pending_.clear();
}

void PoolSchedule::on_event(PoolEvent event) {
  if (event.slot >= 0 && event.slot < pool_.size()) busy_[event.slot].reset();
  if (event.ticket == kRemeasureTicket) {
    remeasure_event_ = std::move(event);
    return;
  }
  auto it = tickets_.find(event.ticket);
  if (it == tickets_.end()) return;
  Ticket& t = it->second;
  if (event.lost) {
    const bool requeue = ++t.lost == 1;
    ctx_.warn(
        "worker " + pool_.label(event.slot) + " stopped answering (" + event.lost_reason +
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
    ctx_.fail("the trial of schedule " + t.id + " on " + pool_.label(event.slot) +
              " could not run, so nothing is logged for it: " + event.harness_failure);
    return;
  }
  ++ctx_.evaluations;
  ++slot_trials_[event.slot];
  t.verdict = std::move(event.verdict);
}

void PoolSchedule::decide_ready() {
  while (ctx_.result.ok && !tickets_.empty() && tickets_.begin()->second.verdict) {
    Ticket t = std::move(tickets_.begin()->second);
    tickets_.erase(tickets_.begin());
    queued_ids_.erase(t.id);
    if (!decide_ticket(t)) return;
    ++ctx_.next_trial;
    while (!batch_ends_.empty() &&
           (tickets_.empty() || tickets_.begin()->first >= batch_ends_.front())) {
      batch_ends_.pop_front();
      print_rates();
      if (!stopping_ && ctx_.stop_condition().empty()) propose_batch();
    }
  }
}

bool PoolSchedule::decide_ticket(const Ticket& t) {
  const json slot = {{"identity", pool_.identity(t.slot)}, {"label", pool_.label(t.slot)}};
  const std::string type = device_type(slot["identity"]);
  const bool primary = type == ctx_.primary_type;
  const std::string id = primary ? t.id : pool_.schedule_id(t.slot, t.proposal.config);
  if (!primary) keep_.swap_device_type(type);
  remeasure_slot_ = t.slot;
  const bool logged = sink_.conclude(t.proposal, id, *t.verdict, t.t0, &slot);
  if (!primary) keep_.swap_device_type(type);
  return logged;
}

eval::Verdict PoolSchedule::evaluate_now(const ScheduleConfig& config, std::string* failure) {
  int slot = remeasure_slot_;
  if (slot < 0 || !pool_.alive(slot))
    for (slot = 0; slot < pool_.size() && !pool_.alive(slot); ++slot) {
    }
  if (slot >= pool_.size()) {
    *failure = "every worker stopped answering";
    return {};
  }
  while (busy_[slot] && !ctx_.cancelled())
    if (std::optional<PoolEvent> e = pool_.wait(0.5)) on_event(std::move(*e));
  remeasure_event_.reset();
  last_slot_ = slot;
  busy_[slot] = kRemeasureTicket;
  pool_.submit(slot, kRemeasureTicket, config);
  while (!remeasure_event_ && !ctx_.cancelled())
    if (std::optional<PoolEvent> e = pool_.wait(0.5)) on_event(std::move(*e));
  if (!remeasure_event_) return {};  // cancelled: the caller checks the flag
  PoolEvent e = std::move(*remeasure_event_);
  remeasure_event_.reset();
  if (e.lost) {
    eval::Verdict v;
    v.status = "timeout";
    v.notes.push_back("worker " + pool_.label(slot) + " stopped answering: " + e.lost_reason);
    return v;
  }
  *failure = e.harness_failure;
  return e.verdict;
}

void PoolSchedule::print_rates() {
  if (!ctx_.options.progress || ctx_.trials_this_invocation == 0) return;
  if (rates_printed_at_ == ctx_.next_trial) return;
  rates_printed_at_ = ctx_.next_trial;
  const double minutes = std::max(1e-9, (ctx_.clock.now_s() - ctx_.start_s) / 60.0);
  std::string line = "progress: " + std::to_string(ctx_.next_trial) + "/" +
                     std::to_string(ctx_.options.budget) + " trials, " +
                     fmt("%.2f", ctx_.trials_this_invocation / minutes) + " trials/min (";
  for (int s = 0; s < pool_.size(); ++s)
    line += (s ? ", " : "") + pool_.label(s) + " " + fmt("%.2f", slot_trials_[s] / minutes) +
            (pool_.alive(s) ? "" : " lost");
  line += "), best " +
          (keep_.incumbent().latency() ? fmt("%.3f us", *keep_.incumbent().latency()) : "-");
  *ctx_.options.progress << line << "\n" << std::flush;
}

json PoolSchedule::workers_summary() const {
  const double minutes = std::max(1e-9, (ctx_.clock.now_s() - ctx_.start_s) / 60.0);
  json workers = json::array();
  for (int s = 0; s < pool_.size(); ++s)
    workers.push_back({{"slot", s},
                       {"timed_on", pool_.label(s)},
                       {"device_type", device_type(pool_.identity(s))},
                       {"trials", slot_trials_[s]},
                       {"trials_per_min", slot_trials_[s] / minutes},
                       {"alive", pool_.alive(s)}});
  return workers;
}

}  // namespace megasched::search
