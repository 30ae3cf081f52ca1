// The trial flags a loop hands its `megasched worker` processes (harness/trial_flags.h): what the
// loop parsed must reach the process that runs the GPU trial, --baselines included.
#include <gtest/gtest.h>

#include "eval/baselines/baseline.h"
#include "harness/trial_flags.h"
#include "harness/verbs.h"

namespace megasched::harness {
namespace {

/// Parses `args` with a command that takes --baselines (default `default_text`) and
/// --stop-slower (default `stop_default`) into `flags`.
void parse(const std::string& default_text, std::vector<std::string> args, TrialFlags* flags,
           double stop_default = 0.0) {
  CLI::App app;
  add_baselines_flag(&app, &flags->ev.gpu_options.baselines, default_text);
  add_stop_slower_flag(&app, &flags->ev.stop_slower, stop_default);
  args.insert(args.begin(), "megasched");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
}

TEST(TrialFlags, BaselinesTakeTheCommandsDefaultUnlessGiven) {
  TrialFlags loop;
  parse("auto", {}, &loop);
  EXPECT_EQ(loop.ev.gpu_options.baselines, std::vector<std::string>{"auto"});
  TrialFlags evaluate;
  parse("all", {}, &evaluate);
  EXPECT_EQ(evaluate.ev.gpu_options.baselines, eval::baseline_kinds());
  TrialFlags given;
  parse("auto", {"--baselines", "cublas"}, &given);
  EXPECT_EQ(given.ev.gpu_options.baselines, std::vector<std::string>{"cublas"});
}

TEST(TrialFlags, TheWorkerGetsTheLoopsBaselines) {
  for (const char* text : {"auto", "none", "cublas", "graph-pdl,cublas"}) {
    TrialFlags loop;
    parse("auto", {"--baselines", text}, &loop);
    const std::string args = loop.worker_arguments();
    EXPECT_NE(args.find(std::string(" --baselines ") + text), std::string::npos) << args;
    // The worker's own parse of that text gives the loop's selection back.
    TrialFlags worker;
    parse("all", {"--baselines", text}, &worker);
    EXPECT_EQ(worker.ev.gpu_options.baselines, loop.ev.gpu_options.baselines) << text;
  }
}

TEST(TrialFlags, TheWorkerGetsTheLoopsEarlyStop) {
  TrialFlags loop;
  parse("auto", {}, &loop, 2.0);
  EXPECT_EQ(loop.ev.stop_slower, 2.0);
  EXPECT_NE(loop.worker_arguments().find(" --stop-slower 2"), std::string::npos);
  TrialFlags given;
  parse("auto", {"--stop-slower", "1.5"}, &given, 2.0);
  EXPECT_EQ(given.ev.stop_slower, 1.5);
  TrialFlags worker;
  parse("all", {"--stop-slower", "1.5"}, &worker);
  EXPECT_EQ(worker.ev.stop_slower, 1.5);
  TrialFlags off;
  parse("auto", {"--stop-slower", "0"}, &off, 2.0);
  EXPECT_NE(off.worker_arguments().find(" --stop-slower 0"), std::string::npos);
  // The loop's defaults, whoever builds the command (the CLI, MCP, landscape record).
  const LoopCommand command;
  EXPECT_EQ(command.trial.ev.stop_slower, 2.0);
  EXPECT_EQ(command.trial.ev.gpu_options.baselines, std::vector<std::string>{"auto"});
}

}  // namespace
}  // namespace megasched::harness
