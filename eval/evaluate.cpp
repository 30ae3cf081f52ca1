#include "eval/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <limits>
#include <random>

#include "eval/baselines/baseline.h"
#include "eval/bottleneck.h"
#include "eval/eager.h"
#include "eval/gpu_reference.h"
#include "eval/oracle.h"
#include "eval/prepare.h"
#include "eval/reference_forward.h"
#include "eval/roofline.h"
#include "eval/timing.h"
#include "schedule/checkpoint.h"
#include "schedule/cost_model.h"
#include "schedule/format.h"
#include "schedule/lookup.h"
#include "schedule/validate.h"
#include "vm/nvrtc_build.h"
#include "vm/reference_vm.h"

namespace megasched::eval {

using nlohmann::json;
using schedule::GpuTarget;
using schedule::ModelShape;

namespace {

/// Diagnostics beyond this many are counted, not listed (a broken program can have thousands).
constexpr size_t kMaxDiagnosticsInVerdict = 50;

using Clock = std::chrono::steady_clock;

}  // namespace

std::optional<GpuTarget> resolve_target(const std::string& gpu, std::string* error) {
  if (gpu != "auto") return schedule::find_target_named(gpu, error);
  std::optional<GpuTarget> live = live_target(error);
  if (!live && error)
    *error += " (--gpu auto reads the GPU of this machine; name a target instead, e.g. --gpu h100)";
  return live;
}

std::string gpu_target_mismatch(const std::string& live_name, const schedule::GpuTarget& named) {
  std::string ignored;
  const auto live = schedule::find_target_named(live_name, &ignored, false);
  if (!live || live->name == named.name) return "";
  return "--gpu " + named.name + " names another GPU than this machine's " + live_name + " (" +
         live->name + "): the latency was timed on the " + live_name + " and is labelled " +
         named.name + " (hint: --gpu auto or --gpu " + live->name + ")";
}

std::vector<int32_t> trial_tokens(int vocab, int count, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0x5eedull);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  for (auto& t : tokens) t = pick(rng);
  return tokens;
}

std::unique_ptr<TrialEvaluator> TrialEvaluator::create(const EvaluatorOptions& options,
                                                       std::string* error, bool* environment) {
  if (environment) *environment = false;
  try {
    return create_unguarded(options, error, environment);
  } catch (const std::bad_alloc&) {
    if (environment) *environment = true;
    if (error) *error = "not enough memory to load model " + options.model + " and its reference";
    return nullptr;
  }
}

std::unique_ptr<TrialEvaluator> TrialEvaluator::create_unguarded(const EvaluatorOptions& options,
                                                                 std::string* error,
                                                                 bool* environment) {
  auto fail = [&](std::string msg, bool machine = false) -> std::unique_ptr<TrialEvaluator> {
    if (error) *error = std::move(msg);
    if (environment) *environment = machine;
    return nullptr;
  };
  if (options.device != "cpu" && options.device != "gpu")
    return fail("unknown device '" + options.device +
                "'; use cpu (predicted latency) or gpu (measured)");
  if (options.positions.empty()) return fail("no positions to check; pass e.g. --positions 0,3,7");
  if (options.timed_position < 0) return fail("--timed-position must be >= 0");
  if (!options.objective.empty() && options.timed_position != 0)
    return fail(
        "--objective and --timed-position both say where trials are timed; use one or the other "
        "(an objective of one position, e.g. --objective 1024, times at 1024 alone)");
  if (const std::string why = objective_error(options.objective); !why.empty()) return fail(why);
  if (options.check_steps < 1) return fail("check_steps must be >= 1");
  if (const std::string why = stop_slower_error(options.stop_slower); !why.empty())
    return fail("stop_slower " + why);
  if (options.reference != "auto" && options.reference != "cpu" && options.reference != "gpu")
    return fail("unknown reference engine '" + options.reference + "'; use auto, cpu or gpu");
  std::unique_ptr<TrialEvaluator> ev(new TrialEvaluator());
  ev->options_ = options;
  // Its trials share one set of baselines: built and checked by the first, timed by every one.
  if (!ev->options_.gpu_options.baseline_cache)
    ev->options_.gpu_options.baseline_cache = make_baseline_cache();
  std::sort(ev->options_.objective.begin(), ev->options_.objective.end(),
            [](const ObjectiveTerm& a, const ObjectiveTerm& b) { return a.position < b.position; });
  std::sort(ev->options_.positions.begin(), ev->options_.positions.end());
  ev->options_.positions.erase(
      std::unique(ev->options_.positions.begin(), ev->options_.positions.end()),
      ev->options_.positions.end());
  std::string why;
  if (options.device == "gpu" && !gpu_available(&why))
    return fail("--device gpu: " + why + "; use --device cpu for a predicted latency", true);
  auto shape = schedule::resolve_shape(options.model, &why);
  if (!shape) return fail(why);
  if (const std::string range =
          objective_range_error(options.objective, shape->name, shape->max_seq);
      !range.empty())
    return fail(range);
  const std::vector<int> timed = ev->timed_positions();
  const int last = std::max(ev->options_.positions.back(), timed.back());
  if (ev->options_.positions.front() < 0 || last >= shape->max_seq)
    return fail("positions must lie in [0, " + std::to_string(shape->max_seq - 1) + "] for model " +
                shape->name);
  auto target = resolve_target(options.gpu, &why);
  if (!target) return fail(why, options.gpu == "auto");
  ev->target_ = *target;
  if (options.device == "gpu" && options.gpu != "auto") {
    if (const auto live = live_target(&why)) {
      ev->target_mismatch_ = gpu_target_mismatch(live->name, *target);
      if (!ev->target_mismatch_.empty() && options.progress)
        options.progress("warning: " + ev->target_mismatch_);
    }
  }
  auto weights = schedule::load_weights(options.model, options.seed, &why);
  if (!weights) return fail(why);
  ev->weights_ = std::move(*weights);
  // The timed position (every objective position) is always checked.
  ev->checked_ = ev->options_.positions;
  ev->checked_.insert(ev->checked_.end(), timed.begin(), timed.end());
  std::sort(ev->checked_.begin(), ev->checked_.end());
  ev->checked_.erase(std::unique(ev->checked_.begin(), ev->checked_.end()), ev->checked_.end());
  const int end = std::min(ev->checked_.back() + options.check_steps, ev->weights_.shape.max_seq);
  ev->reference_.emplace(ev->weights_, trial_tokens(ev->weights_.shape.vocab, end, options.seed),
                         ev->checked_);
  if (!ev->reference_->load(ev->options_, &why))
    return fail(why, why.find("GPU reference") != std::string::npos);
  return ev;
}

std::vector<int> TrialEvaluator::timed_positions() const {
  if (options_.objective.empty()) return {options_.timed_position};
  return objective_positions(options_.objective);
}

json TrialEvaluator::identity() const {
  return {{"model", weights_.shape.name},
          {"target", target_.name},
          {"device", options_.device},
          {"seed", options_.seed},
          {"ir_version", ms_abi::kAbiVersion}};
}

std::string trial_schedule_id(const schedule::ScheduleConfig& config, const std::string& model,
                              uint64_t seed, const std::string& target, const std::string& device,
                              int timed_position, const Objective& objective) {
  // The build identity (ABI version + kernel -D options) is a function of the config, so the
  // canonical config, the model (and its weight seed) and the target identify the trial.
  // A trial timed at another position than 0, or over an objective, is another trial (ids at
  // position 0 without one are unchanged).
  const std::string at = timed_position != 0 ? "|pos" + std::to_string(timed_position) : "";
  const std::string over = objective.empty() ? "" : "|obj" + objective_text(objective);
  return schedule::hash_hex(schedule::canonical_string(config) + "|" + model + "#" +
                            std::to_string(seed) + "|" + target + "|abi" +
                            std::to_string(ms_abi::kAbiVersion) + "|" + device + at + over);
}

namespace {

// The floor of an objective: the weighted means of the per-position floor_us,
// floor_datasheet_us and bytes_min (floor_us is bytes_min over one bandwidth, so the mean floor
// is the mean bytes over it). *entries gets one verdict "objective" entry per position, with no
// latency yet.
Floor objective_floor(const Objective& objective, const ModelShape& shape,
                      const schedule::GpuTarget& target, json* entries) {
  std::vector<double> floor_us, datasheet_us, bytes;
  Floor mean;
  *entries = json::array();
  for (const ObjectiveTerm& t : objective) {
    const Floor f = floor_for(shape, target, t.position);
    floor_us.push_back(f.floor_us);
    datasheet_us.push_back(f.floor_datasheet_us);
    bytes.push_back(static_cast<double>(f.bytes_min));
    mean.measured_bandwidth = f.measured_bandwidth;
    entries->push_back({{"position", t.position},
                        {"weight", t.weight},
                        {"latency_us", nullptr},
                        {"latency_p90_us", 0.0},
                        {"latency_spread_us", 0.0},
                        {"floor_us", f.floor_us},
                        {"floor_datasheet_us", f.floor_datasheet_us},
                        {"bytes_min", f.bytes_min}});
  }
  mean.floor_us = weighted_mean(objective, floor_us);
  mean.floor_datasheet_us = weighted_mean(objective, datasheet_us);
  mean.bytes_min = static_cast<uint64_t>(std::llround(weighted_mean(objective, bytes)));
  return mean;
}

// The floor guard at each objective position: a latency below its position's floor is withheld
// there (null, with a note). False when one was, so the verdict gets no latency either.
bool withhold_below_floor(Verdict* v) {
  if (!v->objective.is_array()) return true;
  bool ok = true;
  for (json& e : v->objective) {
    if (!e["latency_us"].is_number()) continue;
    const double latency = e["latency_us"].get<double>(), floor = e["floor_us"].get<double>();
    if (latency >= floor) continue;
    v->notes.push_back("latency " + std::to_string(latency) + " us at position " +
                       std::to_string(e["position"].get<int>()) + " is below its floor " +
                       std::to_string(floor) + " us: withheld (a timing or accounting error)");
    e["latency_us"] = nullptr;
    ok = false;
  }
  return ok;
}

// The verdict's bottleneck class (eval/bottleneck.h); the cost model gives the program's
// dependent stages, which only a correct trial with a latency needs.
json bottleneck_of(const Verdict& v, const schedule::Program& program, const ModelShape& shape,
                   const schedule::GpuTarget& target) {
  double stages = 0.0;
  if (v.correct && v.latency_us)
    stages = schedule::predict(program, shape, target, v.timed_position, v.floor_us)
                 .critical_path_stages;
  return classify_verdict(v, stages, target.num_sms);
}
}  // namespace

std::string TrialEvaluator::schedule_id(const schedule::ScheduleConfig& config) const {
  return trial_schedule_id(config, weights_.shape.name, options_.seed, target_.name,
                           options_.device, options_.timed_position, options_.objective);
}

Verdict TrialEvaluator::evaluate(const schedule::ScheduleConfig& config) {
  const auto t0 = Clock::now();
  const PreparedProgram prepared = prepare_program(weights_.shape, target_, config);
  json breakdown = {{"lower", prepared.lower_ms}};
  if (!prepared.program) {
    Verdict v;
    v.model = weights_.shape.name;
    v.target = target_.name;
    v.device = options_.device;
    v.schedule_id = schedule_id(config);
    if (!options_.objective.empty()) {
      v.timed_position = timed_positions().front();
      objective_floor(options_.objective, weights_.shape, target_, &v.objective);
    }
    v.status = "rejected";
    v.rejected_reason = "lowering";
    v.diagnostics = json::array({{{"rule", "lowering"}, {"message", prepared.error}}});
    v.notes.push_back(prepared.error);
    v.breakdown_ms = std::move(breakdown);
    v.breakdown_ms["total"] = ms_since(t0);
    return v;
  }
  breakdown["validate"] = prepared.validate_ms;
  Verdict v = judge(*prepared.program, prepared.report, schedule_id(config), std::move(breakdown));
  v.bottleneck = bottleneck_of(v, *prepared.program, weights_.shape, target_);
  v.breakdown_ms["total"] = ms_since(t0);
  return v;
}

bool TrialEvaluator::check_program(const schedule::Program& program, std::string* error) const {
  return schedule::check_program_fits_model(program, weights_.shape, target_, error);
}

Verdict TrialEvaluator::evaluate_program(const schedule::Program& program,
                                         const std::string& schedule_id) {
  const auto t0 = Clock::now();
  std::string error;
  if (!check_program(program, &error)) {
    Verdict v;
    v.model = weights_.shape.name;
    v.target = target_.name;
    v.device = options_.device;
    v.schedule_id = schedule_id;
    v.status = "rejected";
    v.rejected_reason = "program";
    v.diagnostics = json::array({{{"rule", "program"}, {"message", error}}});
    v.notes.push_back(error);
    v.breakdown_ms = {{"total", ms_since(t0)}};
    return v;
  }
  const schedule::ValidationReport report = schedule::validate(program, target_);
  Verdict v = judge(program, report, schedule_id, {{"lower", 0.0}, {"validate", ms_since(t0)}});
  v.bottleneck = bottleneck_of(v, program, weights_.shape, target_);
  v.breakdown_ms["total"] = ms_since(t0);
  return v;
}

Verdict TrialEvaluator::judge(const schedule::Program& program,
                              const schedule::ValidationReport& report,
                              const std::string& schedule_id, json breakdown) {
  const ModelShape& shape = weights_.shape;
  Verdict v;
  v.breakdown_ms = std::move(breakdown);
  v.model = shape.name;
  v.target = target_.name;
  v.device = options_.device;
  v.schedule_id = schedule_id;
  v.tasks = program.tasks.size();
  v.reference = reference_->info();
  const Floor floor = options_.objective.empty()
                          ? floor_for(shape, target_, options_.timed_position)
                          : objective_floor(options_.objective, shape, target_, &v.objective);
  v.weight_bytes = static_cast<uint64_t>(shape.weight_bytes());
  v.bytes_min = floor.bytes_min;
  v.timed_position = timed_positions().front();
  v.floor_us = floor.floor_us;
  v.floor_datasheet_us = floor.floor_datasheet_us;
  if (!target_mismatch_.empty()) v.notes.push_back(target_mismatch_);
  if (!floor.measured_bandwidth)
    v.notes.push_back("floor_us uses the datasheet bandwidth of " + target_.name +
                      " (run `megasched doctor --measure` on the GPU for the measured figure)");

  // 1. Nothing unsafe runs.
  if (!report.ok()) {
    v.rejected_reason = report.rules();
    v.diagnostics = json::array();
    for (size_t i = 0; i < report.diagnostics.size() && i < kMaxDiagnosticsInVerdict; ++i)
      v.diagnostics.push_back(schedule::to_json(report.diagnostics[i]));
    if (report.diagnostics.size() > kMaxDiagnosticsInVerdict)
      v.notes.push_back(std::to_string(report.diagnostics.size() - kMaxDiagnosticsInVerdict) +
                        " more diagnostics not listed; run `megasched validate` for all of them");
    if (!options_.skip_validation) {
      v.status = "rejected";
      return v;
    }
    v.notes.push_back("validation failed but was skipped (test-only switch)");
  }
  v.valid = report.ok();

  // 2. Program correctness: the ReferenceVm against the reference (every checked window on a
  // toy-sized model, the timed position on a larger one).
  v.positions_checked = checked_;
  v.argmax_match = true;
  // 3. The latency: measured on the GPU (after the kernel's own correctness pass) or predicted.
  const std::optional<double> latency = check_and_measure(program, report.ok(), floor, &v);
  if (!latency) return v;
  v.correct = true;
  v.status = "ok";

  // 4. The floor guard: a latency below the floor is physically impossible and is withheld, at
  // each objective position and for their mean.
  const bool positions_above_floor = withhold_below_floor(&v);
  if (!positions_above_floor || *latency < floor.floor_us) {
    if (*latency < floor.floor_us)
      v.notes.push_back("latency " + std::to_string(*latency) + " us is below the floor " +
                        std::to_string(floor.floor_us) +
                        " us: withheld (a timing or accounting error)");
    v.latency_kind.clear();
    return v;
  }
  v.latency_us = latency;
  v.pct_of_floor = 100.0 * floor.floor_us / *latency;
  if (floor.floor_datasheet_us > 0)
    v.pct_of_datasheet = 100.0 * floor.floor_datasheet_us / *latency;
  // The fastest correct measurement at each timed position bounds later trials' timing there
  // (EvaluatorOptions::stop_slower).
  if (v.latency_kind == "measured-gpu") {
    const auto faster = [&](int position, double us) {
      auto [it, fresh] = fastest_us_.emplace(position, us);
      if (!fresh) it->second = std::min(it->second, us);
    };
    if (options_.objective.empty()) {
      faster(options_.timed_position, *latency);
    } else {
      for (size_t i = 0; i < options_.objective.size() && i < v.objective.size(); ++i)
        if (v.objective[i].contains("latency_us") && v.objective[i]["latency_us"].is_number())
          faster(options_.objective[i].position, v.objective[i]["latency_us"].get<double>());
    }
  }
  return v;
}

std::optional<double> TrialEvaluator::check_and_measure(const schedule::Program& program,
                                                        bool valid, const Floor& floor,
                                                        Verdict* v) {
  const bool overlap = valid && options_.device == "gpu" && reference_->sampled();
  if (!overlap) {
    const auto t_ref = Clock::now();
    const bool program_ok = !valid || reference_->check_reference_vm(program, timed_positions(), v);
    v->breakdown_ms["reference_check"] = ms_since(t_ref);
    if (!program_ok) {
      v->status = "incorrect";
      return std::nullopt;
    }
    return TrialTimer(options_, weights_, target_, *reference_, &fastest_us_)
        .time(program, floor, v);
  }
  // The sampled check is one ReferenceVm step of a large model on one CPU core (most of a
  // second); the GPU phases do not depend on it, so the two run at once. The verdict is the one
  // the sequence gives: the ReferenceVm's checks and notes first, incorrect (with no latency) when
  // either check fails.
  Verdict ref_v;
  ref_v.argmax_match = true;
  auto ref = std::async(std::launch::async, [&] {
    const auto t_ref = Clock::now();
    const bool ok = reference_->check_reference_vm(program, timed_positions(), &ref_v);
    return std::make_pair(ok, ms_since(t_ref));
  });
  Verdict out = *v;
  const std::optional<double> latency =
      TrialTimer(options_, weights_, target_, *reference_, &fastest_us_).time(program, floor, &out);
  const auto [program_ok, ref_ms] = ref.get();
  json checks = v->checks;
  for (const json& c : ref_v.checks) checks.push_back(c);
  for (size_t i = v->checks.size(); i < out.checks.size(); ++i) checks.push_back(out.checks[i]);
  out.checks = std::move(checks);
  std::vector<std::string> notes = v->notes;
  notes.insert(notes.end(), ref_v.notes.begin(), ref_v.notes.end());
  notes.insert(notes.end(), out.notes.begin() + static_cast<std::ptrdiff_t>(v->notes.size()),
               out.notes.end());
  out.notes = std::move(notes);
  out.max_abs_err = std::max(out.max_abs_err, ref_v.max_abs_err);
  out.rel_err = std::max(out.rel_err, ref_v.rel_err);
  cap_errors(&out);
  out.argmax_match = out.argmax_match && ref_v.argmax_match;
  out.breakdown_ms["reference_check"] = ref_ms;  // beside the GPU phases, not before them
  out.reference["reference_vm_beside_gpu"] = true;
  if (!program_ok) {
    out.status = "incorrect";
    out.samples_us.clear();
    out.latency_kind.clear();
    out.latency_p90_us = out.latency_spread_us = 0.0;
    out.speedup_vs_baseline.reset();
    out.baseline_kind.clear();
    out.baseline_us.reset();
    if (out.objective.is_array())
      for (json& e : out.objective) e["latency_us"] = nullptr;
  }
  *v = std::move(out);
  return program_ok ? latency : std::nullopt;
}

}  // namespace megasched::eval
