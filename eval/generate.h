// Greedy generation: the prompt is fed one token per step from position 0, then each step's argmax
// becomes the next step's token. The KV cache persists across steps, and the program (and, on a
// GPU, the kernel) is lowered and built once for every step. With a plan (schedule/plan.h), every
// bucket's program is lowered, validated and loaded before the first token, and the step at a
// bucket's begin runs that bucket's program on the KV cache the steps before it wrote: the plans'
// programs must lay the cache out alike (kv_layout_difference), and the tokens and logits are
// those each config gives alone. With verify, every step's logits and token are checked against
// the eager reference. On a GPU, a step's logits are copied to the host only when something reads
// them (verify, on_logits); otherwise the next token is the kernel's own argmax, read back alone.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/plan.h"
#include "schedule/program.h"
#include "schedule/target.h"

namespace megasched::eval {

struct GenerateOptions {
  std::vector<int32_t> prompt;  // token ids, at least one
  int max_tokens = 16;          // tokens to generate after the prompt
  std::string device = "cpu";   // "cpu" (ReferenceVm) | "gpu" (the megakernel)
  bool verify = false;          // compare every step with the eager reference
  /// Called with each step's logits (position, vocab floats), e.g. to dump them for a cross-check.
  std::function<void(int, const std::vector<float>&)> on_logits;
};

struct GenerateResult {
  bool ok = false;                    // ran to the end (and, with verify, every step matched)
  std::string error;                  // one line when !ok
  std::vector<int32_t> tokens;        // generated tokens (excluding the prompt)
  std::vector<double> step_us;        // host wall time of each step (prompt steps included)
  std::vector<int> switch_positions;  // with a plan: the positions where a bucket's program began
  double tokens_per_s = 0.0;          // generated tokens over the time of the generating steps
  int steps_verified = 0;
  double max_rel_err = 0.0;      // worst over verified steps
  int first_mismatch_step = -1;  // step whose token or logits differ from eager (-1: none)
  // Verified steps whose argmax differed from eager's by a near tie (eval/oracle.h
  // Comparison::near_tie): accepted; eager goes on with the kernel's token. Each with the
  // reference's gap between the two tokens and the step's max_abs_err.
  struct NearTie {
    int step = 0;
    double argmax_gap = 0.0;
    double max_abs_err = 0.0;
  };
  std::vector<NearTie> near_ties;
};

/// Why `options` cannot be decoded on `shape` (a prompt token outside the vocabulary, a prompt
/// and max tokens beyond the KV cache, ...), or "" when they can: bad input, before any work.
std::string generate_input_error(const schedule::ModelShape& shape, const GenerateOptions& options);

/// Lowers `config` once, validates it, and generates.
GenerateResult generate(const schedule::Weights& weights, const schedule::GpuTarget& target,
                        const schedule::ScheduleConfig& config, const GenerateOptions& options);
/// Lowers and validates every bucket's config of `plan` (which must cover the model's positions)
/// and generates, each step with the program of the bucket that holds its position. On a GPU every
/// bucket's kernel is built, loaded and launched once before the first token, the VMs share the
/// weights and one KV cache (vm::GpuVm::create_sharing_kv), and a boundary copies nothing: the
/// next step runs the next bucket's kernel.
GenerateResult generate(const schedule::Weights& weights, const schedule::GpuTarget& target,
                        const schedule::Plan& plan, const GenerateOptions& options);

/// How two programs lay out the KV cache differently ("kv_dtype 1 vs 0", "kv buffer elements
/// ..."), or "" when one cache serves both: the buffer's extent and the model constants that
/// place a row (layers, KV heads, head dim, max_seq, KV dtype; the order is abi/abi.h's kBufKv).
std::string kv_layout_difference(const schedule::Program& a, const schedule::Program& b);

nlohmann::json to_json(const GenerateResult& result);

/// The result's near ties as [{"step", "argmax_gap", "max_abs_err"}] (empty when none).
nlohmann::json near_ties_json(const GenerateResult& result);

}  // namespace megasched::eval
