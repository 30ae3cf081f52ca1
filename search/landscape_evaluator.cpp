#include "search/landscape_evaluator.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace megasched::search {

LandscapeEvaluator::LandscapeEvaluator(const Landscape& landscape, uint64_t noise_seed)
    : landscape_(landscape), rng_(noise_seed) {
  for (const schedule::KnobSpec& spec : schedule::knob_specs())
    ordinal_.push_back(std::all_of(spec.choices.begin(), spec.choices.end(),
                                   [](const nlohmann::json& c) { return c.is_number(); }));
  row_index_.reserve(landscape_.rows.size());
  for (const LandscapeRow& row : landscape_.rows) row_index_.push_back(choice_indexes(row.config));
}

std::vector<int> LandscapeEvaluator::choice_indexes(const schedule::ScheduleConfig& config) const {
  const auto& specs = schedule::knob_specs();
  std::vector<int> out(specs.size(), 0);
  for (size_t k = 0; k < specs.size(); ++k) {
    const nlohmann::json value = schedule::get_knob(config, specs[k].path);
    auto it = std::find(specs[k].choices.begin(), specs[k].choices.end(), value);
    out[k] = static_cast<int>(it - specs[k].choices.begin());
  }
  return out;
}

LandscapeEvaluator::Answer LandscapeEvaluator::answer(
    const schedule::ScheduleConfig& config) const {
  if (const LandscapeRow* own = landscape_.find(config)) return {own, 0};
  const std::vector<int> want = choice_indexes(config);
  Answer best{nullptr, std::numeric_limits<int>::max()};
  for (size_t r = 0; r < row_index_.size(); ++r) {
    int steps = 0;
    for (size_t k = 0; k < want.size() && steps < best.steps; ++k)
      steps += ordinal_[k] ? std::abs(want[k] - row_index_[r][k]) : want[k] != row_index_[r][k];
    if (steps < best.steps) best = {&landscape_.rows[r], steps};
  }
  if (!best.row) best.steps = 0;
  return best;
}

std::optional<double> LandscapeEvaluator::true_latency_us(
    const schedule::ScheduleConfig& config) const {
  const Answer a = answer(config);
  return a.row ? a.row->latency_us : std::nullopt;
}

eval::Verdict LandscapeEvaluator::evaluate(const schedule::ScheduleConfig& config) {
  ++evaluations_;
  eval::Verdict v;
  const LandscapeHeader& h = landscape_.header;
  v.schedule_id = schedule_id(config);
  v.model = h.model;
  v.target = h.target;
  v.device = h.device;
  v.timed_position = h.position;
  const Answer a = answer(config);
  if (!a.row) {
    v.status = "rejected";
    v.rejected_reason = "the landscape has no rows";
    return v;
  }
  if (a.steps > 0)
    v.notes.push_back("not in the landscape: answered by row " + a.row->id + ", " +
                      std::to_string(a.steps) + " knob steps away");
  v.status = a.row->status;
  v.valid = a.row->status != "rejected";
  if (!v.valid) v.rejected_reason = "rejected in the landscape";
  v.correct = a.row->status == "ok";
  v.argmax_match = v.correct;
  if (!v.correct) return v;
  v.latency_kind = h.latency_kind;
  const double median = *a.row->latency_us;
  if (h.latency_kind != "measured-gpu" || a.row->sigma_us <= 0) {
    v.latency_us = median;
    return v;
  }
  std::normal_distribution<double> noise(median, a.row->sigma_us);
  const int n = std::clamp(a.row->repeats, 3, 50);
  for (int i = 0; i < n; ++i) v.samples_us.push_back(std::max(noise(rng_), 0.01 * median));
  std::vector<double> sorted = v.samples_us;
  std::sort(sorted.begin(), sorted.end());
  v.latency_us = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  v.latency_p90_us = sorted[std::min(n - 1, static_cast<int>(std::ceil(0.9 * n)) - 1)];
  v.latency_spread_us = v.latency_p90_us - sorted[static_cast<int>(0.1 * n)];
  return v;
}

nlohmann::json LandscapeEvaluator::identity() const {
  const LandscapeHeader& h = landscape_.header;
  return {{"model", h.model}, {"target", h.target}, {"device", h.device},
          {"build", h.build}, {"landscape", true},  {"timed_position", h.position}};
}

std::string LandscapeEvaluator::schedule_id(const schedule::ScheduleConfig& config) const {
  const LandscapeHeader& h = landscape_.header;
  return schedule::hash_hex(schedule::canonical_string(config) + "|" + h.model + "|" + h.target +
                            "|" + h.device + "|" + h.build + "|p" + std::to_string(h.position));
}

}  // namespace megasched::search
