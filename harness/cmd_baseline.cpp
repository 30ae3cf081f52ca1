// `megasched baseline --model M`: the cuBLAS op-by-op decode step of the model's weights, replayed
// from a CUDA graph: checked against the eager reference at position 0, then timed at --position
// (the KV cache filled by the baseline itself), with the floor of the live device beside it.
#include "eval/baseline.h"
#include "eval/device.h"
#include "eval/eager.h"
#include "eval/evaluate.h"
#include "eval/oracle.h"
#include "eval/roofline.h"
#include "eval/timing.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "vm/gpu_vm.h"

namespace megasched::harness {

void add_baseline_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string model = "toy";
    int position = 0;
    int warmup = 10;
    int iterations = 100;
    uint64_t seed = 0;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "baseline", "Time the cuBLAS CUDA-graph op-by-op decode step of a model (GPU)");
  cmd->add_option("--model", opt->model, "Preset name or Hugging Face checkpoint directory")
      ->capture_default_str();
  cmd->add_option("--position", opt->position, "Position timed (the KV cache is filled up to it)")
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "Untimed replays")->capture_default_str();
  cmd->add_option("--iterations", opt->iterations, "Timed replays")->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Weight and token seed for presets")->capture_default_str();
  cmd->callback([&ctx, opt] {
    std::string error;
    if (!eval::gpu_available(&error)) {
      print_error("baseline", error);
      ctx.exit_code = kExitEnvironment;
      return;
    }
    auto weights = eval::load_weights(opt->model, opt->seed, &error);
    if (!weights) {
      print_error("baseline", error);
      ctx.exit_code = kExitUsage;
      return;
    }
    if (opt->position < 0 || opt->position >= weights->shape.max_seq) {
      print_error("baseline",
                  "--position must lie in [0, " + std::to_string(weights->shape.max_seq - 1) + "]");
      ctx.exit_code = kExitUsage;
      return;
    }
    auto target = eval::live_target(&error);
    auto base = eval::CublasBaseline::create(*weights, &error);
    if (!base || !target) {
      print_error("baseline", error);
      ctx.exit_code = kExitEnvironment;
      return;
    }
    try {
      const auto tokens = eval::trial_tokens(weights->shape.vocab, opt->position + 1, opt->seed);
      eval::EagerModel eager(*weights);
      const eval::Comparison c = eval::compare_logits(
          base->step(tokens[0], 0), eager.step(tokens[0], 0), weights->shape.dtype);
      for (int p = 1; p <= opt->position; ++p) base->step(tokens[static_cast<size_t>(p)], p);
      const int32_t tok = tokens[static_cast<size_t>(opt->position)];
      const bool flush = weights->bytes() <= 2 * target->l2_bytes;
      for (int i = 0; i < opt->warmup; ++i) base->time_step_us(tok, opt->position, flush);
      std::vector<double> samples;
      for (int i = 0; i < opt->iterations; ++i)
        samples.push_back(base->time_step_us(tok, opt->position, flush));
      const eval::SampleStats s = eval::sample_stats(samples);
      const eval::Floor floor = eval::floor_for(weights->shape, *target, opt->position);
      nlohmann::json out = {{"model", weights->shape.name},
                            {"device", target->name},
                            {"position", opt->position},
                            {"latency_us", s.median},
                            {"latency_p90_us", s.p90},
                            {"latency_spread_us", s.p90 - s.p10},
                            {"iterations", opt->iterations},
                            {"l2_flushed", flush},
                            {"floor_us", floor.floor_us},
                            {"floor_datasheet_us", floor.floor_datasheet_us},
                            {"bytes_min", floor.bytes_min},
                            {"check_position_0",
                             {{"rel_err", c.rel_err},
                              {"max_abs_err", c.max_abs_err},
                              {"argmax_match", c.argmax_match}}},
                            {"info", base->info()}};
      if (s.median >= floor.floor_us && s.median > 0) {
        out["pct_of_floor"] = 100.0 * floor.floor_us / s.median;
        if (floor.floor_datasheet_us > 0)
          out["pct_of_datasheet"] = 100.0 * floor.floor_datasheet_us / s.median;
      } else {
        out["note"] = "median below the floor: withheld as a timing or accounting error";
        out.erase("latency_us");
      }
      print_json(out);
    } catch (const std::exception& e) {
      print_error("baseline", e.what());
      ctx.exit_code = kExitEnvironment;
    }
  });
}

}  // namespace megasched::harness
