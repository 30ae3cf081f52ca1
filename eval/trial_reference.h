// The reference a trial is checked against (steps 2 and 3 of eval/evaluate.h): the windows of every
// checked position (the KV cache before it and the logits of check_steps consecutive steps) from
// the disk cache or one pass of a reference engine, where each came from (the verdict's
// "reference"), the GPU engine's cross-check against the CPU eager forward, and the ReferenceVm's
// check of a program against the windows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/reference_cache.h"
#include "eval/verdict.h"
#include "schedule/model.h"
#include "schedule/program.h"
#include "vm/reference_vm.h"

namespace megasched::eval {

struct EvaluatorOptions;  // eval/evaluate.h

class TrialReference {
 public:
  /// The reference of `weights` fed `tokens` (one per position, through the last window's), with a
  /// window at each of `checked` (ascending).
  TrialReference(const schedule::Weights& weights, std::vector<int32_t> tokens,
                 std::vector<int> checked)
      : weights_(&weights), tokens_(std::move(tokens)), checked_(std::move(checked)) {}

  /// Loads the windows (cache or engine) and checks their logits are finite; false + *error when
  /// an engine cannot run, the GPU engine disagrees with the CPU eager forward, or the model's own
  /// logits are not finite.
  bool load(const EvaluatorOptions& options, std::string* error);

  /// The window whose steps include `position` (nullptr when none).
  const ReferenceWindow* window_at(int position) const;
  /// Of the windows whose steps include `position`, the one that starts last (fewest steps from
  /// its KV cache to `position`; nullptr when none).
  const ReferenceWindow* nearest_window_at(int position) const;
  const std::vector<ReferenceWindow>& windows() const { return windows_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  /// The checked positions, ascending (a window at each).
  const std::vector<int>& checked() const { return checked_; }
  /// The verdict's "reference": steps, weights id, cache, engine, windows and their origins.
  const nlohmann::json& info() const { return info_; }
  /// Whether the ReferenceVm checks only the timed positions (from the reference KV cache),
  /// rather than walking every position from 0.
  bool sampled() const { return info_.value("reference_vm", "") == "sampled"; }

  /// Step 2: `program` on the ReferenceVm against the windows (at the `timed` positions when
  /// sampled), into v->checks; false (with notes) when it differs.
  bool check_reference_vm(const schedule::Program& program, const std::vector<int>& timed,
                          Verdict* v) const;

 private:
  /// The GPU engine's window at position 0, when it just computed one, against a few CPU steps.
  bool cross_check_gpu_window(std::string* error);
  /// One ReferenceVm step's logits against `ref`, into v->checks; false (with a note) on a miss.
  bool record_reference_vm_check(int position, int start, const vm::ReferenceVm::StepResult& step,
                                 const std::vector<float>& ref, Verdict* v) const;

  const schedule::Weights* weights_;
  std::vector<int32_t> tokens_;
  std::vector<int> checked_;
  std::vector<ReferenceWindow> windows_;  // one per checked position, ascending
  int reference_vm_threads_ = 1;          // the sampled check's threads (load() resolves auto)
  nlohmann::json info_ = nlohmann::json::object();
};

}  // namespace megasched::eval
