#include "flywheel/plan_report.h"

#include <algorithm>
#include <climits>
#include <map>
#include <tuple>

#include "flywheel/report.h"
#include "schedule/config.h"
#include "schedule/format.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;
using schedule::fmt;

// The measured latencies of one group: per config (canonical text) and position, every record's.
struct Group {
  std::string model, target, device, latency_kind;
  int max_seq = 0;
  std::map<std::string, std::map<int, std::vector<double>>> latencies;
  std::map<std::string, std::map<int, std::string>> schedule_id;  // per config and position
};

// The bucket holding `position`, or -1 past the plan's last bucket (max_seq 0: "max" unbounded).
int bucket_of(const schedule::Plan& plan, int max_seq, int position) {
  for (size_t i = plan.buckets.size(); i-- > 0;) {
    const schedule::PlanBucket& b = plan.buckets[i];
    if (position < b.begin) continue;
    const int end = b.end == schedule::kPlanEndOfModel ? (max_seq > 0 ? max_seq : INT_MAX) : b.end;
    return position < end ? static_cast<int>(i) : -1;
  }
  return -1;
}

std::optional<double> median_at(const Group& g, const std::string& config, int position) {
  auto c = g.latencies.find(config);
  if (c == g.latencies.end()) return std::nullopt;
  auto p = c->second.find(position);
  if (p == c->second.end()) return std::nullopt;
  return median(p->second);
}

json series_of(const schedule::Plan& plan, const std::vector<std::string>& keys, const Group& g) {
  json series = json::array();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto c = g.latencies.find(keys[i]);
    if (c == g.latencies.end()) continue;
    json points = json::array();
    for (const auto& [position, us] : c->second)
      points.push_back({{"position", position},
                        {"latency_us", median(us)},
                        {"n", us.size()},
                        {"inside", bucket_of(plan, g.max_seq, position) == static_cast<int>(i)}});
    series.push_back({{"bucket", i}, {"points", points}});
  }
  return series;
}

json best_per_position(const schedule::Plan& plan, const std::vector<std::string>& keys,
                       const Group& g) {
  std::map<int, std::pair<double, std::string>> best;  // position -> (median us, config)
  for (const auto& [config, by_position] : g.latencies)
    for (const auto& [position, us] : by_position) {
      const double m = median(us);
      auto it = best.find(position);
      // A tie goes to a bucket's config: the plan's choice is then the fastest measured too.
      const auto is_bucket = [&](const std::string& c) {
        return std::find(keys.begin(), keys.end(), c) != keys.end();
      };
      if (it == best.end() || m < it->second.first ||
          (m == it->second.first && is_bucket(config) && !is_bucket(it->second.second)))
        best[position] = {m, config};
    }
  json out = json::array();
  for (const auto& [position, b] : best) {
    const auto bucket = std::find(keys.begin(), keys.end(), b.second);
    const int plan_bucket = bucket_of(plan, g.max_seq, position);
    json plan_us = nullptr, plan_gap = nullptr;
    if (plan_bucket >= 0)
      if (const auto us = median_at(g, keys[static_cast<size_t>(plan_bucket)], position)) {
        plan_us = *us;
        plan_gap = 100.0 * (*us - b.first) / b.first;
      }
    out.push_back({{"position", position},
                   {"latency_us", b.first},
                   {"schedule_id", g.schedule_id.at(b.second).at(position)},
                   {"bucket", bucket == keys.end() ? json(nullptr) : json(bucket - keys.begin())},
                   {"plan_bucket", plan_bucket < 0 ? json(nullptr) : json(plan_bucket)},
                   {"plan_us", plan_us},
                   {"plan_gap_pct", plan_gap}});
  }
  return out;
}

// One boundary: the left and right buckets' configs at every position of the two buckets where
// both were measured.
json boundary_of(const schedule::Plan& plan, const std::vector<std::string>& keys, const Group& g,
                 size_t left) {
  const size_t right = left + 1;
  const int at = plan.buckets[right].begin;
  json comparisons = json::array(), warnings = json::array(), notes = json::array();
  std::map<int, bool> positions;
  for (const std::string* key : {&keys[left], &keys[right]})
    if (auto c = g.latencies.find(*key); c != g.latencies.end())
      for (const auto& [position, us] : c->second) positions[position] = true;
  for (const auto& [position, unused] : positions) {
    const int in = bucket_of(plan, g.max_seq, position);
    if (in != static_cast<int>(left) && in != static_cast<int>(right)) continue;
    const auto l = median_at(g, keys[left], position), r = median_at(g, keys[right], position);
    if (!l || !r) continue;
    const double saving = 100.0 * (*l - *r) / *l;
    comparisons.push_back({{"position", position},
                           {"in_bucket", in},
                           {"left_us", *l},
                           {"right_us", *r},
                           {"switch_saving_pct", saving}});
    const std::string figures = "bucket " + std::to_string(right) + "'s config " +
                                fmt("%.2f us vs ", *r) + "bucket " + std::to_string(left) + "'s " +
                                fmt("%.2f us", *l);
    if (in == static_cast<int>(right) && *r > *l)
      warnings.push_back("boundary " + std::to_string(at) + " misplaced: at " +
                         std::to_string(position) + " (inside bucket " + std::to_string(right) +
                         ") " + figures + ": switching costs " + fmt("%.2f%%", -saving));
    if (in == static_cast<int>(left) && *r < *l)
      notes.push_back("at " + std::to_string(position) + " (inside bucket " + std::to_string(left) +
                      ") " + figures + " already: the boundary could come " + "earlier than " +
                      std::to_string(at));
  }
  return {{"position", at},       {"left", left},  {"right", right}, {"comparisons", comparisons},
          {"warnings", warnings}, {"notes", notes}};
}

}  // namespace

json no_plan_report(const std::string& message) {
  return {{"source", nullptr}, {"message", message}};
}

json build_plan_report(const schedule::Plan& plan, const std::string& source,
                       const std::vector<CorpusRecord>& records) {
  std::vector<std::string> keys;
  json buckets = json::array();
  for (size_t i = 0; i < plan.buckets.size(); ++i) {
    const schedule::PlanBucket& b = plan.buckets[i];
    const json config = schedule::to_json(b.config);
    keys.push_back(config.dump());
    buckets.push_back({{"index", i},
                       {"begin", b.begin},
                       {"end", b.end == schedule::kPlanEndOfModel ? json("max") : json(b.end)},
                       {"label", schedule::bucket_label(b)},
                       {"config", config}});
  }
  std::vector<Group> groups;
  for (const CorpusRecord& r : records) {
    if (!r.verdict.correct || !r.verdict.latency_us || !r.verdict.objective.is_null()) continue;
    auto key = std::tie(r.model, r.target, r.device, r.verdict.latency_kind);
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) {
      return std::tie(x.model, x.target, x.device, x.latency_kind) == key;
    });
    if (g == groups.end()) {
      groups.push_back({r.model,
                        r.target,
                        r.device,
                        r.verdict.latency_kind,
                        r.model_shape.is_object() ? r.model_shape.value("max_seq", 0) : 0,
                        {},
                        {}});
      g = groups.end() - 1;
    }
    const std::string config = r.config.dump();
    g->latencies[config][r.verdict.timed_position].push_back(*r.verdict.latency_us);
    g->schedule_id[config].emplace(r.verdict.timed_position, r.schedule_id);
  }
  json out = {{"source", source}, {"buckets", buckets}, {"groups", json::array()}};
  for (const Group& g : groups) {
    json series = series_of(plan, keys, g);
    if (series.empty()) continue;
    json boundaries = json::array();
    for (size_t i = 0; i + 1 < plan.buckets.size(); ++i)
      boundaries.push_back(boundary_of(plan, keys, g, i));
    out["groups"].push_back({{"model", g.model},
                             {"target", g.target},
                             {"device", g.device},
                             {"latency_kind", g.latency_kind},
                             {"max_seq", g.max_seq},
                             {"series", series},
                             {"best_per_position", best_per_position(plan, keys, g)},
                             {"boundaries", boundaries}});
  }
  if (out["groups"].empty())
    out["message"] =
        "no correct record with a latency of any of the plan's " +
        std::to_string(plan.buckets.size()) +
        " bucket config(s) in the corpus (hint: `megasched loop --plan " + source +
        "` or `loop --plan-buckets` times each bucket's config at its midpoint; pass --corpus "
        "PATH if its records are elsewhere)";
  return out;
}

}  // namespace megasched::flywheel
