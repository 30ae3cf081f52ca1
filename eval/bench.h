// The comparison behind `megasched bench`: one model on the live GPU, in one process, at several
// positions: the floor (computed from the bytes a step must move and the measured bandwidth), the
// default config and any given configs (each a GPU trial: the kernel checked on the reference
// windows at position 0 and at the timed position, kBenchCheckSteps steps each from the reference
// KV cache before it, as a loop's trials are checked, then timed at the position), every baseline
// kind (eval/baselines/baseline.h, checked against eager at position 0) and, when given, the rows
// of peers' JSON (bench/peers/: PyTorch and transformers, measured by their own scripts on the same
// GPU). The result renders as JSON, a Markdown table (median, p10/p90, % of the measured bandwidth,
// ratio to each baseline kind) and an SVG bar chart; the rendering is host code with no GPU.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/plan.h"
#include "schedule/target.h"

namespace megasched::eval {

/// One row of the comparison at one position.
struct BenchRow {
  std::string name;  // "floor", a config's label, a baseline kind, a peer's row name
  std::string kind;  // "floor" (computed, not measured) | "config" | "baseline" | "peer"
  int position = 0;
  std::string status = "ok";  // "ok", or why the row has no latency (the trial's status...)
  std::string message;        // one line when status != "ok"
  std::optional<double> median_us, p10_us, p90_us;
  nlohmann::json detail = nlohmann::json::object();  // errors, kernel info, the peer's fields
};

struct BenchResult {
  std::string model;
  std::string device;               // the live target's name
  double bandwidth_gbs = 0.0;       // the bandwidth of the floor and of "% of bandwidth"
  bool measured_bandwidth = false;  // from `megasched doctor --measure` (else the datasheet)
  std::vector<int> positions;       // in the order measured
  std::vector<double> floor_us;     // per position, over bandwidth_gbs
  std::vector<BenchRow> rows;
};

/// The ratio columns: every baseline kind that has a row, in first-seen order.
std::vector<std::string> bench_baseline_names(const BenchResult& result);
/// The median of baseline `name` at `position`, when measured.
std::optional<double> bench_baseline_us(const BenchResult& result, const std::string& name,
                                        int position);

/// The whole result, each row with "pct_of_bandwidth" and "x_vs_<baseline>" (baseline median over
/// the row's median: above 1 means faster than that baseline) where they apply.
nlohmann::json bench_to_json(const BenchResult& result);
/// A result read back from bench_to_json's document (a bench.json written earlier): the model,
/// device, bandwidth, positions, floors and every row with its detail (the derived columns
/// dropped). nullopt and *error naming the first missing or mistyped field.
std::optional<BenchResult> bench_from_json(const nlohmann::json& doc, std::string* error);
/// The Markdown table: one line per row, grouped by position.
std::string bench_table(const BenchResult& result);
/// An SVG bar chart of the medians: one group per position, one bar per row (the floor hatched).
std::string bench_svg(const BenchResult& result);

/// Reads peer rows from a peers JSON document: {"peer": NAME, "rows": [{"name", "position",
/// "median_us", "p10_us", "p90_us", ...}]} (bench/peers/torch_peer.py writes it), or an array of
/// such documents. nullopt and *error naming the first bad field.
std::optional<std::vector<BenchRow>> peer_rows(const nlohmann::json& peers, std::string* error);

struct BenchOptions {
  std::vector<int> positions = {0, 1024, 4096};
  std::vector<std::pair<std::string, schedule::ScheduleConfig>> configs;  // label, config
  /// label, plan of several buckets (schedule/plan.h, covering the model): at each position the
  /// config of the bucket that holds it, a row like a config's (detail "bucket": its range)
  std::vector<std::pair<std::string, schedule::Plan>> plans;
  std::vector<std::string> baselines;  // baseline kinds to time (default: every kind)
  int warmup = 10;
  int iterations = 100;  // timed steps per row and round
  /// Interleaved rounds: at each position every config, plan and baseline row is timed once per
  /// round, in turn, and its median and p10/p90 are over every round's samples (detail
  /// "round_medians_us"), so a drift over time or a fresh allocation's luck falls on every row
  /// alike instead of on whichever row ran then. Each round checks a config row again.
  int rounds = 1;
  uint64_t seed = 0;            // tokens
  std::vector<BenchRow> peers;  // appended as given
};

/// A row measured in several rounds as one row: the first round's row with its median and p10/p90
/// over every round's samples (`samples[r]`: round r's) and detail "round_medians_us" (each
/// round's median) when there is more than one; a round whose row has no latency (a failed check,
/// an error) makes the whole row that round's row, as the failure says more than the timings.
/// `rounds` and `samples` are the same length, at least one.
BenchRow pool_rounds(const std::vector<BenchRow>& rounds,
                     const std::vector<std::vector<double>>& samples);

/// Consecutive steps a config row is checked from each of its windows' positions: the timed step
/// and the one after it, which reads the KV row the timed step wrote.
constexpr int kBenchCheckSteps = 2;

/// The positions the reference has a window at: every measured position, and 0 (each config row
/// is checked at 0 too), ascending and distinct.
std::vector<int> bench_check_positions(const std::vector<int>& positions);

/// Measures everything on the live GPU (`target` is the live device). Progress lines (one per
/// row, and the reference windows' pass while it runs) go to `progress` when given. A failing
/// config or baseline is a row with its status; only a failure before anything can run (no
/// device, or a reference that cannot be computed) is nullopt with *error.
std::optional<BenchResult> run_bench(const schedule::Weights& weights,
                                     const schedule::GpuTarget& target, const BenchOptions& options,
                                     std::string* error,
                                     const std::function<void(const std::string&)>& progress = {});

}  // namespace megasched::eval
