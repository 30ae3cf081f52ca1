// `megasched propose`: the incumbent config plus the documented search space for a model and
// target, as one JSON document an agent edits and sends back to `evaluate`.
#include "eval/evaluate.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "schedule/config.h"
#include "schedule/search.h"

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
    auto shape = eval::resolve_shape(opt->model, &error);
    if (!shape) return print_error("propose", error), void(ctx.exit_code = kExitUsage);
    auto target = eval::resolve_target(opt->gpu, &error);
    if (!target)
      return print_error("propose", error), void(ctx.exit_code = target_error_code(opt->gpu));
    int code = kExitUsage;
    auto config = read_config_arg(opt->config, &error, &code);
    if (!config) return print_error("propose", error), void(ctx.exit_code = code);
    std::string fit;
    const bool fits = schedule::config_fits(*config, *shape, *target, &fit);
    nlohmann::json out = {
        {"model", shape->name},
        {"target", target->name},
        {"incumbent", schedule::to_json(*config)},
        {"incumbent_fits", fits},
        {"search_space", schedule::search_space_json(*shape)},
        {"next",
         "edit `incumbent` (any knob to any listed choice) and run: megasched evaluate --model " +
             shape->name + " --gpu " + target->name + " --device cpu --config cfg.json"},
    };
    if (!fits) out["incumbent_fit_error"] = fit;
    print_json(out);
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
