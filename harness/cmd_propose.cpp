// `megasched propose`: the incumbent config plus the documented search space for a model and
// target, as one JSON document an agent edits and sends back to `evaluate`.
#include "eval/bottleneck.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "harness/verbs.h"
#include "schedule/lookup.h"

namespace megasched::harness {
namespace {

/// The knob axis the incumbent's verdict points to (eval/bottleneck.h): its class, the axis, and
/// each knob of it with the incumbent's value and the choices, from the search space. nullopt
/// with *error when the verdict cannot be read; a null "next_axis" when it has no class.
std::optional<nlohmann::json> next_axis(const std::string& path, const nlohmann::json& proposal,
                                        std::string* error, int* code) {
  auto text = read_text(path, error);
  if (!text) return *code = kExitEnvironment, std::nullopt;
  nlohmann::json verdict = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!verdict.is_object()) {
    *error = "--verdict '" + path + "' is not a Verdict JSON object (the output of evaluate)";
    return *code = kExitUsage, std::nullopt;
  }
  const nlohmann::json b = verdict.value("bottleneck", nlohmann::json());
  if (!b.is_object()) return nlohmann::json(nullptr);
  auto axis = eval::suggest_axis(b.value("class", ""));
  if (!axis) {
    *error =
        "--verdict '" + path + "': unknown bottleneck class " + b.value("class", "").substr(0, 40);
    return *code = kExitUsage, std::nullopt;
  }
  nlohmann::json knobs = nlohmann::json::array();
  for (const std::string& knob : axis->knobs) {
    for (const auto& k : proposal["search_space"]["knobs"]) {
      if (k["path"] != knob) continue;
      const std::string group = knob.substr(0, knob.find('.'));
      const std::string name = knob.substr(knob.find('.') + 1);
      knobs.push_back({{"path", knob},
                       {"value", proposal["incumbent"][group][name]},
                       {"choices", k["choices"]}});
    }
  }
  return nlohmann::json{
      {"bottleneck", b}, {"axis", axis->axis}, {"why", axis->why}, {"knobs", knobs}};
}

}  // namespace

void add_propose_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string model = "toy";
    std::string gpu = "h100";
    std::string config;
    std::string verdict;
    int position = 0;
    bool config_only = false;
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
  cmd->add_option("--position", opt->position,
                  "With a plan as --config (best:llama-1b:h100 is one): the incumbent is the "
                  "config of the bucket that holds this position")
      ->check(integer_in(0, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--verdict", opt->verdict,
                  "The incumbent's Verdict (evaluate's output): adds next_axis, the knob axis its "
                  "bottleneck class points to");
  cmd->add_flag("--config-only", opt->config_only,
                "Print the incumbent config alone, the file evaluate --config reads "
                "(`propose --config-only > cfg.json`, edit, evaluate)")
      ->excludes("--verdict");
  cmd->callback([&ctx, opt] {
    std::string error;
    int code = kExitUsage;
    if (auto shape = schedule::resolve_shape(opt->model, &error);
        shape && opt->position >= shape->max_seq)
      return print_error("propose", "--position " + std::to_string(opt->position) +
                                        " is past the last position " +
                                        std::to_string(shape->max_seq - 1) + " of model " +
                                        shape->name),
             void(ctx.exit_code = kExitUsage);
    auto config = read_config_arg(opt->config, &error, &code, opt->position);
    if (!config) return print_error("propose", error), void(ctx.exit_code = code);
    VerbResult result = propose_incumbent(opt->model, opt->gpu, *config);
    if (result.exit_code == kExitOk && opt->config_only)
      result.document = nlohmann::json(result.document["incumbent"]);
    if (result.exit_code == kExitOk && !opt->verdict.empty()) {
      auto axis = next_axis(opt->verdict, result.document, &error, &code);
      if (!axis) return print_error("propose", error), void(ctx.exit_code = code);
      result.document["next_axis"] = *axis;
    }
    ctx.exit_code = finish_verb("propose", result);
  });
}

}  // namespace megasched::harness
