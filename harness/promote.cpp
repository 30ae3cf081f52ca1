#include "harness/promote.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <set>

#include "eval/evaluate.h"
#include "eval/generate.h"
#include "eval/plan_evaluate.h"
#include "flywheel/measured_records.h"
#include "flywheel/registry.h"
#include "flywheel/run_dir.h"
#include "harness/cli_util.h"
#include "schedule/format.h"
#include "schedule/lookup.h"
#include "schedule/named_configs.h"
#include "search/plan_search.h"

namespace megasched::harness {
namespace {

using nlohmann::json;
using schedule::fmt;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<int> verify_positions(int max_seq) {
  std::vector<int> out;
  for (int p : {0, 1024, 4096}) {
    const int clipped = std::max(0, std::min(p, max_seq - 1));
    if (std::find(out.begin(), out.end(), clipped) == out.end()) out.push_back(clipped);
  }
  return out;
}

GateOutcome decide_benchmark_gate(const std::vector<double>& candidate_us,
                                  const std::vector<double>& incumbent_us, double required) {
  GateOutcome g;
  if (candidate_us.empty() || candidate_us.size() != incumbent_us.size()) {
    g.message = "benchmark gate: needs one candidate and one incumbent latency per round (got " +
                std::to_string(candidate_us.size()) + " and " +
                std::to_string(incumbent_us.size()) + ")";
    return g;
  }
  const double cand = median(candidate_us), inc = median(incumbent_us);
  const double speedup = cand > 0 ? inc / cand : 0.0;
  g.pass = speedup >= required;
  g.detail = {{"candidate_median_us", cand},  {"incumbent_median_us", inc},
              {"speedup", speedup},           {"required_speedup", required},
              {"candidate_us", candidate_us}, {"incumbent_us", incumbent_us}};
  g.message = std::string("benchmark gate ") + (g.pass ? "passed" : "failed") + ": candidate " +
              fmt("%.3f", cand) + " us vs incumbent " + fmt("%.3f", inc) + " us, " +
              fmt("%.3f", speedup) + "x " + (g.pass ? ">= " : "< ") + fmt("%.2f", required) +
              "x (medians of " + std::to_string(candidate_us.size()) + " interleaved rounds)";
  return g;
}

GateOutcome run_benchmark_gate(int rounds, double required, const Measure& measure) {
  std::vector<double> cand, inc;
  json order = json::array();
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool candidate = (r % 2 == 0) == (k == 0);
      std::string error;
      const std::optional<double> us = measure(candidate, &error);
      if (!us) {
        GateOutcome g;
        g.message = std::string("benchmark gate failed: the ") +
                    (candidate ? "candidate" : "incumbent") + " did not measure in round " +
                    std::to_string(r) + ": " + error;
        g.detail = {{"order", order}};
        return g;
      }
      (candidate ? cand : inc).push_back(*us);
      order.push_back(candidate ? "candidate" : "incumbent");
    }
  }
  GateOutcome g = decide_benchmark_gate(cand, inc, required);
  g.detail["order"] = order;
  return g;
}

bool append_verify_verdict(const VerifyRequest& request, const schedule::ScheduleConfig& config,
                           const eval::Verdict& verdict, const schedule::ModelShape& shape,
                           const nlohmann::json& identity, bool* appended, std::string* error) {
  *appended = false;
  if (!flywheel::flywheel_enabled(request.flywheel_dir) || verdict.device != "gpu") return true;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  flywheel::MeasuredTrial t;
  t.run_id = flywheel::new_run_id(now);
  t.strategy = "promote";
  t.description = "promote: the verify gate's trial";
  t.config = config;
  t.verdict = verdict;
  t.shape = shape;
  t.identity = identity;
  return flywheel::append_shared(request.flywheel_dir, flywheel::measured_record(t, now),
                                 flywheel::kSourcePromote, appended, error);
}

GateOutcome run_verify_gate(const VerifyRequest& request, const schedule::ScheduleConfig& config,
                            eval::Verdict* verdict, bool* environment) {
  GateOutcome g;
  std::string error;
  eval::EvaluatorOptions ev;
  ev.model = request.model;
  ev.gpu = request.gpu;
  ev.device = request.device;
  ev.seed = request.seed;
  auto shape = schedule::resolve_shape(request.model, &error);
  if (!shape) {
    g.message = "verify gate: " + error;
    return g;
  }
  ev.positions = request.positions.empty() ? verify_positions(shape->max_seq) : request.positions;
  ev.progress = progress_on_stderr("promote");
  auto evaluator = eval::TrialEvaluator::create(ev, &error, environment);
  if (!evaluator) {
    g.message = "verify gate: " + error;
    return g;
  }
  *verdict = evaluator->evaluate(config);
  if (bool appended = false; !append_verify_verdict(request, config, *verdict, *shape,
                                                    evaluator->identity(), &appended, &error))
    std::cerr << "promote: warning: shared corpus: " << error << "\n";
  g.detail = {{"positions", ev.positions},          {"device", request.device},
              {"status", verdict->status},          {"valid", verdict->valid},
              {"correct", verdict->correct},        {"rel_err", verdict->rel_err},
              {"max_abs_err", verdict->max_abs_err}};
  if (!verdict->valid || !verdict->correct) {
    g.message = "verify gate failed: " +
                (verdict->valid ? "incorrect (status " + verdict->status + ", rel_err " +
                                      fmt("%.3g", verdict->rel_err) + ")"
                                : "rejected (" + verdict->rejected_reason + ")") +
                " at positions checked " + json(ev.positions).dump() +
                (verdict->notes.empty() ? "" : ": " + verdict->notes.back());
    return g;
  }
  auto weights = schedule::load_weights(request.model, request.seed, &error);
  if (!weights) {
    g.message = "verify gate: " + error;
    return g;
  }
  eval::GenerateOptions gen;
  gen.prompt = {1};
  gen.max_tokens = std::max(1, std::min(request.tokens, shape->max_seq - 1));
  gen.device = request.device;
  gen.verify = true;
  const eval::GenerateResult r = eval::generate(*weights, evaluator->target(), config, gen);
  g.detail["generate"] = {{"tokens", gen.max_tokens},
                          {"ok", r.ok},
                          {"steps_verified", r.steps_verified},
                          {"max_rel_err", r.max_rel_err},
                          {"first_mismatch_step", r.first_mismatch_step},
                          {"near_ties", eval::near_ties_json(r)}};
  if (!r.ok) {
    g.message = "verify gate failed: generate --verify of " + std::to_string(gen.max_tokens) +
                " tokens: " + r.error;
    return g;
  }
  g.pass = true;
  g.message = "verify gate passed: correct at positions " + json(ev.positions).dump() + " (" +
              request.device + "), generate --verify " + std::to_string(gen.max_tokens) +
              " tokens, max rel_err " + fmt("%.3g", r.max_rel_err);
  return g;
}

std::vector<PlanGateBucket> plan_gate_buckets(const schedule::Plan& plan, int max_seq) {
  std::vector<PlanGateBucket> out;
  for (const schedule::PlanBucket& b : plan.buckets) {
    PlanGateBucket g;
    g.begin = b.begin;
    g.end = schedule::bucket_end(b, max_seq);
    g.timed_position = search::bucket_timed_position(b, max_seq);
    g.weight = g.end - g.begin;
    out.push_back(g);
  }
  return out;
}

GateOutcome run_plan_benchmark_gate(const std::vector<PlanGateBucket>& buckets, int rounds,
                                    double required, const BucketMeasure& measure) {
  double total = 0.0;
  for (const PlanGateBucket& b : buckets) total += b.weight;
  std::vector<std::vector<double>> samples[2];  // [candidate?][bucket] -> latencies
  samples[0].resize(buckets.size());
  samples[1].resize(buckets.size());
  GateOutcome g = run_benchmark_gate(rounds, required, [&](bool candidate, std::string* error) {
    double sum = 0.0;
    for (size_t i = 0; i < buckets.size(); ++i) {
      // A shared bucket: the side timed second in a round counts the first side's sample.
      const std::vector<double>& other = samples[!candidate][i];
      if (buckets[i].shared && other.size() > samples[candidate][i].size()) {
        samples[candidate][i].push_back(other.back());
        sum += buckets[i].weight * other.back();
        continue;
      }
      std::string why;
      const std::optional<double> us = measure(candidate, i, &why);
      if (!us) {
        *error = "bucket [" + std::to_string(buckets[i].begin) + ", " +
                 std::to_string(buckets[i].end) + ") at position " +
                 std::to_string(buckets[i].timed_position) + ": " + why;
        return std::optional<double>();
      }
      samples[candidate][i].push_back(*us);
      sum += buckets[i].weight * *us;
    }
    return std::optional<double>(sum / total);
  });
  json per_bucket = json::array();
  for (size_t i = 0; i < buckets.size(); ++i) {
    const PlanGateBucket& b = buckets[i];
    json e = {{"begin", b.begin},
              {"end", b.end},
              {"timed_position", b.timed_position},
              {"weight", b.weight}};
    if (!samples[1][i].empty() && samples[1][i].size() == samples[0][i].size()) {
      const double cand = median(samples[1][i]), inc = median(samples[0][i]);
      e["candidate_median_us"] = cand;
      e["incumbent_median_us"] = inc;
      e["speedup"] = cand > 0 ? inc / cand : 0.0;
    }
    if (b.shared) e["shared"] = true;
    per_bucket.push_back(e);
  }
  g.detail["buckets"] = per_bucket;
  g.detail["rule"] =
      "weighted: each side's round latency is the mean over the buckets, each timed at its "
      "midpoint and weighted by its positions; the gate compares the medians of those; a bucket "
      "whose candidate config is the incumbent's is timed once a round for both sides (shared)";
  if (g.message.rfind("benchmark gate", 0) == 0)
    g.message.insert(std::string("benchmark gate").size(), " (plan, weighted over buckets)");
  return g;
}

GateOutcome run_plan_verify_gate(const VerifyRequest& request, const schedule::Plan& plan,
                                 std::vector<eval::Verdict>* verdicts, bool* environment) {
  GateOutcome g;
  std::string error;
  auto shape = schedule::resolve_shape(request.model, &error);
  if (!shape) {
    g.message = "verify gate: " + error;
    return g;
  }
  if (!schedule::check_plan_covers(plan, shape->max_seq, &error)) {
    g.message = "verify gate: the plan does not fit model " + shape->name + ": " + error;
    return g;
  }
  const std::vector<int> wanted =
      request.positions.empty() ? verify_positions(shape->max_seq) : request.positions;
  json buckets = json::array();
  std::vector<std::string> passed;
  std::set<int> checked;
  for (const schedule::PlanBucket& b : plan.buckets) {
    VerifyRequest r = request;
    r.positions = eval::bucket_positions(b, shape->max_seq, wanted);
    checked.insert(r.positions.begin(), r.positions.end());
    eval::Verdict v;
    const GateOutcome one = run_verify_gate(r, b.config, &v, environment);
    if (verdicts) verdicts->push_back(v);
    json d = one.detail;
    d["begin"] = b.begin;
    d["end"] = schedule::bucket_end(b, shape->max_seq);
    d["pass"] = one.pass;
    buckets.push_back(d);
    if (!one.pass) {
      g.detail = {{"buckets", buckets}};
      g.message = "verify gate failed in bucket " + schedule::bucket_label(b) + ": " + one.message;
      return g;
    }
    passed.push_back(schedule::bucket_label(b) + " at " + json(r.positions).dump());
  }
  g.pass = true;
  g.detail = {{"buckets", buckets},
              {"device", request.device},
              {"positions", std::vector<int>(checked.begin(), checked.end())},
              {"generate", buckets.back().value("generate", json::object())}};
  std::string list;
  for (const std::string& p : passed) list += (list.empty() ? "" : ", ") + p;
  g.message = "verify gate passed bucket by bucket: " + list + " (" + request.device + ")";
  return g;
}

std::optional<GateIncumbent> gate_incumbent(const std::string& registry_path,
                                            const schedule::ModelShape& shape,
                                            const std::string& target, std::string* error) {
  GateIncumbent inc;
  const flywheel::RegistryRead registry = flywheel::read_registry(registry_path);
  const std::optional<flywheel::RegistryEntry> newest =
      flywheel::newest_entry(registry, shape.name, target, schedule::dtype_name(shape.dtype));
  const std::string record = "best:" + shape.name + ":" + target;
  const auto preset = schedule::find_preset(shape.name);  // the records are of presets' dtypes
  const auto named = preset && preset->dtype == shape.dtype
                         ? schedule::find_named_config(record, nullptr)
                         : std::nullopt;
  if (newest) {
    inc = {{}, newest->id, "registry", newest->config};
  } else if (named) {
    inc = {{}, record, "built-in record", named->config};
  } else {
    inc = {schedule::single_config_plan(schedule::ScheduleConfig{}), "default", "default",
           schedule::to_json(schedule::ScheduleConfig{})};
    return inc;
  }
  auto plan = schedule::parse_plan(inc.document, error);
  if (!plan || !schedule::check_plan_covers(*plan, shape.max_seq, error)) {
    *error = inc.source + " " + inc.id + ": " + *error;
    return std::nullopt;
  }
  inc.plan = std::move(*plan);
  return inc;
}

}  // namespace megasched::harness
