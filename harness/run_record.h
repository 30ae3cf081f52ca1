// The CLI's side of the run directory (flywheel/run_dir.h): the command line of this invocation,
// the --runs-dir flag, and opening a run (its id printed first, on stderr) and closing it.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "flywheel/run_dir.h"

namespace megasched::harness {

/// Records argv (main does it once); command_line() gives it shell-quoted, as one line.
void set_command_line(int argc, char** argv);
const std::string& command_line();

/// --runs-dir (default workspace/runs) and --no-run-dir.
void add_runs_dir_flags(CLI::App* cmd, std::string* runs_dir, bool* no_run_dir);

/// Opens `<runs_dir>/<new run id>/` for a `kind` run and prints "megasched <kind>: run <id>
/// (<path>)" on stderr, before anything else of the run. nullopt with *error when it cannot.
std::optional<flywheel::RunDir> start_run(const std::string& runs_dir, const std::string& kind,
                                          std::string* error);

/// Writes the manifest; a failure is one stderr line (the run's own result stands).
void end_run(flywheel::RunDir& run, int exit_code);

}  // namespace megasched::harness
