#include "flywheel/lessons.h"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "eval/bottleneck.h"
#include "eval/objective.h"
#include "flywheel/plan_report.h"
#include "flywheel/run_dir.h"
#include "schedule/config.h"
#include "schedule/format.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;
using Flat = std::map<std::string, json>;

Flat flatten(const json& config) {
  Flat out;
  if (!config.is_object()) return out;
  for (const auto& [group, body] : config.items()) {
    if (!body.is_object()) continue;
    for (const auto& [name, value] : body.items()) out[group + "." + name] = value;
  }
  return out;
}

const Flat& defaults() {
  static const Flat flat = flatten(schedule::to_json(schedule::ScheduleConfig{}));
  return flat;
}

json value_of(const Flat& config, const std::string& path) {
  auto it = config.find(path);
  if (it != config.end()) return it->second;
  auto d = defaults().find(path);
  return d == defaults().end() ? json(nullptr) : d->second;
}

// Two-sided 95% Student t quantile for `df` degrees of freedom.
double t95(int df) {
  static const double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                  2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                  2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                  2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df <= 0) return NAN;
  return df <= 30 ? kTable[df - 1] : 1.96;
}

struct Trial {
  const CorpusRecord* record;
  Flat config;
  double latency_us;
};

struct Group {
  std::string model, target, device, latency_kind;
  int timed_position = 0;
  std::string objective;                     // canonical text; "" for one timed position
  std::vector<const CorpusRecord*> records;  // every trial, file order
  std::vector<Trial> correct;                // one per schedule id
};

// Pair effects: per (knob, from, to) the % changes of latency.
std::map<std::tuple<std::string, std::string, std::string>, std::vector<double>> pair_effects(
    const std::vector<Trial>& trials) {
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<double>> out;
  std::set<std::string> keys;
  for (const auto& [k, v] : defaults()) keys.insert(k);
  for (size_t i = 0; i < trials.size(); ++i) {
    for (size_t j = i + 1; j < trials.size(); ++j) {
      std::string differing;
      int count = 0;
      for (const std::string& k : keys) {
        if (value_of(trials[i].config, k) == value_of(trials[j].config, k)) continue;
        differing = k;
        if (++count > 1) break;
      }
      if (count != 1) continue;
      const json a = value_of(trials[i].config, differing);
      const json b = value_of(trials[j].config, differing);
      const json def = value_of({}, differing);
      const bool a_first = a == def || (b != def && a.dump() < b.dump());
      const Trial& from = a_first ? trials[i] : trials[j];
      const Trial& to = a_first ? trials[j] : trials[i];
      out[{differing, (a_first ? a : b).dump(), (a_first ? b : a).dump()}].push_back(
          100.0 * (to.latency_us / from.latency_us - 1.0));
    }
  }
  return out;
}

json effect_row(const std::string& knob, const std::string& from, const std::string& to,
                const std::string& method, int n, double pct, double lo, double hi) {
  auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  return {{"knob", knob},
          {"from", json::parse(from)},
          {"to", json::parse(to)},
          {"method", method},
          {"n", n},
          {"effect_pct", num(pct)},
          {"ci_low_pct", num(lo)},
          {"ci_high_pct", num(hi)}};
}

// Ridge regression of log latency on one-hot knob values (off the default), over all trials;
// rows for the knobs in `wanted` only.
json regression_effects(const std::vector<Trial>& trials, const std::set<std::string>& wanted) {
  json rows = json::array();
  std::vector<std::pair<std::string, json>> features;
  for (const auto& [knob, def] : defaults()) {
    std::set<std::string> seen;
    for (const Trial& t : trials) {
      const json v = value_of(t.config, knob);
      if (v != def && seen.insert(v.dump()).second) features.emplace_back(knob, v);
    }
  }
  const Eigen::Index n = static_cast<Eigen::Index>(trials.size());
  const Eigen::Index p = static_cast<Eigen::Index>(features.size());
  if (n < 2 || p == 0) return rows;
  Eigen::MatrixXd x(n, p);
  Eigen::VectorXd y(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    y(i) = std::log(trials[i].latency_us);
    for (Eigen::Index f = 0; f < p; ++f)
      x(i, f) = value_of(trials[i].config, features[f].first) == features[f].second ? 1.0 : 0.0;
  }
  const Eigen::RowVectorXd mean_x = x.colwise().mean();
  x.rowwise() -= mean_x;
  y.array() -= y.mean();
  const double lambda = 1e-3 * static_cast<double>(n);
  const Eigen::MatrixXd xtx = x.transpose() * x;
  const Eigen::MatrixXd a = xtx + lambda * Eigen::MatrixXd::Identity(p, p);
  const Eigen::MatrixXd a_inv = a.ldlt().solve(Eigen::MatrixXd::Identity(p, p));
  const Eigen::VectorXd beta = a_inv * (x.transpose() * y);
  const Eigen::Index dof = n - p - 1;
  const double sigma2 = dof > 0 ? (y - x * beta).squaredNorm() / static_cast<double>(dof) : NAN;
  const Eigen::MatrixXd cov = sigma2 * a_inv * xtx * a_inv;
  for (Eigen::Index f = 0; f < p; ++f) {
    const std::string& knob = features[f].first;
    if (!wanted.count(knob)) continue;
    const double se = std::sqrt(std::max(0.0, cov(f, f)));
    const double t = dof > 0 ? t95(static_cast<int>(dof)) : NAN;
    auto pct = [](double b) { return 100.0 * (std::exp(b) - 1.0); };
    rows.push_back(effect_row(knob, value_of({}, knob).dump(), features[f].second.dump(),
                              "regression", static_cast<int>(n), pct(beta(f)),
                              pct(beta(f) - t * se), pct(beta(f) + t * se)));
  }
  return rows;
}

json knob_effects(const std::vector<Trial>& trials, const LessonsOptions& options) {
  json rows = json::array();
  std::map<std::string, int> pairs_per_knob;
  for (const auto& [key, pcts] : pair_effects(trials)) {
    const auto& [knob, from, to] = key;
    pairs_per_knob[knob] += static_cast<int>(pcts.size());
    const int n = static_cast<int>(pcts.size());
    double mean = 0.0, var = 0.0;
    for (double v : pcts) mean += v / n;
    for (double v : pcts) var += n > 1 ? (v - mean) * (v - mean) / (n - 1) : 0.0;
    const double half = n > 1 ? t95(n - 1) * std::sqrt(var / n) : NAN;
    rows.push_back(effect_row(knob, from, to, "pairs", n, mean, mean - half, mean + half));
  }
  std::set<std::string> few;
  for (const auto& [knob, def] : defaults())
    if (pairs_per_knob[knob] < options.min_pairs) few.insert(knob);
  json regression = regression_effects(trials, few);
  // A knob keeps its pair rows only when it has enough pairs; otherwise the regression speaks.
  json out = json::array();
  for (const json& r : rows)
    if (!few.count(r["knob"].get<std::string>())) out.push_back(r);
  for (const json& r : regression) out.push_back(r);
  return out;
}

json failures(const std::vector<const CorpusRecord*>& records) {
  std::map<std::pair<std::string, std::string>, std::vector<const CorpusRecord*>> groups;
  for (const CorpusRecord* r : records) {
    const eval::Verdict& v = r->verdict;
    if (v.correct && v.latency_us) continue;
    const std::string status = v.status.empty() ? r->status : v.status;
    if (status == "rejected") {
      std::stringstream rules(v.rejected_reason.empty() ? "unknown" : v.rejected_reason);
      std::string rule;
      while (std::getline(rules, rule, ',')) {
        rule.erase(0, rule.find_first_not_of(' '));
        groups[{"rejected", "rule " + rule}].push_back(r);
      }
    } else if (status == "incorrect") {
      const json first = correctness_report(v)["first_failure"];
      std::string why = "no failing position recorded";
      if (first.is_object() && first["position"].is_number())
        why = "position " + std::to_string(first["position"].get<int>()) + " (" +
              first.value("path", "") + ")";
      groups[{"incorrect", why}].push_back(r);
    } else {
      groups[{status.empty() ? "unknown" : status, status}].push_back(r);
    }
  }
  json out = json::array();
  for (const auto& [key, list] : groups) {
    json examples = json::array(), knobs = json::array();
    for (size_t i = 0; i < list.size() && i < 3; ++i) {
      examples.push_back(list[i]->schedule_id);
      knobs.push_back(list[i]->changed_knobs);
    }
    out.push_back({{"status", key.first},
                   {"why", key.second},
                   {"count", list.size()},
                   {"examples", examples},
                   {"knobs", knobs}});
  }
  return out;
}

json bottleneck_windows(const std::vector<const CorpusRecord*>& records, int window) {
  json out = json::array();
  for (size_t start = 0; start < records.size(); start += static_cast<size_t>(window)) {
    const size_t end = std::min(records.size(), start + static_cast<size_t>(window));
    json row = {{"trials", std::to_string(start) + "-" + std::to_string(end - 1)}};
    for (const std::string& c : eval::bottleneck_classes()) row[c] = 0;
    row["none"] = 0;
    for (size_t i = start; i < end; ++i) {
      const json& b = records[i]->verdict.bottleneck;
      const std::string c = b.is_object() ? b.value("class", "none") : "none";
      row[c] = row.value(c, 0) + 1;
    }
    out.push_back(row);
  }
  return out;
}

}  // namespace

json build_lessons(const std::vector<CorpusRecord>& records, const LessonsOptions& options) {
  std::vector<Group> groups;
  for (const CorpusRecord& r : records) {
    const std::string objective =
        eval::objective_text(eval::objective_of_entries(r.verdict.objective));
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.model == r.model && g.target == r.target && g.device == r.device &&
             g.timed_position == r.verdict.timed_position && g.objective == objective;
    });
    if (it == groups.end()) {
      groups.push_back(
          {r.model, r.target, r.device, "", r.verdict.timed_position, objective, {}, {}});
      it = groups.end() - 1;
    }
    it->records.push_back(&r);
    if (!r.verdict.correct || !r.verdict.latency_us || *r.verdict.latency_us <= 0) continue;
    if (it->latency_kind.empty()) it->latency_kind = r.verdict.latency_kind;
    const bool seen = std::any_of(it->correct.begin(), it->correct.end(), [&](const Trial& t) {
      return t.record->schedule_id == r.schedule_id;
    });
    if (!seen && r.verdict.latency_kind == it->latency_kind)
      it->correct.push_back({&r, flatten(r.config), *r.verdict.latency_us});
  }
  json out = {{"groups", json::array()}};
  for (const Group& g : groups) {
    out["groups"].push_back({{"model", g.model},
                             {"target", g.target},
                             {"device", g.device},
                             {"latency_kind", g.latency_kind},
                             {"timed_position", g.timed_position},
                             {"trials", g.records.size()},
                             {"correct", g.correct.size()},
                             {"effects", knob_effects(g.correct, options)},
                             {"failures", failures(g.records)},
                             {"bottlenecks", bottleneck_windows(g.records, options.window)}});
    if (!g.objective.empty()) out["groups"].back()["objective"] = g.objective;
  }
  return out;
}

std::string lessons_markdown(const json& lessons, const std::string& source) {
  using schedule::fmt;
  auto num = [](const json& x) { return x.is_number() ? fmt("%+.2f", x.get<double>()) : "-"; };
  std::ostringstream md;
  md << "# LESSONS\n\nWhat the search learned, from `" << source
     << "` (`megasched report --lessons`). Effects are % of latency (negative: faster), with a "
        "95% confidence interval; `pairs`: trials that differ only in that knob, `regression`: "
        "a ridge regression of log latency over all correct trials (too few pairs).\n";
  for (const json& g : lessons["groups"]) {
    md << "\n## " << g["model"].get<std::string>() << " on " << g["target"].get<std::string>()
       << " (" << g["device"].get<std::string>() << ", " << g["latency_kind"].get<std::string>()
       << (g.contains("objective") ? ", objective " + g["objective"].get<std::string>()
                                   : ", position " + g["timed_position"].dump())
       << ")\n\n"
       << g["trials"] << " trials, " << g["correct"] << " correct with a latency.\n\n"
       << "### Knob effects\n\n| knob | from | to | method | n | effect % | 95% CI % |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (const json& e : g["effects"])
      md << "| " << e["knob"].get<std::string>() << " | " << e["from"].dump() << " | "
         << e["to"].dump() << " | " << e["method"].get<std::string>() << " | " << e["n"] << " | "
         << num(e["effect_pct"]) << " | " << num(e["ci_low_pct"]) << " .. " << num(e["ci_high_pct"])
         << " |\n";
    md << "\n### Failed configs\n\n| status | why | count | examples |\n|---|---|---|---|\n";
    for (const json& f : g["failures"]) {
      std::string examples;
      for (const json& id : f["examples"])
        examples += (examples.empty() ? "" : ", ") + id.get<std::string>();
      md << "| " << f["status"].get<std::string>() << " | " << f["why"].get<std::string>() << " | "
         << f["count"] << " | " << examples << " |\n";
    }
    md << "\n### Bottleneck classes over time\n\n| trials |";
    for (const std::string& c : eval::bottleneck_classes()) md << " " << c << " |";
    md << " none |\n|---|---|---|---|---|---|\n";
    for (const json& w : g["bottlenecks"]) {
      md << "| " << w["trials"].get<std::string>() << " |";
      for (const std::string& c : eval::bottleneck_classes()) md << " " << w[c] << " |";
      md << " " << w["none"] << " |\n";
    }
  }
  if (lessons.contains("plan")) md << plan_report_markdown(lessons["plan"]);
  return md.str();
}

}  // namespace megasched::flywheel
