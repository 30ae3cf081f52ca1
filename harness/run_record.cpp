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

}  // namespace megasched::harness
