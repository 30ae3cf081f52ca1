#include "eval/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include "eval/eager.h"
#include "eval/oracle.h"
#include "eval/prepare.h"
#include "vm/gpu_vm.h"
#include "vm/reference_vm.h"

namespace megasched::eval {

namespace {

/// One decode step of whichever VM generates: logits for (token, position).
using StepFn = std::function<std::optional<std::vector<float>>(int32_t, int32_t, std::string*)>;

}  // namespace

std::string generate_input_error(const schedule::ModelShape& shape,
                                 const GenerateOptions& options) {
  if (options.prompt.empty()) return "the prompt is empty; pass --prompt-ids 1,2,3";
  for (int32_t t : options.prompt)
    if (t < 0 || t >= shape.vocab)
      return "prompt token " + std::to_string(t) + " is outside the vocabulary [0, " +
             std::to_string(shape.vocab) + ") of model " + shape.name;
  if (options.max_tokens < 0)
    return "max tokens " + std::to_string(options.max_tokens) + " is negative";
  // The step at the last prompt position yields the first new token, and the last new token is
  // never fed back: prompt + max_tokens - 1 steps (the prompt alone for 0 tokens).
  const int64_t total_steps =
      static_cast<int64_t>(options.prompt.size()) + std::max(options.max_tokens, 1) - 1;
  if (total_steps > shape.max_seq)
    return "prompt (" + std::to_string(options.prompt.size()) + " tokens) + max tokens (" +
           std::to_string(options.max_tokens) + ") = " + std::to_string(total_steps) +
           " steps exceeds the KV cache of " + std::to_string(shape.max_seq) +
           " positions of model " + shape.name;
  return "";
}

GenerateResult generate(const schedule::Weights& weights, const schedule::GpuTarget& target,
                        const schedule::ScheduleConfig& config, const GenerateOptions& options) {
  GenerateResult r;
  const auto& shape = weights.shape;
  if (r.error = generate_input_error(shape, options); !r.error.empty()) return r;
  // The step at the last prompt position yields the first new token (see generate_input_error).
  const int total_steps =
      static_cast<int>(options.prompt.size()) + std::max(options.max_tokens, 1) - 1;
  std::string error;
  const PreparedProgram prepared = prepare_program(shape, target, config);
  if (!prepared.program) return r.error = "lowering: " + prepared.error, r;
  if (!prepared.report.ok()) return r.error = prepared.unsafe_message(), r;
  const schedule::Program& program = *prepared.program;

  StepFn step;
  std::unique_ptr<vm::ReferenceVm> ref;
  std::unique_ptr<vm::GpuVm> gpu;
  if (options.device == "gpu") {
    bool rejected = false;
    gpu = vm::GpuVm::create(program, weights, vm::GpuVmOptions{}, &error, &rejected);
    if (!gpu) return r.error = "gpu: " + error, r;
    step = [&](int32_t token, int32_t pos, std::string* why) -> std::optional<std::vector<float>> {
      auto s = gpu->step(token, pos);
      if (s.status != "ok") {
        *why = s.status + ": " + s.message;
        return std::nullopt;
      }
      return std::move(s.logits);
    };
  } else {
    ref = std::make_unique<vm::ReferenceVm>(program, weights);
    step = [&](int32_t token, int32_t pos, std::string* why) -> std::optional<std::vector<float>> {
      auto s = ref->step(token, pos);
      if (!s.completed) {
        *why = "the program did not finish: " + s.stuck;
        return std::nullopt;
      }
      return std::move(s.logits);
    };
  }
  std::unique_ptr<EagerModel> eager;
  if (options.verify) eager = std::make_unique<EagerModel>(weights);

  int32_t token = options.prompt[0];
  double generating_us = 0.0;
  for (int pos = 0; pos < total_steps; ++pos) {
    const auto t0 = std::chrono::steady_clock::now();
    auto logits = step(token, pos, &error);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (!logits) return r.error = "step " + std::to_string(pos) + ": " + error, r;
    r.step_us.push_back(us);
    const int32_t next = argmax(*logits);
    if (options.on_logits) options.on_logits(pos, *logits);
    if (eager) {
      const auto expect = eager->step(token, pos);
      const Comparison c = compare_logits(*logits, expect, shape.dtype);
      r.max_rel_err = std::max(r.max_rel_err, c.rel_err);
      ++r.steps_verified;
      if (!c.pass && r.first_mismatch_step < 0) r.first_mismatch_step = pos;
    }
    const bool in_prompt = pos + 1 < static_cast<int>(options.prompt.size());
    if (in_prompt) {
      token = options.prompt[static_cast<size_t>(pos + 1)];
    } else {
      if (static_cast<int>(r.tokens.size()) < options.max_tokens) {
        r.tokens.push_back(next);
        generating_us += us;
      }
      token = next;
    }
  }
  if (generating_us > 0)
    r.tokens_per_s = static_cast<double>(r.tokens.size()) / (generating_us * 1e-6);
  r.ok = r.first_mismatch_step < 0;
  if (!r.ok)
    r.error = "step " + std::to_string(r.first_mismatch_step) + " differs from the eager reference";
  return r;
}

nlohmann::json to_json(const GenerateResult& r) {
  nlohmann::json j = {{"ok", r.ok},
                      {"tokens", r.tokens},
                      {"tokens_per_s", r.tokens_per_s},
                      {"step_us", r.step_us},
                      {"steps_verified", r.steps_verified},
                      {"max_rel_err", r.max_rel_err}};
  if (!r.error.empty()) j["error"] = r.error;
  if (r.first_mismatch_step >= 0) j["first_mismatch_step"] = r.first_mismatch_step;
  return j;
}

}  // namespace megasched::eval
