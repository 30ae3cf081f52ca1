#include "groundtruth/closure.h"

#include <algorithm>

#include "groundtruth/device_model.h"

namespace megasched::groundtruth {
namespace {

class Closure {
 public:
  Closure(const schedule::Program& p, uint32_t epoch, const std::vector<char>& chained)
      : p_(p), epoch_(epoch), chained_(chained), n_(p.tasks.size()), added_(step_increments(p)) {
    dynamic_ = p.launch.dynamic_queue;
    workers_ = static_cast<size_t>(std::max(1, p.launch.grid_blocks));
    live_queues_ = dynamic_ ? 1 : std::min(p.queues.size(), workers_);
  }

  /// Whether every wait, as its counter goes from 0 to what the step adds, turns true at most once:
  /// the int32 difference counter - target never steps from 2^31 - 1 to -2^31.
  bool persistent() const {
    for (const ms_abi::Wait& w : p_.waits) {
      if (w.counter >= added_.size()) return false;
      const uint64_t added = added_[w.counter];
      if (added == 0) continue;
      const uint32_t start = static_cast<uint32_t>(
          uint64_t{epoch_} * added - uint64_t{epoch_} * p_.counter_totals[w.counter] - w.threshold);
      const uint64_t first_drop = start <= 0x7fffffffu ? 0x7fffffffull : 0x17fffffffull;
      if (first_drop < uint64_t{start} + added) return false;
    }
    return true;
  }

  /// Fires every transition but the finishing of `held` tasks until none is enabled. Returns
  /// which tasks finished; *enabled (if given) gets the held tasks enabled at the end.
  std::vector<char> run(const std::vector<char>& held, std::vector<char>* enabled) const {
    std::vector<char> fin(n_, 0);
    std::vector<uint64_t> value(p_.counter_totals.size(), 0);
    const std::vector<uint32_t> empty;
    const std::vector<uint32_t>& q = dynamic_ && !p_.queues.empty() ? p_.queues[0] : empty;
    size_t cursor = dynamic_ && workers_ >= q.size() ? q.size() : 0;
    auto can_start = [&](uint32_t t) { return device_waits_hold(p_, t, epoch_, value, added_); };
    std::vector<uint32_t> candidates;
    auto collect = [&] {
      candidates.clear();
      if (dynamic_) {
        for (size_t i = 0; i < cursor; ++i)
          if (!fin[q[i]]) candidates.push_back(q[i]);
      } else {
        for (size_t qi = 0; qi < live_queues_; ++qi)
          for (uint32_t t : p_.queues[qi])
            if (!fin[t]) {
              candidates.push_back(t);
              break;
            }
      }
      for (uint32_t t = 0; t < n_; ++t)
        if (chained_[t] && !fin[t]) candidates.push_back(t);
    };
    for (bool progress = true; progress;) {
      progress = false;
      if (dynamic_) {
        size_t in_flight = 0;
        for (size_t i = 0; i < cursor; ++i) in_flight += !fin[q[i]];
        for (; in_flight < workers_ && cursor < q.size(); ++cursor, ++in_flight) progress = true;
      }
      collect();
      for (uint32_t t : candidates) {
        if (held[t] || !can_start(t)) continue;
        fin[t] = 1;
        if (p_.tasks[t].signal_increment > 0)
          value[p_.tasks[t].signal_counter] += p_.tasks[t].signal_increment;
        progress = true;
      }
    }
    if (enabled) {
      enabled->assign(n_, 0);
      collect();
      for (uint32_t t : candidates) (*enabled)[t] = can_start(t);
    }
    return fin;
  }

  size_t tasks() const { return n_; }

 private:
  const schedule::Program& p_;
  const uint32_t epoch_;
  const std::vector<char>& chained_;
  const size_t n_;
  const std::vector<uint64_t> added_;  // step_increments
  bool dynamic_ = false;
  size_t workers_ = 1, live_queues_ = 0;
};

}  // namespace

std::optional<std::vector<ClosureHazard>> closure_hazards(
    const schedule::Program& p, uint32_t epoch, const std::vector<char>& chained,
    const std::function<bool(uint32_t, uint32_t)>& conflicts, bool stop_at_first) {
  const Closure c(p, epoch, chained);
  if (!c.persistent()) return std::nullopt;
  const uint32_t n = static_cast<uint32_t>(c.tasks());
  const std::string at = epoch == 0 ? "" : " at step epoch " + std::to_string(epoch);
  std::vector<ClosureHazard> out;
  std::vector<char> held(n, 0);
  const std::vector<char> all = c.run(held, nullptr);
  const auto unfinished = static_cast<size_t>(std::count(all.begin(), all.end(), 0));
  if (unfinished > 0) {
    out.push_back({"deadlock", std::to_string(unfinished) + " tasks can never start after " +
                                   std::to_string(n - unfinished) + " finished ones" + at +
                                   " (closure)"});
    if (stop_at_first) return out;
  }
  for (uint32_t w = 0; w < n; ++w) {
    bool written = false;
    for (uint32_t x = 0; x < n && !written; ++x) written = x != w && conflicts(x, w);
    if (!written) continue;
    held[w] = 1;
    const std::vector<char> before_w = c.run(held, nullptr);
    for (uint32_t x = 0; x < n; ++x) {
      if (x == w || !before_w[x] || !conflicts(x, w)) continue;
      held[x] = 1;
      std::vector<char> enabled;
      c.run(held, &enabled);
      held[x] = 0;
      const bool together = enabled[x] && enabled[w];
      out.push_back({together ? "race" : "stale_read",
                     "task " + std::to_string(x) + " can " +
                         (together ? "run concurrently with" : "run before") + " task " +
                         std::to_string(w) + ", which writes an element it accesses" + at +
                         " (closure)"});
      if (stop_at_first) return out;
    }
    held[w] = 0;
  }
  return out;
}

}  // namespace megasched::groundtruth
