// `megasched promote`: a config through the verify gate and the benchmark gate into the verified
// registry (harness/promote.h, flywheel/registry.h; HARNESS.md section 14). A failed gate says
// which gate with its numbers (exit 1); nothing is written to the registry then.
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>

#include "eval/device.h"
#include "eval/evaluate.h"
#include "flywheel/corpus.h"
#include "flywheel/registry.h"
#include "harness/build_info.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/promote.h"
#include "harness/run_record.h"
#include "harness/trial_flags.h"
#include "schedule/lookup.h"
#include "schedule/lower.h"
#include "schedule/plan.h"
#include "vm/nvrtc_build.h"

namespace megasched::harness {
namespace {

using nlohmann::json;

struct Options {
  std::string model = "toy";
  std::string gpu = "h100";
  std::string device = "gpu";
  std::string config;
  std::string plan;       // a plan file or a loop run directory holding plan.json
  std::string positions;  // "": verify_positions(max_seq)
  int tokens = kVerifyTokens;
  int rounds = 3;
  double speedup = kPromoteSpeedup;
  bool verify_only = false;
  uint64_t seed = 0;
  std::string registry = flywheel::default_registry_path();
  std::string runs_dir = "workspace/runs";
  bool no_run_dir = false;
  std::string flywheel_dir = flywheel::default_flywheel_dir();
};

/// What is promoted for: the model's shape and the target (the registry's key).
struct Workload {
  schedule::ModelShape shape;
  schedule::GpuTarget target;
};

/// The benchmark gate against what best:MODEL:GPU resolves to (harness/promote.h, gate_incumbent):
/// a plan's config at position 0, where the gate times both.
GateOutcome benchmark(const Options& opt, const schedule::ScheduleConfig& candidate,
                      const Workload& probe, json* incumbent_doc) {
  std::string why;
  const auto inc = gate_incumbent(opt.registry, probe.shape, probe.target.name, &why);
  if (!inc) return {false, "benchmark gate: " + why, {}};
  const schedule::ScheduleConfig incumbent = schedule::plan_config_for(inc->plan, 0);
  *incumbent_doc = {
      {"id", inc->id}, {"source", inc->source}, {"config", schedule::to_json(incumbent)}};
  if (!inc->plan.single()) (*incumbent_doc)["plan"] = inc->document;
  if (schedule::to_json(incumbent) == schedule::to_json(candidate))
    return {false,
            "benchmark gate: the candidate is the incumbent (" +
                incumbent_doc->value("id", std::string()) + ")",
            {}};
  eval::EvaluatorOptions ev;
  ev.model = opt.model, ev.gpu = opt.gpu, ev.seed = opt.seed;
  ev.positions = {0};
  ev.device = opt.device;
  ev.gpu_options.baselines.clear();  // the gate compares the two configs, not the baselines
  ev.progress = progress_on_stderr("promote");
  std::string error;
  auto timer = eval::TrialEvaluator::create(ev, &error);
  if (!timer) return {false, "benchmark gate: " + error, {}};
  // gpu: measured latencies only; cpu: the cost model's predictions, labelled as such.
  const std::string kind = opt.device == "gpu" ? "measured-gpu" : "predicted";
  auto measure = [&](bool is_candidate, std::string* why) -> std::optional<double> {
    const eval::Verdict v = timer->evaluate(is_candidate ? candidate : incumbent);
    if (v.correct && v.latency_us && v.latency_kind == kind) return v.latency_us;
    *why = "status " + v.status + ", latency_kind " + v.latency_kind +
           (v.notes.empty() ? "" : ": " + v.notes.back());
    return std::nullopt;
  };
  GateOutcome gate = run_benchmark_gate(opt.rounds, opt.speedup, measure);
  gate.detail["latency_kind"] = kind;
  if (kind == "predicted")
    gate.message +=
        " [predicted by the cost model for " + probe.target.name + " (--device cpu), not measured]";
  return gate;
}

constexpr const char* kPlanGateRule =
    "plan: verify gate bucket by bucket (each config checked at the positions inside its bucket, "
    "its ends included); benchmark gate over the weighted objective (each bucket's config and the "
    "incumbent's config for that bucket timed at the bucket's midpoint, weighted by the bucket's "
    "positions, a bucket whose config is the incumbent's timed once a round for both sides; "
    "promoted when the incumbent's weighted median over the candidate's >= --speedup)";

/// The benchmark gate of a plan of several buckets over its weighted objective (harness/promote.h)
/// against what best:MODEL:GPU resolves to (gate_incumbent: a config or a plan).
GateOutcome benchmark_plan(const Options& opt, const schedule::Plan& candidate,
                           const Workload& probe, json* incumbent_doc) {
  std::string error;
  const auto inc = gate_incumbent(opt.registry, probe.shape, probe.target.name, &error);
  if (!inc) return {false, "benchmark gate: " + error, {}};
  const schedule::Plan& incumbent = inc->plan;
  *incumbent_doc = {{"id", inc->id}, {"source", inc->source}, {"config", inc->document}};
  std::vector<PlanGateBucket> buckets = plan_gate_buckets(candidate, probe.shape.max_seq);
  std::vector<schedule::ScheduleConfig> mine, theirs;
  bool same = true;
  for (size_t i = 0; i < buckets.size(); ++i) {
    mine.push_back(candidate.buckets[i].config);
    theirs.push_back(schedule::plan_config_for(incumbent, buckets[i].timed_position));
    buckets[i].shared = schedule::to_json(mine.back()) == schedule::to_json(theirs.back());
    same = same && buckets[i].shared;
  }
  if (same)
    return {false,
            "benchmark gate: the candidate is the incumbent (" +
                incumbent_doc->value("id", std::string()) + ") at every bucket's timed position",
            {}};
  std::vector<std::unique_ptr<eval::TrialEvaluator>> timers;
  for (const PlanGateBucket& b : buckets) {
    eval::EvaluatorOptions ev;
    ev.model = opt.model, ev.gpu = opt.gpu, ev.seed = opt.seed;
    ev.positions = {b.timed_position};
    ev.timed_position = b.timed_position;
    ev.device = opt.device;
    ev.gpu_options.baselines.clear();
    ev.progress = progress_on_stderr("promote");
    timers.push_back(eval::TrialEvaluator::create(ev, &error));
    if (!timers.back()) return {false, "benchmark gate: " + error, {}};
  }
  const std::string kind = opt.device == "gpu" ? "measured-gpu" : "predicted";
  auto measure = [&](bool is_candidate, size_t i, std::string* why) -> std::optional<double> {
    const eval::Verdict v = timers[i]->evaluate(is_candidate ? mine[i] : theirs[i]);
    if (v.correct && v.latency_us && v.latency_kind == kind) return v.latency_us;
    *why = "status " + v.status + ", latency_kind " + v.latency_kind +
           (v.notes.empty() ? "" : ": " + v.notes.back());
    return std::nullopt;
  };
  GateOutcome gate = run_plan_benchmark_gate(buckets, opt.rounds, opt.speedup, measure);
  gate.detail["latency_kind"] = kind;
  if (kind == "predicted")
    gate.message +=
        " [predicted by the cost model for " + probe.target.name + " (--device cpu), not measured]";
  return gate;
}

/// The registry entry of a promotion that passed both gates.
flywheel::RegistryEntry make_entry(const Workload& probe, const json& candidate,
                                   const GateOutcome& verify, const GateOutcome& bench,
                                   const json& incumbent, const eval::Verdict& verdict,
                                   const std::string& run_id) {
  flywheel::RegistryEntry e;
  e.model = probe.shape.name;
  e.gpu = probe.target.name;
  e.dtype = schedule::dtype_name(probe.shape.dtype);
  e.config = candidate;
  e.fields = bench.detail;
  e.fields.erase("order");
  e.fields["incumbent"] = incumbent.value("id", "default");
  e.fields["rounds"] = bench.detail.value("candidate_us", json::array()).size();
  e.fields["positions_checked"] = verify.detail.value("positions", json::array());
  e.fields["generate_tokens"] = verify.detail.value("generate", json::object()).value("tokens", 0);
  e.fields["latency_kind"] = bench.detail.value("latency_kind", std::string("measured-gpu"));
  e.fields["device"] = verdict.device;
  if (verdict.device == "gpu") {
    const json doctor = eval::device_report();
    e.fields["device_name"] = verdict.kernel.value(
        "device", doctor.value("device", json::object()).value("name", std::string("")));
    e.fields["driver"] = doctor.value("driver_version", json(nullptr));
  } else {
    e.fields["device_name"] = "cpu (cost model for " + probe.target.name + ")";
    e.fields["driver"] = nullptr;
  }
  e.fields["commit"] = build_commit();  // the promoting megasched's, not the cwd's
  e.fields["build"] = vm::build_identity();
  e.fields["run_id"] = run_id;
  e.fields["timestamp"] = flywheel::utc_timestamp(static_cast<double>(std::time(nullptr)));
  return e;
}

int fail(int code, const std::string& message) {
  print_error("promote", message);
  return code;
}

/// The candidate of --config or --plan (a plan file, or a loop run directory holding plan.json).
std::optional<schedule::Plan> read_candidate(const Options& opt, std::string* error, int* code) {
  if (opt.config.empty() == opt.plan.empty()) {
    *code = kExitUsage;
    *error =
        "give the candidate with --config (a config or a plan) or --plan (a plan file or a "
        "loop run directory holding plan.json), one of them";
    return std::nullopt;
  }
  if (!opt.config.empty()) return read_plan_arg(opt.config, error, code);
  std::string path = opt.plan;
  if (std::filesystem::is_directory(path)) {
    path = (std::filesystem::path(path) / "plan.json").string();
    if (!std::filesystem::exists(path)) {
      *code = kExitUsage;
      *error = "--plan " + opt.plan +
               ": a directory without plan.json (hint: the run directory of `megasched loop "
               "--plan-buckets ...`, which writes one when every bucket has a winner)";
      return std::nullopt;
    }
  }
  auto plan = read_plan_arg(path, error, code);
  if (!plan) *error = "--plan " + path + ": " + *error;
  return plan;
}

int run_promote(const Options& opt) {
  std::string error;
  int code = kExitUsage;
  const auto plan = read_candidate(opt, &error, &code);
  if (!plan) return fail(code, error);
  VerifyRequest vr{opt.model, opt.gpu, opt.device, opt.seed, {}, opt.tokens, opt.flywheel_dir};
  if (!opt.positions.empty()) {
    auto list = schedule::parse_int_list(opt.positions);
    if (!list || list->empty())
      return fail(kExitUsage, "--positions '" + opt.positions + "' is not a list such as 0,1024");
    vr.positions = *list;
  }
  auto shape = schedule::resolve_shape(opt.model, &error);
  if (!shape) return fail(kExitUsage, error);
  if (!schedule::check_plan_covers(*plan, shape->max_seq, &error))
    return fail(kExitUsage, "the plan does not fit model " + shape->name + ": " + error);
  auto target = eval::resolve_target(opt.gpu, &error);
  if (!target) return fail(target_error_code(opt.gpu), error);
  if (opt.device == "gpu" && !eval::gpu_available(&error))
    return fail(kExitEnvironment,
                "--device gpu: " + error +
                    " (--device cpu promotes without one, on the ReferenceVm and the cost "
                    "model's predicted latencies; add --verify-only for the verify gate alone)");
  const Workload probe{*shape, *target};
  const bool single = plan->single();
  const schedule::ScheduleConfig& first = plan->buckets[0].config;
  bool environment = false;
  std::optional<flywheel::RunDir> run;
  if (!opt.no_run_dir && !(run = start_run(opt.runs_dir, "promote", &error)))
    return fail(kExitEnvironment, error);
  std::vector<eval::Verdict> verdicts(single ? 1 : 0);  // the plan gate pushes one per bucket
  const GateOutcome verify = single ? run_verify_gate(vr, first, &verdicts[0], &environment)
                                    : run_plan_verify_gate(vr, *plan, &verdicts, &environment);
  json doc = {{"run_id", run ? run->run_id : ""},
              {"model", probe.shape.name},
              {"gpu", probe.target.name},
              {"device", opt.device},
              {"promoted", false},
              {"verify", verify.detail},
              {"config", schedule::to_json(*plan)}};
  if (!single) doc["gate"] = kPlanGateRule;
  int exit_code = kExitOk;
  std::string message, passed = verify.message;  // the failure, or what passed
  if (!verify.pass) {
    doc["failed_gate"] = "verify", exit_code = environment ? kExitEnvironment : kExitFailure;
    message = verify.message;
  } else if (!opt.verify_only) {
    json incumbent;
    const GateOutcome bench = single ? benchmark(opt, first, probe, &incumbent)
                                     : benchmark_plan(opt, *plan, probe, &incumbent);
    doc["benchmark"] = bench.detail;
    doc["incumbent"] = incumbent;
    if (!bench.pass) {
      doc["failed_gate"] = "benchmark", exit_code = kExitFailure;
      message = bench.message;
    } else {
      auto entry = flywheel::append_registry_entry(
          opt.registry,
          make_entry(probe, schedule::to_json(*plan), verify, bench, incumbent,
                     verdicts.empty() ? eval::Verdict{} : verdicts[0], run ? run->run_id : ""),
          &error);
      if (!entry) {
        exit_code = kExitEnvironment;
        message = "registry " + opt.registry + ": " + error;
      } else {
        doc["promoted"] = true;
        doc["entry"] = flywheel::to_json(*entry);
        doc["registry"] = opt.registry;
        passed = bench.message + "; promoted as " + entry->id;
        std::fprintf(stderr, "megasched promote: %s\n", passed.c_str());
      }
    }
  }
  if (!message.empty()) print_error("promote", message);
  doc["message"] = message.empty() ? passed : message;
  print_json(doc);
  if (run) {
    std::string lower_error;  // a config that does not lower has no program (the verdict says why)
    const auto program =
        single ? schedule::lower(probe.shape, probe.target, first, &lower_error) : std::nullopt;
    if (!flywheel::write_trial_files(*run, schedule::to_json(*plan),
                                     program ? schedule::to_json(*program) : json(),
                                     verdicts.empty() ? eval::Verdict{} : verdicts[0], &error) ||
        !flywheel::write_run_json(*run, "promotion.json", doc, &error))
      print_error("promote", "run directory: " + error);
    end_run(*run, exit_code);
  }
  return exit_code;
}

}  // namespace

void add_promote_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "promote",
      "Promote a config into the verified registry: verify gate, then an interleaved benchmark "
      "against what best:MODEL:GPU resolves to (the registry's entry, else the built-in record, "
      "else the default; >= --speedup), then an append to registry/verified.jsonl");
  add_model_flag(cmd, &opt->model);
  add_gpu_flag(cmd, &opt->gpu);
  add_device_flag(cmd, &opt->device,
                  "gpu (measured), or cpu (the ReferenceVm, and the cost model's predicted "
                  "latencies in the benchmark gate: the entry says latency_kind predicted)");
  cmd->add_option("--config", opt->config,
                  "The candidate: ScheduleConfig or plan JSON file, - for stdin, or a name such as "
                  "best:llama-1b:h100");
  cmd->add_option("--plan", opt->plan,
                  "The candidate plan: a plan file, or the run directory of `loop --plan-buckets` "
                  "(its plan.json); verified bucket by bucket, benchmarked over its weighted "
                  "objective (HARNESS.md section 15)");
  cmd->add_option("--positions", opt->positions,
                  "Positions the verify gate checks (default 0,1024,4096, clipped to the model)");
  cmd->add_option("--tokens", opt->tokens, "Tokens the verify gate's generate --verify decodes")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--rounds", opt->rounds, "Interleaved benchmark rounds (each side once a round)")
      ->check(integer_in(1, 1000))
      ->capture_default_str();
  cmd->add_option("--speedup", opt->speedup, "Speedup over the incumbent the benchmark gate needs")
      ->check(finite_number_in(0.0, 1e6, /*min_exclusive=*/true))
      ->capture_default_str();
  cmd->add_flag("--verify-only", opt->verify_only, "Run the verify gate alone; promote nothing");
  add_seed_flag(cmd, &opt->seed);
  cmd->add_option("--registry", opt->registry, "The registry file ($MEGASCHED_REGISTRY)")
      ->capture_default_str();
  add_runs_dir_flags(cmd, &opt->runs_dir, &opt->no_run_dir);
  add_flywheel_flag(cmd, &opt->flywheel_dir);
  cmd->callback([&ctx, opt] { ctx.exit_code = run_promote(*opt); });
}

}  // namespace megasched::harness
