// `megasched runs list|gc --keep N`: the run directories (flywheel/run_dir.h). Nothing is pruned
// unless gc is asked, and gc removes only folders named by a run id.
#include <filesystem>
#include <memory>

#include "flywheel/run_dir.h"
#include "harness/cli_util.h"
#include "harness/commands.h"

namespace megasched::harness {

void add_runs_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string runs_dir = "workspace/runs";
    std::string results;  // --results: the runs beside this results.tsv (where a loop puts them)
    int keep = 0;
    /// The folder to read: --runs-dir, else runs/ beside --results, else the default.
    void resolve() {
      if (!results.empty() && runs_dir == "workspace/runs") {
        const std::filesystem::path parent = std::filesystem::path(results).parent_path();
        runs_dir = (parent.empty() ? std::filesystem::path("runs") : parent / "runs").string();
      }
    }
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("runs", "The run directories: list, gc --keep N");
  cmd->require_subcommand(1);
  auto* list = cmd->add_subcommand("list", "Every run, oldest first");
  list->callback([&ctx, opt] {
    opt->resolve();
    std::string error;
    const auto runs = flywheel::list_runs(opt->runs_dir, &error);
    if (!error.empty()) {
      print_error("runs", error);
      return void(ctx.exit_code = kExitEnvironment);
    }
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : runs) {
      const nlohmann::json& m = r.manifest;
      rows.push_back(
          {{"run_id", r.run_id},
           {"path", r.path},
           {"kind", m.is_object() ? m.value("kind", std::string()) : std::string()},
           {"exit_code",
            m.is_object() ? m.value("exit_code", nlohmann::json()) : nlohmann::json(nullptr)},
           {"finished",
            m.is_object() ? m.value("finished", nlohmann::json()) : nlohmann::json(nullptr)},
           {"command", m.is_object() ? m.value("command", std::string()) : std::string()}});
    }
    if (rows.empty())
      print_error("runs", "no runs in " + opt->runs_dir +
                              " (a loop writes its run directory to runs/ beside its --results: "
                              "pass --results PATH/results.tsv, or --runs-dir DIR)");
    print_json({{"runs_dir", opt->runs_dir}, {"runs", rows}});
    ctx.exit_code = kExitOk;
  });
  auto* gc = cmd->add_subcommand("gc", "Delete all but the newest N run directories");
  gc->add_option("--keep", opt->keep, "Run directories to keep (the newest)")
      ->required()
      ->check(integer_in(0, kMaxInt));
  for (CLI::App* sub : {list, gc}) {  // after the verb: `runs gc --keep N --runs-dir D`
    CLI::Option* runs_dir =
        sub->add_option("--runs-dir", opt->runs_dir, "Folder of run directories")
            ->capture_default_str();
    sub->add_option("--results", opt->results,
                    "The runs of the loop that wrote this results.tsv (runs/ beside it)")
        ->excludes(runs_dir);
  }
  gc->callback([&ctx, opt] {
    opt->resolve();
    std::string error;
    const auto removed = flywheel::gc_runs(opt->runs_dir, opt->keep, &error);
    if (!removed) {
      print_error("runs", error);
      return void(ctx.exit_code = kExitEnvironment);
    }
    print_json({{"runs_dir", opt->runs_dir}, {"kept", opt->keep}, {"removed", *removed}});
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
