// `megasched models` and `megasched targets`: what can be lowered, and for which GPU.
#include <cstdio>

#include "harness/cli_util.h"
#include "harness/commands.h"
#include "schedule/model.h"
#include "schedule/named_configs.h"
#include "schedule/target.h"

namespace megasched::harness {

namespace {

nlohmann::json shape_json(const schedule::ModelShape& s) {
  nlohmann::json j = schedule::to_json(s);
  j["rope_theta"] = s.rope_theta;
  j["params"] = s.param_count();
  j["weight_bytes"] = s.weight_bytes();
  return j;
}

}  // namespace

void add_models_command(CLI::App& app, CliContext& ctx) {
  auto* cmd =
      app.add_subcommand("models", "List the model presets with parameter count and weight bytes");
  auto json_out = std::make_shared<bool>(false);
  auto named = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json_out, "Print JSON instead of a table");
  cmd->add_flag("--named-configs", *named,
                "List the named configs (--config best:MODEL:GPU) instead of the presets");
  cmd->callback([&ctx, json_out, named] {
    if (*named) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& c : schedule::named_configs())
        arr.push_back({{"name", c.name},
                       {"model", c.model},
                       {"gpu", c.gpu},
                       {"source", c.source},
                       {"measured", c.measured},
                       {"config", c.config}});
      if (*json_out) {
        print_json(arr);
      } else {
        for (const auto& c : arr)
          std::printf("%-22s %s\n  %-20s %s\n  %-20s %s\n", c["name"].get<std::string>().c_str(),
                      c["config"].dump().c_str(),
                      "measured:", c["measured"].get<std::string>().c_str(),
                      "source:", c["source"].get<std::string>().c_str());
      }
      ctx.exit_code = kExitOk;
      return;
    }
    if (*json_out) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& p : schedule::presets()) arr.push_back(shape_json(p));
      print_json(arr);
    } else {
      std::printf("%-10s %6s %7s %5s %5s %5s %6s %7s %5s %14s %10s\n", "model", "dtype", "hidden",
                  "layer", "heads", "kv", "hd", "ffn", "tied", "params", "weight MB");
      for (const auto& p : schedule::presets())
        std::printf("%-10s %6s %7d %5d %5d %5d %6d %7d %5s %14lld %10.1f\n", p.name.c_str(),
                    schedule::dtype_name(p.dtype), p.hidden, p.layers, p.heads, p.kv_heads,
                    p.head_dim, p.ffn, p.tied_embeddings ? "yes" : "no",
                    static_cast<long long>(p.param_count()), p.weight_bytes() / 1e6);
      std::printf("A directory with a Hugging Face Llama checkpoint also works as --model.\n");
      std::printf("Named configs (`--config NAME`, see --named-configs):");
      for (const auto& c : schedule::named_configs()) std::printf(" %s", c.name.c_str());
      std::printf("\n");
    }
    ctx.exit_code = kExitOk;
  });
}

void add_targets_command(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand(
      "targets", "List the GPU targets of the registry (plus `auto`: the live device)");
  auto json_out = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json_out, "Print JSON instead of a table");
  cmd->callback([&ctx, json_out] {
    if (*json_out) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& t : schedule::target_registry()) arr.push_back(schedule::to_json(t));
      print_json(arr);
    } else {
      std::printf("%-10s %5s %5s %12s %10s %9s %10s\n", "target", "sm", "SMs", "smem/block",
                  "L2 MiB", "HBM GB", "BW GB/s");
      for (const auto& t : schedule::target_registry())
        std::printf("%-10s %5d %5d %12d %10.0f %9.0f %10.0f\n", t.name.c_str(), t.sm_arch,
                    t.num_sms, t.smem_per_block_optin, t.l2_bytes / 1048576.0, t.hbm_bytes / 1e9,
                    t.datasheet_bw_gbs);
      std::printf("`--gpu auto` reads the live device (needs a CUDA build and a GPU).\n");
    }
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
