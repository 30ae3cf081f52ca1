// `megasched baseline --model M [--kind cublas|graph-pdl]`: an op-by-op decode step of the model's
// weights (eval/baselines/baseline.h: cuBLAS GEMVs, or the fused kernels with programmatic
// dependent launch), replayed from a CUDA graph: checked against the eager reference at position 0,
// then timed at --position (the KV cache filled by the baseline itself), with the floor of the live
// device beside it.
#include "eval/baselines/baseline.h"
#include "eval/device.h"
#include "eval/evaluate.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "schedule/lookup.h"

namespace megasched::harness {

void add_baseline_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string model = "toy";
    std::string kind = "cublas";
    int position = 0;
    int warmup = 10;
    int iterations = 100;
    uint64_t seed = 0;
    bool timeline = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "baseline", "Time an op-by-op CUDA-graph decode step of a model: cuBLAS or graph-pdl (GPU)");
  add_model_flag(cmd, &opt->model);
  cmd->add_option("--kind", opt->kind,
                  "cublas: cuBLAS GEMVs + small kernels; graph-pdl: fused GEMV kernels with "
                  "programmatic dependent launch and split-KV attention")
      ->check(CLI::IsMember(eval::baseline_kinds()))
      ->capture_default_str();
  cmd->add_option("--position", opt->position, "Position timed (the KV cache is filled up to it)")
      ->check(integer_in(0, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "Untimed replays")
      ->check(integer_in(0, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--iterations", opt->iterations, "Timed replays")
      ->check(integer_in(1, kMaxInt))
      ->capture_default_str();
  add_seed_flag(cmd, &opt->seed);
  cmd->add_flag("--timeline", opt->timeline,
                "Add the per-kernel timeline of one more replay at --position (graph-pdl only): "
                "each launch's start, wait for its predecessors passed and end, by the GPU's "
                "global timer, and per kernel the step's time spent on it");
  cmd->callback([&ctx, opt] {
    std::string error;
    // The arguments first, so a bad one is reported as such on any machine.
    auto shape = schedule::resolve_shape(opt->model, &error);
    if (!shape) {
      print_error("baseline", error + " (hint: `megasched models` lists the presets)");
      ctx.exit_code = kExitUsage;
      return;
    }
    if (opt->position >= shape->max_seq) {
      print_error("baseline", "--position must lie in [0, " + std::to_string(shape->max_seq - 1) +
                                  "] for model " + shape->name);
      ctx.exit_code = kExitUsage;
      return;
    }
    if (opt->timeline && opt->kind != "graph-pdl") {
      print_error("baseline",
                  "--timeline needs --kind graph-pdl (the cuBLAS kernels carry no stamps)");
      ctx.exit_code = kExitUsage;
      return;
    }
    if (opt->kind == "graph-pdl") {
      if (const std::string why = eval::graph_pdl_misfit(*shape); !why.empty()) {
        print_error("baseline", "the graph-pdl baseline cannot serve model " + shape->name + ": " +
                                    why + " (hint: --kind cublas serves every shape)");
        ctx.exit_code = kExitUsage;
        return;
      }
    }
    if (!eval::gpu_available(&error)) {
      print_error("baseline", error + "; the baseline times a CUDA graph on a GPU");
      ctx.exit_code = kExitEnvironment;
      return;
    }
    auto weights = schedule::load_weights(opt->model, opt->seed, &error);
    if (!weights) {
      print_error("baseline", error);
      ctx.exit_code = kExitUsage;
      return;
    }
    auto target = eval::live_target(&error);
    if (!target) {
      print_error("baseline", error);
      ctx.exit_code = kExitEnvironment;
      return;
    }
    eval::BaselineTiming timing;
    timing.kind = opt->kind;
    timing.position = opt->position;
    timing.warmup = opt->warmup;
    timing.iterations = opt->iterations;
    timing.seed = opt->seed;
    timing.timeline = opt->timeline;
    const auto out = eval::time_baseline(*weights, *target, timing, &error);
    if (!out) {
      print_error("baseline", error);
      ctx.exit_code = kExitEnvironment;
      return;
    }
    print_json(*out);
  });
}

}  // namespace megasched::harness
