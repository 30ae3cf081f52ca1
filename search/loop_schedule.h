// The order of a loop invocation's trials (search/loop.h): one at a time on one evaluator
// (search_serially), or many at once on a pool of evaluators (PoolSchedule: tickets, batches,
// busy slots, decisions in proposal order). What to propose, whether a schedule is new, and how a
// verdict is decided and logged, a schedule asks of the loop that runs it (TrialSink, LoopRun in
// search/loop.cpp). Private to search/.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"
#include "schedule/config.h"
#include "search/keep_rule.h"
#include "search/loop_context.h"
#include "search/strategy.h"
#include "search/trial_pool.h"

namespace megasched::search {

/// What a schedule asks of the loop that runs it.
class TrialSink {
 public:
  virtual ~TrialSink() = default;
  /// The strategy's view of the run; `queued`: ids proposed and not yet decided (or nullptr).
  virtual SearchState search_state(const std::set<std::string>* queued) = 0;
  /// The schedule id of the incumbent (a proposal made against another one is stale).
  virtual std::string incumbent_id() const = 0;
  /// Whether some run (this one included) already logged this schedule id.
  virtual bool known(const std::string& id) const = 0;
  /// The evaluator's verdict on `config`; nullopt when nothing is to be logged for it (the
  /// harness failed to judge it, or the run was cancelled).
  virtual std::optional<eval::Verdict> evaluate(const schedule::ScheduleConfig& config) = 0;
  /// Decides and logs a judged proposal (next_trial's record). `slot`: the pool slot that judged
  /// it ({"identity", "label"}), or nullptr. False when the loop cannot go on.
  virtual bool conclude(const Proposal& proposal, const std::string& id, const eval::Verdict& v,
                        double t0, const nlohmann::json* slot) = 0;
};

/// Propose, skip what is known, evaluate, keep or revert, log; until a stop condition (its reason
/// in ctx.stop_reason). With compile-ahead (LoopOptions::compile_ahead and compile_pool) the
/// proposals after the next are queued and their kernels built meanwhile; a queued proposal made
/// against an earlier incumbent is dropped unrun (ctx.stale_proposals) and the strategy asked
/// again.
void search_serially(LoopContext& ctx, TrialSink& sink);

// Proposals get a ticket (their sequence number) and are dispatched to idle slots in ticket
// order; verdicts are decided (keep rule, log) in ticket order as they arrive, so the decisions do
// not depend on which worker finished first. The strategy proposes a batch (one candidate per
// live slot) at the start, a second one right after (with compile-ahead, compile_ahead more,
// their kernels building meanwhile), and a new one each time every ticket of a
// batch is decided, before any later ticket is: what it sees at each call is a function of the
// seed and the verdicts, not of the timing, while the batch queued behind keeps every slot busy.
class PoolSchedule {
 public:
  PoolSchedule(LoopContext& ctx, TrialPool& pool, KeepRule& keep, TrialSink& sink);

  /// The trials, until a stop condition, an exhausted strategy or no live slot.
  void search();

  /// One evaluation now (trial 0, an incumbent's re-measurement) on the slot of the ticket being
  /// decided (at first, the first live slot): waits for the slot to be idle, keeping every other
  /// verdict that comes meanwhile for its turn. `failure`: the harness failure, if any.
  eval::Verdict evaluate_now(const schedule::ScheduleConfig& config, std::string* failure);

  /// The label of the slot evaluate_now() ran on last.
  std::string last_label() const { return pool_.label(last_slot_); }

  /// The summary's "workers": trials and trials/min per slot.
  nlohmann::json workers_summary() const;

 private:
  struct Ticket {
    Proposal proposal;
    std::string id;  // schedule id for the primary device type (the dedup key)
    int slot = -1;   // the slot it runs or ran on
    int lost = 0;    // times its slot stopped answering
    double t0 = 0;   // dispatch time
    std::optional<eval::Verdict> verdict;
  };
  static constexpr uint64_t kRemeasureTicket = ~uint64_t{0};

  int in_flight() const;
  int live_slots() const;
  /// Queues up to one candidate per live slot (never past the budget). False when the strategy
  /// has nothing and nothing is outstanding: the loop stops (ctx.stop_reason says why).
  bool propose_batch();
  /// Proposes batches until depth_ are outstanding, or the strategy has nothing now (it waits for
  /// verdicts): after a wait the pipeline is refilled, not left one batch deep. False as
  /// propose_batch.
  bool refill();
  /// Hands queued tickets to idle live slots, lowest ticket first.
  void dispatch();
  /// A stop: queued tickets are dropped (never tried, so a later run may propose them again).
  void drop_pending();
  /// A verdict, or a slot that stopped answering: its trial is requeued once, then logged as a
  /// timeout (two workers went silent on it).
  void on_event(PoolEvent event);
  /// Decides every ticket whose verdict is in and all of whose predecessors are decided.
  void decide_ready();
  /// The keep rule for one ticket against the incumbent of its slot's device type.
  bool decide_ticket(const Ticket& t);
  /// Trials done, trials/min in all and per worker, best so far (on the progress stream).
  void print_rates();

  LoopContext& ctx_;
  TrialPool& pool_;
  KeepRule& keep_;
  TrialSink& sink_;
  std::map<uint64_t, Ticket> tickets_;         // proposed and not yet decided, by ticket
  std::deque<uint64_t> pending_;               // not yet dispatched, in dispatch order
  std::vector<std::optional<uint64_t>> busy_;  // slot -> its ticket
  std::deque<uint64_t> batch_ends_;            // one past the last ticket of each outstanding batch
  std::set<std::string> queued_ids_;           // ids of the tickets not yet decided
  uint64_t next_seq_ = 0;
  int remeasure_slot_ = -1;    // where evaluate_now() runs: the slot of the ticket being decided
  int last_slot_ = 0;          // where evaluate_now() ran last
  int rates_printed_at_ = -1;  // ctx.next_trial at the last progress: line
  std::optional<PoolEvent> remeasure_event_;
  bool stopping_ = false;
  size_t depth_ = 2;  // batches to keep outstanding: 2, plus compile_ahead
  std::vector<int> slot_trials_;
};

}  // namespace megasched::search
