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

/// What one step gives the loop: the greedy next token, and the logits when asked for.
struct StepResult {
  int32_t next = -1;
  std::vector<float> logits;
};

/// The VMs of a plan's buckets, built before the first step; step() runs the bucket that holds
/// the position, handing the KV cache to the next bucket's VM when a step crosses into it.
class PlanVms {
 public:
  /// "" or why the plan cannot run: a bucket that does not lower or validate, two buckets whose
  /// KV layouts differ, a VM that cannot be made.
  std::string prepare(const schedule::Weights& weights, const schedule::GpuTarget& target,
                      const schedule::Plan& plan, const std::string& device, int32_t first_token) {
    plan_ = &plan;
    const schedule::ModelShape& shape = weights.shape;
    for (const schedule::PlanBucket& b : plan.buckets) {
      const std::string label = plan.single() ? "" : "bucket " + schedule::bucket_label(b) + ": ";
      PreparedProgram prepared = prepare_program(shape, target, b.config);
      if (!prepared.program) return label + "lowering: " + prepared.error;
      if (!prepared.report.ok()) return label + prepared.unsafe_message();
      programs_.push_back(std::make_unique<schedule::Program>(std::move(*prepared.program)));
      const std::string differs = kv_layout_difference(*programs_.front(), *programs_.back());
      if (!differs.empty())
        return "buckets " + schedule::bucket_label(plan.buckets.front()) + " and " +
               schedule::bucket_label(b) + " lay out the KV cache differently (" + differs +
               "): the buckets of a plan share one KV cache";
    }
    if (device == "gpu") return prepare_gpu(weights, plan, first_token);
    for (const auto& program : programs_)
      refs_.push_back(std::make_unique<vm::ReferenceVm>(*program, weights));
    return "";
  }

  /// One step's next token and, when `want_logits` (always on the CPU), its logits. On the GPU
  /// without logits only the kernel's own argmax comes back (GpuVm::step_argmax).
  std::optional<StepResult> step(int32_t token, int32_t pos, bool want_logits, std::string* why,
                                 std::vector<int>* switches) {
    const size_t bucket = schedule::plan_bucket_index(*plan_, pos);
    if (!gpus_.empty()) {
      // The VMs share one KV cache: switching program is running another kernel, no copy.
      if (bucket != current_) current_ = bucket, switches->push_back(pos);
      auto s = want_logits ? gpus_[current_]->step(token, pos)
                           : gpus_[current_]->step_argmax(token, pos);
      if (s.status != "ok") return *why = s.status + ": " + s.message, std::nullopt;
      if (!want_logits) return StepResult{s.argmax, {}};
      const int32_t next = argmax(s.logits);
      return StepResult{next, std::move(s.logits)};
    }
    if (bucket != current_) {
      // The cache of positions [0, pos) as the previous bucket's program wrote it.
      if (!refs_[bucket]->load_kv(refs_[current_]->kv_snapshot(pos)))
        return *why = "the KV cache does not fit bucket " +
                      schedule::bucket_label(plan_->buckets[bucket]) + "'s program",
               std::nullopt;
      current_ = bucket;
      switches->push_back(pos);
    }
    auto s = refs_[current_]->step(token, pos);
    if (!s.completed) return *why = "the program did not finish: " + s.stuck, std::nullopt;
    const int32_t next = argmax(s.logits);
    return StepResult{next, std::move(s.logits)};
  }

 private:
  /// Every bucket's GpuVm, its kernel built and loaded, on the first VM's KV cache. Each later
  /// bucket's kernel runs once now at position 0 (the first step rewrites that KV row before any
  /// step reads it), so the step at its boundary pays no first launch.
  std::string prepare_gpu(const schedule::Weights& weights, const schedule::Plan& plan,
                          int32_t first_token) {
    for (size_t i = 0; i < programs_.size(); ++i) {
      const std::string label =
          plan.single() ? "" : "bucket " + schedule::bucket_label(plan.buckets[i]) + ": ";
      std::string error;
      bool rejected = false;
      gpus_.push_back(
          i == 0 ? vm::GpuVm::create(*programs_[i], weights, vm::GpuVmOptions{}, &error, &rejected)
                 : vm::GpuVm::create_sharing_kv(*programs_[i], weights, vm::GpuVmOptions{},
                                                *gpus_[0], &error, &rejected));
      if (!gpus_.back()) return label + "gpu: " + error;
      if (i == 0) continue;
      const vm::StepOutput warm = gpus_.back()->step(first_token, 0);
      if (warm.status != "ok") return label + "gpu: warm-up step: " + warm.message;
    }
    return "";
  }

  const schedule::Plan* plan_ = nullptr;
  std::vector<std::unique_ptr<schedule::Program>> programs_;  // the VMs hold references
  std::vector<std::unique_ptr<vm::ReferenceVm>> refs_;        // one per bucket (CPU)
  std::vector<std::unique_ptr<vm::GpuVm>> gpus_;              // one per bucket (GPU)
  size_t current_ = 0;
};

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

std::string kv_layout_difference(const schedule::Program& a, const schedule::Program& b) {
  auto differs = [](const char* what, uint64_t x, uint64_t y) {
    return std::string(what) + " " + std::to_string(x) + " vs " + std::to_string(y);
  };
  const ms_abi::ModelParams& m = a.model;
  const ms_abi::ModelParams& n = b.model;
  if (a.buffer_elements[ms_abi::kBufKv] != b.buffer_elements[ms_abi::kBufKv])
    return differs("KV buffer elements", a.buffer_elements[ms_abi::kBufKv],
                   b.buffer_elements[ms_abi::kBufKv]);
  if (m.layers != n.layers) return differs("layers", m.layers, n.layers);
  if (m.kv_heads != n.kv_heads) return differs("KV heads", m.kv_heads, n.kv_heads);
  if (m.head_dim != n.head_dim) return differs("head_dim", m.head_dim, n.head_dim);
  if (m.max_seq != n.max_seq) return differs("max_seq", m.max_seq, n.max_seq);
  if (m.kv_dtype != n.kv_dtype) return differs("KV dtype code", m.kv_dtype, n.kv_dtype);
  return "";
}

GenerateResult generate(const schedule::Weights& weights, const schedule::GpuTarget& target,
                        const schedule::ScheduleConfig& config, const GenerateOptions& options) {
  return generate(weights, target, schedule::single_config_plan(config), options);
}

GenerateResult generate(const schedule::Weights& weights, const schedule::GpuTarget& target,
                        const schedule::Plan& plan, const GenerateOptions& options) {
  GenerateResult r;
  const auto& shape = weights.shape;
  if (r.error = generate_input_error(shape, options); !r.error.empty()) return r;
  // The step at the last prompt position yields the first new token (see generate_input_error).
  const int total_steps =
      static_cast<int>(options.prompt.size()) + std::max(options.max_tokens, 1) - 1;
  std::string error;
  if (!schedule::check_plan_covers(plan, shape.max_seq, &error))
    return r.error = "the plan does not fit model " + shape.name + ": " + error, r;
  PlanVms vms;
  r.error = vms.prepare(weights, target, plan, options.device, options.prompt[0]);
  if (!r.error.empty()) return r;
  std::unique_ptr<EagerModel> eager;
  if (options.verify) eager = std::make_unique<EagerModel>(weights);

  int32_t token = options.prompt[0];
  double generating_us = 0.0;
  // Logits come back to the host only for someone who reads them; greedy tokens alone take the
  // kernel's argmax (on the GPU, 4 bytes instead of the vocabulary's logits each step).
  const bool want_logits = options.verify || static_cast<bool>(options.on_logits);
  for (int pos = 0; pos < total_steps; ++pos) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = vms.step(token, pos, want_logits, &error, &r.switch_positions);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (!out) return r.error = "step " + std::to_string(pos) + ": " + error, r;
    r.step_us.push_back(us);
    const int32_t next = out->next;
    if (options.on_logits) options.on_logits(pos, out->logits);
    if (eager) {
      const auto expect = eager->step(token, pos);
      const Comparison c = compare_logits(out->logits, expect, shape.dtype);
      r.max_rel_err = std::max(r.max_rel_err, c.rel_err);
      ++r.steps_verified;
      if (!step_verified(c) && r.first_mismatch_step < 0) r.first_mismatch_step = pos;
      if (c.near_tie) r.near_ties.push_back({pos, c.argmax_gap, c.max_abs_err});
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

nlohmann::json near_ties_json(const GenerateResult& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const GenerateResult::NearTie& t : r.near_ties)
    out.push_back({{"step", t.step}, {"argmax_gap", t.argmax_gap}, {"max_abs_err", t.max_abs_err}});
  return out;
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
  if (!r.switch_positions.empty()) j["switch_positions"] = r.switch_positions;
  if (!r.near_ties.empty()) j["near_ties"] = near_ties_json(r);
  return j;
}

}  // namespace megasched::eval
