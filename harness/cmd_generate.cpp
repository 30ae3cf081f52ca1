// `megasched generate`: greedy decode with one built program (and on a GPU one built kernel) for
// every step; --verify checks each step against the eager reference.
#include <fstream>

#include "eval/evaluate.h"
#include "eval/generate.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"

namespace megasched::harness {

void add_generate_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string model = "toy";
    std::string gpu = "h100";
    std::string device = "cpu";
    std::string config;
    std::string prompt = "1";
    int max_tokens = 16;
    bool verify = false;
    uint64_t seed = 0;
    std::string logits_out;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "generate", "Greedy decode: feed a prompt, generate tokens with one built program");
  add_model_flag(cmd, &opt->model);
  add_gpu_flag(cmd, &opt->gpu, "GPU target the program is lowered for (or auto)");
  add_device_flag(cmd, &opt->device, "cpu (ReferenceVm) or gpu (the megakernel)");
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig JSON file, - for stdin, default, or a name such as "
                  "best:llama-1b:h100 "
                  "(`megasched models` lists them; default: the default config)");
  cmd->add_option("--prompt-ids", opt->prompt, "Prompt token ids, comma-separated")
      ->capture_default_str();
  cmd->add_option("--max-tokens", opt->max_tokens, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--verify", opt->verify,
                "Check every step's logits and token against the eager reference");
  add_seed_flag(cmd, &opt->seed, "--seed", "Weight seed for presets");
  cmd->add_option(
      "--logits-out", opt->logits_out,
      "Write every step's logits as raw little-endian float32 [steps][vocab] to this file");
  cmd->callback([&ctx, opt] {
    std::string error;
    auto prompt = parse_int_list(opt->prompt);
    if (!prompt)
      return print_error("generate", "--prompt-ids '" + opt->prompt +
                                         "' is not a comma-separated list of token ids"),
             void(ctx.exit_code = kExitUsage);
    auto config = read_config_arg(opt->config, &error);
    if (!config) return print_error("generate", error), void(ctx.exit_code = kExitUsage);
    auto target = eval::resolve_target(opt->gpu, &error);
    if (!target) return print_error("generate", error), void(ctx.exit_code = kExitUsage);
    if (opt->device == "gpu" && !eval::gpu_available(&error))
      return print_error("generate", "--device gpu: " + error),
             void(ctx.exit_code = kExitEnvironment);
    auto weights = eval::load_weights(opt->model, opt->seed, &error);
    if (!weights) return print_error("generate", error), void(ctx.exit_code = kExitUsage);
    eval::GenerateOptions g;
    g.prompt.assign(prompt->begin(), prompt->end());
    g.max_tokens = opt->max_tokens;
    g.device = opt->device;
    g.verify = opt->verify;
    std::ofstream dump;
    if (!opt->logits_out.empty()) {
      dump.open(opt->logits_out, std::ios::binary);
      if (!dump)
        return print_error("generate", "cannot write --logits-out '" + opt->logits_out + "'"),
               void(ctx.exit_code = kExitEnvironment);
      g.on_logits = [&dump](int, const std::vector<float>& logits) {
        dump.write(reinterpret_cast<const char*>(logits.data()),
                   static_cast<std::streamsize>(logits.size() * sizeof(float)));
      };
    }
    const auto result = eval::generate(*weights, *target, *config, g);
    auto j = eval::to_json(result);
    j["model"] = weights->shape.name;
    j["device"] = opt->device;
    j["prompt"] = g.prompt;
    print_json(j);
    if (!result.ok) print_error("generate", result.error);
    ctx.exit_code = result.ok ? kExitOk : kExitFailure;
  });
}

}  // namespace megasched::harness
