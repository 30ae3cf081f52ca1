// `megasched profile`: where one decode step's time goes. Lowers and validates a config as
// `evaluate` does, builds the megakernel with per-task stamps (GpuVmOptions::profile), fills the
// KV cache by running positions 0 .. P-1, runs --warmup steps at P, then one stamped step at P, and
// writes eval::analyze_profile's timeline, per-op / per-block breakdown and critical path to --out
// (a table on stdout, or the whole document with --json). Stamping adds a timer read and a block
// barrier per task: the times locate the step's time, they are not its measured latency.
#include <cstdio>
#include <fstream>

#include "eval/bottleneck.h"
#include "eval/device.h"
#include "eval/evaluate.h"
#include "eval/prepare.h"
#include "eval/profile.h"
#include "eval/profile_run.h"
#include "eval/roofline.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/run_record.h"
#include "harness/trial_flags.h"
#include "schedule/lookup.h"

namespace megasched::harness {
namespace {

/// The profile's run directory: the config, the program, the timeline (with its bottleneck).
void write_profile_run_dir(flywheel::RunDir& run, const nlohmann::json& config,
                           const nlohmann::json& program, const nlohmann::json& timeline,
                           int exit_code) {
  std::string error;
  if (!flywheel::write_run_json(run, "config.json", config, &error) ||
      !flywheel::write_run_json(run, "program.json", program, &error) ||
      !flywheel::write_run_json(run, "timeline.json", timeline, &error))
    print_error("profile", "run directory: " + error);
  end_run(run, exit_code);
}

}  // namespace

void add_profile_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string model = "toy";
    std::string gpu = "auto";
    std::string config;
    std::string out;
    int position = 0;
    int token = -1;
    int warmup = 3;
    int top = 15;
    uint64_t seed = 0;
    bool json = false;
    std::string runs_dir = "workspace/runs";
    bool no_run_dir = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "profile",
      "Stamp every task of one decode step on the GPU: timeline, per-op and per-block "
      "time, critical path");
  add_model_flag(cmd, &opt->model);
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig JSON file, - for stdin, default, or a name such as "
                  "best:llama-1b:h100 "
                  "(`megasched models` lists them; default: the default config)");
  add_gpu_flag(cmd, &opt->gpu,
               "GPU target the config is lowered for (see `megasched targets`) or auto");
  cmd->add_option("--position", opt->position,
                  "Position profiled (positions before it run first, filling the KV cache)")
      ->check(integer_in(0, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--token", opt->token,
                  "Token fed at --position (default: the seeded token sequence of evaluate)")
      ->check(integer_in(0, kMaxInt));
  cmd->add_option("--warmup", opt->warmup, "Unstamped steps at --position before the stamped one")
      ->check(integer_in(0, kMaxInt))
      ->capture_default_str();
  add_seed_flag(cmd, &opt->seed);
  cmd->add_option("--out", opt->out, "Write the analysis (timeline included) to this JSON file")
      ->required();
  cmd->add_option("--top", opt->top, "Ops listed in the table")
      ->check(integer_in(1, kMaxInt))
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print the whole analysis as JSON instead of the table");
  add_runs_dir_flags(cmd, &opt->runs_dir, &opt->no_run_dir);
  cmd->callback([&ctx, opt] {
    std::string error;
    auto fail = [&](int code, const std::string& message) {
      print_error("profile", message);
      ctx.exit_code = code;
    };
    // Arguments and the program first, so a bad one is reported on any machine.
    auto shape = schedule::resolve_shape(opt->model, &error);
    if (!shape) return fail(kExitUsage, error + " (hint: `megasched models` lists the presets)");
    if (opt->position < 0 || opt->position >= shape->max_seq)
      return fail(kExitUsage, "--position must lie in [0, " + std::to_string(shape->max_seq - 1) +
                                  "] for model " + shape->name);
    if (opt->token != -1 && (opt->token < 0 || opt->token >= shape->vocab))
      return fail(kExitUsage, "--token must lie in [0, " + std::to_string(shape->vocab - 1) +
                                  "] for model " + shape->name);
    if (opt->warmup < 0) return fail(kExitUsage, "--warmup must be >= 0");
    int code = kExitUsage;
    // A plan profiles the config of the bucket that holds --position (schedule/plan.h).
    auto config = read_config_arg(opt->config, &error, &code, opt->position);
    if (!config) return fail(code, error);
    std::string why;
    const std::string no_gpu_hint =
        "; use `megasched evaluate --device cpu` for a CPU check (correctness and a predicted "
        "latency)";
    std::optional<schedule::GpuTarget> target;
    if (opt->gpu == "auto") {
      if (!eval::gpu_available(&why))
        return fail(kExitEnvironment, "profile needs a CUDA device: " + why + no_gpu_hint);
      target = eval::resolve_target(opt->gpu, &error);
      if (!target) return fail(kExitEnvironment, error);
    } else {
      target = eval::resolve_target(opt->gpu, &error);
      if (!target) return fail(kExitUsage, error);
    }

    // The program, exactly as evaluate builds it; nothing unsafe launches.
    const eval::PreparedProgram prepared = eval::prepare_program(*shape, *target, *config);
    if (!prepared.program)
      return fail(kExitUsage,
                  "the config does not lower for " + shape->name + ": " + prepared.error);
    if (!prepared.report.ok())
      return fail(kExitFailure, prepared.unsafe_message() + " (" +
                                    std::to_string(prepared.report.diagnostics.size()) +
                                    " diagnostics; `megasched validate` lists them all)");
    if (!eval::gpu_available(&why))
      return fail(kExitEnvironment, "profile needs a CUDA device: " + why + no_gpu_hint);
    auto weights = schedule::load_weights(opt->model, opt->seed, &error);
    if (!weights) return fail(kExitUsage, error);

    eval::ProfileRunOptions po;
    po.position = opt->position;
    po.token = opt->token;
    po.warmup = opt->warmup;
    po.seed = opt->seed;
    std::optional<flywheel::RunDir> run_dir;
    if (!opt->no_run_dir && !(run_dir = start_run(opt->runs_dir, "profile", &error)))
      return fail(kExitEnvironment, error);
    eval::ProfileRun run = eval::profile_on_gpu(*prepared.program, *weights, po);
    if (run.doc.is_object() && run.doc.contains("kernel_info")) {
      const nlohmann::json& info = run.doc["kernel_info"];
      run.doc["bottleneck"] = eval::classify_profile(
          run.doc, info, eval::floor_for(*shape, *target, opt->position).floor_us,
          info.value("grid_blocks", 0), target->num_sms);
    }
    if (run_dir) {
      write_profile_run_dir(*run_dir, schedule::to_json(*config),
                            schedule::to_json(*prepared.program), run.doc,
                            run.status == "ok" ? kExitOk : kExitFailure);
    }
    if (run.status == "rejected" || run.status == "failed") return fail(kExitFailure, run.message);
    if (run.status == "error") return fail(kExitEnvironment, run.message);
    run.doc["gpu"] = target->name;
    run.doc["config"] = schedule::to_json(*config);
    if (!write_text_file(opt->out, run.doc.dump() + "\n", &error))
      return fail(kExitEnvironment, "--out: " + error);
    if (run.status != "ok") return fail(kExitFailure, run.message + "; what ran is in " + opt->out);
    if (opt->json) {
      print_json(run.doc);
    } else {
      std::printf("%s on %s, position %d\n%s\ntimeline and analysis: %s\nnote: %s\n",
                  weights->shape.name.c_str(), run.doc["device"].get<std::string>().c_str(),
                  opt->position, eval::format_profile(run.doc, opt->top).c_str(), opt->out.c_str(),
                  run.doc["note"].get<std::string>().c_str());
    }
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
