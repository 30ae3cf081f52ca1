// megasched: the command line. One table of subcommands over library calls; each subcommand lives
// in harness/cmd_<name>.cpp. JSON goes to stdout, diagnostics to stderr; exit codes are in
// harness/commands.h (and HARNESS.md).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/commands.h"
#include "harness/run_record.h"
#include "schedule/config.h"

namespace {

using megasched::harness::CliContext;

struct CommandEntry {
  const char* name;
  void (*add)(CLI::App&, CliContext&);
};

const CommandEntry kCommands[] = {
    {"models", megasched::harness::add_models_command},
    {"targets", megasched::harness::add_targets_command},
    {"propose", megasched::harness::add_propose_command},
    {"evaluate", megasched::harness::add_evaluate_command},
    {"validate", megasched::harness::add_validate_command},
    {"fuzz-validator", megasched::harness::add_fuzz_validator_command},
    {"loop", megasched::harness::add_loop_command},
    {"report", megasched::harness::add_report_command},
    {"prior", megasched::harness::add_prior_command},
    {"corpus", megasched::harness::add_corpus_command},
    {"search-bench", megasched::harness::add_search_bench_command},
    {"landscape", megasched::harness::add_landscape_command},
    {"worker", megasched::harness::add_worker_command},
    {"mcp", megasched::harness::add_mcp_command},
    {"generate", megasched::harness::add_generate_command},
    {"doctor", megasched::harness::add_doctor_command},
    {"baseline", megasched::harness::add_baseline_command},
    {"bench", megasched::harness::add_bench_command},
    {"profile", megasched::harness::add_profile_command},
    {"promote", megasched::harness::add_promote_command},
    {"registry", megasched::harness::add_registry_command},
    {"runs", megasched::harness::add_runs_command},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "megasched: an autoresearch search harness over a megakernel schedule IR.\n"
      "Edit one ScheduleConfig (JSON); megasched lowers it into a program for a persistent CUDA\n"
      "megakernel VM, proves it safe, checks it against an eager forward, times it (or predicts\n"
      "its latency without a GPU) against the HBM floor, and logs every trial.",
      "megasched"};
  app.require_subcommand(1);
  // A flag error is one line that names the command and points to its help (CLI11's own message
  // takes two lines and names no command). Set before the subcommands exist: they copy it.
  const std::string command = argc > 1 && argv[1][0] != '-' ? argv[1] : "";
  app.failure_message([command](const CLI::App*, const CLI::Error& e) {
    std::string what = e.what();
    for (char& c : what)
      if (c == '\n') c = ' ';
    const std::string help =
        command.empty() ? "megasched --help" : "megasched " + command + " --help";
    return "megasched" + (command.empty() ? "" : " " + command) + ": " + what + " (see `" + help +
           "`)\n";
  });
  megasched::harness::set_command_line(argc, argv);
  CliContext ctx;
  std::vector<std::string> names;
  for (const auto& c : kCommands) {
    c.add(app, ctx);
    names.emplace_back(c.name);
  }
  // An unknown command gets a suggestion rather than CLI11's generic message.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string cmd = argv[1];
    bool known = false;
    for (const auto& n : names) known = known || n == cmd;
    if (!known) {
      const std::string near = megasched::schedule::nearest(cmd, names);
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
      std::fprintf(stderr,
                   "megasched: unknown command '%s'%s; commands: %s (see megasched --help)\n",
                   cmd.c_str(), near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str(),
                   all.c_str());
      return megasched::harness::kExitUsage;
    }
  }
  const std::string who = "megasched" + (command.empty() ? "" : " " + command);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : megasched::harness::kExitUsage;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: not enough memory (a smaller model or fewer --jobs may fit)\n",
                 who.c_str());
    return megasched::harness::kExitEnvironment;
  } catch (const std::exception& e) {
    // Every expected failure is a message before it gets here: this is a bug, said in one line.
    std::fprintf(stderr, "%s: internal error: %s (please report it)\n", who.c_str(), e.what());
    return megasched::harness::kExitEnvironment;
  }
  // JSON on stdout is the result: a stdout that cannot take it (a full disk) is a failed write.
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "%s: cannot write the result to stdout\n", who.c_str());
    return megasched::harness::kExitEnvironment;
  }
  return ctx.exit_code;
}
