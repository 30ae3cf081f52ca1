#include "harness/run_record.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "eval/evaluate.h"
#include "harness/cli_util.h"
#include "schedule/lookup.h"
#include "schedule/lower.h"

namespace megasched::harness {
namespace {

std::string& stored_command_line() {
  static std::string line;
  return line;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

void set_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i ? " " : "") + search::shell_quote(argv[i]);
  stored_command_line() = line;
}

const std::string& command_line() { return stored_command_line(); }

void add_runs_dir_flags(CLI::App* cmd, std::string* runs_dir, bool* no_run_dir) {
  cmd->add_option("--runs-dir", *runs_dir,
                  "Folder of run directories (this run writes <runs-dir>/<run id>/)")
      ->capture_default_str();
  cmd->add_flag("--no-run-dir", *no_run_dir, "Write no run directory for this run");
}

std::optional<flywheel::RunDir> start_run(const std::string& runs_dir, const std::string& kind,
                                          std::string* error) {
  const double now = now_s();
  // Ids grow strictly within this process; another process may have taken the same microsecond.
  std::string id = flywheel::new_run_id(now);
  for (int tries = 0; tries < 1000 && std::filesystem::exists(std::filesystem::path(runs_dir) / id);
       ++tries)
    id = flywheel::new_run_id(now);
  auto run = flywheel::open_run_dir(runs_dir, id, kind, command_line(), now, error);
  if (run)
    std::fprintf(stderr, "megasched %s: run %s (%s)\n", kind.c_str(), run->run_id.c_str(),
                 run->path.c_str());
  return run;
}

void end_run(flywheel::RunDir& run, int exit_code) {
  std::string error;
  if (!flywheel::finish_run_dir(run, exit_code, now_s(), &error))
    print_error(run.kind, "run directory: " + error);
}

namespace {

/// The best config's lowered program (null when it cannot be rebuilt here).
nlohmann::json best_program(const LoopCommand& opt, const nlohmann::json& best) {
  std::string error;
  auto shape = schedule::resolve_shape(opt.trial.ev.model, &error);
  auto target = shape ? eval::resolve_target(opt.trial.ev.gpu, &error) : std::nullopt;
  auto config = target
                    ? schedule::parse_config(best.value("config", nlohmann::json::object()), &error)
                    : std::nullopt;
  auto program = config ? schedule::lower(*shape, *target, *config, &error) : std::nullopt;
  return program ? schedule::to_json(*program) : nlohmann::json();
}

}  // namespace

void write_loop_run_dir(const std::string& runs_dir, const LoopCommand& opt,
                        const VerbResult& result) {
  if (!result.document.is_object() || !result.document.contains("run_id")) return;
  std::string root = runs_dir;
  if (root.empty()) {
    const std::filesystem::path parent = std::filesystem::path(opt.loop.results_path).parent_path();
    root = (parent.empty() ? std::filesystem::path("runs") : parent / "runs").string();
  }
  std::string error;
  auto run = flywheel::open_run_dir(
      root, result.document["run_id"].get<std::string>(), "loop", command_line(),
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
      &error);
  bool ok = run && flywheel::write_run_json(*run, "summary.json", result.document, &error);
  const nlohmann::json best = result.document.value("best", nlohmann::json());
  if (ok && best.is_object() && best.contains("verdict"))
    ok = flywheel::write_trial_files(*run, best.value("config", nlohmann::json::object()),
                                     best_program(opt, best),
                                     eval::verdict_from_json(best["verdict"]), &error);
  if (!ok) {
    print_error("loop", "run directory: " + error);
    return;
  }
  std::fprintf(stderr, "megasched loop: run %s (%s)\n", run->run_id.c_str(), run->path.c_str());
  end_run(*run, result.exit_code);
}

}  // namespace megasched::harness
