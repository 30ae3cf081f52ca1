// The validator's reachability and deadlock rules (schedule/validate_rules.h): every counter's
// declared total against its producers, every wait threshold reachable, and the greedy simulation
// of monotone counters that drains every queue or names where it sticks.
#include <algorithm>
#include <queue>
#include <string>

#include "schedule/validate_rules.h"

namespace megasched::schedule::validate_rules {
namespace {

// First wait of `task` not satisfied by `value`; -1 when all hold, -2 when a wait is malformed.
// Counters only grow, so waits before `from` that held once still hold.
int first_unsatisfied(const Context& cx, uint32_t task, const std::vector<uint64_t>& value,
                      uint32_t from = 0) {
  const ms_abi::Instr& in = cx.p.tasks[task];
  if (!cx.waits_ok(in)) return -2;
  for (uint32_t w = from; w < in.wait_count; ++w) {
    const ms_abi::Wait& wt = cx.p.waits[in.wait_begin + w];
    if (!cx.counter_ok(wt.counter)) return -2;
    if (value[wt.counter] < wt.threshold) return static_cast<int>(w);
  }
  return -1;
}

void report_stuck(Context& cx, uint32_t slot, uint32_t t, bool dynamic,
                  const std::vector<uint64_t>& value, bool malformed) {
  const std::string where = dynamic
                                ? "worker " + std::to_string(slot) + " of the dynamic queue holds "
                                : "queue " + std::to_string(slot) + " is stuck at ";
  if (malformed) {
    cx.add(
        "deadlock",
        where + cx.label.task(t) + ", whose waits name a counter or wait entry that does not exist",
        {t});
    return;
  }
  const int w = first_unsatisfied(cx, t, value);
  if (w < 0) return;  // not blocked (cannot happen after the simulation drains every ready slot)
  const ms_abi::Wait& wt = cx.p.waits[cx.p.tasks[t].wait_begin + w];
  const uint32_t c = wt.counter;
  std::vector<uint32_t> tasks{t};
  std::string missing;
  size_t listed = 0, unfinished = 0;
  for (uint32_t prod : cx.producers[c]) {
    if (cx.ran[prod]) continue;
    ++unfinished;
    if (listed++ < 3) {
      missing += (missing.empty() ? "" : ", ") + cx.label.task(prod);
      tasks.push_back(prod);
    }
  }
  std::string msg = where + cx.label.task(t) + ", which waits for " + cx.label.counter(c) +
                    " >= " + std::to_string(wt.threshold) + " but the counter stops at " +
                    std::to_string(value[c]) + " of " + std::to_string(cx.actual_total[c]);
  if (unfinished > 0)
    msg += ": its producers " + missing +
           (unfinished > listed ? " and " + std::to_string(unfinished - listed) + " more" : "") +
           " never run";
  else
    msg += ": no producer is left to raise it";
  cx.add("deadlock", msg, std::move(tasks), {c});
}

}  // namespace

void collect_producers(Context& cx) {
  const size_t c_count = cx.p.counter_totals.size();
  cx.producers.assign(c_count, {});
  cx.actual_total.assign(c_count, 0);
  for (uint32_t t = 0; t < cx.n; ++t) {
    const ms_abi::Instr& in = cx.p.tasks[t];
    if (in.signal_increment == 0 || !cx.counter_ok(in.signal_counter)) continue;
    cx.producers[in.signal_counter].push_back(t);
    cx.actual_total[in.signal_counter] += in.signal_increment;
  }
  // Largest increment first: the guaranteed producers of a wait are then a prefix (simple rule).
  for (auto& list : cx.producers) {
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return cx.p.tasks[a].signal_increment > cx.p.tasks[b].signal_increment;
    });
  }
}

void check_reachability(Context& cx) {
  for (uint32_t c = 0; c < cx.p.counter_totals.size(); ++c) {
    if (cx.p.counter_totals[c] != cx.actual_total[c])
      cx.add("reachability",
             cx.label.counter(c) + " declares " + std::to_string(cx.p.counter_totals[c]) +
                 " increments per step but its producers add " +
                 std::to_string(cx.actual_total[c]) +
                 ", so epoch-scaled thresholds are wrong from the second step on",
             {}, {c});
    // The VMs compare 32-bit counters with 32-bit targets wrap-safely (ms_abi::counter_reached),
    // which is exact only while a step's increments stay below 2^31.
    const uint64_t total = std::max<uint64_t>(cx.p.counter_totals[c], cx.actual_total[c]);
    if (total > ms_abi::kMaxCounterTotal)
      cx.add("reachability",
             cx.label.counter(c) + " receives " + std::to_string(total) +
                 " increments per step, more than 2^31 - 1: counters and wait targets are 32-bit "
                 "and wrap, and the wrap-safe comparison (ms_abi::counter_reached) tells a counter "
                 "that is behind its target from one that is past it only while a step adds less "
                 "than 2^31, so a wait could pass before its producers ran; hint: signal smaller "
                 "increments (lowering signals 1 per tile) or split the counter",
             {}, {c});
  }
  for (uint32_t t = 0; t < cx.n; ++t) {
    const ms_abi::Instr& in = cx.p.tasks[t];
    if (!cx.waits_ok(in)) continue;
    for (uint32_t w = 0; w < in.wait_count; ++w) {
      const ms_abi::Wait& wt = cx.p.waits[in.wait_begin + w];
      if (!cx.counter_ok(wt.counter)) continue;
      if (wt.threshold > cx.actual_total[wt.counter])
        cx.add("reachability",
               cx.label.task(t) + " waits for " + cx.label.counter(wt.counter) +
                   " >= " + std::to_string(wt.threshold) + ", but its producers add only " +
                   std::to_string(cx.actual_total[wt.counter]) + " per step",
               {t}, {wt.counter});
    }
  }
}
// Greedy simulation shared by both queue kinds: `slots` are the places a task can wait in (queue
// heads, or claimed tasks of the dynamic queue); refill(slot) loads the next task into a slot.
void check_deadlock(Context& cx) {
  const size_t c_count = cx.p.counter_totals.size();
  std::vector<uint64_t> value(c_count, 0);
  using Waiter = std::pair<uint64_t, uint32_t>;  // (threshold, slot)
  std::vector<std::priority_queue<Waiter, std::vector<Waiter>, std::greater<Waiter>>> blocked(
      c_count);
  const bool dynamic = cx.p.launch.dynamic_queue && cx.p.queues.size() == 1;
  const std::vector<uint32_t> empty;
  // Slots: static -> one per queue; dynamic -> one per worker.
  const size_t workers =
      dynamic ? static_cast<size_t>(std::max(1, cx.p.launch.grid_blocks)) : cx.p.queues.size();
  const size_t slot_count =
      dynamic ? std::min<size_t>(workers, cx.p.queues[0].size()) : cx.p.queues.size();
  std::vector<int64_t> slot_task(slot_count, -1);  // task waiting in the slot, -1 none
  std::vector<size_t> pos(cx.p.queues.size(), 0);  // next entry of each queue
  std::vector<int> malformed(slot_count, 0);
  std::vector<uint32_t> cursor(slot_count,
                               0);  // first wait of the slot's task not yet seen to hold
  std::vector<uint32_t> work;
  auto refill = [&](uint32_t s) {
    const std::vector<uint32_t>& q = dynamic ? cx.p.queues[0] : cx.p.queues[s];
    size_t& next = dynamic ? pos[0] : pos[s];
    while (next < q.size() && q[next] >= cx.n)
      ++next;  // ids out of range: a structure error already
    slot_task[s] = next < q.size() ? static_cast<int64_t>(q[next++]) : -1;
    cursor[s] = 0;
  };
  for (uint32_t s = 0; s < slot_count; ++s) {
    refill(s);
    work.push_back(s);
  }
  cx.ran.assign(cx.n, 0);
  while (!work.empty()) {
    const uint32_t s = work.back();
    work.pop_back();
    while (slot_task[s] >= 0) {
      const uint32_t t = static_cast<uint32_t>(slot_task[s]);
      const int w = first_unsatisfied(cx, t, value, cursor[s]);
      if (w == -2) {
        malformed[s] = 1;
        break;
      }
      if (w >= 0) {
        cursor[s] = static_cast<uint32_t>(w);
        const ms_abi::Wait& wt = cx.p.waits[cx.p.tasks[t].wait_begin + w];
        blocked[wt.counter].push({wt.threshold, s});
        break;
      }
      cx.ran[t] = 1;
      refill(s);
      // The task's signal, and a chained task its arrival completes (it runs on this block
      // at once, waits for nothing more, and signals in turn).
      for (uint32_t r = t; r != UINT32_MAX;) {
        const ms_abi::Instr& in = cx.p.tasks[r];
        uint32_t next = UINT32_MAX;
        if (in.signal_increment > 0 && cx.counter_ok(in.signal_counter)) {
          const uint32_t c = in.signal_counter;
          value[c] += in.signal_increment;
          while (!blocked[c].empty() && blocked[c].top().first <= value[c]) {
            work.push_back(blocked[c].top().second);
            blocked[c].pop();
          }
          if (in.chain != 0 && in.chain <= cx.n && cx.chained[in.chain - 1] &&
              !cx.ran[in.chain - 1] && first_unsatisfied(cx, in.chain - 1, value) == -1) {
            next = in.chain - 1;
            cx.ran[next] = 1;
          }
        }
        r = next;
      }
    }
  }
  for (uint32_t s = 0; s < slot_count; ++s) {
    if (slot_task[s] < 0) continue;
    report_stuck(cx, s, static_cast<uint32_t>(slot_task[s]), dynamic, value, malformed[s] != 0);
  }
  if (dynamic && slot_count > 0 && slot_count == workers && pos[0] < cx.p.queues[0].size()) {
    bool all_stuck = true;
    for (uint32_t s = 0; s < slot_count; ++s) all_stuck = all_stuck && slot_task[s] >= 0;
    if (all_stuck)
      cx.add("deadlock", "all " + std::to_string(workers) +
                             " workers of the dynamic queue hold tasks that cannot start, so the " +
                             std::to_string(cx.p.queues[0].size() - pos[0]) +
                             " unclaimed tasks they wait for never run");
  }
}

}  // namespace megasched::schedule::validate_rules
