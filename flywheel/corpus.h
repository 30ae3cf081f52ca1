// corpus.jsonl: one JSON record per trial, for machines (the prior trains on it, `report` and
// `--resume` read it back). Every trial lands here, failures included, before its results.tsv
// row: a record holds everything the row is made from, so a row lost to a kill between the two
// appends is restored on resume.
//
// Record (schemas/corpus_record.schema.json):
//   {"record": "trial", "trial": 3, "timestamp": "2026-11-22T02:31:07Z", "run_id": "r20261122-...",
//    "strategy": "hillclimb", "status": "kept", "description": "...",
//    "schedule_id": "...", "parent_id": "...", "config": {canonical ScheduleConfig},
//    "changed_knobs": ["tiling.gemv_rows_per_task"],   // vs the parent
//    "complexity": 1, "verdict": {eval::Verdict},
//    "keep": {"incumbent_id": .., "incumbent_us": .., "margin_us": .., "reason": ..,
//             "remeasured_incumbent_us": .. (measured only)},
//    "default_us": 512.0, "best_us": 498.1,             // after this trial
//    "model": "small", "target": "h100", "device": "cpu",
//    "model_shape": {hidden, layers, heads, kv_heads, head_dim, ffn, vocab, max_seq, dtype, ...},
//    "device_fingerprint": {evaluator identity + host},
//    "versions": {"abi": 1, "ir": .., "build": ..},
//    "source": "loop"}                                  // shared corpus rows only
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"
#include "schedule/model.h"

namespace megasched::flywheel {

/// The loop's outcome vocabulary (results.tsv `status`, HARNESS.md).
inline constexpr const char* kStatusKept = "kept";  // correct and better: the new incumbent
inline constexpr const char* kStatusDiscarded = "discarded";  // correct but not better beyond noise
inline constexpr const char* kStatusRejected = "rejected";    // did not lower or failed validation
inline constexpr const char* kStatusIncorrect = "incorrect";  // ran, wrong output
inline constexpr const char* kStatusCrash = "crash";          // the evaluator (worker) crashed
inline constexpr const char* kStatusTimeout = "timeout";      // hang or over the trial deadline

/// Every status, in report order.
const std::vector<std::string>& status_vocabulary();

struct CorpusRecord {
  int trial = 0;          // 0-based within the run
  std::string timestamp;  // ISO-8601 UTC
  std::string run_id;
  std::string strategy;     // default | warm-start | random | hillclimb | prior | proposer
  std::string status;       // one of status_vocabulary()
  std::string description;  // what the strategy tried and what the loop decided
  std::string schedule_id;
  std::string parent_id;  // the config this candidate was derived from ("" for trial 0)
  nlohmann::json config;  // canonical ScheduleConfig JSON
  std::vector<std::string> changed_knobs;  // knob paths that differ from the parent
  int complexity = 0;                      // knobs away from the default
  eval::Verdict verdict;
  nlohmann::json keep = nlohmann::json::object();  // keep-rule inputs and decision
  std::optional<double> default_us;  // latency of the default config in this run (if known)
  std::optional<double> best_us;     // incumbent latency after this trial
  std::string model;
  std::string target;
  std::string device;  // "cpu" | "gpu"
  nlohmann::json model_shape = nlohmann::json::object();
  nlohmann::json device_fingerprint = nlohmann::json::object();
  nlohmann::json versions = nlohmann::json::object();
  std::string timed_on;  // the worker that timed it (multi-worker loops); "" otherwise
  std::string source;    // the shared corpus's writer: loop | bench | promote | landscape
                         // (flywheel/shared_corpus.h); "" in a loop's own corpus
};

nlohmann::json to_json(const CorpusRecord& record);
/// nullopt (with *error) when `j` is not a trial record.
std::optional<CorpusRecord> corpus_record_from_json(const nlohmann::json& j, std::string* error);

/// Appends one record (one line) under the file lock.
bool append_corpus(const std::string& path, const CorpusRecord& record, std::string* error);

struct CorpusRead {
  std::vector<CorpusRecord> records;
  bool exists = false;
  std::vector<std::string> problems;  // "corpus.jsonl:17: truncated line (skipped)" ...
  std::string error;                  // there but unreadable, or not a regular file: no records
};
/// Reads every record; torn or malformed lines are skipped and listed in `problems`.
CorpusRead read_corpus(const std::string& path);

/// The current time as ISO-8601 UTC ("2026-11-22T02:31:07Z").
std::string utc_timestamp(double unix_seconds);

}  // namespace megasched::flywheel
