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

/// A non-finite output's error is infinite, which JSON cannot carry (it would print null and break
/// the verdict schema): the largest double stands for it, with a note saying why.
void cap_errors(Verdict* v) {
  if (std::isfinite(v->max_abs_err) && std::isfinite(v->rel_err)) return;
  v->max_abs_err =
      std::isfinite(v->max_abs_err) ? v->max_abs_err : std::numeric_limits<double>::max();
  v->rel_err = std::isfinite(v->rel_err) ? v->rel_err : std::numeric_limits<double>::max();
  const std::string note = "the output has non-finite values: the errors show the largest double";
  if (std::find(v->notes.begin(), v->notes.end(), note) == v->notes.end()) v->notes.push_back(note);
}

using Clock = std::chrono::steady_clock;

}  // namespace

std::optional<GpuTarget> resolve_target(const std::string& gpu, std::string* error) {
  if (gpu != "auto") return schedule::find_target_named(gpu, error);
  std::optional<GpuTarget> live = live_target(error);
  if (!live && error)
    *error += " (--gpu auto reads the GPU of this machine; name a target instead, e.g. --gpu h100)";
  return live;
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
  if (options.reference != "auto" && options.reference != "cpu" && options.reference != "gpu")
    return fail("unknown reference engine '" + options.reference + "'; use auto, cpu or gpu");
  std::unique_ptr<TrialEvaluator> ev(new TrialEvaluator());
  ev->options_ = options;
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
  auto weights = schedule::load_weights(options.model, options.seed, &why);
  if (!weights) return fail(why);
  ev->weights_ = std::move(*weights);
  // The timed position (every objective position) is always checked.
  ev->checked_ = ev->options_.positions;
  ev->checked_.insert(ev->checked_.end(), timed.begin(), timed.end());
  std::sort(ev->checked_.begin(), ev->checked_.end());
  ev->checked_.erase(std::unique(ev->checked_.begin(), ev->checked_.end()), ev->checked_.end());
  const int end = std::min(ev->checked_.back() + options.check_steps, ev->weights_.shape.max_seq);
  ev->tokens_ = trial_tokens(ev->weights_.shape.vocab, end, options.seed);
  if (!ev->load_reference(&why)) return fail(why, why.find("GPU reference") != std::string::npos);
  return ev;
}

bool TrialEvaluator::load_reference(std::string* error) {
  const auto t0 = Clock::now();
  const ModelShape& shape = weights_.shape;
  const bool gpu =
      options_.reference == "gpu" || (options_.reference == "auto" && options_.device == "gpu");
  const std::string dir = options_.reference_cache_dir.empty()     ? default_reference_cache_dir()
                          : options_.reference_cache_dir == "none" ? ""
                                                                   : options_.reference_cache_dir;
  const std::string weights_id = weights_identity(weights_);
  std::vector<WindowOrigin> origins;
  auto make_engine = [&](std::string* why) -> std::unique_ptr<ReferenceForward> {
    if (!gpu) return std::make_unique<CpuEagerForward>(weights_);
    auto engine = make_gpu_reference(weights_, why);
    if (!engine) *why = "the GPU reference cannot run: " + *why;
    return engine;
  };
  // A line when the pass has run 2 s, then every 5 s: the CPU eager forward of `small` to
  // position 4099 takes minutes, once per cache directory.
  auto last_line = t0 - std::chrono::seconds(3);
  WindowProgress progress;
  if (options_.progress)
    progress = [&](int done, int total) {
      const auto now = Clock::now();
      if (now - last_line < std::chrono::seconds(5) && done < total) return;
      if (done == total && last_line == t0 - std::chrono::seconds(3)) return;  // never slow
      last_line = now;
      char line[256];
      std::snprintf(line, sizeof line,
                    "reference windows (%s eager forward, once; then cached in %s): position "
                    "%d of %d, %.0f s",
                    gpu ? "GPU" : "CPU", dir.empty() ? "no cache" : dir.c_str(), done, total,
                    std::chrono::duration<double>(now - t0).count());
      options_.progress(line);
    };
  auto windows = reference_windows(weights_, weights_id, tokens_, checked_, options_.check_steps,
                                   ReferenceCache(dir), make_engine, &origins, error, progress);
  if (!windows) return false;
  windows_ = std::move(*windows);
  json listed = json::array();
  for (const WindowOrigin& o : origins)
    listed.push_back(
        {{"start", o.start}, {"lookup", o.lookup}, {"engine", o.engine}, {"note", o.note}});
  reference_info_ = {
      {"steps", options_.check_steps},
      {"weights_id", weights_id},
      {"cache_dir", dir},
      {"engine_on_miss", gpu ? "gpu-eager" : "cpu-eager"},
      {"reference_vm",
       weights_.layout.total_elements <= options_.reference_vm_walk_elements ? "walk" : "sampled"},
      {"windows", listed}};
  if (!cross_check_gpu_window(error)) return false;
  for (const ReferenceWindow& w : windows_)
    for (size_t i = 0; i < w.logits.size(); ++i)
      // The reference itself is not finite: the model (its constants or weights) is at fault, and
      // every schedule would be blamed for it.
      if (!std::all_of(w.logits[i].begin(), w.logits[i].end(),
                       [](float x) { return std::isfinite(x); })) {
        *error = "model " + shape.name + ": the " + w.engine +
                 " forward gives non-finite logits at position " +
                 std::to_string(w.start + static_cast<int>(i)) +
                 " (check its rope_theta, rms_norm_eps and weights)";
        return false;
      }
  reference_info_["load_ms"] = ms_since(t0);
  return true;
}

bool TrialEvaluator::cross_check_gpu_window(std::string* error) {
  // The GPU engine's window at position 0, when it just computed one, against the CPU eager forward
  // (a few CPU steps): a GPU reference that disagrees is never used.
  const ReferenceWindow& w = windows_.front();
  if (w.start != 0 || w.engine != "gpu-eager") return true;
  for (const json& o : reference_info_["windows"])
    if (o["start"] == 0 && o["lookup"] == "hit") return true;
  CpuEagerForward cpu(weights_);
  const ReferenceWindow c =
      compute_windows(cpu, weights_.shape, tokens_, {0}, static_cast<int>(w.logits.size()))[0];
  json per = json::array();
  for (size_t i = 0; i < w.logits.size(); ++i) {
    const Comparison cmp = compare_logits(w.logits[i], c.logits[i], weights_.shape.dtype);
    per.push_back({{"position", i}, {"rel_err", cmp.rel_err}, {"pass", cmp.pass}});
    if (cmp.pass) continue;
    *error = "the GPU reference differs from the CPU eager forward at position " +
             std::to_string(i) + " (rel_err " + schedule::fmt("%.4g", cmp.rel_err) +
             "): the reference is not trusted; rerun with a CPU reference or report it";
    return false;
  }
  reference_info_["cross_check_cpu"] = per;
  return true;
}

std::vector<int> TrialEvaluator::timed_positions() const {
  if (options_.objective.empty()) return {options_.timed_position};
  return objective_positions(options_.objective);
}

const ReferenceWindow* TrialEvaluator::window_at(int position) const {
  for (const ReferenceWindow& w : windows_)
    if (position >= w.start && position < w.start + static_cast<int>(w.logits.size())) return &w;
  return nullptr;
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
  v.reference = reference_info_;
  const Floor floor = options_.objective.empty()
                          ? floor_for(shape, target_, options_.timed_position)
                          : objective_floor(options_.objective, shape, target_, &v.objective);
  v.weight_bytes = static_cast<uint64_t>(shape.weight_bytes());
  v.bytes_min = floor.bytes_min;
  v.timed_position = timed_positions().front();
  v.floor_us = floor.floor_us;
  v.floor_datasheet_us = floor.floor_datasheet_us;
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
  return v;
}

std::optional<double> TrialEvaluator::check_and_measure(const schedule::Program& program,
                                                        bool valid, const Floor& floor,
                                                        Verdict* v) {
  const bool overlap =
      valid && options_.device == "gpu" && reference_info_.value("reference_vm", "") == "sampled";
  if (!overlap) {
    const auto t_ref = Clock::now();
    const bool program_ok = !valid || check_on_reference_vm(program, v);
    v->breakdown_ms["reference_check"] = ms_since(t_ref);
    if (!program_ok) {
      v->status = "incorrect";
      return std::nullopt;
    }
    return time_trial(program, floor, v);
  }
  // The sampled check is one ReferenceVm step of a large model on one CPU core (most of a
  // second); the GPU phases do not depend on it, so the two run at once. The verdict is the one
  // the sequence gives: the ReferenceVm's checks and notes first, incorrect (with no latency) when
  // either check fails.
  Verdict ref_v;
  ref_v.argmax_match = true;
  auto ref = std::async(std::launch::async, [&] {
    const auto t_ref = Clock::now();
    const bool ok = check_on_reference_vm(program, &ref_v);
    return std::make_pair(ok, ms_since(t_ref));
  });
  Verdict out = *v;
  const std::optional<double> latency = time_trial(program, floor, &out);
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

bool TrialEvaluator::record_reference_vm_check(int position, int start,
                                               const vm::ReferenceVm::StepResult& step,
                                               const std::vector<float>& ref, Verdict* v) {
  const Comparison c = compare_logits(step.logits, ref, weights_.shape.dtype);
  v->max_abs_err = std::max(v->max_abs_err, c.max_abs_err);
  v->rel_err = std::max(v->rel_err, c.rel_err);
  if (!c.finite || std::isnan(c.rel_err)) v->rel_err = v->max_abs_err = INFINITY;
  cap_errors(v);
  v->argmax_match = v->argmax_match && c.argmax_match;
  const bool argmax_ok = step.argmax == argmax(step.logits);
  v->checks.push_back({{"path", "reference_vm"},
                       {"position", position},
                       {"window_start", start},
                       {"rel_err", std::isfinite(c.rel_err) ? c.rel_err : 1e300},
                       {"max_abs_err", std::isfinite(c.max_abs_err) ? c.max_abs_err : 1e300},
                       {"argmax_match", c.argmax_match},
                       {"worst_logit", worst_logit_json(c)},
                       {"pass", c.pass && argmax_ok}});
  if (!argmax_ok)
    v->notes.push_back("program argmax task wrote " + std::to_string(step.argmax) +
                       " at position " + std::to_string(position) + " but the logits' argmax is " +
                       std::to_string(argmax(step.logits)));
  if (!c.pass)
    v->notes.push_back("ReferenceVm differs from the reference at position " +
                       std::to_string(position) + ": rel_err " + std::to_string(c.rel_err) +
                       ", max_abs_err " + std::to_string(c.max_abs_err) +
                       (c.argmax_match ? "" : ", argmax differs"));
  return c.pass && argmax_ok;
}

bool TrialEvaluator::check_on_reference_vm(const schedule::Program& program, Verdict* v) {
  vm::ReferenceVm ref(program, weights_);
  // Sampled: the timed position alone (each objective position), from the reference KV cache
  // (a large model's ReferenceVm step takes most of a second). Loading a later position's KV
  // overwrites every row the earlier step read or wrote.
  if (reference_info_.value("reference_vm", "") == "sampled") {
    bool ok = true;
    for (const int p : timed_positions()) {
      const ReferenceWindow* w = window_at(p);
      if (!ref.load_kv(w->kv)) {
        v->notes.push_back("the reference KV cache does not fit the program's model");
        return false;
      }
      const auto step = ref.step(tokens_[static_cast<size_t>(p)], p);
      if (!step.completed) {
        v->notes.push_back("ReferenceVm could not finish position " + std::to_string(p) + ": " +
                           step.stuck);
        return false;
      }
      ok = record_reference_vm_check(p, w->start, step,
                                     w->logits[static_cast<size_t>(p - w->start)], v) &&
           ok;
    }
    return ok;
  }
  // Walk: every position from 0 to the last window position, its own KV cache throughout.
  bool ok = true;
  const int end = windows_.back().start + static_cast<int>(windows_.back().logits.size());
  for (int p = 0; p < end; ++p) {
    const auto step = ref.step(tokens_[static_cast<size_t>(p)], p);
    if (!step.completed) {
      v->notes.push_back("ReferenceVm could not finish position " + std::to_string(p) + ": " +
                         step.stuck);
      return false;
    }
    const ReferenceWindow* w = window_at(p);
    if (w)
      ok = record_reference_vm_check(p, 0, step, w->logits[static_cast<size_t>(p - w->start)], v) &&
           ok;
  }
  return ok;
}

std::optional<double> TrialEvaluator::time_trial(const schedule::Program& program,
                                                 const Floor& floor, Verdict* v) {
  if (!options_.objective.empty()) return time_objective(program, v);
  return options_.device == "gpu" ? measure_on_gpu(program, options_.timed_position, v)
                                  : predict_latency(program, options_.timed_position, floor, v);
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

std::optional<double> TrialEvaluator::time_objective(const schedule::Program& program, Verdict* v) {
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
        gpu ? measure_on_gpu(program, p, &at, &medians)
            : predict_latency(program, p, floor_for(weights_.shape, target_, p), &at);
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

std::optional<double> TrialEvaluator::measure_on_gpu(const schedule::Program& program, int position,
                                                     Verdict* v,
                                                     std::vector<BaselineMedian>* medians_out) {
  GpuTrialOptions gpu_options = options_.gpu_options;
  gpu_options.timed_position = position;  // the floor refers to this position
  const vm::CubinCacheStats before = vm::cubin_cache_stats();
  const GpuTrialResult g = run_gpu_trial(program, weights_, tokens_, windows_, gpu_options);
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
  for (int p : checked_) {
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

std::optional<double> TrialEvaluator::predict_latency(const schedule::Program& program,
                                                      int position, const Floor& floor,
                                                      Verdict* v) {
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
