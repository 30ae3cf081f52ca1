// The verified registry (`registry/verified.jsonl`): the configs (and plans, schedule/plan.h)
// `megasched promote` let through
// its two gates, one JSON line each, append-only. A line is never rewritten or removed: a newer
// entry for the same model, GPU and dtype supersedes an older one, and `best:<model>:<gpu>`
// resolves to the newest (a measured one before any predicted one: `promote --device cpu`
// entries carry "latency_kind": "predicted"), then to the built-in presets
// (schedule/named_configs.h). Appends take
// the log's exclusive lock, derive the entry's version from the lines present under that lock and
// fsync before releasing it (flywheel/locked_file.h), so two promotes at once get two versions.
//
// Entry (schemas/registry_entry.schema.json):
//   {"record": "verified", "id": "toy_h100_f32_1a2b3c4d_v1", "model", "gpu", "dtype",
//    "config_hash8", "version", "config": {canonical ScheduleConfig},
//    "candidate_median_us", "incumbent_median_us", "incumbent": "<id>" | "default",
//    "speedup", "rounds", "required_speedup", "positions_checked", "generate_tokens",
//    "latency_kind", "device", "device_name", "driver", "commit", "build", "run_id", "timestamp"}
// The id is deterministic: <model>_<gpu>_<dtype>_<config-hash8>_v<n>, where config-hash8 is the
// first 8 hex digits of the canonical config's hash and n counts the entries of that model, GPU,
// dtype and config (1 for the first promotion of a config, 2 when it is promoted again).
// "config" holds a plan the same way: schedule::to_json(plan), which is the config's canonical JSON
// for a one-bucket plan (so its id is its config's, and entries written before plans stay valid)
// and the bucket document for a plan of several buckets; readers parse it with parse_plan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace megasched::flywheel {

/// The registry file: $MEGASCHED_REGISTRY when set, else registry/verified.jsonl.
std::string default_registry_path();

struct RegistryEntry {
  std::string id;
  std::string model;
  std::string gpu;    // target name
  std::string dtype;  // "f32" | "bf16"
  std::string config_hash8;
  int version = 0;
  nlohmann::json config;  // canonical ScheduleConfig JSON, or a plan's (schedule::to_json(Plan))
  nlohmann::json fields = nlohmann::json::object();  // medians, gates, device, commit, run id ...
};

/// The first 8 hex digits of the canonical config's hash (schedule::hash_hex of its JSON dump).
std::string config_hash8(const nlohmann::json& canonical_config);
/// "<model>_<gpu>_<dtype>_<hash8>_v<version>" (a model path is reduced to its last component,
/// characters other than [A-Za-z0-9.-] become '-').
std::string registry_id(const std::string& model, const std::string& gpu, const std::string& dtype,
                        const std::string& hash8, int version);

nlohmann::json to_json(const RegistryEntry& entry);
/// nullopt with *error when `j` is not a registry entry (or its id does not match its fields).
std::optional<RegistryEntry> registry_entry_from_json(const nlohmann::json& j, std::string* error);

struct RegistryRead {
  std::vector<RegistryEntry> entries;  // in file order (oldest first)
  bool exists = false;
  std::vector<std::string> problems;  // "verified.jsonl:3: not JSON (skipped)" ... one per bad line
  std::string error;                  // there but unreadable: no entries
};
/// Every entry; a corrupt line is reported in `problems` and skipped, the others are kept.
RegistryRead read_registry(const std::string& path);

/// Appends `entry` (its id and version are assigned here, under the lock, from the entries
/// already there) and returns it as written; nullopt with *error on an I/O failure.
std::optional<RegistryEntry> append_registry_entry(const std::string& path, RegistryEntry entry,
                                                   std::string* error);

/// Whether the entry's gate compared measured GPU latencies ("latency_kind" measured-gpu, or
/// absent) rather than the cost model's predictions (a `promote --device cpu` entry).
bool is_measured(const RegistryEntry& entry);
/// The newest entry for model and gpu (and dtype, when not empty), measured entries first: the
/// newest predicted entry only when there is no measured one. nullopt when there is none.
std::optional<RegistryEntry> newest_entry(const RegistryRead& registry, const std::string& model,
                                          const std::string& gpu, const std::string& dtype = "");
/// The entry called `id`, or nullopt.
std::optional<RegistryEntry> find_entry(const RegistryRead& registry, const std::string& id);

/// What `best:<model>:<gpu>` resolves to: the newest registry entry, then the built-in preset.
struct ResolvedName {
  nlohmann::json
      config;          // the ScheduleConfig (patch) JSON or a plan document (parse_plan reads both)
  std::string source;  // "registry" | "preset"
  std::string detail;  // the entry id, or the preset's measurement record
};
/// nullopt with *error naming the registry's entries for that pair and the presets when neither
/// has `name`, or when `name` is not "best:<model>:<gpu>".
std::optional<ResolvedName> resolve_best_name(const std::string& name,
                                              const std::string& registry_path, std::string* error);

}  // namespace megasched::flywheel
