// The whole-generation comparison behind `megasched bench --generate PROMPT_LEN:NEW_TOKENS`: for
// each case, a greedy generation of NEW_TOKENS tokens after a PROMPT_LEN-token prompt (the token
// ids eval::trial_tokens gives for the seed) by every row on the live GPU, one token per step from
// position 0 (the prompt included: no prefill), each step timed on the host clock from token and
// position in to the next token on the host (each row's own argmax, read back alone: no logits
// are copied to the host).
// Rows: megasched's (a plan switching kernel at its bucket boundaries and single configs, each
// through eval/generate.h, every kernel built before the first token), each baseline kind
// (eval/baselines/baseline.h, its graph replayed per step) and the PyTorch peer
// (bench/peers/torch_peer.py --generate, run as a child process where python3 imports torch and
// transformers, else a "skipped" row saying why: its CUDA
// graph step with eager ops and with torch.compile, and transformers' generate with a static
// cache). Per row: the wall time per generated token (p50, p90), tokens/s, the prompt's steps and
// the whole generation in ms, and its greedy tokens against the first megasched row's (the first
// index that differs). The rendering (JSON, Markdown) is host code with no GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/model.h"
#include "schedule/plan.h"
#include "schedule/target.h"

namespace megasched::eval {

/// One generation: PROMPT_LEN prompt tokens, then NEW_TOKENS greedy ones.
struct GenerateCase {
  int prompt_len = 0;  // tokens, >= 1
  int new_tokens = 0;  // tokens, >= 1
};

/// Parses "PROMPT_LEN:NEW_TOKENS" items; each argument may be a comma list ("128:4096,4096:512").
/// nullopt and *error naming the bad item (PROMPT_LEN and NEW_TOKENS must be >= 1).
std::optional<std::vector<GenerateCase>> parse_generate_cases(const std::vector<std::string>& args,
                                                              std::string* error);
/// Why `c` cannot run on `shape` (PROMPT_LEN + NEW_TOKENS beyond the model's positions), with a
/// hint; "" when it can.
std::string generate_case_error(const schedule::ModelShape& shape, const GenerateCase& c);
/// The prompt of `c`: trial_tokens(vocab, prompt_len, seed).
std::vector<int32_t> generate_case_prompt(const schedule::ModelShape& shape, const GenerateCase& c,
                                          uint64_t seed);

/// One row of one case.
struct GenerateBenchRow {
  std::string name;  // a plan's or config's label, a baseline kind, a peer's row name
  std::string kind;  // "plan" | "config" | "baseline" | "peer"
  GenerateCase gen;
  std::string status = "ok";  // "ok", or why the row has no times ("error", "skipped", ...)
  std::string message;        // one line when status != "ok"
  std::optional<double> token_p50_us, token_p90_us;  // wall time per generated token
  double tokens_per_s = 0.0;    // generated tokens over the generating steps' time
  double prompt_ms = 0.0;       // the steps before the first generated token (a peer: its prefill)
  double total_ms = 0.0;        // the whole generation
  std::vector<int32_t> tokens;  // greedy tokens (the prompt excluded)
  std::optional<int> first_mismatch;  // vs the reference row: -1 identical; nullopt not compared
  nlohmann::json detail = nlohmann::json::object();
};

struct GenerateBenchResult {
  std::string model;
  std::string device;  // the live target's name
  std::vector<GenerateCase> cases;
  std::string reference;  // the row every row's tokens are compared with
  std::vector<GenerateBenchRow> rows;
};

/// The first index where `a` and `b` differ; the shorter length when one is a prefix of the other;
/// -1 when they are equal.
int first_token_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b);
/// Fills a row's per-token p50/p90, tokens/s, prompt and total times from the time of every step
/// (`prompt_len - 1` prompt steps, then one step per generated token).
void summarize_generation(const std::vector<double>& step_us, int prompt_len,
                          GenerateBenchRow* row);
/// Compares every row's tokens with those of the first "plan" or "config" row of its case (rows
/// without tokens are left uncompared).
void compare_generation_tokens(GenerateBenchResult* result);

/// Reads the rows of a torch_peer.py --generate document: {"peer", "generate_rows": [{"name",
/// "prompt_len", "new_tokens", "status", "message", "token_p50_us", "token_p90_us",
/// "tokens_per_s", "prompt_ms", "total_ms", "tokens", ...}]}. nullopt and *error naming the first
/// bad field.
std::optional<std::vector<GenerateBenchRow>> generate_peer_rows(const nlohmann::json& doc,
                                                                std::string* error);

/// How the PyTorch peer is run: python3 `script` --generate P:N --prompt-file ..., on `checkpoint`
/// (a Hugging Face directory, the same weights megasched loaded: tokens comparable) or else on a
/// random model of `shape`'s preset dimensions (timings only: its tokens are not compared).
struct TorchPeerRun {
  std::string script;      // bench/peers/torch_peer.py; empty: no peer rows; missing: skipped
  std::string checkpoint;  // the --model directory, when megasched loaded one
  std::string work_dir;    // prompt, output and log files
};

struct GenerateBenchOptions {
  std::vector<GenerateCase> cases;
  /// Label and plan of each megasched row (a config is its one-bucket plan): kind "plan" for a
  /// plan of several buckets, "config" otherwise. The first is every case's reference.
  std::vector<std::pair<std::string, schedule::Plan>> plans;
  std::vector<std::string> baselines;  // baseline kinds
  uint64_t seed = 0;                   // the prompt's token ids
  TorchPeerRun torch_peer;
};

/// Runs every case on the live GPU (`target` is the live device). A failing row is a row with its
/// status; only a failure before anything can run (no device) is nullopt with *error.
std::optional<GenerateBenchResult> run_generate_bench(
    const schedule::Weights& weights, const schedule::GpuTarget& target,
    const GenerateBenchOptions& options, std::string* error,
    const std::function<void(const std::string&)>& progress = {});

/// The whole result; each row with its tokens.
nlohmann::json generate_bench_to_json(const GenerateBenchResult& result);
/// The Markdown table: one line per row, grouped by case.
std::string generate_bench_table(const GenerateBenchResult& result);

}  // namespace megasched::eval
