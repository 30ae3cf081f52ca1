// `megasched worker`: the trial process of GPU fault isolation. Loads the model and target once,
// prints a ready line, then answers one JSON line per request line on stdin until end of input
// (protocol in search/worker_evaluator.h and HARNESS.md). `megasched loop` starts it; a person
// can too: `echo '{}' | megasched worker --model toy --device cpu`.
#include <iostream>

#include "eval/evaluate.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "search/worker_evaluator.h"

namespace megasched::harness {

void add_worker_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<TrialFlags>();
  auto* cmd = app.add_subcommand(
      "worker", "Answer trial requests (JSON lines) on stdin: the loop's isolated trial process");
  add_model_flag(cmd, &opt->ev.model);
  add_gpu_flag(cmd, &opt->ev.gpu);
  add_device_flag(cmd, &opt->ev.device);
  add_positions_flag(cmd, &opt->positions);
  add_seed_flag(cmd, &opt->ev.seed, "--weight-seed");
  add_timed_position_flag(cmd, &opt->ev.timed_position);
  add_objective_flag(cmd, &opt->objective);
  add_baselines_flag(cmd, &opt->ev.gpu_options.baselines, "all");
  add_stop_slower_flag(cmd, &opt->ev.stop_slower, 0.0);
  cmd->callback([&ctx, opt] {
    std::string why;
    const bool positions_ok = opt->parse_positions(&why);
    if (!positions_ok || !opt->parse_objective(&why)) {
      std::cout << nlohmann::json{{"ready", false}, {"error", why}}.dump() << std::endl;
      print_error("worker", positions_ok ? why : why + " (e.g. 0,3,7)");
      ctx.exit_code = kExitUsage;
      return;
    }
    std::string error;
    bool environment = false;
    auto evaluator = eval::TrialEvaluator::create(opt->ev, &error, &environment);
    if (!evaluator) {
      std::cout << nlohmann::json{{"ready", false}, {"error", error}}.dump() << std::endl;
      print_error("worker", error);
      ctx.exit_code = environment ? kExitEnvironment : kExitUsage;
      return;
    }
    search::serve_worker(*evaluator, std::cin, std::cout);
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
