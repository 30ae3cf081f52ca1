// The Verdict: what one trial of one ScheduleConfig came to. It is the JSON an agent acts on
// (schemas/verdict.schema.json) and the record the loop keeps or reverts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace megasched::eval {

struct Verdict {
  bool valid = false;           // validate() accepted the program (and it lowered)
  std::string rejected_reason;  // rule names / lowering error when !valid
  nlohmann::json diagnostics = nlohmann::json::array();
  bool correct = false;       // program (ReferenceVm) AND, on a GPU, kernel match eager
  double max_abs_err = 0.0;   // worst over checked positions
  double rel_err = 0.0;       // worst ||out - ref|| / ||ref|| over checked positions
  bool argmax_match = false;  // at every checked position
  std::vector<int> positions_checked;
  std::optional<double> latency_us;    // absent unless correct (and not below the floor)
  std::string latency_kind;            // "measured-gpu" | "predicted" | "" (none)
  double latency_p90_us = 0.0;         // measured only
  double latency_spread_us = 0.0;      // measured: (p90 - p10); predicted: 0
  std::vector<double> samples_us;      // measured timing samples
  int timed_position = 0;              // the position latency_us and floor_us refer to (with an
                                       // objective: its first position)
  double floor_us = 0.0;               // bytes_min / floor bandwidth (measured if known)
  double floor_datasheet_us = 0.0;     // bytes_min / datasheet bandwidth
  std::optional<double> pct_of_floor;  // 100 * floor_us / latency_us
  std::optional<double> pct_of_datasheet;
  std::optional<double> speedup_vs_baseline;  // baseline_us / latency_us
  std::string baseline_kind;                  // the strongest baseline kind timed ("" when none)
  std::optional<double> baseline_us;          // its median in the same run
  std::string schedule_id;
  uint64_t tasks = 0;
  uint64_t weight_bytes = 0;
  uint64_t bytes_min = 0;
  std::string target;
  std::string model;
  std::string device;  // "cpu" | "gpu"
  std::string status;  // "ok" | "rejected" | "incorrect" | "crash" | "timeout" | "hang"
  std::vector<std::string> notes;
  nlohmann::json kernel = nlohmann::json::object();  // registers, spills, smem per variant (GPU)
  // Wall time of the trial's phases in ms (lower, validate, reference_check, then on a GPU
  // compile_and_load, gpu_check, baseline, time, recheck; on a CPU predict) and their total.
  nlohmann::json breakdown_ms = nlohmann::json::object();
  // The bottleneck class (eval/bottleneck.h): {"class", "source", "reason"}, null when the trial
  // has no latency to classify.
  nlohmann::json bottleneck = nullptr;
  // Every comparison made, one entry per (path, position): {"path": "reference_vm" | "gpu",
  // "position", "window_start" (the VM ran from there; the KV cache before it was the
  // reference's), "rel_err", "max_abs_err", "argmax_match", "pass"} (gpu: also "kernel_argmax").
  nlohmann::json checks = nlohmann::json::array();
  // Where the reference came from: {"steps", "weights_id", "cache_dir", "engine_on_miss",
  // "reference_vm": "walk" | "sampled", "windows": [{"start", "lookup", "engine", "note"}],
  // "load_ms"}; empty for a trial that ran nothing.
  nlohmann::json reference = nlohmann::json::object();
  // With an objective (eval/objective.h): one entry per position, ascending: {"position",
  // "weight", "latency_us" (null until measured, or when below its floor), "latency_p90_us",
  // "latency_spread_us", "floor_us", "floor_datasheet_us", "bytes_min"} (GPU: also
  // "baselines_us", each baseline kind's median there). latency_us, floor_us and
  // floor_datasheet_us above are the weighted means of these. Null without an objective, and
  // then absent from the JSON (verdicts of one timed position are unchanged).
  nlohmann::json objective = nullptr;
  // The trial of a plan of several buckets (eval/plan_evaluate.h): one entry per bucket,
  // ascending: {"begin", "end", "schedule_id", "positions_checked", "timed_position", "valid",
  // "correct", "status", "rel_err", "latency_us"}. The fields above are the timed bucket's, with
  // valid, correct and the errors folded over every bucket. Null for a config, and then absent.
  nlohmann::json plan = nullptr;
};

/// A non-finite output's error is infinite, which JSON cannot carry (it would print null and break
/// the verdict schema): the largest double stands for it, with a note saying why.
void cap_errors(Verdict* v);

nlohmann::json to_json(const Verdict& verdict);
/// Tolerant of missing optional fields; used to read the corpus back.
Verdict verdict_from_json(const nlohmann::json& j);

}  // namespace megasched::eval
