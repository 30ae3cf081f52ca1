// `megasched fuzz-validator`: the validator's scorecard. Generates adversarial programs (one-defect
// mutants of real toy lowerings and of safe random DAGs, and random DAGs safe and unsafe), decides
// each with the exhaustive ground truth (groundtruth/ground_truth.h, accesses recorded by the
// ReferenceVm) and with validate(), and prints per class: generated, unsafe by ground truth,
// accepted-unsafe (must be 0), rejected-safe. The table goes to stderr, the JSON summary to stdout;
// exit 0 only when nothing unsafe was accepted.
#include <filesystem>

#include "groundtruth/ground_truth.h"
#include "groundtruth/scorecard.h"
#include "groundtruth/scorecard_setup.h"
#include "harness/cli_util.h"
#include "harness/commands.h"

namespace megasched::harness {

void add_fuzz_validator_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    uint64_t n = 10000;
    uint64_t seed = 1;
    std::string out;
    std::string dump_dir;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "fuzz-validator",
      "Score validate() against an exhaustive ground truth on adversarial programs");
  cmd->add_option("--n", opt->n, "Programs to generate")
      ->check(integer_in(1))
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Generator seed")
      ->check(unsigned_integer())
      ->capture_default_str();
  cmd->add_option("--out", opt->out, "Also write the JSON summary to this file");
  cmd->add_option(
      "--dump-rejected-safe", opt->dump_dir,
      "Write each program validate() rejects but the ground truth calls safe to DIR/<index>.json");
  cmd->callback([&ctx, opt] {
    using namespace schedule;
    using namespace groundtruth;
    std::error_code ec;
    if (!opt->dump_dir.empty() && !std::filesystem::is_directory(opt->dump_dir, ec)) {
      print_error("fuzz-validator", "--dump-rejected-safe: '" + opt->dump_dir +
                                        "' is not a directory (create it first)");
      ctx.exit_code = kExitEnvironment;
      return;
    }
    // Real lowerings to mutate (groundtruth/scorecard_setup.h), the programs the scorecard test
    // pins too.
    const ScorecardBases bases = scorecard_bases(opt->seed);
    ScorecardOptions so = scorecard_options(bases, opt->n, opt->seed);
    // The dynamic backstop on the bases: the ReferenceVm in random valid orders, bit for bit.
    int order_independent = 0;
    for (const Program& base : so.bases) {
      const DynamicCheck d =
          dynamic_check(base, bases.weights->at(base.model_name), 16, opt->seed, 7, 3);
      order_independent += d.completed && d.deterministic;
      if (!(d.completed && d.deterministic))
        print_error("fuzz-validator", "a base lowering is order-dependent: " + d.detail);
    }
    so.progress = [](uint64_t done) {
      std::fprintf(stderr, "fuzz-validator: %llu programs\n",
                   static_cast<unsigned long long>(done));
    };
    std::string write_error;  // the first failed write of a rejected-safe program
    if (!opt->dump_dir.empty())
      so.on_rejected_safe = [dir = opt->dump_dir, &write_error](uint64_t i, const std::string&,
                                                                const Program& p) {
        std::string error;
        if (!write_text_file(dir + "/" + std::to_string(i) + ".json", to_json(p).dump() + "\n",
                             &error) &&
            write_error.empty())
          write_error = "--dump-rejected-safe: " + error;
      };
    const Scorecard card = run_scorecard(so);
    std::fputs(format_scorecard(card).c_str(), stderr);
    nlohmann::json j = to_json(card);
    j["command"] = "megasched fuzz-validator --n " + std::to_string(opt->n) + " --seed " +
                   std::to_string(opt->seed);
    j["bases"] = so.bases.size();
    j["bases_bit_identical_in_16_random_orders"] = order_independent;
    std::string error;
    if (!opt->out.empty() && !write_text_file(opt->out, j.dump(2) + "\n", &error) &&
        write_error.empty())
      write_error = "--out: " + error;
    print_json(j);
    if (!write_error.empty()) {
      print_error("fuzz-validator", write_error);
      ctx.exit_code = kExitEnvironment;
      return;
    }
    const bool bases_ok = order_independent == static_cast<int>(so.bases.size());
    ctx.exit_code = card.total.accepted_unsafe == 0 && bases_ok ? kExitOk : kExitFailure;
  });
}

}  // namespace megasched::harness
