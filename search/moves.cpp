#include "search/moves.h"

#include <algorithm>

#include "schedule/search.h"

namespace megasched::search {

std::optional<flywheel::PriorSample> prior_sample(const TrialOutcome& outcome,
                                                  const nlohmann::json& shape_json) {
  flywheel::PriorSample s;
  s.config = schedule::to_json(outcome.config);
  s.shape = shape_json;
  if (outcome.latency_us && *outcome.latency_us > 0)
    s.latency_us = outcome.latency_us;
  else if (outcome.status == flywheel::kStatusKept || outcome.status == flywheel::kStatusDiscarded)
    return std::nullopt;
  return s;
}
namespace {

std::string knob_text(const nlohmann::json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

std::string describe_change(const schedule::ScheduleConfig& from,
                            const schedule::ScheduleConfig& to) {
  std::string text;
  for (const std::string& path : schedule::changed_knobs(from, to)) {
    if (!text.empty()) text += ", ";
    text += path + " " + knob_text(schedule::get_knob(from, path)) + "->" +
            knob_text(schedule::get_knob(to, path));
  }
  return text.empty() ? "no change" : text;
}

std::optional<schedule::ScheduleConfig> new_random(const SearchState& state, std::mt19937_64& rng,
                                                   std::set<std::string>* taken) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    schedule::ScheduleConfig c = schedule::random_config(*state.shape, *state.target, rng);
    if (state.is_new && !state.is_new(c)) continue;
    if (taken && !taken->insert(schedule::canonical_string(c)).second) continue;
    return c;
  }
  return std::nullopt;
}

std::optional<schedule::ScheduleConfig> crossover(const schedule::ScheduleConfig& a,
                                                  const schedule::ScheduleConfig& b,
                                                  const schedule::ModelShape& shape,
                                                  const schedule::GpuTarget& target,
                                                  std::mt19937_64& rng) {
  const std::vector<std::string> differ = schedule::changed_knobs(a, b);
  if (differ.size() < 2) return std::nullopt;
  std::bernoulli_distribution coin(0.5);
  for (int attempt = 0; attempt < 8; ++attempt) {
    schedule::ScheduleConfig child = a;
    std::string ignored;  // b's values are allowed values
    for (const std::string& path : differ)
      if (coin(rng)) schedule::set_knob(&child, path, schedule::get_knob(b, path), &ignored);
    if (child == a || child == b) continue;
    if (schedule::config_fits(child, shape, target)) return child;
  }
  return std::nullopt;
}

std::optional<schedule::ScheduleConfig> quick_mutation(const schedule::ScheduleConfig& config,
                                                       const schedule::ModelShape& shape,
                                                       const schedule::GpuTarget& target,
                                                       std::mt19937_64& rng, int knobs) {
  const auto& specs = schedule::knob_specs();
  std::vector<size_t> order(specs.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::string ignored;
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::shuffle(order.begin(), order.end(), rng);
    schedule::ScheduleConfig c = config;
    int changed = 0;
    for (size_t k : order) {
      if (changed == knobs) break;
      const nlohmann::json current = schedule::get_knob(c, specs[k].path);
      std::vector<const nlohmann::json*> other;
      for (const nlohmann::json& choice : specs[k].choices)
        if (choice != current && schedule::knob_value_fits(specs[k].path, choice, shape))
          other.push_back(&choice);
      if (other.empty()) continue;
      std::uniform_int_distribution<size_t> pick(0, other.size() - 1);
      schedule::set_knob(&c, specs[k].path, *other[pick(rng)], &ignored);
      ++changed;
    }
    if (changed > 0 && schedule::config_fits(c, shape, target)) return c;
  }
  return std::nullopt;
}

void ElitePool::offer(const schedule::ScheduleConfig& config, double latency_us) {
  auto same = std::find_if(members_.begin(), members_.end(),
                           [&](const Member& m) { return m.config == config; });
  if (same != members_.end()) {
    if (latency_us >= same->latency_us) return;
    members_.erase(same);
  }
  auto at = std::find_if(members_.begin(), members_.end(),
                         [&](const Member& m) { return latency_us < m.latency_us; });
  members_.insert(at, {config, latency_us});
  if (static_cast<int>(members_.size()) > capacity_) members_.pop_back();
}

size_t ElitePool::pick(std::mt19937_64& rng) const {
  std::vector<double> weights;
  for (size_t r = 0; r < members_.size(); ++r) weights.push_back(1.0 / (r + 1));
  std::discrete_distribution<size_t> draw(weights.begin(), weights.end());
  return draw(rng);
}

std::optional<ElitePerturbation> perturb_elite(const ElitePool& elite, const SearchState& state,
                                               std::mt19937_64& rng, int min_knobs, int max_knobs,
                                               std::set<std::string>* taken) {
  std::uniform_int_distribution<int> knobs(min_knobs, max_knobs);
  for (int attempt = 0; attempt < 50 && !elite.empty(); ++attempt) {
    const size_t rank = elite.pick(rng);
    const int k = knobs(rng);
    std::optional<schedule::ScheduleConfig> c =
        quick_mutation(elite.members()[rank].config, *state.shape, *state.target, rng, k);
    if (!c) continue;
    if (state.is_new && !state.is_new(*c)) continue;
    if (!taken->insert(schedule::canonical_string(*c)).second) continue;
    return ElitePerturbation{std::move(*c), rank, k};
  }
  return std::nullopt;
}

}  // namespace megasched::search
