// The CLI's side of the run directory (flywheel/run_dir.h): the command line of this invocation,
// the --runs-dir flag, opening a run (its id printed first, on stderr) and closing it, and the
// run directory a loop leaves.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "flywheel/run_dir.h"
#include "harness/verbs.h"

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

/// A loop's run directory, named by its run id (known once the loop has run: with --resume it is
/// the resumed run's), in `runs_dir` ("": runs/ beside the loop's results file): the command
/// line, summary.json, and the best config with its verdict. The CLI's loop and the MCP loop tool
/// both write one; "megasched loop: run <id> (<path>)" on stderr, or one line saying why not.
void write_loop_run_dir(const std::string& runs_dir, const LoopCommand& opt,
                        const VerbResult& result);

}  // namespace megasched::harness
