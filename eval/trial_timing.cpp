#include "eval/trial_timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "eval/evaluate.h"
#include "eval/gpu_trial.h"
#include "eval/objective.h"
#include "eval/timing.h"
#include "schedule/cost_model.h"
#include "schedule/format.h"
#include "vm/nvrtc_build.h"

namespace megasched::eval {

using nlohmann::json;
using schedule::ModelShape;
using Clock = std::chrono::steady_clock;

namespace {

// The latency a timing step gave at `position`, through the test-only seam when one is set.
std::optional<double> through_seam(const EvaluatorOptions& options, int position,
                                   std::optional<double> latency) {
  if (latency && options.latency_for_testing)
    return options.latency_for_testing(position, *latency);
  return latency;
}

}  // namespace

std::optional<double> TrialTimer::time(const schedule::Program& program, const Floor& floor,
                                       Verdict* v) {
  if (!options_.objective.empty()) return time_objective(program, v);
  const int p = options_.timed_position;
  return through_seam(options_, p,
                      options_.device == "gpu" ? measure_on_gpu(program, p, v)
                                               : predict_latency(program, p, floor, v));
}

namespace {

// One objective position's trial (in `at`, which started as a copy of *v with no checks, notes
// or phases) folded into *v: its checks and notes after v's, its phases added to v's, the rest
// (errors, status, kernel, timing fields) as the position left them.
void fold_position(Verdict at, Verdict* v) {
  json checks = std::move(v->checks);
  for (json& c : at.checks) checks.push_back(std::move(c));
  std::vector<std::string> notes = std::move(v->notes);
  for (std::string& n : at.notes) notes.push_back(std::move(n));
  json phases = std::move(v->breakdown_ms);
  for (const auto& [phase, ms] : at.breakdown_ms.items())
    phases[phase] = phases.value(phase, 0.0) + ms.get<double>();
  *v = std::move(at);
  v->checks = std::move(checks);
  v->notes = std::move(notes);
  v->breakdown_ms = std::move(phases);
}

// The i-th sample of the objective: the weighted mean of each position's i-th sample (empty when
// the positions took different numbers of samples).
std::vector<double> weighted_samples(const Objective& objective,
                                     const std::vector<std::vector<double>>& samples) {
  for (const auto& s : samples)
    if (s.size() != samples.front().size()) return {};
  std::vector<double> mean(samples.empty() ? 0 : samples.front().size());
  for (size_t i = 0; i < mean.size(); ++i) {
    std::vector<double> at;
    for (const auto& s : samples) at.push_back(s[i]);
    mean[i] = weighted_mean(objective, at);
  }
  return mean;
}

}  // namespace

std::optional<double> TrialTimer::time_objective(const schedule::Program& program, Verdict* v) {
  const Objective& objective = options_.objective;
  const bool gpu = options_.device == "gpu";
  const vm::CubinCacheStats before = vm::cubin_cache_stats();
  std::vector<double> latencies, p90s, spreads;
  std::vector<std::vector<double>> samples;
  std::vector<std::vector<BaselineMedian>> baselines;  // per position
  for (size_t i = 0; i < objective.size(); ++i) {
    const int p = objective[i].position;
    Verdict at = *v;
    at.checks = json::array();
    at.notes.clear();
    at.breakdown_ms = json::object();
    std::vector<BaselineMedian> medians;
    const std::optional<double> latency =
        through_seam(options_, p,
                     gpu ? measure_on_gpu(program, p, &at, &medians)
                         : predict_latency(program, p, floor_for(weights_.shape, target_, p), &at));
    json& entry = at.objective[i];
    if (latency) {
      entry["latency_us"] = *latency;
      entry["latency_p90_us"] = at.latency_p90_us;
      entry["latency_spread_us"] = at.latency_spread_us;
      if (gpu) {
        entry["baselines_us"] = json::object();
        for (const BaselineMedian& b : medians) entry["baselines_us"][b.kind] = b.median_us;
      }
      latencies.push_back(*latency);
      p90s.push_back(at.latency_p90_us);
      spreads.push_back(at.latency_spread_us);
      samples.push_back(at.samples_us);
      baselines.push_back(std::move(medians));
    }
    fold_position(std::move(at), v);
    // A latency only when every position has one: the first failure is the verdict's.
    if (!latency) return std::nullopt;
  }
  const double latency = weighted_mean(objective, latencies);
  v->latency_p90_us = weighted_mean(objective, p90s);
  v->latency_spread_us = weighted_mean(objective, spreads);
  v->samples_us = weighted_samples(objective, samples);
  if (gpu) {
    const vm::CubinCacheStats after = vm::cubin_cache_stats();
    if (v->kernel.is_object() && v->kernel.contains("cubin_cache")) {
      v->kernel["cubin_cache"]["trial_hits"] = after.hits - before.hits;
      v->kernel["cubin_cache"]["trial_compiles"] = after.compiles - before.compiles;
    }
    // The strongest baseline over the objective: each kind timed at every position, weighted
    // like the latency; the lowest weighted mean.
    std::vector<BaselineMedian> means;
    for (const BaselineMedian& b : baselines.front()) {
      std::vector<double> at;
      for (const auto& per_position : baselines)
        for (const BaselineMedian& m : per_position)
          if (m.kind == b.kind) at.push_back(m.median_us);
      if (at.size() == baselines.size()) means.push_back({b.kind, weighted_mean(objective, at)});
    }
    v->speedup_vs_baseline.reset();
    v->baseline_kind.clear();
    v->baseline_us.reset();
    for (const BaselineMedian& m : means)
      if (v->kernel.is_object() && v->kernel.contains("baselines") &&
          v->kernel["baselines"].contains(m.kind))
        v->kernel["baselines"][m.kind]["median_us"] = m.median_us;
    if (const auto best = strongest_baseline(means)) {
      v->speedup_vs_baseline = best->median_us / latency;
      v->baseline_kind = best->kind;
      v->baseline_us = best->median_us;
      v->notes.push_back("speedup_vs_baseline: the weighted mean of " + best->kind +
                         "'s medians over the objective's positions (" +
                         schedule::fmt("%.3f us", best->median_us) +
                         ") over the weighted mean latency");
    }
  }
  v->notes.push_back("latency_us is the objective " + objective_text(objective) +
                     (gpu ? ": the weighted mean of the medians at its positions; samples_us "
                            "holds the weighted mean of each position's i-th sample"
                          : ": the weighted mean of the predicted latencies at its positions"));
  return latency;
}

std::string stop_slower_error(double stop_slower) {
  if (stop_slower == 0.0 || (std::isfinite(stop_slower) && stop_slower >= kStopSlowerMin))
    return "";
  return "must be 0 (off) or a finite number >= " + schedule::fmt("%g", kStopSlowerMin) + ", not " +
         schedule::fmt("%g", stop_slower);
}

double stop_bound_us(double stop_slower, const std::map<int, double>& fastest_us, int position) {
  const auto it = fastest_us.find(position);
  return stop_slower > 0.0 && it != fastest_us.end() ? stop_slower * it->second : 0.0;
}

std::optional<double> TrialTimer::measure_on_gpu(const schedule::Program& program, int position,
                                                 Verdict* v,
                                                 std::vector<BaselineMedian>* medians_out) {
  GpuTrialOptions gpu_options = options_.gpu_options;
  gpu_options.timed_position = position;  // the floor refers to this position
  if (fastest_us_)
    gpu_options.stop_above_us = stop_bound_us(options_.stop_slower, *fastest_us_, position);
  const vm::CubinCacheStats before = vm::cubin_cache_stats();
  const GpuTrialResult g =
      run_gpu_trial(program, weights_, reference_.tokens(), reference_.windows(), gpu_options);
  for (const auto& [phase, ms] : g.phases_ms.items()) v->breakdown_ms[phase] = ms;
  v->kernel = g.kernel;
  const vm::CubinCacheStats after = vm::cubin_cache_stats();
  const uint64_t lookups = after.hits + after.compiles;
  v->kernel["cubin_cache"] = {
      {"trial_hits", after.hits - before.hits},
      {"trial_compiles", after.compiles - before.compiles},
      {"process_hits", after.hits},
      {"process_compiles", after.compiles},
      {"process_hit_rate", lookups ? static_cast<double>(after.hits) / lookups : 0.0}};
  for (const json& c : g.checks) v->checks.push_back(c);
  v->max_abs_err = std::max(v->max_abs_err, g.max_abs_err);
  v->rel_err = std::max(v->rel_err, g.rel_err);
  if (std::isnan(g.max_abs_err) || std::isnan(g.rel_err)) v->rel_err = v->max_abs_err = INFINITY;
  cap_errors(v);
  v->argmax_match = v->argmax_match && g.argmax_match;
  if (g.status != "ok") {
    v->status = g.status;
    if (g.status == "rejected") {
      v->valid = false;
      v->rejected_reason = "launch";
    }
    if (g.status == "hang")
      v->diagnostics = json::array({{{"rule", "hang"}, {"dump", g.hang_dump}}});
    v->notes.push_back(g.message);
    return std::nullopt;
  }
  // Correct only if the kernel's output at every checked position was compared and matched.
  for (int p : reference_.checked()) {
    const bool compared = std::any_of(g.checks.begin(), g.checks.end(), [&](const json& c) {
      return c.value("position", -1) == p && c.value("pass", false);
    });
    if (compared) continue;
    v->status = "incorrect";
    v->notes.push_back("the GPU output at position " + std::to_string(p) +
                       " was not compared with the reference");
    return std::nullopt;
  }
  const SampleStats s = sample_stats(g.samples_us);
  v->samples_us = g.samples_us;
  if (g.kernel.contains("timing_stopped"))
    v->notes.push_back("timing stopped after " + std::to_string(g.samples_us.size()) + " of " +
                       std::to_string(gpu_options.iterations) + " iterations: their median " +
                       schedule::fmt("%.1f us", s.median) + " is above " +
                       schedule::fmt("%.1f us", gpu_options.stop_above_us) + " (--stop-slower " +
                       schedule::fmt("%g", options_.stop_slower) + " x the fastest measured here)");
  v->latency_p90_us = s.p90;
  v->latency_spread_us = s.p90 - s.p10;
  v->latency_kind = "measured-gpu";
  std::vector<BaselineMedian> medians;
  for (const auto& b : g.baselines) {
    if (b.samples_us.empty()) continue;
    medians.push_back({b.kind, sample_stats(b.samples_us).median});
    // Each baseline's median beside its build facts (the run directory's performance.json).
    if (v->kernel.is_object() && v->kernel.contains("baselines") &&
        v->kernel["baselines"].contains(b.kind))
      v->kernel["baselines"][b.kind]["median_us"] = medians.back().median_us;
    v->notes.push_back(
        b.kind + " CUDA-graph baseline median " + std::to_string(medians.back().median_us) + " us" +
        (options_.objective.empty() ? "" : " at position " + std::to_string(position)) +
        " (same run)");
  }
  if (medians_out) *medians_out = medians;
  if (const auto best = strongest_baseline(medians)) {
    v->speedup_vs_baseline = best->median_us / s.median;
    v->baseline_kind = best->kind;
    v->baseline_us = best->median_us;
  }
  return s.median;
}

std::optional<double> TrialTimer::predict_latency(const schedule::Program& program, int position,
                                                  const Floor& floor, Verdict* v) {
  const auto t0 = Clock::now();
  const auto est = schedule::predict(program, weights_.shape, target_, position, floor.floor_us);
  v->breakdown_ms["predict"] = ms_since(t0);
  if (!est.completed) {
    v->status = "incorrect";
    v->notes.push_back("the cost model's simulation did not drain every queue");
    return std::nullopt;
  }
  v->latency_kind = "predicted";
  v->notes.push_back("latency predicted by the cost model for " + target_.name + " at position " +
                     std::to_string(position) + " (no GPU run): " +
                     std::to_string(static_cast<int>(est.critical_path_stages)) +
                     " dependent stages");
  return est.latency_us;
}

}  // namespace megasched::eval
