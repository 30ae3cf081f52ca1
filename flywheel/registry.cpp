#include "flywheel/registry.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "flywheel/locked_file.h"
#include "schedule/config.h"
#include "schedule/named_configs.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;

std::string id_part(const std::string& text) {
  std::string base = text;
  while (!base.empty() && base.back() == '/') base.pop_back();
  const size_t slash = base.rfind('/');
  if (slash != std::string::npos) base = base.substr(slash + 1);
  for (char& c : base)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '-';
  return base;
}

// The entries a block of registry lines holds (skipping what is not one), for the version count.
int versions_taken(const std::vector<std::string>& lines, const RegistryEntry& entry) {
  int taken = 0;
  for (const std::string& line : lines) {
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    auto e = registry_entry_from_json(j, nullptr);
    if (e && e->model == entry.model && e->gpu == entry.gpu && e->dtype == entry.dtype &&
        e->config_hash8 == entry.config_hash8)
      taken = std::max(taken, e->version);
  }
  return taken;
}

}  // namespace

std::string default_registry_path() {
  const char* env = std::getenv("MEGASCHED_REGISTRY");
  return env != nullptr && *env != '\0' ? env : "registry/verified.jsonl";
}

std::string config_hash8(const json& canonical_config) {
  return schedule::hash_hex(canonical_config.dump()).substr(0, 8);
}

std::string registry_id(const std::string& model, const std::string& gpu, const std::string& dtype,
                        const std::string& hash8, int version) {
  return id_part(model) + "_" + id_part(gpu) + "_" + id_part(dtype) + "_" + hash8 + "_v" +
         std::to_string(version);
}

json to_json(const RegistryEntry& e) {
  json j = e.fields.is_object() ? e.fields : json::object();
  j["record"] = "verified";
  j["id"] = e.id;
  j["model"] = e.model;
  j["gpu"] = e.gpu;
  j["dtype"] = e.dtype;
  j["config_hash8"] = e.config_hash8;
  j["version"] = e.version;
  j["config"] = e.config;
  return j;
}

std::optional<RegistryEntry> registry_entry_from_json(const json& j, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<RegistryEntry> {
    if (error) *error = why;
    return std::nullopt;
  };
  if (!j.is_object()) return fail("not a JSON object");
  if (j.value("record", "") != "verified") return fail("not a registry entry (record != verified)");
  for (const char* key : {"id", "model", "gpu", "dtype", "config_hash8"})
    if (!j.contains(key) || !j[key].is_string())
      return fail(std::string("no string '") + key + "'");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] < 1)
    return fail("no version >= 1");
  if (!j.contains("config") || !j["config"].is_object()) return fail("no config object");
  RegistryEntry e;
  e.id = j["id"].get<std::string>();
  e.model = j["model"].get<std::string>();
  e.gpu = j["gpu"].get<std::string>();
  e.dtype = j["dtype"].get<std::string>();
  e.config_hash8 = j["config_hash8"].get<std::string>();
  e.version = j["version"].get<int>();
  e.config = j["config"];
  if (config_hash8(e.config) != e.config_hash8)
    return fail("config_hash8 " + e.config_hash8 + " is not the config's hash (" +
                config_hash8(e.config) + "): the config was edited");
  if (registry_id(e.model, e.gpu, e.dtype, e.config_hash8, e.version) != e.id)
    return fail("id '" + e.id + "' does not match its fields");
  e.fields = j;
  for (const char* key :
       {"record", "id", "model", "gpu", "dtype", "config_hash8", "version", "config"})
    e.fields.erase(key);
  return e;
}

RegistryRead read_registry(const std::string& path) {
  RegistryRead out;
  LinesRead lines = read_lines_shared(path);
  out.exists = lines.exists;
  out.error = lines.error;
  out.entries =
      decode_json_lines<RegistryEntry>(path, lines, registry_entry_from_json, &out.problems);
  return out;
}

std::optional<RegistryEntry> append_registry_entry(const std::string& path, RegistryEntry entry,
                                                   std::string* error) {
  entry.config_hash8 = config_hash8(entry.config);
  auto make = [&entry](const std::vector<std::string>& existing,
                       std::string*) -> std::optional<std::vector<std::string>> {
    entry.version = versions_taken(existing, entry) + 1;
    entry.id = registry_id(entry.model, entry.gpu, entry.dtype, entry.config_hash8, entry.version);
    return std::vector<std::string>{to_json(entry).dump()};
  };
  if (!append_lines_locked_after_read(path, make, error)) return std::nullopt;
  return entry;
}

bool is_measured(const RegistryEntry& entry) {
  return entry.fields.value("latency_kind", std::string("measured-gpu")) == "measured-gpu";
}

std::optional<RegistryEntry> newest_entry(const RegistryRead& registry, const std::string& model,
                                          const std::string& gpu, const std::string& dtype) {
  std::optional<RegistryEntry> predicted;
  for (auto it = registry.entries.rbegin(); it != registry.entries.rend(); ++it) {
    if (it->model != model || it->gpu != gpu || (!dtype.empty() && it->dtype != dtype)) continue;
    if (is_measured(*it)) return *it;
    if (!predicted) predicted = *it;
  }
  return predicted;
}

std::optional<RegistryEntry> find_entry(const RegistryRead& registry, const std::string& id) {
  for (const RegistryEntry& e : registry.entries)
    if (e.id == id) return e;
  return std::nullopt;
}

std::optional<ResolvedName> resolve_best_name(const std::string& name,
                                              const std::string& registry_path,
                                              std::string* error) {
  const size_t first = name.find(':');
  const size_t second = name.find(':', first + 1);
  if (name.rfind("best:", 0) != 0 || second == std::string::npos ||
      name.find(':', second + 1) != std::string::npos) {
    if (error) *error = "'" + name + "' is not a name of the form best:<model>:<gpu>";
    return std::nullopt;
  }
  const std::string model = name.substr(first + 1, second - first - 1);
  const std::string gpu = name.substr(second + 1);
  const RegistryRead registry = read_registry(registry_path);
  if (auto entry = newest_entry(registry, model, gpu))
    return ResolvedName{entry->config, "registry", entry->id};
  std::string why;
  if (auto preset = schedule::find_named_config(name, &why))
    return ResolvedName{preset->config, "preset", preset->source};
  if (error)
    *error = why + "; the registry " + registry_path + " has no entry for " + model + " on " + gpu +
             " (`megasched registry list`; `megasched promote` adds one)";
  return std::nullopt;
}

}  // namespace megasched::flywheel
