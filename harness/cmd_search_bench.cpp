// `megasched search-bench`: search strategies replayed against a recorded landscape with no GPU,
// through the real loop and its keep rule, scored as Kernel Tuner's strategy comparison does
// (search/replay.h): the best found after 25/50/100/200 trials normalised between random search's
// expected best (0) and the landscape's optimum (1), median and quartiles over the seeds, and the
// trials each needed to come within 2% of the optimum. A table on stdout, or the JSON with --json.
#include <iostream>

#include "harness/cli_util.h"
#include "harness/commands.h"
#include "search/landscape.h"
#include "search/replay.h"

namespace megasched::harness {

void add_search_bench_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string landscape;
    std::string rows = "all";
    std::vector<std::string> strategies;
    std::vector<int> budgets;
    bool json = false;
    bool trace = false;
    search::BenchOptions bench;
  };
  auto opt = std::make_shared<Options>();
  opt->strategies = opt->bench.strategies;
  opt->budgets = opt->bench.budgets;
  auto* cmd = app.add_subcommand(
      "search-bench",
      "Replay search strategies against a recorded landscape (no GPU) and score them");
  cmd->add_option("--landscape", opt->landscape,
                  "Landscape file (search/landscapes/*.landscape.jsonl, `megasched landscape "
                  "record`)")
      ->required();
  cmd->add_option("--rows", opt->rows,
                  "all: every row answers; sample: only the space-filling sample's rows (the "
                  "named configs and their neighbours left out, so nearest-row answers are not "
                  "drawn towards the records)")
      ->check(CLI::IsMember({"all", "sample"}))
      ->capture_default_str();
  cmd->add_option("--strategies", opt->strategies, "Strategies to replay")
      ->delimiter(',')
      ->check(CLI::IsMember(search::strategy_names()))
      ->capture_default_str();
  cmd->add_option("--budgets", opt->budgets, "Trial budgets to score at")
      ->delimiter(',')
      ->check(integer_in(1, 100000))
      ->capture_default_str();
  cmd->add_option("--seeds", opt->bench.seeds, "Seeds per strategy (strategy and noise)")
      ->check(integer_in(1, 100000))
      ->capture_default_str();
  cmd->add_option("--seed", opt->bench.first_seed, "First seed")
      ->check(unsigned_integer())
      ->capture_default_str();
  cmd->add_option("--within", opt->bench.within,
                  "A run has reached the optimum within this share of it")
      ->check(finite_number_in(0.0, 10.0))
      ->capture_default_str();
  cmd->add_option("--jobs", opt->bench.jobs, "Replays at once (threads)")
      ->check(integer_in(1, 1024))
      ->capture_default_str();
  cmd->add_option("--restart-after", opt->bench.strategy.restart_after,
                  "hillclimb, elite: restart after this many trials without a local gain")
      ->check(integer_in(1, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--elite", opt->bench.strategy.elite_size,
                  "elite, sweep, guided: elite pool size")
      ->check(integer_in(1, 4096))
      ->capture_default_str();
  cmd->add_option("--exploration", opt->bench.strategy.exploration,
                  "prior, guided: share of exploration trials")
      ->check(finite_number_in(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--candidates", opt->bench.strategy.candidates,
                  "guided: candidates ranked per proposal")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--guard", opt->bench.strategy.guard,
                  "guided: predicted slowdown over the incumbent measured only as exploration")
      ->check(finite_number_in(1.0))
      ->capture_default_str();
  add_bandit_flags(cmd, &opt->bench.strategy);
  cmd->add_option("--work-dir", opt->bench.work_dir,
                  "Scratch folder for the replays' logs (default: a temporary one, removed)");
  cmd->add_flag("--json", opt->json, "Print the JSON document instead of the table");
  cmd->add_flag(
      "--trace", opt->trace,
      "The loop's progress lines of each strategy's first seed on stderr (with --jobs 1)");
  cmd->callback([&ctx, opt] {
    std::string error;
    auto landscape = search::read_landscape(opt->landscape, &error);
    if (!landscape) return print_error("search-bench", error), void(ctx.exit_code = kExitUsage);
    if (opt->rows == "sample") {
      landscape = search::sampled_rows_only(*landscape, &error);
      if (!landscape) return print_error("search-bench", error), void(ctx.exit_code = kExitUsage);
    }
    opt->bench.strategies = opt->strategies;
    opt->bench.budgets = opt->budgets;
    if (opt->trace) opt->bench.trace = &std::cerr;
    auto doc = search::run_search_bench(*landscape, opt->bench, &error);
    if (!doc) return print_error("search-bench", error), void(ctx.exit_code = kExitUsage);
    (*doc)["landscape_path"] = opt->landscape;
    (*doc)["rows_replayed"] = opt->rows;
    if (opt->json)
      print_json(*doc);
    else
      std::cout << search::format_search_bench(*doc);
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
