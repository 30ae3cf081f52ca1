// The trial flags: what a subcommand lowers or runs, and where. Each flag is declared here once,
// with its one wording, and the subcommands add the ones they take in their own order:
//   --model           preset name or Hugging Face checkpoint directory
//   --gpu             GPU target the config is lowered for, or auto (the live device)
//   --device          cpu (predicted latency) or gpu (measured)
//   --positions       positions whose logits are checked
//   --timed-position  position the latency and the floor refer to
//   --objective       positions timed and their weights (eval/objective.h): the latency is the
//                     weighted mean over them; instead of --timed-position
//   --seed / --weight-seed   weight and token seed for presets (`loop` and `worker` say
//                     --weight-seed: their --seed is the strategy's)
// A subcommand passes its own help only where its flag means something narrower (generate's
// --device picks the VM that generates).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "eval/evaluate.h"

namespace megasched::harness {

CLI::Option* add_model_flag(CLI::App* cmd, std::string* model,
                            const std::string& help =
                                "Preset name or Hugging Face checkpoint "
                                "directory");
CLI::Option* add_gpu_flag(CLI::App* cmd, std::string* gpu,
                          const std::string& help =
                              "GPU target (see `megasched targets`) or "
                              "auto");
CLI::Option* add_device_flag(CLI::App* cmd, std::string* device,
                             const std::string& help =
                                 "cpu (predicted latency) or gpu "
                                 "(measured)",
                             const std::vector<std::string>& choices = {"cpu", "gpu"});
CLI::Option* add_positions_flag(CLI::App* cmd, std::string* positions,
                                const std::string& help =
                                    "Positions whose logits are checked, "
                                    "comma-separated");
CLI::Option* add_timed_position_flag(CLI::App* cmd, int* timed_position,
                                     const std::string& help =
                                         "Position the latency and the "
                                         "floor refer to");
CLI::Option* add_objective_flag(
    CLI::App* cmd, std::string* objective,
    const std::string& help =
        "Time each trial at several positions and judge it by the weighted mean latency: "
        "POS:WEIGHT,POS:WEIGHT,... (e.g. 0:1,1024:1,4096:2; a bare POS weighs 1); the floor is "
        "the same weighted mean. Instead of --timed-position");
CLI::Option* add_seed_flag(CLI::App* cmd, uint64_t* seed, const std::string& name = "--seed",
                           const std::string& help = "Weight and token seed for presets");

/// --compile-threads N (N >= 1): the CPU threads that build kernels ahead of GPU trials
/// (search/compile_ahead.h); `loop` and `landscape record` share it.
CLI::Option* add_compile_threads_flag(CLI::App* cmd, int* threads);
/// --flywheel DIR: the shared corpus folder (flywheel/shared_corpus.h) the command's GPU trials are
/// appended to (and a prior reads); "none" turns it off. Its default is $MEGASCHED_FLYWHEEL_DIR,
/// else flywheel/data.
CLI::Option* add_flywheel_flag(CLI::App* cmd, std::string* dir);
/// --corpus-stale exclude|include: whether rows of the shared corpus measured by another kernel
/// build (stale: a kernel change moves latencies) train the prior. Default exclude.
CLI::Option* add_corpus_stale_flag(CLI::App* cmd, bool* include);

/// --baselines all|none|auto|KIND,...: the baselines a GPU trial times beside the megakernel
/// (eval/baselines/baseline.h parse_baseline_selection), parsed into *selection; `default_text` is
/// what *selection holds unless the flag is given (shown by --help).
CLI::Option* add_baselines_flag(CLI::App* cmd, std::vector<std::string>* selection,
                                const std::string& default_text);

/// --stop-slower X: GPU trials stop timing after 10 steps when their median is above X times the
/// fastest latency the worker has measured at that position (eval::EvaluatorOptions::stop_slower);
/// 0 or a number from 1.05 up. `default_value` is what *factor holds unless the flag is given.
CLI::Option* add_stop_slower_flag(CLI::App* cmd, double* factor, double default_value);

/// The exit code of a --gpu that does not resolve: 3 for auto (no usable GPU here: the machine's
/// fault), 2 for a name that is no target (the argument's).
int target_error_code(const std::string& gpu);

/// The evaluator's trial flags with --positions still as text.
struct TrialFlags {
  eval::EvaluatorOptions ev;  // model, gpu, device, seed, timed_position, objective, baselines
  std::string positions = "0,3,7";  // --positions as given
  std::string objective;            // --objective as given; "": none

  /// Parses --positions into ev.positions; false with *error naming the flag and its value.
  bool parse_positions(std::string* error);
  /// Parses --objective into ev.objective (an empty text leaves it as it is); false with *error
  /// naming the flag, the fault and the syntax, or when a non-zero --timed-position is given too.
  /// `flag` names the option in messages ("objective" for the MCP tools).
  bool parse_objective(std::string* error, const std::string& flag = "--objective");
  /// The flags for `megasched worker`, which builds the same evaluator in its own process.
  std::string worker_arguments() const;
};

}  // namespace megasched::harness
