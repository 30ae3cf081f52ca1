// Promotion (`megasched promote`, `megasched registry verify`): the two gates a config passes
// before it enters the verified registry (flywheel/registry.h), HARNESS.md section 14.
//   verify gate     valid, correct on the ReferenceVm and (device gpu) on the GPU at positions
//                   0, 1024 and 4096 (clipped to the model's last position), and a greedy
//                   generate with every step checked against the eager forward (64 tokens)
//   benchmark gate  the candidate and the incumbent (what best:MODEL:GPU resolves to: the
//                   registry's newest entry for the model, GPU and dtype, else the built-in
//                   record, else the default config) re-measured in one process, rounds
//                   interleaved ABBA (candidate, incumbent, incumbent, candidate, ...), and
//                   promoted only when median(incumbent) / median(candidate) >= 1.10
// The benchmark gate needs measured latencies: with --device cpu only the verify gate runs
// (--verify-only), and nothing is promoted.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"
#include "flywheel/shared_corpus.h"
#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/plan.h"

namespace megasched::harness {

constexpr double kPromoteSpeedup = 1.10;  // the benchmark gate's threshold
constexpr int kVerifyTokens = 64;         // generate --verify tokens of the verify gate

/// The verify gate's positions for a model of `max_seq` positions: 0, 1024, 4096, each clipped
/// to max_seq - 1, without repeats.
std::vector<int> verify_positions(int max_seq);

struct GateOutcome {
  bool pass = false;
  std::string message;  // which gate, with its numbers
  nlohmann::json detail = nlohmann::json::object();
};

/// The benchmark gate's decision on interleaved timings (one latency per round and side): pass
/// when median(incumbent) / median(candidate) >= required. Empty or unequal sides fail.
GateOutcome decide_benchmark_gate(const std::vector<double>& candidate_us,
                                  const std::vector<double>& incumbent_us, double required);

/// One measurement: the latency of the candidate (true) or the incumbent (false), or nullopt
/// with *error when that trial failed.
using Measure = std::function<std::optional<double>(bool candidate, std::string* error)>;

/// Measures `rounds` rounds in ABBA order (round r even: candidate then incumbent; odd: incumbent
/// then candidate), so a drift of the clock or the temperature falls on both alike. Returns the
/// gate's outcome; detail has each side's samples and the order measured.
GateOutcome run_benchmark_gate(int rounds, double required, const Measure& measure);

/// The incumbent of the benchmark gate: what `best:MODEL:GPU` resolves to for the workload, so a
/// promotion can never make that name slower than it was. `source` says which it is.
struct GateIncumbent {
  schedule::Plan plan;      // a one-bucket plan for a single config
  std::string id;           // the registry entry's id, the record's name, or "default"
  std::string source;       // "registry", "built-in record" or "default"
  nlohmann::json document;  // the config or plan document as the registry or record holds it
};

/// The registry's newest entry at `registry_path` for the shape's model and dtype on `target`,
/// else the built-in record best:MODEL:GPU of schedule/named_configs.h for that model (a preset)
/// and target, else the default config. nullopt with *error when the one chosen does not parse
/// or does not cover the model's positions.
std::optional<GateIncumbent> gate_incumbent(const std::string& registry_path,
                                            const schedule::ModelShape& shape,
                                            const std::string& target, std::string* error);

/// The verify gate on `device` (cpu: the ReferenceVm only, generate on the ReferenceVm).
struct VerifyRequest {
  std::string model = "toy";
  std::string gpu = "h100";
  std::string device = "cpu";
  uint64_t seed = 0;
  std::vector<int> positions;  // empty: verify_positions(max_seq)
  int tokens = kVerifyTokens;
  /// The shared corpus folder the gate's GPU verdict is appended to (flywheel/shared_corpus.h;
  /// "none": off).
  std::string flywheel_dir = flywheel::default_flywheel_dir();
};
/// Appends the verify gate's verdict of `config` (measured by an evaluator of `identity` on a model
/// of `shape`) to request.flywheel_dir as a `promote` row, when it was a GPU trial; a CPU verdict
/// appends nothing. *appended says whether it did; false with *error on an I/O failure.
bool append_verify_verdict(const VerifyRequest& request, const schedule::ScheduleConfig& config,
                           const eval::Verdict& verdict, const schedule::ModelShape& shape,
                           const nlohmann::json& identity, bool* appended, std::string* error);

/// *verdict gets the evaluate verdict (when the trial ran). *environment: the failure is the
/// machine's (no GPU), not the config's.
GateOutcome run_verify_gate(const VerifyRequest& request, const schedule::ScheduleConfig& config,
                            eval::Verdict* verdict, bool* environment);

// ---- plans (schedule/plan.h; HARNESS.md section 15) -------------------------------------------
// verify gate     bucket by bucket: each bucket's config through run_verify_gate, checked at the
//                 positions inside its bucket (its begin and end - 1, and the verify positions
//                 that fall in it); the plan passes when every bucket does
// benchmark gate  over the plan's weighted objective: each round measures every bucket's candidate
//                 config and the incumbent's config for that bucket (the incumbent plan's bucket
//                 that holds the timed position), each at the bucket's timed position (its
//                 midpoint), and a side's round latency is sum(w_b * latency_b) / sum(w_b) with
//                 w_b the bucket's positions (end - begin): the mean step of a generation through
//                 every position; promoted when median(incumbent) / median(candidate) >= 1.10.
//                 Per-bucket speedups are reported, not gated: a bucket may keep the incumbent's
//                 config (1.0x) while the others carry the plan. A bucket whose candidate config
//                 is the incumbent's (PlanGateBucket::shared) is timed once a round, that sample
//                 counted on both sides.

/// One bucket of a plan's benchmark gate.
struct PlanGateBucket {
  int begin = 0;
  int end = 0;  // resolved
  int timed_position = 0;
  double weight = 1.0;  // end - begin
  // The candidate's config is the incumbent's at timed_position: one measurement a round serves
  // both sides. Two timings of one program would put the noise of the plan's widest bucket, not a
  // difference, into the weighted objective (HARNESS.md, "Promoting a plan").
  bool shared = false;
};

/// The gate's buckets of `plan` on a model of `max_seq` positions (timed at the midpoints).
std::vector<PlanGateBucket> plan_gate_buckets(const schedule::Plan& plan, int max_seq);

/// One bucket's measurement: the candidate's (true) or the incumbent's (false) latency of bucket
/// `bucket`, or nullopt with *error.
using BucketMeasure =
    std::function<std::optional<double>(bool candidate, size_t bucket, std::string* error)>;

/// The weighted benchmark gate (ABBA rounds as run_benchmark_gate, a side's round being every
/// bucket in order). detail: the gate's fields over the weighted latencies, "rule", and "buckets"
/// (per bucket: begin, end, timed_position, weight, both sides' medians and the speedup).
GateOutcome run_plan_benchmark_gate(const std::vector<PlanGateBucket>& buckets, int rounds,
                                    double required, const BucketMeasure& measure);

/// The verify gate of a plan, bucket by bucket (request.positions: empty for verify_positions).
/// detail: "buckets", one verify detail per bucket with its begin and end. *verdicts: each
/// bucket's verdict (those that ran). Stops at the first bucket that fails.
GateOutcome run_plan_verify_gate(const VerifyRequest& request, const schedule::Plan& plan,
                                 std::vector<eval::Verdict>* verdicts, bool* environment);

}  // namespace megasched::harness
