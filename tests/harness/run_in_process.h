// Runs megasched subcommands inside the test process, as main() would parse them: for the tests of
// one command's flags and output, without spawning the binary (tests/harness/run_cli.h does that).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/commands.h"

namespace megasched::test {

struct InProcessResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

using AddCommand = void (*)(CLI::App&, harness::CliContext&);

/// Parses and runs `args` (without the program name) with the subcommands `commands` register,
/// capturing stdout and stderr; a parse error is the usage exit code.
inline InProcessResult run_in_process(const std::vector<std::string>& args,
                                      std::initializer_list<AddCommand> commands) {
  CLI::App app{"megasched"};
  harness::CliContext ctx;
  for (AddCommand add : commands) add(app, ctx);
  std::vector<const char*> argv{"megasched"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    ctx.exit_code = harness::kExitUsage;
  }
  InProcessResult r;
  r.out = testing::internal::GetCapturedStdout();
  r.err = testing::internal::GetCapturedStderr();
  r.exit_code = ctx.exit_code;
  return r;
}

}  // namespace megasched::test
