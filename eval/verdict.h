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
  int timed_position = 0;              // the position latency_us and floor_us refer to
  double floor_us = 0.0;               // bytes_min / floor bandwidth (measured if known)
  double floor_datasheet_us = 0.0;     // bytes_min / datasheet bandwidth
  std::optional<double> pct_of_floor;  // 100 * floor_us / latency_us
  std::optional<double> pct_of_datasheet;
  std::optional<double> speedup_vs_baseline;
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
};

nlohmann::json to_json(const Verdict& verdict);
/// Tolerant of missing optional fields; used to read the corpus back.
Verdict verdict_from_json(const nlohmann::json& j);

}  // namespace megasched::eval
