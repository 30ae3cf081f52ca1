// The CLI is one table of subcommands (harness/main.cpp). Each subcommand lives in its own file
// (harness/cmd_<name>.cpp), adds itself to the app with add_<name>_command, fills an options
// struct, calls the library (for the verbs the MCP server shares, harness/verbs.h) and maps the
// outcome to an exit code (harness/verbs.h) through the `exit_code` slot.
#pragma once

#include <CLI/CLI.hpp>

#include "harness/verbs.h"

namespace megasched::harness {

/// Shared state of one CLI invocation: the exit code the chosen subcommand sets.
struct CliContext {
  int exit_code = 0;
};

void add_models_command(CLI::App& app, CliContext& ctx);
void add_targets_command(CLI::App& app, CliContext& ctx);
void add_propose_command(CLI::App& app, CliContext& ctx);
void add_evaluate_command(CLI::App& app, CliContext& ctx);
void add_generate_command(CLI::App& app, CliContext& ctx);
void add_doctor_command(CLI::App& app, CliContext& ctx);          // harness/cmd_doctor.cpp
void add_baseline_command(CLI::App& app, CliContext& ctx);        // harness/cmd_baseline.cpp
void add_bench_command(CLI::App& app, CliContext& ctx);           // harness/cmd_bench.cpp
void add_profile_command(CLI::App& app, CliContext& ctx);         // harness/cmd_profile.cpp
void add_validate_command(CLI::App& app, CliContext& ctx);        // harness/cmd_validate.cpp
void add_fuzz_validator_command(CLI::App& app, CliContext& ctx);  // harness/cmd_fuzz_validator.cpp

void add_loop_command(CLI::App& app, CliContext& ctx);          // harness/cmd_loop.cpp
void add_report_command(CLI::App& app, CliContext& ctx);        // harness/cmd_report.cpp
void add_prior_command(CLI::App& app, CliContext& ctx);         // harness/cmd_prior.cpp
void add_corpus_command(CLI::App& app, CliContext& ctx);        // harness/cmd_corpus.cpp
void add_search_bench_command(CLI::App& app, CliContext& ctx);  // harness/cmd_search_bench.cpp
void add_landscape_command(CLI::App& app, CliContext& ctx);     // harness/cmd_landscape.cpp
void add_worker_command(CLI::App& app, CliContext& ctx);        // harness/cmd_worker.cpp
void add_mcp_command(CLI::App& app, CliContext& ctx);           // harness/cmd_mcp.cpp

void add_promote_command(CLI::App& app, CliContext& ctx);   // harness/cmd_promote.cpp
void add_registry_command(CLI::App& app, CliContext& ctx);  // harness/cmd_registry.cpp
void add_runs_command(CLI::App& app, CliContext& ctx);      // harness/cmd_runs.cpp

}  // namespace megasched::harness
