// `megasched validate`: proves a lowered config (or a program JSON file) safe to launch, or lists
// every violation. JSON on stdout; exit 0 only when safe, 1 when unsafe, 2 on bad arguments.
#include <chrono>
#include <random>

#include "eval/evaluate.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "schedule/lower.h"
#include "schedule/search.h"
#include "schedule/validate.h"

namespace megasched::harness {
namespace {

// Lowers and validates `count` random configs; prints a summary with every rejected config.
int validate_random_configs(const schedule::ModelShape& shape, const schedule::GpuTarget& target,
                            int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int accepted = 0, unlowered = 0;
  double slowest = 0.0, total = 0.0;
  size_t most_tasks = 0;
  nlohmann::json rejected = nlohmann::json::array();
  for (int i = 0; i < count; ++i) {
    const schedule::ScheduleConfig cfg = schedule::random_config(shape, target, rng);
    std::string error;
    const std::optional<schedule::Program> p = schedule::lower(shape, target, cfg, &error);
    if (!p) {
      ++unlowered;
      rejected.push_back({{"config", schedule::to_json(cfg)}, {"lowering", error}});
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    const schedule::ValidationReport r = schedule::validate(*p, target);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    slowest = std::max(slowest, s);
    total += s;
    most_tasks = std::max(most_tasks, p->tasks.size());
    if (r.ok())
      ++accepted;
    else
      rejected.push_back({{"config", schedule::to_json(cfg)}, {"report", schedule::to_json(r)}});
  }
  print_json({{"model", shape.name},
              {"target", target.name},
              {"configs", count},
              {"seed", seed},
              {"accepted", accepted},
              {"not_lowered", unlowered},
              {"rejected", rejected},
              {"most_tasks", most_tasks},
              {"validate_seconds_total", total},
              {"validate_seconds_max", slowest}});
  return accepted == count ? kExitOk : kExitFailure;
}

}  // namespace

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
  CLI::Option* model_given = add_model_flag(cmd, &opt->model,
                                            "Preset name or Hugging Face checkpoint directory "
                                            "(with --program: the program's own by default)");
  add_gpu_flag(cmd, &opt->gpu);
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig JSON file, - for stdin, default, or a name such as "
                  "best:llama-1b:h100 "
                  "(`megasched models` lists them; default: the default config)");
  cmd->add_option("--program", opt->program,
                  "Validate this program JSON file instead of lowering a config");
  cmd->add_option("--random-configs", opt->random_configs,
                  "Instead: lower and validate this many random configs of the search space (exit "
                  "0 if all accepted)")
      ->check(integer_in(1, kMaxInt));
  cmd->add_option("--seed", opt->seed, "Seed of --random-configs")
      ->check(unsigned_integer())
      ->capture_default_str();
  cmd->callback([&ctx, opt, model_given] {
    std::string error;
    auto usage = [&](const std::string& message) {
      print_error("validate", message);
      ctx.exit_code = kExitUsage;
    };
    auto target = eval::resolve_target(opt->gpu, &error);
    if (!target)
      return print_error("validate", error), void(ctx.exit_code = target_error_code(opt->gpu));
    if (opt->random_configs > 0) {
      auto shape = eval::resolve_shape(opt->model, &error);
      if (!shape) return usage(error + " (hint: `megasched models` lists the presets)");
      ctx.exit_code = validate_random_configs(*shape, *target, opt->random_configs, opt->seed);
      return;
    }
    std::optional<schedule::Program> program;
    nlohmann::json out;
    int code = kExitUsage;
    if (!opt->program.empty()) {
      if (!opt->config.empty()) return usage("give --config or --program, not both");
      program = read_program_arg(opt->program, &error, &code);
      if (!program) return print_error("validate", error), void(ctx.exit_code = code);
      // The model the program is checked against: --model, else the one it names when that is a
      // preset or a checkpoint (a hand-built program, e.g. the fuzzer's "fuzz", names none: the
      // validator then judges it against its own declarations alone).
      const bool given = model_given->count() > 0;
      const std::string model = given ? opt->model : program->model_name;
      auto shape = eval::resolve_shape(model, &error);
      if (!shape && given) return usage(error + " (hint: `megasched models` lists the presets)");
      if (shape && !schedule::check_program_fits_model(*program, *shape, *target, &error))
        return usage("program '" + opt->program + "' does not fit model " + shape->name + " on " +
                     target->name + ": " + error);
      out["program"] = opt->program;
      out["model"] = shape ? nlohmann::json(shape->name) : nlohmann::json(nullptr);
    } else {
      auto shape = eval::resolve_shape(opt->model, &error);
      if (!shape) return usage(error + " (hint: `megasched models` lists the presets)");
      auto config = read_config_arg(opt->config, &error, &code);
      if (!config) return print_error("validate", error), void(ctx.exit_code = code);
      program = schedule::lower(*shape, *target, *config, &error);
      if (!program) return usage("the config does not lower for " + shape->name + ": " + error);
      out["model"] = shape->name;
    }
    out["target"] = target->name;
    const auto start = std::chrono::steady_clock::now();
    const schedule::ValidationReport report = schedule::validate(*program, *target);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out["tasks"] = program->tasks.size();
    out["validate_seconds"] = seconds;
    out.update(schedule::to_json(report));
    print_json(out);
    ctx.exit_code = report.ok() ? kExitOk : kExitFailure;
  });
}

}  // namespace megasched::harness
