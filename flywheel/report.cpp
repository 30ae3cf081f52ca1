#include "flywheel/report.h"

#include <algorithm>
#include <map>

#include "schedule/config.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;

const json* json_at_path(const json& config, const std::string& path) {
  const json* node = &config;
  size_t start = 0;
  for (;;) {
    size_t dot = path.find('.', start);
    if (!node->is_object()) return nullptr;
    auto it =
        node->find(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (it == node->end()) return nullptr;
    node = &*it;
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
}

// The loop's incumbent among `rows`: per run, its last kept trial with a latency (what the keep
// rule ended on), and of those the fastest. nullptr when no row was kept (logs of no loop).
const ResultRow* loop_incumbent(const std::vector<const ResultRow*>& rows) {
  std::map<std::string, const ResultRow*> last_kept;
  for (const ResultRow* row : rows)
    if (row->status == kStatusKept && row->correct && row->latency_us) last_kept[row->run_id] = row;
  const ResultRow* best = nullptr;
  for (const auto& [run, row] : last_kept)
    if (best == nullptr || *row->latency_us < *best->latency_us) best = row;
  return best;
}

// A faster correct trial the loop did not keep (a near-tie of a simpler config, discarded): named
// beside the incumbent, so the report never calls a discarded trial the best unannounced.
json faster_not_kept(const ResultRow& row) {
  return {
      {"schedule_id", row.schedule_id}, {"run_id", row.run_id}, {"trial", row.trial},
      {"latency_us", *row.latency_us},  {"status", row.status}, {"description", row.description}};
}

// The keep rule's confirm rounds (loop --confirm, the record's keep.confirm) of a group's trials:
// confirm_counts, and which trials they settled.
json confirm_rounds(const std::vector<const CorpusRecord*>& records) {
  json trials = json::array();
  std::vector<const json*> confirms;
  for (const CorpusRecord* r : records) {
    const auto it = r->keep.find("confirm");
    if (it == r->keep.end() || !it->is_object()) continue;
    confirms.push_back(&*it);
    trials.push_back({{"run_id", r->run_id},
                      {"trial", r->trial},
                      {"faster", it->value("faster", "")},
                      {"confirmed", it->value("confirmed", false)},
                      {"median_gain_share", it->value("median_gain_share", json(nullptr))}});
  }
  json out = confirm_counts(confirms);
  out["trials"] = trials;
  return out;
}

}  // namespace

json confirm_counts(const std::vector<const json*>& confirms) {
  int kept = 0, refused = 0, unconfirmed = 0, timings = 0;
  for (const json* c : confirms) {
    if (!c->value("confirmed", false))
      ++unconfirmed;
    else if (c->value("faster", "") == "candidate")
      ++kept;
    else
      ++refused;
    timings += 2 * static_cast<int>(c->value("rounds", json::array()).size());
  }
  return {{"settled", confirms.size()},
          {"kept", kept},
          {"trades_refused", refused},
          {"not_confirmed", unconfirmed},
          {"timings", timings}};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

json build_report(const std::vector<ResultRow>& rows, const std::vector<CorpusRecord>& records) {
  struct Group {
    std::string model, target, device;
    std::vector<const ResultRow*> rows;
    std::vector<const CorpusRecord*> records;
  };
  std::vector<Group> groups;
  auto group_of = [&](const std::string& model, const std::string& target,
                      const std::string& device) -> Group& {
    for (Group& g : groups)
      if (g.model == model && g.target == target && g.device == device) return g;
    groups.push_back({model, target, device, {}, {}});
    return groups.back();
  };
  for (const ResultRow& row : rows)
    group_of(row.model, row.target, row.device).rows.push_back(&row);
  std::map<std::string, const CorpusRecord*> record_of;
  for (const CorpusRecord& r : records) {
    group_of(r.model, r.target, r.device).records.push_back(&r);
    record_of.emplace(r.schedule_id, &r);
  }

  json out = {{"groups", json::array()}};
  for (const Group& g : groups) {
    json group = {{"model", g.model}, {"target", g.target}, {"device", g.device}};
    json counts = json::object();
    for (const std::string& s : status_vocabulary()) counts[s] = 0;
    std::vector<std::string> runs;
    json series = json::array();
    std::optional<double> best_us;
    const ResultRow* best_row = nullptr;
    std::string latency_kind;
    std::optional<double> default_us;
    for (size_t i = 0; i < g.rows.size(); ++i) {
      const ResultRow& row = *g.rows[i];
      counts[row.status] = counts.value(row.status, 0) + 1;
      if (std::find(runs.begin(), runs.end(), row.run_id) == runs.end()) runs.push_back(row.run_id);
      if (row.correct && row.latency_us) {
        if (!best_us || *row.latency_us < *best_us) {
          best_us = row.latency_us;
          best_row = &row;
        }
        if (latency_kind.empty()) latency_kind = row.latency_kind;
        if (row.complexity == 0 && !default_us) default_us = row.latency_us;
      }
      series.push_back(
          {{"index", i},
           {"run_id", row.run_id},
           {"trial", row.trial},
           {"status", row.status},
           {"latency_us", row.correct && row.latency_us ? json(*row.latency_us) : json(nullptr)},
           {"best_us", best_us ? json(*best_us) : json(nullptr)}});
    }
    const int trials = static_cast<int>(g.rows.size());
    group["trials"] = trials;
    group["runs"] = runs;
    group["latency_kind"] = latency_kind;
    group["status_counts"] = counts;
    group["keep_rate"] =
        trials > 0 ? json(counts[kStatusKept].get<double>() / trials) : json(nullptr);
    group["default_us"] = default_us ? json(*default_us) : json(nullptr);
    group["best_so_far"] = series;
    const ResultRow* fastest = best_row;
    if (const ResultRow* incumbent = loop_incumbent(g.rows)) best_row = incumbent;
    if (best_row) {
      json best = {
          {"schedule_id", best_row->schedule_id},
          {"run_id", best_row->run_id},
          {"trial", best_row->trial},
          {"latency_us", *best_row->latency_us},
          {"latency_kind", best_row->latency_kind},
          {"floor_us", best_row->floor_us},
          {"pct_of_floor", best_row->pct_of_floor ? json(*best_row->pct_of_floor) : json(nullptr)},
          {"speedup_vs_default",
           default_us ? json(*default_us / *best_row->latency_us) : json(nullptr)},
          {"config", nullptr},
          {"verdict", nullptr}};
      auto it = record_of.find(best_row->schedule_id);
      if (it != record_of.end()) {
        best["config"] = it->second->config;
        best["verdict"] = eval::to_json(it->second->verdict);
      }
      if (fastest != best_row && *fastest->latency_us < *best_row->latency_us)
        best["faster_not_kept"] = faster_not_kept(*fastest);
      group["best"] = best;
    } else {
      group["best"] = nullptr;
    }
    json effects = json::array();
    for (const schedule::KnobSpec& spec : schedule::knob_specs()) {
      json values = json::array();
      for (const json& choice : spec.choices) {
        int count = 0;
        std::vector<double> latencies;
        for (const CorpusRecord* r : g.records) {
          const json* v = json_at_path(r->config, spec.path);
          if (!(v ? *v == choice : spec.default_value == choice)) continue;
          ++count;
          if (r->verdict.correct && r->verdict.latency_us)
            latencies.push_back(*r->verdict.latency_us);
        }
        if (count == 0) continue;
        values.push_back(
            {{"value", choice},
             {"count", count},
             {"with_latency", latencies.size()},
             {"median_us", latencies.empty() ? json(nullptr) : json(median(latencies))}});
      }
      effects.push_back({{"knob", spec.path}, {"values", values}});
    }
    group["knob_effects"] = effects;
    // The bottleneck class of each trial (eval/bottleneck.h); "none": no latency to classify.
    json bottlenecks = {
        {"memory", 0}, {"latency-sync", 0}, {"compute", 0}, {"launch", 0}, {"none", 0}};
    for (const CorpusRecord* r : g.records) {
      const json& b = r->verdict.bottleneck;
      const std::string c = b.is_object() ? b.value("class", "none") : "none";
      bottlenecks[c] = bottlenecks.value(c, 0) + 1;
    }
    group["bottleneck_counts"] = bottlenecks;
    group["confirm_rounds"] = confirm_rounds(g.records);
    out["groups"].push_back(group);
  }
  return out;
}

}  // namespace megasched::flywheel
