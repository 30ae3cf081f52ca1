// `megasched propose`: the incumbent config plus the documented search space for a model and
// target, as one JSON document an agent edits and sends back to `evaluate`.
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "harness/verbs.h"

namespace megasched::harness {

void add_propose_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string model = "toy";
    std::string gpu = "h100";
    std::string config;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "propose",
      "Print the incumbent ScheduleConfig and the search space (JSON) for a model and target");
  add_model_flag(cmd, &opt->model);
  add_gpu_flag(cmd, &opt->gpu);
  cmd->add_option("--config", opt->config,
                  "Incumbent config file, - for stdin, default, or a name such as "
                  "best:llama-1b:h100; "
                  "default: the default config");
  cmd->callback([&ctx, opt] {
    std::string error;
    int code = kExitUsage;
    auto config = read_config_arg(opt->config, &error, &code);
    if (!config) return print_error("propose", error), void(ctx.exit_code = code);
    ctx.exit_code = finish_verb("propose", propose_incumbent(opt->model, opt->gpu, *config));
  });
}

}  // namespace megasched::harness
