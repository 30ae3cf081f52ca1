// `megasched worker`: the trial process of GPU fault isolation. Loads the model and target once,
// prints a ready line, then answers one JSON line per request line on stdin until end of input
// (protocol in harness/worker_evaluator.h and HARNESS.md). `megasched loop` starts it; a person
// can too: `echo '{}' | megasched worker --model toy --device cpu`.
#include <iostream>

#include "eval/evaluate.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/worker_evaluator.h"

namespace megasched::harness {

void add_worker_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    eval::EvaluatorOptions ev;
    std::string positions = "0,3,7";
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "worker", "Answer trial requests (JSON lines) on stdin: the loop's isolated trial process");
  cmd->add_option("--model", opt->ev.model, "Preset name or Hugging Face checkpoint directory")
      ->capture_default_str();
  cmd->add_option("--gpu", opt->ev.gpu, "GPU target (see `megasched targets`) or auto")
      ->capture_default_str();
  cmd->add_option("--device", opt->ev.device, "cpu (predicted latency) or gpu (measured)")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  cmd->add_option("--positions", opt->positions,
                  "Positions whose logits are checked, comma-separated")
      ->capture_default_str();
  cmd->add_option("--weight-seed", opt->ev.seed, "Weight and token seed for presets")
      ->capture_default_str();
  cmd->add_option("--timed-position", opt->ev.timed_position,
                  "Position the latency and the floor refer to")
      ->capture_default_str();
  cmd->callback([&ctx, opt] {
    auto positions = parse_int_list(opt->positions);
    if (!positions) {
      std::cout << nlohmann::json{{"ready", false},
                                  {"error", "--positions is not a list of integers"}}
                       .dump()
                << std::endl;
      ctx.exit_code = kExitUsage;
      return;
    }
    opt->ev.positions = *positions;
    std::string error;
    auto evaluator = eval::TrialEvaluator::create(opt->ev, &error);
    if (!evaluator) {
      std::cout << nlohmann::json{{"ready", false}, {"error", error}}.dump() << std::endl;
      print_error("worker", error);
      ctx.exit_code = opt->ev.device == "gpu" ? kExitEnvironment : kExitUsage;
      return;
    }
    serve_worker(*evaluator, std::cin, std::cout);
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
