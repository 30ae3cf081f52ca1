#include "eval/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "eval/bottleneck.h"
#include "eval/eager.h"
#include "eval/oracle.h"
#include "eval/prepare.h"
#include "eval/roofline.h"
#include "eval/timing.h"
#include "schedule/checkpoint.h"
#include "schedule/cost_model.h"
#include "schedule/validate.h"
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

std::string preset_names() {
  std::string s;
  for (const auto& p : schedule::presets()) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

}  // namespace

std::optional<ModelShape> resolve_shape(const std::string& model, std::string* error) {
  if (auto p = schedule::find_preset(model)) return p;
  if (std::filesystem::is_directory(model)) return schedule::read_checkpoint_config(model, error);
  std::vector<std::string> names;
  for (const auto& p : schedule::presets()) names.push_back(p.name);
  const std::string near = schedule::nearest(model, names);
  if (error)
    *error = "unknown model '" + model + "'" +
             (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; use a preset (" +
             preset_names() +
             ") or a directory with a Hugging Face checkpoint (config.json + *.safetensors)";
  return std::nullopt;
}

std::optional<schedule::Weights> load_weights(const std::string& model, uint64_t seed,
                                              std::string* error) {
  if (auto p = schedule::find_preset(model)) return schedule::generate_weights(*p, seed);
  if (!resolve_shape(model, error)) return std::nullopt;
  return schedule::load_checkpoint(model, error);
}

std::optional<GpuTarget> resolve_target(const std::string& gpu, std::string* error) {
  if (gpu == "auto") {
    std::optional<GpuTarget> live = live_target(error);
    if (!live && error)
      *error +=
          " (--gpu auto reads the GPU of this machine; name a target instead, e.g. --gpu h100)";
    return live;
  }
  if (auto t = schedule::find_target(gpu)) return t;
  std::vector<std::string> names;
  std::string all;
  for (const auto& t : schedule::target_registry()) {
    names.push_back(t.name);
    all += (all.empty() ? "" : ", ") + t.name;
  }
  const std::string near = schedule::nearest(gpu, names);
  if (error)
    *error = "unknown GPU target '" + gpu + "'" +
             (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; known: " + all +
             ", or auto (the live device)";
  return std::nullopt;
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
  std::unique_ptr<TrialEvaluator> ev(new TrialEvaluator());
  ev->options_ = options;
  std::sort(ev->options_.positions.begin(), ev->options_.positions.end());
  ev->options_.positions.erase(
      std::unique(ev->options_.positions.begin(), ev->options_.positions.end()),
      ev->options_.positions.end());
  std::string why;
  if (options.device == "gpu" && !gpu_available(&why))
    return fail("--device gpu: " + why + "; use --device cpu for a predicted latency", true);
  auto shape = resolve_shape(options.model, &why);
  if (!shape) return fail(why);
  const int last = std::max(ev->options_.positions.back(), options.timed_position);
  if (ev->options_.positions.front() < 0 || last >= shape->max_seq)
    return fail("positions must lie in [0, " + std::to_string(shape->max_seq - 1) + "] for model " +
                shape->name);
  auto target = resolve_target(options.gpu, &why);
  if (!target) return fail(why, options.gpu == "auto");
  ev->target_ = *target;
  auto weights = load_weights(options.model, options.seed, &why);
  if (!weights) return fail(why);
  ev->weights_ = std::move(*weights);
  const int max_pos = ev->options_.positions.back();
  ev->tokens_ = trial_tokens(ev->weights_.shape.vocab, max_pos + 1, options.seed);
  EagerModel eager(ev->weights_);
  size_t next = 0;
  for (int p = 0; p <= max_pos; ++p) {
    auto logits = eager.step(ev->tokens_[static_cast<size_t>(p)], p);
    // The reference itself is not finite: the model (its constants or weights) is at fault, and
    // every schedule would be blamed for it.
    if (!std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }))
      return fail("model " + ev->weights_.shape.name +
                  ": the eager forward gives non-finite logits at position " + std::to_string(p) +
                  " (check its rope_theta, rms_norm_eps and weights)");
    if (next < ev->options_.positions.size() && ev->options_.positions[next] == p) {
      ev->reference_.push_back(std::move(logits));
      ++next;
    }
  }
  return ev;
}

json TrialEvaluator::identity() const {
  return {{"model", weights_.shape.name},
          {"target", target_.name},
          {"device", options_.device},
          {"seed", options_.seed},
          {"ir_version", ms_abi::kAbiVersion}};
}

std::string TrialEvaluator::schedule_id(const schedule::ScheduleConfig& config) const {
  // The build identity (ABI version + kernel -D options) is a function of the config, so the
  // canonical config, the model (and its weight seed) and the target identify the trial.
  // A trial timed at another position than 0 is another trial (ids at position 0 are unchanged).
  const std::string at =
      options_.timed_position != 0 ? "|pos" + std::to_string(options_.timed_position) : "";
  return schedule::hash_hex(schedule::canonical_string(config) + "|" + weights_.shape.name + "#" +
                            std::to_string(options_.seed) + "|" + target_.name + "|abi" +
                            std::to_string(ms_abi::kAbiVersion) + "|" + options_.device + at);
}

namespace {
using Clock = std::chrono::steady_clock;

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
  const Floor floor = floor_for(shape, target_, options_.timed_position);
  v.weight_bytes = static_cast<uint64_t>(shape.weight_bytes());
  v.bytes_min = floor.bytes_min;
  v.timed_position = options_.timed_position;
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

  // 2. Program correctness: the ReferenceVm against the eager forward at every checked position.
  v.positions_checked = options_.positions;
  v.argmax_match = true;
  const auto t_ref = Clock::now();
  const bool program_ok = !report.ok() || check_on_reference_vm(program, &v);
  v.breakdown_ms["reference_check"] = ms_since(t_ref);
  if (!program_ok) {
    v.status = "incorrect";
    return v;
  }

  // 3. The latency: measured on the GPU (after the kernel's own correctness pass) or predicted.
  const std::optional<double> latency =
      options_.device == "gpu" ? measure_on_gpu(program, &v) : predict_latency(program, floor, &v);
  if (!latency) return v;
  v.correct = true;
  v.status = "ok";

  // 4. The floor guard: a latency below the floor is physically impossible and is withheld.
  if (*latency < floor.floor_us) {
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

bool TrialEvaluator::check_on_reference_vm(const schedule::Program& program, Verdict* v) {
  const ModelShape& shape = weights_.shape;
  bool ok = true;
  vm::ReferenceVm ref(program, weights_);
  size_t next = 0;
  for (int p = 0; p <= options_.positions.back(); ++p) {
    auto step = ref.step(tokens_[static_cast<size_t>(p)], p);
    if (!step.completed) {
      v->notes.push_back("ReferenceVm could not finish position " + std::to_string(p) + ": " +
                         step.stuck);
      return false;
    }
    if (options_.positions[next] != p) continue;
    const Comparison c = compare_logits(step.logits, reference_[next], shape.dtype);
    v->max_abs_err = std::max(v->max_abs_err, c.max_abs_err);
    v->rel_err = std::max(v->rel_err, c.rel_err);
    if (!c.finite || std::isnan(c.rel_err)) v->rel_err = v->max_abs_err = INFINITY;
    cap_errors(v);
    v->argmax_match = v->argmax_match && c.argmax_match;
    if (step.argmax != argmax(step.logits)) {
      ok = false;
      v->notes.push_back("program argmax task wrote " + std::to_string(step.argmax) +
                         " at position " + std::to_string(p) + " but the logits' argmax is " +
                         std::to_string(argmax(step.logits)));
    }
    if (!c.pass) {
      ok = false;
      v->notes.push_back("ReferenceVm differs from eager at position " + std::to_string(p) +
                         ": rel_err " + std::to_string(c.rel_err) + ", max_abs_err " +
                         std::to_string(c.max_abs_err) +
                         (c.argmax_match ? "" : ", argmax differs"));
    }
    ++next;
  }
  return ok;
}

std::optional<double> TrialEvaluator::measure_on_gpu(const schedule::Program& program, Verdict* v) {
  GpuTrialOptions gpu_options = options_.gpu_options;
  gpu_options.timed_position = options_.timed_position;  // the floor refers to this position
  const GpuTrialResult g =
      run_gpu_trial(program, weights_, tokens_, reference_, options_.positions, gpu_options);
  for (const auto& [phase, ms] : g.phases_ms.items()) v->breakdown_ms[phase] = ms;
  v->kernel = g.kernel;
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
  const SampleStats s = sample_stats(g.samples_us);
  v->samples_us = g.samples_us;
  v->latency_p90_us = s.p90;
  v->latency_spread_us = s.p90 - s.p10;
  v->latency_kind = "measured-gpu";
  if (!g.baseline_samples_us.empty()) {
    const double base = sample_stats(g.baseline_samples_us).median;
    v->speedup_vs_baseline = base / s.median;
    v->notes.push_back("cuBLAS CUDA-graph baseline median " + std::to_string(base) +
                       " us (same run)");
  }
  return s.median;
}

std::optional<double> TrialEvaluator::predict_latency(const schedule::Program& program,
                                                      const Floor& floor, Verdict* v) {
  const auto t0 = Clock::now();
  const auto est =
      schedule::predict(program, weights_.shape, target_, options_.timed_position, floor.floor_us);
  v->breakdown_ms["predict"] = ms_since(t0);
  if (!est.completed) {
    v->status = "incorrect";
    v->notes.push_back("the cost model's simulation did not drain every queue");
    return std::nullopt;
  }
  v->latency_kind = "predicted";
  v->notes.push_back("latency predicted by the cost model for " + target_.name + " at position " +
                     std::to_string(options_.timed_position) + " (no GPU run): " +
                     std::to_string(static_cast<int>(est.critical_path_stages)) +
                     " dependent stages");
  return est.latency_us;
}

}  // namespace megasched::eval
