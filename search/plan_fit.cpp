#include "search/plan_fit.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

namespace megasched::search {

using nlohmann::json;

namespace {

/// Why `input` cannot be fitted, or "".
std::string input_error(const PlanFitInput& input) {
  const std::string hint =
      " (hint: bench --fit-plan needs --positions starting at 0, e.g. 0,256,1024,4096, and at "
      "least one --config besides the default)";
  if (input.configs.empty()) return "no config was measured" + hint;
  if (input.positions.empty() || input.positions.front() != 0)
    return "the measured positions must start at 0 (a plan covers every position from 0)" + hint;
  for (size_t i = 1; i < input.positions.size(); ++i)
    if (input.positions[i] <= input.positions[i - 1])
      return "the measured positions must be strictly ascending: " +
             std::to_string(input.positions[i]) + " follows " +
             std::to_string(input.positions[i - 1]) + hint;
  if (!(input.tie_margin >= 0.0 && input.tie_margin < 1.0))
    return "the tie margin must be in [0, 1), got " + std::to_string(input.tie_margin);
  bool from_zero = false;
  for (const MeasuredConfig& c : input.configs) {
    const std::vector<int>& own = c.positions.empty() ? input.positions : c.positions;
    if (c.median_us.size() != own.size())
      return "config " + c.label + " has " + std::to_string(c.median_us.size()) + " medians for " +
             std::to_string(own.size()) + " positions";
    for (size_t i = 0; i < own.size(); ++i) {
      if (std::find(input.positions.begin(), input.positions.end(), own[i]) ==
          input.positions.end())
        return "config " + c.label + " was measured at " + std::to_string(own[i]) +
               ", not one of the measured positions";
      if (i > 0 && own[i] <= own[i - 1])
        return "config " + c.label + "'s positions must be strictly ascending";
    }
    for (double us : c.median_us)
      if (!std::isfinite(us) || us <= 0.0)
        return "config " + c.label + " has a median that is not a positive number";
    from_zero = from_zero || (!own.empty() && own.front() == 0);
  }
  if (!from_zero) return "no config was measured at position 0" + hint;
  return "";
}

/// The straight lines through each config's medians (the header's "lines").
class Lines {
 public:
  explicit Lines(const PlanFitInput& input) : in_(input) {}

  /// Whether config c has a line at x: x within its first and last measured positions.
  bool covers(size_t c, int x) const {
    const auto& p = own(c);
    return !p.empty() && p.front() <= x && x <= p.back();
  }
  double slope(size_t c, int x) const {
    const auto& p = own(c);
    if (p.size() < 2) return 0.0;
    const size_t k = interval(p, x);
    const auto& m = in_.configs[c].median_us;
    return (m[k + 1] - m[k]) / static_cast<double>(p[k + 1] - p[k]);
  }
  double at(size_t c, int x) const {
    const auto& p = own(c);
    const size_t k = interval(p, x);
    return in_.configs[c].median_us[k] + slope(c, x) * static_cast<double>(x - p[k]);
  }
  /// Whether config a is ahead of b at x: lower, or tied and falling faster (ahead just after x),
  /// or tied both ways and listed first.
  bool ahead(size_t a, size_t b, int x) const {
    const double la = at(a, x), lb = at(b, x);
    if (std::abs(la - lb) > 1e-9 * std::max(la, lb)) return la < lb;
    const double sa = slope(a, x), sb = slope(b, x);
    if (sa != sb) return sa < sb;
    return a < b;
  }

 private:
  const std::vector<int>& own(size_t c) const {
    return in_.configs[c].positions.empty() ? in_.positions : in_.configs[c].positions;
  }
  /// The interval index k of x among positions p: p[k] <= x <= p[k + 1], the interval to the
  /// right at a measured position (the last interval from the last position on).
  static size_t interval(const std::vector<int>& p, int x) {
    if (p.size() < 2) return 0;
    const size_t above = std::upper_bound(p.begin(), p.end(), x) - p.begin();
    return std::min(above == 0 ? 0 : above - 1, p.size() - 2);
  }

  const PlanFitInput& in_;
};

bool same_config(const PlanFitInput& input, size_t a, size_t b) {
  return a == b ||
         schedule::to_json(input.configs[a].config) == schedule::to_json(input.configs[b].config);
}

/// The config in force at every position 0..last measured (the header's "envelope" and
/// "margin"), by index into input.configs; `lowest` gets the config on the lowest line there.
std::vector<size_t> configs_in_force(const PlanFitInput& input, std::vector<size_t>* lowest) {
  const Lines lines(input);
  const int last = input.positions.back();
  lowest->assign(static_cast<size_t>(last) + 1, 0);
  for (int x = 0; x <= last; ++x) {
    // Among the configs with a line at x; where none has one, the lowest before x stays.
    std::optional<size_t> best;
    for (size_t c = 0; c < input.configs.size(); ++c)
      if (lines.covers(c, x) && (!best || lines.ahead(c, *best, x))) best = c;
    (*lowest)[x] = best ? *best : (*lowest)[x > 0 ? x - 1 : 0];
  }

  std::vector<size_t> in_force(lowest->size());
  size_t running = (*lowest)[0];
  int kept_from = -1;  // where the running config began to be kept while another was lowest
  for (int start = 0; start <= last;) {
    const size_t c = (*lowest)[start];
    int end = start;
    while (end <= last && (*lowest)[end] == c) ++end;
    // The most c beats the running config by in [start, end); past the running config's last
    // measured position it has no line and c takes over.
    double advantage = 0.0;
    for (int x = start; x < end; ++x)
      advantage = lines.covers(running, x)
                      ? std::max(advantage, lines.at(running, x) / lines.at(c, x) - 1.0)
                      : HUGE_VAL;
    if (same_config(input, c, running)) {
      kept_from = -1;  // the running config (under any label) is lowest again
    } else if (advantage > input.tie_margin) {
      int begin = start;  // back to where c last crossed below the running config
      while (kept_from >= 0 && begin - 1 >= kept_from && lines.covers(c, begin - 1) &&
             lines.ahead(c, running, begin - 1))
        --begin;
      std::fill(in_force.begin() + begin, in_force.begin() + start, c);
      running = c;
      kept_from = -1;
    } else if (kept_from < 0) {
      kept_from = start;
    }
    std::fill(in_force.begin() + start, in_force.begin() + end, running);
    start = end;
  }
  return in_force;
}

}  // namespace

std::optional<PlanFit> fit_plan(const PlanFitInput& input, std::string* error) {
  if (const std::string why = input_error(input); !why.empty()) {
    if (error) *error = why;
    return std::nullopt;
  }
  std::vector<size_t> lowest;
  const std::vector<size_t> in_force = configs_in_force(input, &lowest);
  const auto& positions = input.positions;

  PlanFit fit;
  json buckets = json::array();
  for (int x = 0; x < static_cast<int>(in_force.size()); ++x) {
    const size_t c = in_force[x];
    // Two labels of one config's JSON are one bucket, as merge_equal_buckets would make them.
    if (x > 0 && same_config(input, c, in_force[x - 1])) continue;
    // A bucket after the first begins inside (p, q] of two measured positions.
    if (!fit.plan.buckets.empty()) fit.plan.buckets.back().end = x;
    fit.plan.buckets.push_back({x, schedule::kPlanEndOfModel, input.configs[c].config});
    fit.labels.push_back(input.configs[c].label);
    json b = {{"begin", x}, {"config", input.configs[c].label}, {"fastest_at", json::array()}};
    if (x > 0) {
      const size_t q = std::lower_bound(positions.begin(), positions.end(), x) - positions.begin();
      b["crossover_between"] = {positions[q - 1], positions[q]};
    }
    buckets.push_back(b);
  }
  json winners = json::array();
  for (int p : positions) {
    const bool plan_is_lowest = same_config(input, lowest[p], in_force[p]);
    winners.push_back(input.configs[plan_is_lowest ? lowest[p] : in_force[p]].label);
    if (plan_is_lowest) {
      size_t i = 0;
      while (i + 1 < fit.plan.buckets.size() && fit.plan.buckets[i + 1].begin <= p) ++i;
      buckets[i]["fastest_at"].push_back(p);
    }
  }
  for (size_t i = 0; i < buckets.size(); ++i)
    buckets[i]["end"] = i + 1 < buckets.size() ? json(buckets[i + 1]["begin"]) : json("max");
  fit.explain = {{"positions", positions},
                 {"winners", winners},
                 {"buckets", buckets},
                 {"tie_margin", input.tie_margin}};
  return fit;
}

}  // namespace megasched::search
