// `megasched evaluate`: one trial of one config (or a ready-made program) -> a Verdict (JSON).
// Exit 0 only when the program is valid and correct.
#include <fstream>

#include "eval/evaluate.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "schedule/lower.h"

namespace megasched::harness {

void add_evaluate_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    TrialFlags trial;
    std::string config;
    std::string program;
    bool no_baseline = false;
    std::string save_program;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("evaluate",
                                 "Run one trial of a ScheduleConfig and print its Verdict (JSON)");
  eval::EvaluatorOptions& ev = opt->trial.ev;
  add_model_flag(cmd, &ev.model);
  add_gpu_flag(cmd, &ev.gpu);
  add_device_flag(cmd, &ev.device);
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig JSON file, - for stdin, default, or a name such as "
                  "best:llama-1b:h100 "
                  "(`megasched models` lists them; default: the default config)");
  cmd->add_option("--program", opt->program,
                  "Evaluate a program JSON file instead of lowering a config");
  add_positions_flag(cmd, &opt->trial.positions);
  add_timed_position_flag(cmd, &ev.timed_position);
  add_seed_flag(cmd, &ev.seed);
  cmd->add_option("--iterations", ev.gpu_options.iterations, "Timed GPU iterations")
      ->capture_default_str();
  cmd->add_option("--warmup", ev.gpu_options.warmup, "Untimed GPU iterations")
      ->capture_default_str();
  cmd->add_flag("--no-baseline", opt->no_baseline, "Skip the cuBLAS CUDA-graph baseline (GPU)");
  cmd->add_option("--save-program", opt->save_program,
                  "Write the lowered program JSON to this file");
  cmd->callback([&ctx, opt] {
    std::string error;
    if (!opt->trial.parse_positions(&error))
      return print_error("evaluate", error + " (e.g. 0,3,7)"), void(ctx.exit_code = kExitUsage);
    eval::EvaluatorOptions& ev = opt->trial.ev;
    ev.gpu_options.time_baseline = !opt->no_baseline;
    std::optional<schedule::ScheduleConfig> config;
    if (opt->program.empty()) {
      config = read_config_arg(opt->config, &error);
      if (!config) return print_error("evaluate", error), void(ctx.exit_code = kExitUsage);
    }
    auto evaluator = eval::TrialEvaluator::create(ev, &error);
    if (!evaluator) {
      const bool env = error.find("--device gpu") != std::string::npos;
      return print_error("evaluate", error),
             void(ctx.exit_code = env ? kExitEnvironment : kExitUsage);
    }
    eval::Verdict verdict;
    if (!opt->program.empty()) {
      auto text = read_text(opt->program, &error);
      if (!text) return print_error("evaluate", error), void(ctx.exit_code = kExitUsage);
      auto j = nlohmann::json::parse(*text, nullptr, false);
      if (j.is_discarded())
        return print_error("evaluate", "program '" + opt->program + "' is not valid JSON"),
               void(ctx.exit_code = kExitUsage);
      auto program = schedule::program_from_json(j, &error);
      if (!program)
        return print_error("evaluate", "program '" + opt->program + "': " + error),
               void(ctx.exit_code = kExitUsage);
      verdict = evaluator->evaluate_program(*program, schedule::hash_hex(j.dump()));
    } else {
      if (!opt->save_program.empty()) {
        auto program = schedule::lower(evaluator->shape(), evaluator->target(), *config, &error);
        if (program) std::ofstream(opt->save_program) << schedule::to_json(*program).dump() << "\n";
      }
      verdict = evaluator->evaluate(*config);
    }
    print_json(eval::to_json(verdict));
    ctx.exit_code = verdict_exit_code(verdict);
  });
}

}  // namespace megasched::harness
