#include "search/loop_schedule.h"

#include <algorithm>
#include <utility>

#include "schedule/format.h"
#include "search/compile_ahead.h"

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

/// The serial loop's proposals not yet run, in order, and with compile-ahead the kernels of all
/// but the next one building (search/compile_ahead.h). Each remembers the incumbent it was
/// proposed against: once the incumbent changes it is stale and never runs.
class SerialQueue {
 public:
  SerialQueue(LoopContext& ctx, TrialSink& sink)
      : ctx_(ctx),
        sink_(sink),
        builds_(ctx.options.compile_pool),
        ahead_(builds_ ? std::max(ctx.options.compile_ahead, 0) : 0) {}

  bool empty() const { return queue_.empty(); }
  /// Proposals the queue should hold before the next trial: the next one and those ahead (none
  /// past the budget).
  size_t wanted() const {
    return static_cast<size_t>(std::clamp(ctx_.options.budget - ctx_.next_trial, 1, 1 + ahead_));
  }
  size_t size() const { return queue_.size(); }
  /// The strategy's view (with compile-ahead, the queued ids count as taken).
  SearchState state() { return sink_.search_state(ahead_ > 0 ? &ids_ : nullptr); }

  void push(Proposal proposal) {
    std::string id = ctx_.evaluator.schedule_id(proposal.config);
    Entry e{std::move(proposal), std::move(id), incumbent_};
    if (builds_ && !queue_.empty()) builds_->submit(e.id, e.proposal.config, generation_);
    ids_.insert(e.id);
    queue_.push_back(std::move(e));
  }

  /// Drops the proposals made against an earlier incumbent (and their queued builds).
  void drop_stale() {
    if (ahead_ == 0 || ctx_.strategy.proposals_outlive_incumbent()) return;
    const std::string now = sink_.incumbent_id();
    if (now == incumbent_) return;
    incumbent_ = now;
    ++generation_;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->incumbent == incumbent_) {
        ++it;
        continue;
      }
      ids_.erase(it->id);
      it = queue_.erase(it);
      ++ctx_.stale_proposals;
    }
    builds_->drop_stale(generation_);
  }

  /// The next proposal and its schedule id; its queued build, if not started, is taken back.
  std::pair<Proposal, std::string> pop() {
    Entry e = std::move(queue_.front());
    queue_.pop_front();
    ids_.erase(e.id);
    if (builds_) {
      builds_->withdraw(e.id);
      // The new front's kernel starts building now if it was queued behind a full pool.
      if (!queue_.empty())
        builds_->submit(queue_.front().id, queue_.front().proposal.config, generation_);
    }
    return {std::move(e.proposal), std::move(e.id)};
  }

  /// Every tenth trial, the compile-ahead state on the progress stream.
  void report() const {
    if (builds_ && ctx_.options.progress && ctx_.next_trial % 10 == 0)
      *ctx_.options.progress << builds_->status_line() << "\n";
  }

 private:
  struct Entry {
    Proposal proposal;
    std::string id;
    std::string incumbent;  // the incumbent's schedule id when it was proposed
  };
  LoopContext& ctx_;
  TrialSink& sink_;
  CompileAhead* builds_;
  const int ahead_;
  std::deque<Entry> queue_;
  std::set<std::string> ids_;
  std::string incumbent_ = sink_.incumbent_id();
  uint64_t generation_ = 0;
};

}  // namespace

void search_serially(LoopContext& ctx, TrialSink& sink) {
  Strategy& strategy = ctx.strategy;
  SerialQueue queue(ctx, sink);
  int duplicate_rounds = 0, unusable_rounds = 0;
  while (ctx.result.ok) {
    if (const std::string why = ctx.stop_condition(); !why.empty()) {
      ctx.stop_reason = why;
      break;
    }
    queue.drop_stale();
    if (queue.size() < queue.wanted()) {
      const bool had = !queue.empty();
      std::vector<Proposal> fresh =
          strategy.propose(queue.state(), static_cast<int>(queue.wanted() - queue.size()));
      const std::string problem = strategy.last_error();
      if (!problem.empty() && (!fresh.empty() || strategy.skipped_all()))
        ctx.warn(strategy.name() + ": skipped: " + problem);
      if (!had && fresh.empty() && strategy.skipped_all() &&
          ++unusable_rounds < strategy.duplicate_patience())
        continue;  // every candidate was skipped: ask again
      if (!had && fresh.empty()) {
        ctx.stop_reason = problem.empty() ? "exhausted: the strategy has nothing new"
                                          : "strategy failed: " + problem;
        break;
      }
      if (!had) unusable_rounds = 0;
      for (Proposal& p : fresh) queue.push(std::move(p));
    }
    auto [proposal, id] = queue.pop();
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
    queue.report();
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
  // Two batches outstanding (the one running, one queued behind it), and with compile-ahead
  // compile_ahead more (that many tickets per worker queued with their kernels building): a
  // verdict is judged in ticket order, so a trial that waits for its build holds back the
  // proposals behind it, and with fewer tickets ahead the other workers ran dry (four H200s with
  // one batch ahead spent a third of their time in builds: 2.6x one GPU's rate).
  const int ahead = ctx_.options.compile_pool ? std::max(ctx_.options.compile_ahead, 0) : 0;
  depth_ = static_cast<size_t>(2 + ahead);
  if (ctx_.stop_condition().empty()) refill();
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
      if (pending_.empty() && !refill()) break;
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
      if (ctx_.options.compile_pool) ctx_.options.compile_pool->submit(id, t.proposal.config);
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

bool PoolSchedule::refill() {
  while (batch_ends_.size() < depth_ && ctx_.result.ok && ctx_.stop_condition().empty()) {
    const size_t before = batch_ends_.size();
    if (!propose_batch()) return false;
    if (batch_ends_.size() == before) break;  // nothing now: the strategy waits for verdicts
  }
  return true;
}

void PoolSchedule::dispatch() {
  for (int s = 0; s < pool_.size() && !pending_.empty(); ++s) {
    if (busy_[s] || !pool_.alive(s)) continue;
    const uint64_t seq = pending_.front();
    pending_.pop_front();
    Ticket& t = tickets_.at(seq);
    // Not started yet: the worker builds it now (a build of the same key waits for the other).
    if (ctx_.options.compile_pool) ctx_.options.compile_pool->withdraw(t.id);
    t.slot = s;
    t.t0 = ctx_.clock.now_s();
    busy_[s] = seq;
    pool_.submit(s, seq, t.proposal.config);
  }
}

void PoolSchedule::drop_pending() {
  for (uint64_t seq : pending_) {
    if (ctx_.options.compile_pool) ctx_.options.compile_pool->withdraw(tickets_.at(seq).id);
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
      if (!stopping_ && ctx_.stop_condition().empty()) refill();
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
  if (ctx_.options.compile_pool) line += "; " + ctx_.options.compile_pool->status_line();
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
