#include "harness/trial_flags.h"

#include <limits>
#include <stdexcept>

#include "eval/baselines/baseline.h"
#include "eval/trial_timing.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "schedule/format.h"

namespace megasched::harness {

CLI::Option* add_model_flag(CLI::App* cmd, std::string* model, const std::string& help) {
  return cmd->add_option("--model", *model, help)->capture_default_str();
}

CLI::Option* add_gpu_flag(CLI::App* cmd, std::string* gpu, const std::string& help) {
  return cmd->add_option("--gpu", *gpu, help)->capture_default_str();
}

CLI::Option* add_device_flag(CLI::App* cmd, std::string* device, const std::string& help,
                             const std::vector<std::string>& choices) {
  return cmd->add_option("--device", *device, help)
      ->check(CLI::IsMember(choices))
      ->capture_default_str();
}

CLI::Option* add_compile_threads_flag(CLI::App* cmd, int* threads) {
  return cmd
      ->add_option("--compile-threads", *threads,
                   "GPU trials: CPU threads that build kernels ahead into the cubin cache "
                   "(default: hardware threads - 1, at most 8 per GPU worker)")
      ->check(integer_in(1, 256));
}

CLI::Option* add_positions_flag(CLI::App* cmd, std::string* positions, const std::string& help) {
  return cmd->add_option("--positions", *positions, help)->capture_default_str();
}

CLI::Option* add_timed_position_flag(CLI::App* cmd, int* timed_position, const std::string& help) {
  return cmd->add_option("--timed-position", *timed_position, help)
      ->check(integer_in(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
}

CLI::Option* add_objective_flag(CLI::App* cmd, std::string* objective, const std::string& help) {
  return cmd->add_option("--objective", *objective, help)->type_name("POS:WEIGHT,...");
}

CLI::Option* add_seed_flag(CLI::App* cmd, uint64_t* seed, const std::string& name,
                           const std::string& help) {
  return cmd->add_option(name, *seed, help)->check(unsigned_integer())->capture_default_str();
}

CLI::Option* add_flywheel_flag(CLI::App* cmd, std::string* dir) {
  return cmd
      ->add_option("--flywheel", *dir,
                   "Shared corpus folder: every GPU trial is appended to its <target>.corpus.jsonl "
                   "there (CPU trials never); none: off ($MEGASCHED_FLYWHEEL_DIR, else "
                   "flywheel/data)")
      ->capture_default_str();
}

CLI::Option* add_corpus_stale_flag(CLI::App* cmd, bool* include) {
  return cmd
      ->add_option_function<std::string>(
          "--corpus-stale", [include](const std::string& value) { *include = value == "include"; },
          "Shared corpus rows of another kernel build (stale: a kernel change moves latencies): "
          "exclude (default) or include them in the prior's training")
      ->check(CLI::IsMember({"exclude", "include"}));
}

CLI::Option* add_baselines_flag(CLI::App* cmd, std::vector<std::string>* selection,
                                const std::string& default_text) {
  std::string error;
  *selection = *eval::parse_baseline_selection(default_text, &error);
  CLI::Validator valid(
      [](std::string& text) {
        std::string why;
        return eval::parse_baseline_selection(text, &why) ? std::string() : why;
      },
      "all|none|auto|KIND,...");
  return cmd
      ->add_option_function<std::string>(
          "--baselines",
          [selection](const std::string& text) {
            std::string why;
            *selection = *eval::parse_baseline_selection(text, &why);
          },
          "GPU trials: the CUDA-graph baselines timed beside the megakernel, interleaved with it: "
          "all, none, auto (graph-pdl, or cublas where graph-pdl cannot run the model) or kinds "
          "comma-separated (cublas, graph-pdl); speedup_vs_baseline is against the fastest one "
          "timed")
      ->check(valid)
      ->default_str(default_text);
}

CLI::Option* add_stop_slower_flag(CLI::App* cmd, double* factor, double default_value) {
  *factor = default_value;
  CLI::Validator valid(
      [](std::string& text) {
        double x = 0.0;
        try {
          size_t used = 0;
          x = std::stod(text, &used);
          if (used != text.size()) return "'" + text + "' is not a number";
        } catch (const std::exception&) {
          return "'" + text + "' is not a number";
        }
        return eval::stop_slower_error(x);
      },
      "0|X>=" + schedule::fmt("%g", eval::kStopSlowerMin));
  return cmd
      ->add_option("--stop-slower", *factor,
                   "GPU trials: stop timing after 10 steps when their median is above this many "
                   "times the fastest latency the worker has measured at that position (the "
                   "verdict's kernel.timing_stopped says so; its latency is those steps' median); "
                   "0: time every iteration")
      ->check(valid)
      ->default_str(schedule::fmt("%g", default_value));
}

int target_error_code(const std::string& gpu) {
  return gpu == "auto" ? kExitEnvironment : kExitUsage;
}

bool TrialFlags::parse_positions(std::string* error) {
  auto list = schedule::parse_int_list(positions);
  if (!list) {
    if (error) *error = "--positions '" + positions + "' is not a comma-separated list of integers";
    return false;
  }
  ev.positions = *list;
  return true;
}

bool TrialFlags::parse_objective(std::string* error, const std::string& flag) {
  if (objective.empty()) return true;
  auto parsed = eval::parse_objective(objective, error, flag);
  if (!parsed) return false;
  if (ev.timed_position != 0) {
    const bool cli = flag.rfind("--", 0) == 0;
    const std::string at = std::to_string(ev.timed_position);
    if (error)
      *error = flag + " and " + (cli ? "--timed-position" : "timed_position") +
               " both say where trials are timed; use one or the other (an objective of one "
               "position, e.g. " +
               flag + (cli ? " " + at : " \"" + at + "\"") + ", times at " + at + " alone)";
    return false;
  }
  ev.objective = *parsed;
  return true;
}

std::string TrialFlags::worker_arguments() const {
  // The objective in its canonical form (no spaces, nothing to quote), so the worker's schedule
  // ids are the ones the loop computes.
  return "--model " + search::shell_quote(ev.model) + " --gpu " + search::shell_quote(ev.gpu) +
         " --device " + ev.device + " --positions " + positions + " --weight-seed " +
         std::to_string(ev.seed) + " --timed-position " + std::to_string(ev.timed_position) +
         (ev.objective.empty() ? "" : " --objective " + eval::objective_text(ev.objective)) +
         " --baselines " + eval::baseline_selection_text(ev.gpu_options.baselines) +
         " --stop-slower " + schedule::fmt("%g", ev.stop_slower);
}

}  // namespace megasched::harness
