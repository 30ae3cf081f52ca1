#include "harness/verbs.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "eval/device.h"
#include "eval/evaluate.h"
#include "eval/objective.h"
#include "flywheel/corpus.h"
#include "flywheel/plan_report.h"
#include "flywheel/report.h"
#include "flywheel/report_render.h"
#include "flywheel/results.h"
#include "harness/cli_util.h"
#include "harness/trial_flags.h"
#include "schedule/build_fit.h"
#include "schedule/lookup.h"
#include "schedule/lower.h"
#include "schedule/search.h"
#include "schedule/validate.h"
#include "search/mpi_pool.h"
#include "search/worker_evaluator.h"
#include "search/worker_pool.h"
#include "vm/nvrtc_build.h"

namespace megasched::harness {
namespace {

VerbResult failed(int exit_code, const std::string& message) {
  VerbResult r;
  r.exit_code = exit_code;
  r.message = message;
  return r;
}

VerbResult succeeded(nlohmann::json document, int exit_code = kExitOk) {
  VerbResult r;
  r.exit_code = exit_code;
  r.document = std::move(document);
  return r;
}

// Lowers and validates `count` random configs: a summary with every rejected config.
VerbResult validate_random_configs(const schedule::ModelShape& shape,
                                   const schedule::GpuTarget& target, int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int accepted = 0, unlowered = 0;
  double slowest = 0.0, total = 0.0;
  size_t most_tasks = 0;
  nlohmann::json rejected = nlohmann::json::array();
  for (int i = 0; i < count; ++i) {
    const schedule::ScheduleConfig cfg = schedule::random_config(shape, target, rng);
    std::string error;
    const std::optional<schedule::Program> p = schedule::lower(shape, target, cfg, &error);
    if (!p) {
      ++unlowered;
      rejected.push_back({{"config", schedule::to_json(cfg)}, {"lowering", error}});
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    const schedule::ValidationReport r = schedule::validate(*p, target);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    slowest = std::max(slowest, s);
    total += s;
    most_tasks = std::max(most_tasks, p->tasks.size());
    if (r.ok())
      ++accepted;
    else
      rejected.push_back({{"config", schedule::to_json(cfg)}, {"report", schedule::to_json(r)}});
  }
  return succeeded({{"model", shape.name},
                    {"target", target.name},
                    {"configs", count},
                    {"seed", seed},
                    {"accepted", accepted},
                    {"not_lowered", unlowered},
                    {"rejected", rejected},
                    {"most_tasks", most_tasks},
                    {"validate_seconds_total", total},
                    {"validate_seconds_max", slowest}},
                   accepted == count ? kExitOk : kExitFailure);
}

// `validate` of a plan of several buckets: each bucket's config lowered for the model and target
// and validated; the document lists every bucket's verdict (a bucket that does not lower has
// "lowering"), "rules" the rules any bucket broke, exit 0 only when all are safe.
VerbResult validate_plan(const schedule::ModelShape& shape, const schedule::GpuTarget& target,
                         const schedule::Plan& plan) {
  std::string error;
  if (!schedule::check_plan_covers(plan, shape.max_seq, &error))
    return failed(kExitUsage, "the plan does not fit model " + shape.name + ": " + error);
  nlohmann::json buckets = nlohmann::json::array();
  bool all_ok = true;
  std::vector<std::string> rules;
  for (const schedule::PlanBucket& b : plan.buckets) {
    nlohmann::json entry = {{"begin", b.begin}, {"end", schedule::bucket_end(b, shape.max_seq)}};
    const std::optional<schedule::Program> program =
        schedule::lower(shape, target, b.config, &error);
    if (!program) {
      entry.update({{"ok", false}, {"lowering", error}});
      all_ok = false;
      buckets.push_back(entry);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    const schedule::ValidationReport report = schedule::validate(*program, target);
    entry["tasks"] = program->tasks.size();
    entry["validate_seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    entry.update(schedule::to_json(report));
    all_ok = all_ok && report.ok();
    for (const schedule::Diagnostic& d : report.diagnostics)
      if (std::find(rules.begin(), rules.end(), d.rule) == rules.end()) rules.push_back(d.rule);
    buckets.push_back(entry);
  }
  std::string rule_list;
  for (const std::string& r : rules) rule_list += (rule_list.empty() ? "" : ",") + r;
  return succeeded({{"model", shape.name},
                    {"target", target.name},
                    {"ok", all_ok},
                    {"rules", rule_list},
                    {"buckets", buckets}},
                   all_ok ? kExitOk : kExitFailure);
}

}  // namespace

int verdict_exit_code(const eval::Verdict& verdict) {
  return verdict.valid && verdict.correct ? kExitOk : kExitFailure;
}

VerbResult propose_incumbent(const std::string& model, const std::string& gpu,
                             const schedule::ScheduleConfig& incumbent) {
  std::string error;
  auto shape = schedule::resolve_shape(model, &error);
  if (!shape) return failed(kExitUsage, error);
  auto target = eval::resolve_target(gpu, &error);
  if (!target) return failed(target_error_code(gpu), error);  // `auto` without a GPU: exit 3
  std::string fit;
  const bool fits = schedule::config_fits(incumbent, *shape, *target, &fit);
  nlohmann::json out = {
      {"model", shape->name},
      {"target", target->name},
      {"incumbent", schedule::to_json(incumbent)},
      {"incumbent_fits", fits},
      {"search_space", schedule::search_space_json(*shape)},
      {"next",
       "write `incumbent` to a file (megasched propose --model " + shape->name + " --gpu " +
           target->name +
           " --config-only > cfg.json), edit any knob to any listed choice, and run: megasched "
           "evaluate --model " +
           shape->name + " --gpu " + target->name + " --device cpu --config cfg.json"},
  };
  if (!fits) out["incumbent_fit_error"] = fit;
  return succeeded(out);
}

namespace {

/// The megakernel of `program` built by NVRTC for the target's arch, uncached so that ptxas
/// reports its resources: what the GPU would load, known before any device time is spent (a
/// kernel that spills or whose ptxas ignored a setmaxnreg shows here).
nlohmann::json kernel_resources(const schedule::Program& program,
                                const schedule::GpuTarget& target) {
  vm::BuildRequest request = vm::megakernel_request(program, target.sm_arch, "");
  request.cache_dir.clear();  // a fresh build: a cache hit carries no ptxas report
  const vm::BuildResult build = vm::build_cubin(request);
  nlohmann::json k = {{"ok", build.ok},
                      {"arch", vm::arch_name(target.sm_arch)},
                      {"build_key", build.key},
                      {"compile_ms", build.compile_ms},
                      {"defines", request.defines}};
  if (!build.ok) {
    k["error"] = build.error.substr(0, build.error.find('\n'));
    return k;
  }
  // The entry and the device functions it calls (the streamed GEMV's spills are its own).
  const vm::KernelResources r = vm::megakernel_resources(build.kernels);
  if (r.name.empty()) {
    k["note"] = "ptxas reported no resources for ms_megakernel";
    return k;
  }
  k["registers"] = r.registers;
  k["spill_store_bytes"] = r.spill_store_bytes;
  k["spill_load_bytes"] = r.spill_load_bytes;
  k["stack_bytes"] = r.stack_bytes;
  k["smem_static_bytes"] = r.smem_static_bytes;
  const schedule::FallbackGemv fallback = schedule::fallback_gemv(program);
  if (fallback.tasks > 0)
    k["fallback_gemv"] = {{"tasks", fallback.tasks}, {"first", fallback.first}};
  if (r.spill_store_bytes > 0 || r.spill_load_bytes > 0) {
    k["spills_by_function"] = vm::spills_json(build.kernels);
    std::string note =
        "the kernel spills registers to local memory, and every task of the step pays for "
        "it (fewer threads per block leave more registers per thread; a smaller "
        "kernel.unroll or kernel.rows_per_warp needs fewer)";
    bool stream_spills = false;
    for (const vm::KernelResources& f : build.kernels)
      stream_spills = stream_spills || (f.name.find("gemv_stream") != std::string::npos &&
                                        f.spill_store_bytes + f.spill_load_bytes > 0);
    if (stream_spills && fallback.tasks > 0)
      note += "; the build compiles the fallback GEMV for " + std::to_string(fallback.tasks) +
              " GEMV task(s) the streamed GEMV does not take, and its registers cost the "
              "streamed GEMV's: " +
              fallback.first;
    k["note"] = note;
  }
  return k;
}

}  // namespace

VerbResult validate_schedule(const ValidateRequest& request) {
  std::string error;
  auto target = eval::resolve_target(request.gpu, &error);
  if (!target) return failed(target_error_code(request.gpu), error);
  const std::string presets_hint = " (hint: `megasched models` lists the presets)";
  if (request.kernel && request.random_configs > 0)
    return failed(kExitUsage,
                  "kernel builds one config's kernel: give a config or a program, not "
                  "random configs");
  if (request.random_configs > 0) {
    auto shape = schedule::resolve_shape(request.model, &error);
    if (!shape) return failed(kExitUsage, error + presets_hint);
    return validate_random_configs(*shape, *target, request.random_configs, request.seed);
  }
  std::optional<schedule::Program> program;
  nlohmann::json out;
  if (request.program) {
    program = request.program;
    // The model the program is checked against (a hand-built program, e.g. the fuzzer's "fuzz",
    // names none: the validator then judges it against its own declarations alone).
    const std::string model = request.model_given ? request.model : program->model_name;
    auto shape = schedule::resolve_shape(model, &error);
    if (!shape && request.model_given) return failed(kExitUsage, error + presets_hint);
    if (shape && !schedule::check_program_fits_model(*program, *shape, *target, &error))
      return failed(kExitUsage, "program '" + request.program_label + "' does not fit model " +
                                    shape->name + " on " + target->name + ": " + error);
    out["program"] = request.program_label;
    out["model"] = shape ? nlohmann::json(shape->name) : nlohmann::json(nullptr);
  } else {
    auto shape = schedule::resolve_shape(request.model, &error);
    if (!shape) return failed(kExitUsage, error + presets_hint);
    if (request.plan && !request.plan->single()) {
      if (request.kernel)
        return failed(kExitUsage,
                      "kernel builds one config's kernel and a plan has " +
                          std::to_string(request.plan->buckets.size()) +
                          " buckets (hint: `megasched propose --model M --config PLAN "
                          "--position P --config-only` prints the config of the bucket that "
                          "holds position P)");
      return validate_plan(*shape, *target, *request.plan);
    }
    program = schedule::lower(*shape, *target, request.config.value_or(schedule::ScheduleConfig{}),
                              &error);
    if (!program)
      return failed(kExitUsage, "the config does not lower for " + shape->name + ": " + error);
    out["model"] = shape->name;
  }
  out["target"] = target->name;
  const auto start = std::chrono::steady_clock::now();
  const schedule::ValidationReport report = schedule::validate(*program, *target);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out["tasks"] = program->tasks.size();
  out["validate_seconds"] = seconds;
  out.update(schedule::to_json(report));
  bool built = true;
  if (request.kernel) {
    if (!vm::nvrtc_available())
      return failed(kExitEnvironment,
                    "validate --kernel: this megasched was built without the CUDA toolkit (no "
                    "NVRTC); rebuild with -DMEGASCHED_CUDA=ON");
    out["kernel"] = kernel_resources(*program, *target);
    built = out["kernel"]["ok"].get<bool>();
  }
  return succeeded(out, report.ok() && built ? kExitOk : kExitFailure);
}

namespace {

/// The newest plan a plan search wrote beside `results_path` (runs/<run id>/plan.json; run ids
/// sort by start time), or "".
std::string newest_plan_run(const std::string& results_path) {
  const std::filesystem::path runs = std::filesystem::path(results_path).parent_path() / "runs";
  std::error_code ec;
  std::string newest;
  for (const auto& entry : std::filesystem::directory_iterator(runs, ec))
    if (std::filesystem::is_regular_file(entry.path() / "plan.json", ec) &&
        (newest.empty() || entry.path().string() > newest))
      newest = entry.path().string();
  return newest.empty() ? "" : (std::filesystem::path(newest) / "plan.json").string();
}

/// The report's plan section (flywheel/plan_report.h), or a failed verb for a bad --plan.
VerbResult plan_section(const ReportRequest& request,
                        const std::vector<flywheel::CorpusRecord>& records) {
  const std::string source =
      request.plan.empty() ? newest_plan_run(request.results_path) : request.plan;
  if (source.empty())
    return succeeded(flywheel::no_plan_report(
        "no plan (hint: pass --plan FILE|best:MODEL:GPU, or run `megasched loop --plan-buckets "
        "0,B1,...`: its plan.json lands under runs/ beside --results)"));
  std::string error;
  int code = kExitUsage;
  const auto plan = read_plan_arg(source, &error, &code);
  if (!plan)
    return failed(code, "--plan " + source + ": " + error +
                            " (hint: a plan document {\"buckets\": [...]} such as a plan run's "
                            "plan.json, a config, or best:MODEL:GPU)");
  return succeeded(flywheel::build_plan_report(*plan, source, records));
}

}  // namespace

VerbResult build_report_document(const ReportRequest& request) {
  for (const std::string* input : {&request.results_path, &request.corpus_path})
    if (!request.html_path.empty() && flywheel::same_file(request.html_path, *input))
      return failed(kExitUsage, "--out '" + request.html_path + "' is the " +
                                    (input == &request.results_path ? "--results" : "--corpus") +
                                    " log it would read; name another file (e.g. report.html)");
  flywheel::ResultsRead results = flywheel::read_results(request.results_path);
  if (!results.error.empty()) return failed(kExitEnvironment, results.error);
  if (!results.exists)
    return failed(kExitEnvironment, "no results file at " + request.results_path +
                                        " (run `megasched loop` first, or pass --results PATH)");
  flywheel::CorpusRead corpus = flywheel::read_corpus(request.corpus_path);
  if (!corpus.error.empty()) return failed(kExitEnvironment, corpus.error);
  auto keep = [&](const std::string& model, const std::string& target) {
    return (request.model.empty() || model == request.model) &&
           (request.target.empty() || target == request.target);
  };
  std::vector<flywheel::ResultRow> rows;
  for (auto& row : results.rows)
    if (keep(row.model, row.target)) rows.push_back(std::move(row));
  std::vector<flywheel::CorpusRecord> records;
  for (auto& r : corpus.records)
    if (keep(r.model, r.target)) records.push_back(std::move(r));
  const VerbResult plan = plan_section(request, records);
  if (plan.exit_code != kExitOk) return plan;
  nlohmann::json report = flywheel::build_report(rows, records);
  report["plan"] = plan.document;
  report["sources"] = {{"results", request.results_path},
                       {"corpus", corpus.exists ? request.corpus_path : ""}};
  nlohmann::json problems = results.problems;
  for (const auto& p : corpus.problems) problems.push_back(p);
  if (!corpus.exists)
    problems.push_back("no corpus at " + request.corpus_path +
                       ": best configs and knob effects are missing");
  report["problems"] = problems;
  if (!request.html_path.empty()) {
    std::error_code ec;
    auto parent = std::filesystem::path(request.html_path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    std::string error;
    if (!write_text_file(request.html_path, flywheel::report_html(report), &error))
      return failed(kExitEnvironment, "--out: " + error);
    report["html"] = request.html_path;
  }
  return succeeded(report);
}

std::string this_executable() {
  char buffer[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) return "megasched";
  buffer[n] = '\0';
  return buffer;
}

std::string worker_command(const std::string& executable, const TrialFlags& flags) {
  return search::shell_quote(executable.empty() ? this_executable() : executable) + " worker " +
         flags.worker_arguments();
}

std::string check_worker_flags(const LoopCommand& opt) {
  if ((!opt.gpus.empty()) + (opt.workers > 0) + opt.mpi > 1)
    return "--gpus, --workers and --mpi each choose where the trials run; give one";
  if (!opt.gpus.empty() && opt.device == "cpu")
    return "--gpus runs one worker per GPU (measured trials); CPU trials in several workers: "
           "--device cpu --workers N";
  if (opt.workers > 0 && opt.device == "gpu")
    return "--workers runs CPU trials; one worker per GPU: --gpus all (or --gpus 0,1)";
  if (!(opt.rank_timeout_s > 0)) return "--rank-timeout must be more than 0 seconds";
  if (opt.device == "cpu" && (opt.compile_ahead > 0 || opt.compile_threads > 0))
    return "--compile-ahead and --compile-threads build GPU kernels ahead of GPU trials; CPU "
           "trials build none: drop them, or run with --device gpu";
  return "";
}

std::optional<VerbResult> start_loop_backend(LoopCommand& opt, const std::string& device,
                                             LoopBackend* backend) {
  std::string error;
  search::WorkerOptions w;
  w.command = worker_command(opt.executable, opt.trial);
  w.trial_timeout_s = opt.trial_timeout_s;
  w.cancel = opt.loop.cancel;  // a cancelled loop kills the trial in flight
  if (opt.mpi) {
    search::MpiLoopOptions m;
    m.worker = w;
    m.gpu = device == "gpu";
    m.rank_timeout_s = opt.rank_timeout_s;
    m.timed_position = opt.trial.ev.timed_position;
    m.objective = opt.trial.ev.objective;
    bool usage = false;
    backend->pool = search::start_mpi_loop(m, &error, &backend->served, &usage);
    if (backend->served) return VerbResult{*backend->served, nullptr, ""};
    if (!backend->pool) return failed(usage ? kExitUsage : kExitEnvironment, error);
    backend->warning = error;
    return std::nullopt;
  }
  if (!opt.gpus.empty() || opt.workers > 0) {
    search::WorkerPoolOptions p;
    p.worker = w;
    p.cpu_slots = opt.workers;
    p.timed_position = opt.trial.ev.timed_position;
    p.objective = opt.trial.ev.objective;
    if (!opt.gpus.empty()) {
      bool environment = false;
      auto gpus = search::parse_gpu_list(opt.gpus, &error, &environment);
      if (!gpus) return failed(environment ? kExitEnvironment : kExitUsage, error);
      p.gpus = *gpus;
    }
    backend->pool = search::start_worker_pool(p, &error);
    if (!backend->pool) return failed(kExitEnvironment, error);
    return std::nullopt;
  }
  if (device == "gpu" || opt.isolate) {
    auto worker = std::make_unique<search::WorkerEvaluator>(w);
    if (!worker->start(&error)) return failed(kExitEnvironment, error);
    backend->evaluator = std::move(worker);
  } else {
    bool environment = false;
    eval::EvaluatorOptions ev = opt.trial.ev;
    ev.progress = progress_on_stderr("loop");
    auto trial = eval::TrialEvaluator::create(ev, &error, &environment);
    if (!trial) return failed(environment ? kExitEnvironment : kExitUsage, error);
    backend->evaluator = std::move(trial);
  }
  return std::nullopt;
}

void resolve_keep_rule(LoopCommand& opt, const std::string& device) {
  const search::LoopOptions fallback;
  const bool gpu = device == "gpu";
  opt.loop.min_gain = opt.min_gain >= 0 ? opt.min_gain : gpu ? kGpuMinGain : fallback.min_gain;
  opt.loop.confirm = opt.confirm >= 0 ? opt.confirm : gpu ? kGpuConfirm : fallback.confirm;
}

std::optional<VerbResult> start_compile_ahead(LoopCommand& opt, const std::string& device,
                                              const schedule::ModelShape& shape,
                                              const schedule::GpuTarget& target,
                                              std::unique_ptr<search::CompileAhead>* pool,
                                              int workers) {
  opt.loop.compile_ahead = 0;
  opt.loop.compile_pool = nullptr;
  const bool asked = opt.compile_ahead > 0;
  if (device != "gpu") {
    if (asked || opt.compile_threads > 0)
      return failed(kExitUsage,
                    "--compile-ahead and --compile-threads build GPU kernels ahead of GPU "
                    "trials; CPU trials build none: drop them, or run with --device gpu");
    return std::nullopt;
  }
  const int ahead = opt.compile_ahead < 0 ? kDefaultCompileAhead : opt.compile_ahead;
  if (ahead == 0) return std::nullopt;
  if (const std::string why = search::compile_ahead_unavailable(target); !why.empty()) {
    if (asked) return failed(kExitUsage, "--compile-ahead: " + why);
    if (opt.loop.progress) *opt.loop.progress << "warning: no compile-ahead: " << why << "\n";
    return std::nullopt;
  }
  const int threads =
      opt.compile_threads > 0 ? opt.compile_threads : search::default_compile_threads(workers);
  // Room for the serial loop's queue and a pool's outstanding batches of tickets.
  const int capacity = std::max(64, 4 * ahead);
  *pool = std::make_unique<search::CompileAhead>(search::kernel_prebuilder(shape, target), threads,
                                                 capacity);
  opt.loop.compile_ahead = ahead;
  opt.loop.compile_pool = pool->get();
  return std::nullopt;
}

std::vector<flywheel::CorpusRecord> loop_training(const LoopCommand& opt,
                                                  const flywheel::TrainingRequest& request,
                                                  std::string* note) {
  // The prior learns from every model this workspace has tried on this target and device, and
  // from every GPU run of this model on this target the repository keeps, judged as this loop
  // judges (the same objective, or the same timed position): a latency at position 4096 or a
  // weighted mean is no sample of a position-0 loop's target. Rows of another kernel build are
  // left out by default: a kernel change moves latencies, so they would teach the old kernel.
  std::vector<flywheel::CorpusRecord> own = flywheel::read_corpus(opt.loop.corpus_path).records;
  flywheel::SharedCorpusFilter filter;
  filter.target = request.target;
  filter.model = request.model;
  filter.include_stale = opt.corpus_stale;
  filter.build = vm::build_identity();
  flywheel::SharedCorpusRead shared;
  if (request.device == "gpu") shared = flywheel::read_shared(opt.flywheel_dir, filter);
  int shared_used = 0;
  auto training =
      flywheel::training_records(std::move(own), std::move(shared.records), request, &shared_used);
  *note = "training: " + std::to_string(training.size() - shared_used) + " records of " +
          opt.loop.corpus_path + ", " + std::to_string(shared_used) + " of the shared corpus" +
          (flywheel::flywheel_enabled(opt.flywheel_dir) ? " " + opt.flywheel_dir : " (off)") +
          " (" + std::to_string(shared.stale) + " stale rows of other kernel builds " +
          (opt.corpus_stale ? "included" : "left out") +
          (shared.stale_unread > 0
               ? ", " + std::to_string(shared.stale_unread) + " more in its archives unread"
               : "") +
          ")" + (shared.error.empty() ? "" : "; shared corpus unreadable: " + shared.error);
  return training;
}

VerbResult run_loop_command(LoopCommand& opt) {
  std::string error;
  if (!opt.trial.parse_positions(&error)) return failed(kExitUsage, error);
  if (!opt.trial.parse_objective(&error, opt.objective_flag)) return failed(kExitUsage, error);
  eval::EvaluatorOptions& ev = opt.trial.ev;
  opt.loop.timed_position = ev.timed_position;
  opt.loop.objective = ev.objective;
  if (ev.timed_position < 0) return failed(kExitUsage, "--timed-position must be >= 0");
  if (!opt.start.empty() || opt.start_config) {
    if (opt.loop.warm_start)
      return failed(kExitUsage, "--start and --warm-start both choose trial 0; give one");
    if (!opt.start_config) {
      int code = kExitUsage;
      // A plan (best:MODEL:GPU) starts from its config at the timed position.
      opt.start_config = read_config_arg(opt.start, &error, &code, ev.timed_position);
      if (!opt.start_config) return failed(code, "--start: " + error);
    }
    opt.loop.start = *opt.start_config;
  }
  if (!opt.strategy.proposer_command.empty()) opt.strategy.name = "proposer";
  if (opt.loop.budget < 1) return failed(kExitUsage, "--budget must be at least 1");
  if (!(opt.trial_timeout_s > 0))
    return failed(kExitUsage, "--trial-timeout must be more than 0 seconds");
  if (const std::string why = check_worker_flags(opt); !why.empty()) return failed(kExitUsage, why);
  if (const std::string why = search::check_log_paths(opt.loop.results_path, opt.loop.corpus_path);
      !why.empty())
    return failed(kExitUsage, why);
  std::string device = opt.device;
  if (device == "auto" && opt.workers > 0) device = "cpu";
  if (device == "auto" && !opt.gpus.empty()) device = "gpu";
  if (device == "auto") device = eval::gpu_available(nullptr) ? "gpu" : "cpu";
  ev.device = device;
  resolve_keep_rule(opt, device);

  auto shape = schedule::resolve_shape(ev.model, &error);
  if (!shape) return failed(kExitUsage, error);
  // Before any worker starts: a position the model cannot reach is the arguments' fault.
  if (const std::string why = eval::objective_range_error(ev.objective, shape->name, shape->max_seq,
                                                          opt.objective_flag);
      !why.empty())
    return failed(kExitUsage, why);
  auto target = eval::resolve_target(ev.gpu, &error);
  if (!target) return failed(ev.gpu == "auto" ? kExitEnvironment : kExitUsage, error);

  std::unique_ptr<search::CompileAhead> builds;  // rank 0's only (an MPI rank serves and returns)
  LoopBackend backend;
  if (std::optional<VerbResult> done = start_loop_backend(opt, device, &backend)) return *done;
  if (std::optional<VerbResult> refused = start_compile_ahead(
          opt, device, *shape, *target, &builds, backend.pool ? backend.pool->size() : 1)) {
    search::finish_mpi_loop(backend.pool.get(), kExitUsage);
    return *refused;
  }
  const nlohmann::json identity =
      backend.pool ? backend.pool->identity(0) : backend.evaluator->identity();

  opt.strategy.shape = *shape;
  opt.loop.flywheel_dir = opt.flywheel_dir;
  if (search::strategy_trains(opt.strategy)) {
    flywheel::TrainingRequest request;
    request.target = identity.value("target", target->name);
    request.model = identity.value("model", shape->name);
    request.device = device;
    request.timed_position = ev.timed_position;
    request.objective = ev.objective;
    std::string note;
    opt.strategy.training = loop_training(opt, request, &note);
    if (opt.loop.progress) *opt.loop.progress << note << "\n";
  }
  auto strategy = search::make_strategy(opt.strategy, &error);
  if (!strategy) {
    search::finish_mpi_loop(backend.pool.get(), kExitUsage);
    return failed(kExitUsage, error);
  }

  if (opt.on_start) opt.on_start();
  opt.loop.seed = opt.strategy.seed;
  if (!backend.warning.empty() && opt.loop.progress)
    *opt.loop.progress << "warning: " << backend.warning << "\n";
  if (backend.pool && opt.loop.progress) {
    *opt.loop.progress << (opt.mpi ? "mpi: rank 0 (pid " + std::to_string(::getpid()) + " on " +
                                         search::host_name() + ") runs the loop; workers:"
                                   : std::string("workers:"));
    for (int s = 0; s < backend.pool->size(); ++s)
      *opt.loop.progress << " " << backend.pool->label(s)
                         << (backend.pool->alive(s) ? "" : " (not ready)");
    *opt.loop.progress << "\n";
  }
  search::SystemClock clock;
  search::LoopResult result =
      backend.pool
          ? search::run_loop_on_pool(*backend.pool, *shape, *target, *strategy, clock, opt.loop)
          : search::run_loop(*backend.evaluator, *shape, *target, *strategy, clock, opt.loop);
  VerbResult r;
  if (!result.ok) {
    r = failed(result.bad_arguments ? kExitUsage : kExitEnvironment, result.error);
    r.document = result.summary;
  } else {
    // Loud failure when nothing was measured: trials ran and none had a correct latency.
    const bool nothing =
        result.summary["trials"].get<int>() > 0 && result.summary["best"].is_null();
    r = succeeded(result.summary, nothing ? kExitFailure : kExitOk);
  }
  if (opt.on_end) opt.on_end(r);
  if (opt.mpi) {
    // Rank 0 prints now, as finish_verb would (the MCP server has no --mpi): a lost rank ends
    // the job with MPI_Abort.
    if (!r.message.empty()) print_error("loop", r.message);
    if (!r.document.is_null()) print_json(r.document);
    std::fflush(nullptr);
    search::finish_mpi_loop(backend.pool.get(), r.exit_code);
    return VerbResult{r.exit_code, nullptr, ""};
  }
  return r;
}

}  // namespace megasched::harness
