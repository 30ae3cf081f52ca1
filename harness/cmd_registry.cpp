// `megasched registry list|show ID|verify ID`: the verified registry (flywheel/registry.h).
// list: every entry (newest last) and every corrupt line (exit 1 when there is one, the good
// entries still listed); show: one entry; verify: re-runs the promotion's verify gate on it (a
// plan's bucket by bucket, harness/promote.h).
#include <memory>

#include "eval/device.h"
#include "flywheel/registry.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/promote.h"
#include "schedule/config.h"
#include "schedule/plan.h"

namespace megasched::harness {
namespace {

using nlohmann::json;

struct Options {
  std::string registry = flywheel::default_registry_path();
  std::string id;
  std::string device = "auto";
  std::string positions;
  int tokens = kVerifyTokens;
};

/// The registry, or an exit code after its message.
std::optional<flywheel::RegistryRead> load(const Options& opt, int* code) {
  flywheel::RegistryRead registry = flywheel::read_registry(opt.registry);
  if (!registry.error.empty()) {
    print_error("registry", registry.error);
    *code = kExitEnvironment;
    return std::nullopt;
  }
  for (const std::string& problem : registry.problems) print_error("registry", problem);
  return registry;
}

json list_row(const flywheel::RegistryEntry& e) {
  return {{"id", e.id},
          {"model", e.model},
          {"gpu", e.gpu},
          {"dtype", e.dtype},
          {"latency_kind", e.fields.value("latency_kind", std::string("measured-gpu"))},
          {"device", e.fields.value("device", std::string("gpu"))},
          {"candidate_median_us", e.fields.value("candidate_median_us", json(nullptr))},
          {"speedup", e.fields.value("speedup", json(nullptr))},
          {"incumbent", e.fields.value("incumbent", json(nullptr))},
          {"timestamp", e.fields.value("timestamp", json(nullptr))},
          {"run_id", e.fields.value("run_id", json(nullptr))}};
}

}  // namespace

VerbResult registry_list(const std::string& path) {
  VerbResult r;
  flywheel::RegistryRead registry = flywheel::read_registry(path);
  if (!registry.error.empty()) return {kExitEnvironment, nullptr, registry.error};
  json rows = json::array();
  for (const auto& e : registry.entries) rows.push_back(list_row(e));
  r.document = {{"registry", path}, {"entries", rows}, {"problems", registry.problems}};
  if (!registry.problems.empty()) {
    r.exit_code = kExitFailure;
    r.message = std::to_string(registry.problems.size()) + " corrupt line(s) in " + path +
                " skipped (listed under problems; the other entries are intact): " +
                registry.problems.front();
  }
  return r;
}

VerbResult registry_show(const std::string& path, const std::string& id) {
  flywheel::RegistryRead registry = flywheel::read_registry(path);
  if (!registry.error.empty()) return {kExitEnvironment, nullptr, registry.error};
  auto entry = flywheel::find_entry(registry, id);
  if (!entry) {
    std::vector<std::string> ids;
    for (const auto& e : registry.entries) ids.push_back(e.id);
    const std::string near = schedule::nearest(id, ids);
    return {kExitUsage, nullptr,
            "no entry '" + id + "' in " + path +
                (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                "; `megasched registry list` lists them"};
  }
  return {kExitOk, flywheel::to_json(*entry), ""};
}

void add_registry_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "registry", "The verified registry of promoted configs: list, show ID, verify ID");
  cmd->require_subcommand(1);
  auto* list = cmd->add_subcommand("list", "Every entry (newest last) and every corrupt line");
  list->callback(
      [&ctx, opt] { ctx.exit_code = finish_verb("registry", registry_list(opt->registry)); });
  auto* show = cmd->add_subcommand("show", "One entry as JSON");
  show->add_option("id", opt->id, "Entry id (`megasched registry list`)")->required();
  show->callback([&ctx, opt] {
    ctx.exit_code = finish_verb("registry", registry_show(opt->registry, opt->id));
  });
  auto* verify = cmd->add_subcommand("verify", "Re-run the verify gate on one entry");
  verify->add_option("id", opt->id, "Entry id")->required();
  verify->add_option("--device", opt->device, "cpu, gpu, or auto (gpu when one is usable)")
      ->check(CLI::IsMember({"cpu", "gpu", "auto"}))
      ->capture_default_str();
  verify->add_option("--positions", opt->positions, "Positions to check (default 0,1024,4096)");
  verify->add_option("--tokens", opt->tokens, "Tokens of the generate --verify")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  for (CLI::App* sub : {list, show, verify})  // after the verb: `registry list --registry F`
    sub->add_option("--registry", opt->registry, "The registry file ($MEGASCHED_REGISTRY)")
        ->capture_default_str();
  verify->callback([&ctx, opt] {
    int code = kExitOk;
    auto registry = load(*opt, &code);
    if (!registry) return void(ctx.exit_code = code);
    auto entry = flywheel::find_entry(*registry, opt->id);
    if (!entry) {
      print_error("registry", "no entry '" + opt->id + "' in " + opt->registry);
      return void(ctx.exit_code = kExitUsage);
    }
    std::string error;
    auto plan = schedule::parse_plan(entry->config, &error);
    if (!plan) {
      print_error("registry", entry->id + ": " + error);
      return void(ctx.exit_code = kExitUsage);
    }
    VerifyRequest vr{entry->model, entry->gpu, opt->device, 0, {}, opt->tokens};
    if (vr.device == "auto") vr.device = eval::gpu_available(nullptr) ? "gpu" : "cpu";
    if (!opt->positions.empty()) {
      auto list = schedule::parse_int_list(opt->positions);
      if (!list || list->empty()) {
        print_error("registry",
                    "--positions '" + opt->positions + "' is not a list such as 0,1024");
        return void(ctx.exit_code = kExitUsage);
      }
      vr.positions = *list;
    }
    eval::Verdict verdict;
    bool environment = false;
    // A plan of several buckets: each bucket's config checked at the positions inside it.
    const GateOutcome gate =
        plan->single() ? run_verify_gate(vr, plan->buckets[0].config, &verdict, &environment)
                       : run_plan_verify_gate(vr, *plan, nullptr, &environment);
    print_json({{"id", entry->id},
                {"pass", gate.pass},
                {"message", gate.message},
                {"verify", gate.detail}});
    if (!gate.pass) print_error("registry", gate.message);
    ctx.exit_code = gate.pass ? kExitOk : environment ? kExitEnvironment : kExitFailure;
  });
}

}  // namespace megasched::harness
