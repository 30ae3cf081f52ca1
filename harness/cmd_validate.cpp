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
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("validate",
                                 "Check a lowered config or a program JSON for deadlock, races, "
                                 "reachability, coverage and launch limits");
  add_model_flag(cmd, &opt->model);
  add_gpu_flag(cmd, &opt->gpu);
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig JSON file, - for stdin, default, or a name such as "
                  "best:llama-1b:h100 "
                  "(`megasched models` lists them; default: the default config)");
  cmd->add_option("--program", opt->program,
                  "Validate this program JSON file instead of lowering a config");
  cmd->add_option("--random-configs", opt->random_configs,
                  "Instead: lower and validate this many random configs of the search space (exit "
                  "0 if all accepted)");
  cmd->add_option("--seed", opt->seed, "Seed of --random-configs")->capture_default_str();
  cmd->callback([&ctx, opt] {
    std::string error;
    auto usage = [&](const std::string& message) {
      print_error("validate", message);
      ctx.exit_code = kExitUsage;
    };
    ValidateRequest request;
    request.model = opt->model;
    request.gpu = opt->gpu;
    request.random_configs = opt->random_configs;
    request.seed = opt->seed;
    const bool random = opt->random_configs > 0;  // the random configs need nothing else
    if (!random && !opt->program.empty()) {
      auto text = read_text(opt->program, &error);
      if (!text) return usage(error);
      auto j = nlohmann::json::parse(*text, nullptr, false);
      if (j.is_discarded())
        return usage(
            "program '" + opt->program +
            "' is not valid JSON (hint: write one with `megasched evaluate --save-program`)");
      request.program = std::move(j);
      request.program_label = opt->program;
    } else if (!random) {
      request.config = read_config_arg(opt->config, &error);
      if (!request.config) return usage(error);
    }
    ctx.exit_code = finish_verb("validate", validate_schedule(request));
  });
}

}  // namespace megasched::harness
