// A measured landscape: the knob space of one model on one GPU, sampled and judged once, kept as
// data so search strategies can be compared without a GPU (search/landscape_evaluator.h replays
// it, `megasched search-bench` scores strategies on it, `megasched landscape record` writes it).
//
// File format (JSON lines, one object a line, appended as rows are judged, so a killed recording
// resumes where it stopped):
//   line 1, the header: {"landscape": 1, "model", "target", "device" ("cpu" | "gpu"),
//     "device_name" (the evaluator identity's, e.g. the GPU's name), "position" (the timed
//     position), "objective" (its JSON, null for a single position), "latency_kind"
//     ("measured-gpu" | "predicted"), "build" (vm::build_identity of the kernel that was timed),
//     "versions" (eval::trial_versions), "date" (ISO-8601 UTC), "commit", "note"}
//   every further line, one config: {"id" (its schedule id), "config" (only the knobs off the
//     default, nested as in the config JSON), "status" (ok | rejected | incorrect | crash |
//     timeout), "latency_us" (the median, with status ok), "sigma_us" (the repeat spread as one
//     standard deviation, eval's latency_sigma_us), "repeats" (timing samples behind the median),
//     "origin" ("sample", or "neighbour:<name>" for a one-knob neighbour of a named config, or
//     "named:<name>" for that config itself)}
// Files live in search/landscapes/, named by model, target, position and the build identity
// (landscape_file_name), so a kernel change starts a new file instead of mixing kernels.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/config.h"

namespace megasched::search {

constexpr int kLandscapeVersion = 1;

struct LandscapeHeader {
  std::string model;
  std::string target;
  std::string device;                  // "cpu" | "gpu"
  std::string device_name;             // the evaluator identity's device name ("" when it has none)
  int position = 0;                    // timed position
  nlohmann::json objective = nullptr;  // eval::Objective JSON, null: the position alone
  std::string latency_kind;            // "measured-gpu" | "predicted"
  std::string build;                   // kernel build identity (vm::build_identity)
  nlohmann::json versions = nlohmann::json::object();  // eval::trial_versions
  std::string date;                                    // ISO-8601 UTC, when recording began
  std::string commit;                                  // source commit ("" when unknown)
  std::string note;                                    // free text (how it was made)
};

struct LandscapeRow {
  std::string id;  // schedule id
  schedule::ScheduleConfig config;
  std::string status;                // ok | rejected | incorrect | crash | timeout
  std::optional<double> latency_us;  // median, with status ok
  double sigma_us = 0.0;             // one standard deviation of a repeat
  int repeats = 0;                   // samples behind the median (0: a prediction)
  std::string origin;                // sample | neighbour:<name> | named:<name>
};

struct Landscape {
  LandscapeHeader header;
  std::vector<LandscapeRow> rows;
  std::unordered_map<std::string, size_t> by_config;  // canonical config -> row index

  /// The row of exactly this config, or null.
  const LandscapeRow* find(const schedule::ScheduleConfig& config) const;
  /// The fastest ok row (null when none is ok).
  const LandscapeRow* optimum() const;
};

/// The landscape with only its sampled rows (origin "sample"): the named configs and their
/// neighbours left out, so a replay's nearest-row answers are not drawn towards the records whose
/// every neighbour was measured. nullopt with *error when no sampled row is ok.
std::optional<Landscape> sampled_rows_only(const Landscape& landscape, std::string* error);

/// The statuses a row may have.
const std::vector<std::string>& landscape_statuses();

nlohmann::json to_json(const LandscapeHeader& header);
nlohmann::json to_json(const LandscapeRow& row);
/// Rows and headers from JSON; nullopt with *error naming the field and what is allowed.
std::optional<LandscapeHeader> landscape_header_from_json(const nlohmann::json& j,
                                                          std::string* error);
std::optional<LandscapeRow> landscape_row_from_json(const nlohmann::json& j, std::string* error);

/// Reads a landscape file. nullopt with *error ("PATH:LINE: what is wrong; hint") for a missing
/// file, a missing or malformed header, a malformed row (a torn last line included: the recorder
/// moves one aside with flywheel::repair_torn_tail before it resumes), or a config listed twice.
std::optional<Landscape> read_landscape(const std::string& path, std::string* error);

/// Writes the header as the first line of a new file (fails when the file exists).
bool write_landscape_header(const std::string& path, const LandscapeHeader& header,
                            std::string* error);
/// Appends one row (one locked line, flywheel::append_lines_locked).
bool append_landscape_row(const std::string& path, const LandscapeRow& row, std::string* error);

/// "llama-1b.h100.p0.<first 12 characters of the build>.landscape.jsonl".
std::string landscape_file_name(const LandscapeHeader& header);

}  // namespace megasched::search
