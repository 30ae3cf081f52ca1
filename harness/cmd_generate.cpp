// `megasched generate`: greedy decode with one built program (and on a GPU one built kernel) for
// every step, or with a plan each bucket's program for its positions (eval/generate.h); --verify
// checks each step against the eager reference.
#include <cerrno>
#include <cstring>
#include <fstream>

#include "eval/evaluate.h"
#include "eval/generate.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "schedule/lookup.h"

namespace megasched::harness {

namespace {

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

int fail(int code, const std::string& message) {
  print_error("generate", message);
  return code;
}

/// The decode the flags describe; returns the exit code.
int run_generate(const Options& opt) {
  std::string error;
  auto prompt = schedule::parse_int_list(opt.prompt);
  if (!prompt)
    return fail(kExitUsage,
                "--prompt-ids '" + opt.prompt + "' is not a comma-separated list of token ids");
  int code = kExitUsage;
  auto plan = read_plan_arg(opt.config, &error, &code);
  if (!plan) return fail(code, error);
  auto target = eval::resolve_target(opt.gpu, &error);
  if (!target) return fail(target_error_code(opt.gpu), error);
  if (opt.device == "gpu" && !eval::gpu_available(&error))
    return fail(kExitEnvironment, "--device gpu: " + error);
  auto weights = schedule::load_weights(opt.model, opt.seed, &error);
  if (!weights) return fail(kExitUsage, error);
  if (!schedule::check_plan_covers(*plan, weights->shape.max_seq, &error))
    return fail(kExitUsage, "the plan does not fit model " + weights->shape.name + ": " + error);
  eval::GenerateOptions g;
  g.prompt.assign(prompt->begin(), prompt->end());
  g.max_tokens = opt.max_tokens;
  g.device = opt.device;
  g.verify = opt.verify;
  if (const std::string bad = eval::generate_input_error(weights->shape, g); !bad.empty())
    return fail(kExitUsage, bad + " (--prompt-ids, --max-tokens)");
  std::ofstream dump;
  if (!opt.logits_out.empty()) {
    dump.open(opt.logits_out, std::ios::binary);
    if (!dump)
      return fail(kExitEnvironment,
                  "--logits-out: cannot write '" + opt.logits_out + "': " + std::strerror(errno));
    g.on_logits = [&dump](int, const std::vector<float>& logits) {
      dump.write(reinterpret_cast<const char*>(logits.data()),
                 static_cast<std::streamsize>(logits.size() * sizeof(float)));
    };
  }
  const auto result = eval::generate(*weights, *target, *plan, g);
  if (!opt.logits_out.empty()) {
    dump.close();  // a full disk shows here, when the last buffer is flushed
    if (!dump)
      return fail(kExitEnvironment,
                  "--logits-out: cannot write '" + opt.logits_out + "': " + std::strerror(errno));
  }
  auto j = eval::to_json(result);
  j["model"] = weights->shape.name;
  j["device"] = opt.device;
  j["prompt"] = g.prompt;
  print_json(j);
  if (!result.ok) print_error("generate", result.error);
  return result.ok ? kExitOk : kExitFailure;
}

}  // namespace

void add_generate_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "generate",
      "Greedy decode: feed a prompt, generate tokens with one built program (a plan: one per "
      "bucket, every kernel built before the first token, one KV cache)");
  add_model_flag(cmd, &opt->model);
  add_gpu_flag(cmd, &opt->gpu, "GPU target the program is lowered for (or auto)");
  add_device_flag(cmd, &opt->device, "cpu (ReferenceVm) or gpu (the megakernel)");
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig or plan JSON file (a plan switches program at its bucket "
                  "boundaries), - for stdin, default, or a name such as best:llama-1b:h100 "
                  "(`megasched models` lists them; default: the default config)");
  cmd->add_option("--prompt-ids", opt->prompt, "Prompt token ids, comma-separated")
      ->capture_default_str();
  cmd->add_option("--max-tokens", opt->max_tokens, "Tokens to generate")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--verify", opt->verify,
                "Check every step's logits and token against the eager reference");
  add_seed_flag(cmd, &opt->seed, "--seed", "Weight seed for presets");
  cmd->add_option(
      "--logits-out", opt->logits_out,
      "Write every step's logits as raw little-endian float32 [steps][vocab] to this file");
  cmd->callback([&ctx, opt] { ctx.exit_code = run_generate(*opt); });
}

}  // namespace megasched::harness
