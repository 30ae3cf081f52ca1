#include "eval/verdict.h"

#include <limits>

#include <cmath>

#include <algorithm>

namespace megasched::eval {

void cap_errors(Verdict* v) {
  if (std::isfinite(v->max_abs_err) && std::isfinite(v->rel_err)) return;
  v->max_abs_err =
      std::isfinite(v->max_abs_err) ? v->max_abs_err : std::numeric_limits<double>::max();
  v->rel_err = std::isfinite(v->rel_err) ? v->rel_err : std::numeric_limits<double>::max();
  const std::string note = "the output has non-finite values: the errors show the largest double";
  if (std::find(v->notes.begin(), v->notes.end(), note) == v->notes.end()) v->notes.push_back(note);
}

using nlohmann::json;

namespace {

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::optional<double> read_optional(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

}  // namespace

json to_json(const Verdict& v) {
  json j = {
      {"valid", v.valid},
      {"rejected_reason", v.rejected_reason},
      {"diagnostics", v.diagnostics},
      {"correct", v.correct},
      {"max_abs_err", v.max_abs_err},
      {"rel_err", v.rel_err},
      {"argmax_match", v.argmax_match},
      {"positions_checked", v.positions_checked},
      {"latency_us", optional_number(v.latency_us)},
      {"latency_kind", v.latency_kind},
      {"latency_p90_us", v.latency_p90_us},
      {"latency_spread_us", v.latency_spread_us},
      {"samples_us", v.samples_us},
      {"timed_position", v.timed_position},
      {"floor_us", v.floor_us},
      {"floor_datasheet_us", v.floor_datasheet_us},
      {"pct_of_floor", optional_number(v.pct_of_floor)},
      {"pct_of_datasheet", optional_number(v.pct_of_datasheet)},
      {"speedup_vs_baseline", optional_number(v.speedup_vs_baseline)},
      {"baseline_kind", v.baseline_kind},
      {"baseline_us", optional_number(v.baseline_us)},
      {"schedule_id", v.schedule_id},
      {"tasks", v.tasks},
      {"weight_bytes", v.weight_bytes},
      {"bytes_min", v.bytes_min},
      {"target", v.target},
      {"model", v.model},
      {"device", v.device},
      {"status", v.status},
      {"notes", v.notes},
      {"kernel", v.kernel},
      {"breakdown_ms", v.breakdown_ms},
      {"bottleneck", v.bottleneck},
      {"checks", v.checks},
      {"reference", v.reference},
  };
  if (!v.objective.is_null()) j["objective"] = v.objective;
  if (!v.plan.is_null()) j["plan"] = v.plan;
  return j;
}

Verdict verdict_from_json(const json& j) {
  Verdict v;
  if (!j.is_object()) return v;
  v.valid = j.value("valid", false);
  v.rejected_reason = j.value("rejected_reason", "");
  v.diagnostics = j.value("diagnostics", json::array());
  v.correct = j.value("correct", false);
  v.max_abs_err = j.value("max_abs_err", 0.0);
  v.rel_err = j.value("rel_err", 0.0);
  v.argmax_match = j.value("argmax_match", false);
  v.positions_checked = j.value("positions_checked", std::vector<int>{});
  v.latency_us = read_optional(j, "latency_us");
  v.latency_kind = j.value("latency_kind", "");
  v.latency_p90_us = j.value("latency_p90_us", 0.0);
  v.latency_spread_us = j.value("latency_spread_us", 0.0);
  v.samples_us = j.value("samples_us", std::vector<double>{});
  v.timed_position = j.value("timed_position", 0);
  v.floor_us = j.value("floor_us", 0.0);
  v.floor_datasheet_us = j.value("floor_datasheet_us", 0.0);
  v.pct_of_floor = read_optional(j, "pct_of_floor");
  v.pct_of_datasheet = read_optional(j, "pct_of_datasheet");
  v.speedup_vs_baseline = read_optional(j, "speedup_vs_baseline");
  v.baseline_kind = j.value("baseline_kind", "");
  v.baseline_us = read_optional(j, "baseline_us");
  v.schedule_id = j.value("schedule_id", "");
  v.tasks = j.value("tasks", uint64_t{0});
  v.weight_bytes = j.value("weight_bytes", uint64_t{0});
  v.bytes_min = j.value("bytes_min", uint64_t{0});
  v.target = j.value("target", "");
  v.model = j.value("model", "");
  v.device = j.value("device", "");
  v.status = j.value("status", "");
  v.notes = j.value("notes", std::vector<std::string>{});
  v.kernel = j.value("kernel", json::object());
  v.breakdown_ms = j.value("breakdown_ms", json::object());
  // Verdicts logged before the bottleneck class existed read as unclassified.
  if (j.contains("bottleneck") && j["bottleneck"].is_object()) v.bottleneck = j["bottleneck"];
  v.checks = j.value("checks", json::array());
  v.reference = j.value("reference", json::object());
  if (j.contains("objective") && j["objective"].is_array()) v.objective = j["objective"];
  if (j.contains("plan") && j["plan"].is_array()) v.plan = j["plan"];
  return v;
}

}  // namespace megasched::eval
