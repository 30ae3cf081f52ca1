// `megasched validate`: proves a lowered config (or a program JSON file) safe to launch, or lists
// every violation. JSON on stdout; exit 0 only when safe, 1 when unsafe, 2 on bad arguments.
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "harness/verbs.h"

namespace megasched::harness {

void add_validate_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string model = "toy";
    std::string gpu = "h100";
    std::string config;
    std::string program;
    int random_configs = 0;
    uint64_t seed = 1;
    bool kernel = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("validate",
                                 "Check a lowered config or a program JSON for deadlock, races, "
                                 "reachability, coverage and launch limits");
  CLI::Option* model_given = add_model_flag(cmd, &opt->model,
                                            "Preset name or Hugging Face checkpoint directory "
                                            "(with --program: the program's own by default)");
  add_gpu_flag(cmd, &opt->gpu);
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig or plan JSON file, - for stdin, default, or a name such as "
                  "best:llama-1b:h100 "
                  "(`megasched models` lists them; default: the default config)");
  cmd->add_option("--program", opt->program,
                  "Validate this program JSON file instead of lowering a config");
  cmd->add_option("--random-configs", opt->random_configs,
                  "Instead: lower and validate this many random configs of the search space (exit "
                  "0 if all accepted)")
      ->check(integer_in(1, kMaxInt));
  cmd->add_flag("--kernel", opt->kernel,
                "Also build the megakernel with NVRTC for the target (no GPU needed) and report "
                "its registers, spills and stack under \"kernel\" (exit 1 if it does not build)");
  cmd->add_option("--seed", opt->seed, "Seed of --random-configs")
      ->check(unsigned_integer())
      ->capture_default_str();
  cmd->callback([&ctx, opt, model_given] {
    std::string error;
    auto usage = [&](const std::string& message) {
      print_error("validate", message);
      ctx.exit_code = kExitUsage;
    };
    ValidateRequest request;
    request.model = opt->model;
    request.model_given = model_given->count() > 0;
    request.gpu = opt->gpu;
    request.random_configs = opt->random_configs;
    request.seed = opt->seed;
    request.kernel = opt->kernel;
    int code = kExitUsage;
    if (opt->random_configs == 0 && !opt->program.empty()) {
      if (!opt->config.empty()) return usage("give --config or --program, not both");
      request.program = read_program_arg(opt->program, &error, &code);
      if (!request.program) return print_error("validate", error), void(ctx.exit_code = code);
      request.program_label = opt->program;
    } else if (opt->random_configs == 0) {
      auto plan = read_plan_arg(opt->config, &error, &code);
      if (!plan) return print_error("validate", error), void(ctx.exit_code = code);
      if (plan->single())
        request.config = plan->buckets[0].config;
      else
        request.plan = std::move(plan);
    }
    ctx.exit_code = finish_verb("validate", validate_schedule(request));
  });
}

}  // namespace megasched::harness
