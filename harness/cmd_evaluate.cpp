// `megasched evaluate`: one trial of one config (or a ready-made program) -> a Verdict (JSON).
// Exit 0 only when the program is valid and correct.
#include "eval/evaluate.h"
#include "eval/plan_evaluate.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/run_record.h"
#include "harness/trial_flags.h"
#include "harness/verbs.h"
#include "schedule/lookup.h"
#include "schedule/lower.h"

namespace megasched::harness {

namespace {

struct Options {
  TrialFlags trial;
  std::string config;
  std::string program;
  bool no_baseline = false;
  std::string save_program;
  std::string runs_dir = "workspace/runs";
  bool no_run_dir = false;
};

int fail(int code, const std::string& message) {
  print_error("evaluate", message);
  return code;
}

/// The trial of a plan of several buckets (eval/plan_evaluate.h); returns the exit code.
int run_evaluate_plan(const Options& opt, const schedule::Plan& plan) {
  if (!opt.save_program.empty())
    return fail(kExitUsage,
                "--save-program saves one program; a plan has one per bucket (hint: "
                "evaluate a bucket's config with --save-program)");
  std::string error;
  bool environment = false;
  std::optional<flywheel::RunDir> run;
  if (!opt.no_run_dir && !(run = start_run(opt.runs_dir, "evaluate", &error)))
    return fail(kExitEnvironment, error);
  auto verdict = eval::evaluate_plan(opt.trial.ev, plan, &error, &environment);
  if (!verdict) {
    if (run) end_run(*run, environment ? kExitEnvironment : kExitUsage);
    return fail(environment ? kExitEnvironment : kExitUsage, error);
  }
  print_json(eval::to_json(*verdict));
  const int code = verdict_exit_code(*verdict);
  if (run) {
    if (!flywheel::write_trial_files(*run, schedule::to_json(plan), nullptr, *verdict, &error))
      print_error("evaluate", "run directory: " + error);
    end_run(*run, code);
  }
  return code;
}

/// The trial the flags describe; returns the exit code.
int run_evaluate(Options& opt) {
  std::string error;
  if (!opt.trial.parse_positions(&error)) return fail(kExitUsage, error + " (e.g. 0,3,7)");
  if (!opt.trial.parse_objective(&error)) return fail(kExitUsage, error);
  eval::EvaluatorOptions& ev = opt.trial.ev;
  if (opt.no_baseline) ev.gpu_options.baselines.clear();
  if (!opt.program.empty() && (!opt.config.empty() || !opt.save_program.empty()))
    return fail(kExitUsage, "--program runs a saved program: give no --config or --save-program");
  std::optional<schedule::ScheduleConfig> config;
  std::optional<schedule::Program> program;
  int code = kExitUsage;
  if (opt.program.empty()) {
    auto plan = read_plan_arg(opt.config, &error, &code);
    if (!plan) return fail(code, error);
    if (!plan->single()) return run_evaluate_plan(opt, *plan);
    config = plan->buckets[0].config;
  } else {
    program = read_program_arg(opt.program, &error, &code);
    if (!program) return fail(code, error);
    // Checked before the model loads: a program of another model is refused at once.
    auto shape = schedule::resolve_shape(ev.model, &error);
    auto target = shape ? eval::resolve_target(ev.gpu, &error) : std::nullopt;
    if (shape && target && !schedule::check_program_fits_model(*program, *shape, *target, &error))
      return fail(kExitUsage, "program '" + opt.program + "' does not fit model " + shape->name +
                                  " on " + target->name + ": " + error);
  }
  bool environment = false;
  ev.progress = progress_on_stderr("evaluate");
  auto evaluator = eval::TrialEvaluator::create(ev, &error, &environment);
  if (!evaluator) return fail(environment ? kExitEnvironment : kExitUsage, error);
  // Input checks and --save-program first: a refused input is one stderr line, no run.
  if (program && !evaluator->check_program(*program, &error))
    return fail(kExitUsage, "program '" + opt.program + "' does not fit model " +
                                evaluator->shape().name + " on " + evaluator->target().name + ": " +
                                error);
  if (config && !opt.save_program.empty()) {
    // A config that does not lower has no program to save; its verdict says why (rejected).
    auto lowered = schedule::lower(evaluator->shape(), evaluator->target(), *config, &error);
    if (!lowered)
      print_error("evaluate", "--save-program: nothing saved, the config does not lower");
    else if (!write_text_file(opt.save_program, schedule::to_json(*lowered).dump() + "\n", &error))
      return fail(kExitEnvironment, "--save-program: " + error);
  }
  std::optional<flywheel::RunDir> run;
  if (!opt.no_run_dir && !(run = start_run(opt.runs_dir, "evaluate", &error)))
    return fail(kExitEnvironment, error);
  const eval::Verdict verdict =
      program ? evaluator->evaluate_program(*program,
                                            schedule::hash_hex(schedule::to_json(*program).dump()))
              : evaluator->evaluate(*config);
  print_json(eval::to_json(verdict));
  const int code_of_verdict = verdict_exit_code(verdict);
  if (run) {
    nlohmann::json program_json = program ? schedule::to_json(*program) : nlohmann::json();
    if (config) {
      auto lowered = schedule::lower(evaluator->shape(), evaluator->target(), *config, &error);
      if (lowered) program_json = schedule::to_json(*lowered);
    }
    const nlohmann::json config_json = config ? schedule::to_json(*config) : nlohmann::json();
    if (!flywheel::write_trial_files(*run, config_json, program_json, verdict, &error))
      print_error("evaluate", "run directory: " + error);
    end_run(*run, code_of_verdict);
  }
  return code_of_verdict;
}

}  // namespace

void add_evaluate_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("evaluate",
                                 "Run one trial of a ScheduleConfig and print its Verdict (JSON)");
  eval::EvaluatorOptions& ev = opt->trial.ev;
  add_model_flag(cmd, &ev.model);
  add_gpu_flag(cmd, &ev.gpu);
  add_device_flag(cmd, &ev.device);
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig or plan JSON file, - for stdin, default, or a name such as "
                  "best:llama-1b:h100 "
                  "(`megasched models` lists them; default: the default config)");
  cmd->add_option("--program", opt->program,
                  "Evaluate a program JSON file instead of lowering a config");
  add_positions_flag(cmd, &opt->trial.positions);
  add_timed_position_flag(cmd, &ev.timed_position);
  add_objective_flag(cmd, &opt->trial.objective);
  add_seed_flag(cmd, &ev.seed);
  cmd->add_option("--iterations", ev.gpu_options.iterations, "Timed GPU iterations")
      ->check(integer_in(1, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--warmup", ev.gpu_options.warmup, "Untimed GPU iterations")
      ->check(integer_in(0, kMaxInt))
      ->capture_default_str();
  auto* baselines = add_baselines_flag(cmd, &ev.gpu_options.baselines, "all");
  cmd->add_flag("--no-baseline", opt->no_baseline, "Time no baseline (GPU): --baselines none")
      ->excludes(baselines);
  cmd->add_option("--save-program", opt->save_program,
                  "Write the lowered program JSON to this file");
  add_runs_dir_flags(cmd, &opt->runs_dir, &opt->no_run_dir);
  cmd->callback([&ctx, opt] { ctx.exit_code = run_evaluate(*opt); });
}

}  // namespace megasched::harness
