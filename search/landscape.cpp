#include "search/landscape.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "flywheel/locked_file.h"

namespace megasched::search {
namespace {

using nlohmann::json;

// Only the knobs off the default, nested by group: rows stay short and read as a diff.
json config_diff(const schedule::ScheduleConfig& config) {
  const schedule::ScheduleConfig defaults;
  json out = json::object();
  for (const std::string& path : schedule::changed_knobs(defaults, config)) {
    const size_t dot = path.find('.');
    out[path.substr(0, dot)][path.substr(dot + 1)] = schedule::get_knob(config, path);
  }
  return out;
}

bool string_field(const json& j, const char* key, bool required, std::string* out,
                  std::string* error) {
  if (!j.contains(key)) {
    if (required) *error = std::string("missing \"") + key + "\"";
    return !required;
  }
  if (!j[key].is_string()) {
    *error = std::string("\"") + key + "\" must be a string, not " + schedule::json_excerpt(j[key]);
    return false;
  }
  *out = j[key].get<std::string>();
  return true;
}

}  // namespace

const std::vector<std::string>& landscape_statuses() {
  static const std::vector<std::string> statuses = {"ok", "rejected", "incorrect", "crash",
                                                    "timeout"};
  return statuses;
}

const LandscapeRow* Landscape::find(const schedule::ScheduleConfig& config) const {
  auto it = by_config.find(schedule::canonical_string(config));
  return it == by_config.end() ? nullptr : &rows[it->second];
}

const LandscapeRow* Landscape::optimum() const {
  const LandscapeRow* best = nullptr;
  for (const LandscapeRow& r : rows)
    if (r.latency_us && (!best || *r.latency_us < *best->latency_us)) best = &r;
  return best;
}

std::optional<Landscape> sampled_rows_only(const Landscape& landscape, std::string* error) {
  Landscape out;
  out.header = landscape.header;
  for (const LandscapeRow& r : landscape.rows) {
    if (r.origin != "sample") continue;
    out.by_config[schedule::canonical_string(r.config)] = out.rows.size();
    out.rows.push_back(r);
  }
  if (!out.optimum()) {
    if (error)
      *error = "the landscape has no sampled row with a latency (" +
               std::to_string(out.rows.size()) + " sampled rows of " +
               std::to_string(landscape.rows.size()) +
               "); replay all its rows (--rows all) or record a sample (`megasched landscape "
               "record --sample N`)";
    return std::nullopt;
  }
  return out;
}

json to_json(const LandscapeHeader& h) {
  return {{"landscape", kLandscapeVersion},
          {"model", h.model},
          {"target", h.target},
          {"device", h.device},
          {"device_name", h.device_name},
          {"position", h.position},
          {"objective", h.objective},
          {"latency_kind", h.latency_kind},
          {"build", h.build},
          {"versions", h.versions},
          {"date", h.date},
          {"commit", h.commit},
          {"note", h.note}};
}

json to_json(const LandscapeRow& r) {
  json j = {{"id", r.id}, {"config", config_diff(r.config)}, {"status", r.status}};
  if (r.latency_us) j["latency_us"] = *r.latency_us;
  j["sigma_us"] = r.sigma_us;
  j["repeats"] = r.repeats;
  j["origin"] = r.origin;
  return j;
}

std::optional<LandscapeHeader> landscape_header_from_json(const json& j, std::string* error) {
  if (!j.is_object() || !j.contains("landscape")) {
    *error = "the first line is not a landscape header (it has no \"landscape\" version)";
    return std::nullopt;
  }
  if (j["landscape"] != kLandscapeVersion) {
    *error = "landscape version " + schedule::json_excerpt(j["landscape"]) +
             " is not the version this build reads (" + std::to_string(kLandscapeVersion) + ")";
    return std::nullopt;
  }
  LandscapeHeader h;
  if (!string_field(j, "model", true, &h.model, error) ||
      !string_field(j, "target", true, &h.target, error) ||
      !string_field(j, "device", true, &h.device, error) ||
      !string_field(j, "device_name", false, &h.device_name, error) ||
      !string_field(j, "latency_kind", true, &h.latency_kind, error) ||
      !string_field(j, "build", true, &h.build, error) ||
      !string_field(j, "date", false, &h.date, error) ||
      !string_field(j, "commit", false, &h.commit, error) ||
      !string_field(j, "note", false, &h.note, error))
    return std::nullopt;
  if (h.device != "cpu" && h.device != "gpu") {
    *error = "\"device\" must be cpu or gpu, not " + schedule::text_excerpt(h.device);
    return std::nullopt;
  }
  if (h.latency_kind != "measured-gpu" && h.latency_kind != "predicted") {
    *error = "\"latency_kind\" must be measured-gpu or predicted, not " +
             schedule::text_excerpt(h.latency_kind);
    return std::nullopt;
  }
  if (h.build.empty()) {
    *error = "\"build\" is empty: a landscape names the kernel build it timed";
    return std::nullopt;
  }
  if (!j.contains("position") || !j["position"].is_number_integer() || j["position"] < 0) {
    *error = "\"position\" must be a non-negative integer";
    return std::nullopt;
  }
  h.position = j["position"].get<int>();
  h.objective = j.value("objective", json(nullptr));
  h.versions = j.value("versions", json::object());
  return h;
}

std::optional<LandscapeRow> landscape_row_from_json(const json& j, std::string* error) {
  if (!j.is_object()) {
    *error = "a row must be a JSON object";
    return std::nullopt;
  }
  LandscapeRow r;
  if (!string_field(j, "id", true, &r.id, error) ||
      !string_field(j, "status", true, &r.status, error) ||
      !string_field(j, "origin", false, &r.origin, error))
    return std::nullopt;
  const auto& statuses = landscape_statuses();
  if (std::find(statuses.begin(), statuses.end(), r.status) == statuses.end()) {
    *error = "\"status\" " + schedule::text_excerpt(r.status) +
             " is not one of ok, rejected, incorrect, crash, timeout";
    return std::nullopt;
  }
  if (!j.contains("config")) {
    *error = "missing \"config\"";
    return std::nullopt;
  }
  std::string why;
  auto config = schedule::parse_config(j["config"], &why);
  if (!config) {
    *error = "\"config\": " + why;
    return std::nullopt;
  }
  r.config = *config;
  const bool has_latency = j.contains("latency_us") && !j["latency_us"].is_null();
  if (has_latency && (!j["latency_us"].is_number() || !(j["latency_us"].get<double>() > 0))) {
    *error =
        "\"latency_us\" must be a positive number, not " + schedule::json_excerpt(j["latency_us"]);
    return std::nullopt;
  }
  if (r.status == "ok" && !has_latency) {
    *error = "a row with status ok needs \"latency_us\"";
    return std::nullopt;
  }
  if (r.status != "ok" && has_latency) {
    *error = "a row with status " + r.status + " has no latency (\"latency_us\" is for ok rows)";
    return std::nullopt;
  }
  if (has_latency) r.latency_us = j["latency_us"].get<double>();
  const json sigma = j.value("sigma_us", json(0.0));
  if (!sigma.is_number() || sigma.get<double>() < 0) {
    *error = "\"sigma_us\" must be a number >= 0, not " + schedule::json_excerpt(sigma);
    return std::nullopt;
  }
  r.sigma_us = sigma.get<double>();
  const json repeats = j.value("repeats", json(0));
  if (!repeats.is_number_integer() || repeats.get<int>() < 0) {
    *error = "\"repeats\" must be an integer >= 0, not " + schedule::json_excerpt(repeats);
    return std::nullopt;
  }
  r.repeats = repeats.get<int>();
  return r;
}

std::optional<Landscape> read_landscape(const std::string& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot open the landscape (record one with `megasched landscape record`)";
    return std::nullopt;
  }
  Landscape land;
  std::string line;
  int number = 0;
  bool have_header = false;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string why;
    std::optional<json> j = schedule::parse_json_text(line, &why);
    if (!j) {
      *error = where + "not JSON (" + why + ")" +
               (in.peek() == EOF ? "; a torn last line? `megasched landscape record` with the "
                                   "same --out resumes and sets it aside"
                                 : "");
      return std::nullopt;
    }
    if (!have_header) {
      auto header = landscape_header_from_json(*j, &why);
      if (!header) {
        *error = where + why;
        return std::nullopt;
      }
      land.header = std::move(*header);
      have_header = true;
      continue;
    }
    auto row = landscape_row_from_json(*j, &why);
    if (!row) {
      *error = where + why;
      return std::nullopt;
    }
    const std::string key = schedule::canonical_string(row->config);
    if (!land.by_config.emplace(key, land.rows.size()).second) {
      *error = where + "the config of row " + row->id + " is listed twice (first as row " +
               std::to_string(land.by_config[key] + 1) + " after the header)";
      return std::nullopt;
    }
    land.rows.push_back(std::move(*row));
  }
  if (!have_header) {
    *error = path + ": empty file, no landscape header";
    return std::nullopt;
  }
  return land;
}

bool write_landscape_header(const std::string& path, const LandscapeHeader& header,
                            std::string* error) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    *error = path + " exists already";
    return false;
  }
  return flywheel::append_lines_locked(path, "", {to_json(header).dump()}, error);
}

bool append_landscape_row(const std::string& path, const LandscapeRow& row, std::string* error) {
  return flywheel::append_lines_locked(path, "", {to_json(row).dump()}, error);
}

std::string landscape_file_name(const LandscapeHeader& h) {
  std::string build = h.build.substr(0, 12);
  for (char& c : build)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  return h.model + "." + h.target + ".p" + std::to_string(h.position) + "." + build +
         ".landscape.jsonl";
}

}  // namespace megasched::search
