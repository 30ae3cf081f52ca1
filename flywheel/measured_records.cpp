#include "flywheel/measured_records.h"

#include <unistd.h>

#include "eval/evaluate.h"
#include "eval/evaluator.h"

namespace megasched::flywheel {

using nlohmann::json;

std::string measured_status(const eval::Verdict& v) {
  if (v.status == "crash") return kStatusCrash;
  if (v.status == "timeout" || v.status == "hang") return kStatusTimeout;
  if (v.status == "rejected" || !v.valid) return kStatusRejected;
  if (v.status == "incorrect" || !v.correct) return kStatusIncorrect;
  return kStatusDiscarded;
}

CorpusRecord measured_record(const MeasuredTrial& t, double now_s) {
  CorpusRecord r;
  r.trial = t.trial;
  r.timestamp = utc_timestamp(now_s);
  r.run_id = t.run_id;
  r.strategy = t.strategy;
  r.status = measured_status(t.verdict);
  r.description = t.description;
  r.schedule_id = t.verdict.schedule_id;
  r.config = schedule::to_json(t.config);
  r.complexity = schedule::complexity(t.config);
  r.verdict = t.verdict;
  r.keep = {{"reason", t.strategy + ": a measurement, no keep decision"}};
  r.model = t.identity.value("model", t.shape.name);
  r.target = t.identity.value("target", t.verdict.target);
  r.device = t.identity.value("device", t.verdict.device);
  r.model_shape = schedule::to_json(t.shape);
  r.device_fingerprint = t.identity;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) r.device_fingerprint["host"] = host;
  r.versions = eval::trial_versions(t.identity);
  return r;
}

eval::Verdict bench_row_verdict(const eval::BenchRow& row, const std::string& model,
                                const std::string& target) {
  eval::Verdict v;
  v.model = model;
  v.target = target;
  v.device = "gpu";
  v.timed_position = row.position;
  v.status = row.status;
  v.valid = row.status != "rejected" && row.status != "lower_error";
  v.correct = row.status == "ok";
  if (v.correct && row.median_us) {
    v.latency_us = row.median_us;
    v.latency_kind = "measured-gpu";
    if (row.p90_us) v.latency_p90_us = *row.p90_us;
  }
  if (row.status == "lower_error") v.rejected_reason = "lowering";
  if (!row.message.empty()) v.notes.push_back(row.message);
  v.max_abs_err = row.detail.value("max_abs_err", 0.0);
  v.rel_err = row.detail.value("rel_err", 0.0);
  if (row.detail.contains("kernel")) v.kernel = row.detail["kernel"];
  return v;
}

std::vector<CorpusRecord> bench_records(
    const eval::BenchResult& result,
    const std::vector<std::pair<std::string, schedule::ScheduleConfig>>& configs,
    const schedule::ModelShape& shape, uint64_t seed, const std::string& run_id, double now_s) {
  std::vector<CorpusRecord> out;
  for (const eval::BenchRow& row : result.rows) {
    if (row.kind != "config") continue;
    const schedule::ScheduleConfig* config = nullptr;
    for (const auto& [label, c] : configs)
      if (label == row.name) config = &c;
    if (config == nullptr) continue;  // a label bench did not give: not one of its configs
    MeasuredTrial t;
    t.run_id = run_id;
    t.trial = static_cast<int>(out.size());
    t.strategy = "bench";
    t.description = "bench row " + row.name + " at position " + std::to_string(row.position);
    t.config = *config;
    t.verdict = bench_row_verdict(row, shape.name, result.device);
    t.verdict.schedule_id =
        eval::trial_schedule_id(*config, shape.name, seed, result.device, "gpu", row.position, {});
    t.shape = shape;
    t.identity = {{"model", shape.name},
                  {"target", result.device},
                  {"device", "gpu"},
                  {"seed", seed},
                  {"command", "bench"}};
    out.push_back(measured_record(t, now_s));
  }
  return out;
}

}  // namespace megasched::flywheel
