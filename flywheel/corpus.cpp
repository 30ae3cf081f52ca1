#include "flywheel/corpus.h"

#include <cmath>
#include <ctime>

#include "flywheel/locked_file.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;

json optional_number(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

std::optional<double> read_optional_number(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

const std::vector<std::string>& status_vocabulary() {
  static const std::vector<std::string> statuses = {kStatusKept,     kStatusDiscarded,
                                                    kStatusRejected, kStatusIncorrect,
                                                    kStatusCrash,    kStatusTimeout};
  return statuses;
}

json to_json(const CorpusRecord& r) {
  json j{{"record", "trial"},
         {"trial", r.trial},
         {"timestamp", r.timestamp},
         {"run_id", r.run_id},
         {"strategy", r.strategy},
         {"status", r.status},
         {"description", r.description},
         {"schedule_id", r.schedule_id},
         {"parent_id", r.parent_id},
         {"config", r.config},
         {"changed_knobs", r.changed_knobs},
         {"complexity", r.complexity},
         {"verdict", eval::to_json(r.verdict)},
         {"keep", r.keep},
         {"default_us", optional_number(r.default_us)},
         {"best_us", optional_number(r.best_us)},
         {"model", r.model},
         {"target", r.target},
         {"device", r.device},
         {"model_shape", r.model_shape},
         {"device_fingerprint", r.device_fingerprint},
         {"versions", r.versions}};
  if (!r.timed_on.empty()) j["timed_on"] = r.timed_on;  // multi-worker loops only
  if (!r.source.empty()) j["source"] = r.source;        // shared corpus rows only
  return j;
}

std::optional<CorpusRecord> corpus_record_from_json(const json& j, std::string* error) {
  if (!j.is_object() || j.value("record", "") != "trial") {
    if (error) *error = "not a trial record";
    return std::nullopt;
  }
  try {
    CorpusRecord r;
    r.trial = j.value("trial", 0);
    r.timestamp = j.value("timestamp", "");
    r.run_id = j.value("run_id", "");
    r.strategy = j.value("strategy", "");
    r.status = j.value("status", "");
    r.description = j.value("description", "");
    r.schedule_id = j.value("schedule_id", "");
    r.parent_id = j.value("parent_id", "");
    r.config = j.value("config", json::object());
    r.changed_knobs = j.value("changed_knobs", std::vector<std::string>{});
    r.complexity = j.value("complexity", 0);
    r.verdict = eval::verdict_from_json(j.value("verdict", json::object()));
    r.keep = j.value("keep", json::object());
    r.default_us = read_optional_number(j, "default_us");
    r.best_us = read_optional_number(j, "best_us");
    r.model = j.value("model", "");
    r.target = j.value("target", "");
    r.device = j.value("device", "");
    r.model_shape = j.value("model_shape", json::object());
    r.device_fingerprint = j.value("device_fingerprint", json::object());
    r.versions = j.value("versions", json::object());
    r.timed_on = j.value("timed_on", "");
    r.source = j.value("source", "");
    if (r.schedule_id.empty() || r.run_id.empty()) {
      if (error) *error = "record without schedule_id or run_id";
      return std::nullopt;
    }
    return r;
  } catch (const json::exception& e) {
    if (error) *error = std::string("bad record: ") + e.what();
    return std::nullopt;
  }
}

bool append_corpus(const std::string& path, const CorpusRecord& record, std::string* error) {
  return append_lines_locked(path, "", {to_json(record).dump()}, error);
}

CorpusRead read_corpus(const std::string& path) {
  CorpusRead out;
  LinesRead lines = read_lines_shared(path);
  out.exists = lines.exists;
  out.error = lines.error;
  out.records =
      decode_json_lines<CorpusRecord>(path, lines, corpus_record_from_json, &out.problems);
  return out;
}

std::string utc_timestamp(double unix_seconds) {
  std::time_t t = static_cast<std::time_t>(std::floor(unix_seconds));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

}  // namespace megasched::flywheel
