#include "search/plan_fit.h"

#include <algorithm>
#include <cmath>

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
  for (const MeasuredConfig& c : input.configs) {
    if (c.median_us.size() != input.positions.size())
      return "config " + c.label + " has " + std::to_string(c.median_us.size()) + " medians for " +
             std::to_string(input.positions.size()) + " positions";
    for (double us : c.median_us)
      if (!std::isfinite(us) || us <= 0.0)
        return "config " + c.label + " has a median that is not a positive number";
  }
  return "";
}

/// The winner at position index k: the fastest config, unless `running` is within the margin.
size_t winner_at(const PlanFitInput& input, size_t k, std::optional<size_t> running) {
  size_t best = 0;
  for (size_t c = 1; c < input.configs.size(); ++c)
    if (input.configs[c].median_us[k] < input.configs[best].median_us[k]) best = c;
  if (running && input.configs[*running].median_us[k] <=
                     input.configs[best].median_us[k] * (1.0 + input.tie_margin))
    return *running;
  return best;
}

/// The first position of `to`'s bucket between measured positions index k and k + 1: where the
/// lines through `from`'s and `to`'s medians cross, rounded up, inside (p, q].
int crossover(const PlanFitInput& input, size_t k, size_t from, size_t to) {
  const int p = input.positions[k];
  const int q = input.positions[k + 1];
  const double dp = input.configs[from].median_us[k] - input.configs[to].median_us[k];
  const double dq = input.configs[from].median_us[k + 1] - input.configs[to].median_us[k + 1];
  // from is ahead at p (dp <= 0 up to the margin) and behind at q (dq > 0): the share of the way
  // from p to q where dp + t (dq - dp) = 0.
  double t = dq - dp > 0.0 ? -dp / (dq - dp) : 1.0;
  t = std::clamp(t, 0.0, 1.0);
  const int at = p + static_cast<int>(std::ceil(t * static_cast<double>(q - p)));
  return std::clamp(at, p + 1, q);
}

}  // namespace

std::optional<PlanFit> fit_plan(const PlanFitInput& input, std::string* error) {
  if (const std::string why = input_error(input); !why.empty()) {
    if (error) *error = why;
    return std::nullopt;
  }
  PlanFit fit;
  json winners = json::array();
  json buckets = json::array();
  std::optional<size_t> running;
  for (size_t k = 0; k < input.positions.size(); ++k) {
    const size_t w = winner_at(input, k, running);
    winners.push_back(input.configs[w].label);
    if (running && w == *running) continue;
    const int begin = running ? crossover(input, k - 1, *running, w) : 0;
    running = w;
    // Two labels of one config's JSON are one bucket, as merge_equal_buckets would make them.
    if (!fit.plan.buckets.empty() && schedule::to_json(fit.plan.buckets.back().config) ==
                                         schedule::to_json(input.configs[w].config))
      continue;
    if (!fit.plan.buckets.empty()) fit.plan.buckets.back().end = begin;
    fit.plan.buckets.push_back({begin, schedule::kPlanEndOfModel, input.configs[w].config});
    fit.labels.push_back(input.configs[w].label);
    json b = {{"begin", begin}, {"config", input.configs[w].label}};
    if (k > 0) b["crossover_between"] = {input.positions[k - 1], input.positions[k]};
    buckets.push_back(b);
  }
  for (size_t i = 0; i < buckets.size(); ++i)
    buckets[i]["end"] = i + 1 < buckets.size() ? json(buckets[i + 1]["begin"]) : json("max");
  fit.explain = {{"positions", input.positions},
                 {"winners", winners},
                 {"buckets", buckets},
                 {"tie_margin", input.tie_margin}};
  return fit;
}

}  // namespace megasched::search
