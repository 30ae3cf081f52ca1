#include "flywheel/shared_corpus.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "flywheel/gzip_lines.h"
#include "flywheel/locked_file.h"
#include "schedule/target.h"

namespace megasched::flywheel {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFileSuffix = ".corpus.jsonl";

std::string build_of(const CorpusRecord& record) {
  auto it = record.versions.find("build");
  return it != record.versions.end() && it->is_string() ? it->get<std::string>() : "";
}

/// The files of `filter` in `dir`: one target's, or every *.corpus.jsonl by name, and the live
/// name of every archive/*.corpus.jsonl.gz whose live file is gone.
std::vector<std::string> files_to_read(const std::string& dir, const SharedCorpusFilter& filter,
                                       std::string* error) {
  if (!filter.target.empty()) return {shared_corpus_path(dir, filter.target)};
  std::set<std::string> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return {};
  if (!fs::is_directory(dir, ec)) {
    *error = "the shared corpus folder " + dir + " is not a folder (set " + kFlywheelDirEnv +
             " to a folder, or to none)";
    return {};
  }
  const std::string suffix = kFileSuffix;
  auto live_name = [&](const std::string& name, const std::string& tail) -> std::string {
    const std::string ending = suffix + tail;
    if (name.size() <= ending.size() ||
        name.compare(name.size() - ending.size(), std::string::npos, ending) != 0)
      return "";
    return name.substr(0, name.size() - tail.size());
  };
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (std::string name = live_name(entry.path().filename().string(), ""); !name.empty())
      out.insert((fs::path(dir) / name).string());
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / "archive", ec))
    if (std::string name = live_name(entry.path().filename().string(), ".gz"); !name.empty())
      out.insert((fs::path(dir) / name).string());
  return {out.begin(), out.end()};
}

/// The archive of the live file `live` in `dir` (archive_path).
std::string archive_of(const std::string& dir, const std::string& live) {
  return (fs::path(dir) / "archive" / (fs::path(live).filename().string() + ".gz")).string();
}

}  // namespace

std::string default_flywheel_dir() {
  const char* env = std::getenv(kFlywheelDirEnv);
  return env != nullptr && *env != '\0' ? env : kDefaultFlywheelDir;
}

bool flywheel_enabled(const std::string& dir) { return !dir.empty() && dir != kFlywheelOff; }

std::string target_file_key(const std::string& target) {
  if (auto known = schedule::find_target(target)) return known->name;
  std::string out;
  for (unsigned char c : target) {
    if (std::isalnum(c))
      out.push_back(static_cast<char>(std::tolower(c)));
    else if (!out.empty() && out.back() != '-')
      out.push_back('-');
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

std::string shared_corpus_path(const std::string& dir, const std::string& target) {
  return (fs::path(dir) / (target_file_key(target) + kFileSuffix)).string();
}

bool is_stale(const CorpusRecord& record, const std::string& build) {
  const std::string own = build_of(record);
  return own.empty() || own != build;
}

std::string timed_key(const CorpusRecord& record) {
  const std::string objective =
      eval::objective_text(eval::objective_of_entries(record.verdict.objective));
  return objective.empty() ? "p" + std::to_string(record.verdict.timed_position)
                           : "obj" + objective;
}

CorpusRecord compact_for_sharing(CorpusRecord record) {
  nlohmann::json failing = nlohmann::json::array();
  for (const nlohmann::json& c : record.verdict.checks)
    if (c.is_object() && !c.value("pass", true)) failing.push_back(c);
  record.verdict.checks = std::move(failing);
  if (record.verdict.kernel.is_object())
    for (const char* detail : {"checks", "baseline", "baselines"})
      record.verdict.kernel.erase(detail);
  return record;
}

bool append_shared(const std::string& dir, CorpusRecord record, const std::string& source,
                   bool* appended, std::string* error) {
  *appended = false;
  if (!flywheel_enabled(dir) || record.device != "gpu") return true;
  record = compact_for_sharing(std::move(record));
  record.source = source;
  if (!append_corpus(shared_corpus_path(dir, record.target), record, error)) return false;
  *appended = true;
  return true;
}

int append_shared_all(const std::string& dir, const std::vector<CorpusRecord>& records,
                      const std::string& source, std::string* error) {
  int count = 0;
  for (const CorpusRecord& r : records) {
    bool appended = false;
    if (!append_shared(dir, r, source, &appended, error)) return -1;
    count += appended ? 1 : 0;
  }
  return count;
}

ImportResult import_corpus(const std::string& dir, const std::string& path) {
  ImportResult out;
  if (!flywheel_enabled(dir)) {
    out.error = "the shared corpus is off (" + std::string(kFlywheelDirEnv) +
                " or --flywheel is none): name a folder to import into";
    return out;
  }
  CorpusRead file = read_corpus(path);
  out.problems = file.problems;
  if (!file.error.empty() || !file.exists) {
    out.error = file.error.empty() ? "no corpus at " + path : file.error;
    return out;
  }
  SharedCorpusFilter every;
  every.include_stale = true;
  every.dedupe = false;
  SharedCorpusRead shared = read_shared(dir, every);
  if (!shared.error.empty()) {
    out.error = shared.error;
    return out;
  }
  std::set<std::string> held;
  auto key = [](const CorpusRecord& r) {
    return r.run_id + "|" + std::to_string(r.trial) + "|" + r.schedule_id;
  };
  for (const CorpusRecord& r : shared.records) held.insert(key(r));
  out.read = static_cast<int>(file.records.size());
  for (const CorpusRecord& r : file.records) {
    if (r.device != "gpu") {
      ++out.cpu;
      continue;
    }
    if (!held.insert(key(r)).second) {
      ++out.already;
      continue;
    }
    std::string source = r.source;
    if (source.empty())
      source = r.strategy == kSourceBench || r.strategy == kSourcePromote ||
                       r.strategy == kSourceLandscape
                   ? r.strategy
                   : kSourceLoop;
    bool appended = false;
    if (!append_shared(dir, r, source, &appended, &out.error)) return out;
    out.imported += appended ? 1 : 0;
  }
  return out;
}

std::vector<CorpusRecord> dedupe_records(std::vector<CorpusRecord> records, int* dropped) {
  // The index of the survivor of each key: the newest timestamp, the later line on a tie.
  std::map<std::string, size_t> newest;
  for (size_t i = 0; i < records.size(); ++i) {
    const CorpusRecord& r = records[i];
    const std::string key = r.schedule_id + "|" + build_of(r) + "|" + timed_key(r);
    auto [it, fresh] = newest.emplace(key, i);
    if (!fresh && records[it->second].timestamp <= r.timestamp) it->second = i;
  }
  std::vector<bool> keep(records.size(), false);
  for (const auto& [key, index] : newest) keep[index] = true;
  std::vector<CorpusRecord> out;
  for (size_t i = 0; i < records.size(); ++i)
    if (keep[i]) out.push_back(std::move(records[i]));
  if (dropped) *dropped = static_cast<int>(records.size() - out.size());
  return out;
}

SharedCorpusRead read_shared(const std::string& dir, const SharedCorpusFilter& filter) {
  SharedCorpusRead out;
  if (!flywheel_enabled(dir)) return out;
  const std::string key = filter.target.empty() ? "" : target_file_key(filter.target);
  for (const std::string& path : files_to_read(dir, filter, &out.error)) {
    CorpusRead file = read_corpus(path);
    if (!file.error.empty()) {
      out.error = file.error;
      return out;
    }
    // The file's archive: rows moved out of it (archive_rows), older than its own.
    const std::string archive = archive_of(dir, path);
    LinesRead lines = read_gz_lines(archive);
    if (!file.exists && !lines.exists) continue;
    // A record of the filter's target and model, from the live file or its archive.
    auto take = [&](CorpusRecord& r, bool archived) {
      if (!key.empty() && target_file_key(r.target) != key) return;
      if (!filter.model.empty() && r.model != filter.model) return;
      if (is_stale(r, filter.build)) {
        ++out.stale;
        if (!filter.include_stale) return;
      }
      out.archived += archived ? 1 : 0;
      out.records.push_back(std::move(r));
    };
    if (lines.exists && !lines.error.empty()) {
      out.problems.push_back(lines.error + " (its rows are left out)");
    } else if (lines.exists) {
      out.archives.push_back(archive);
      if (!filter.include_stale && !filter.build.empty()) {
        // A row of the build names it: the others need no parse (most of an archive is stale).
        LinesRead named;
        for (size_t i = 0; i < lines.lines.size(); ++i) {
          if (lines.lines[i].find(filter.build) == std::string::npos) {
            out.stale_unread += lines.lines[i].empty() ? 0 : 1;
            continue;
          }
          named.lines.push_back(std::move(lines.lines[i]));
          named.line_numbers.push_back(lines.line_numbers[i]);
        }
        lines.lines = std::move(named.lines);
        lines.line_numbers = std::move(named.line_numbers);
      }
      for (CorpusRecord& r :
           decode_json_lines<CorpusRecord>(archive, lines, corpus_record_from_json, &out.problems))
        take(r, true);
    }
    if (!file.exists) continue;
    out.files.push_back(path);
    out.problems.insert(out.problems.end(), file.problems.begin(), file.problems.end());
    for (CorpusRecord& r : file.records) take(r, false);
  }
  if (filter.dedupe) out.records = dedupe_records(std::move(out.records), &out.duplicates);
  return out;
}

std::string archive_path(const std::string& dir, const std::string& target) {
  return archive_of(dir, shared_corpus_path(dir, target));
}

ArchiveResult archive_rows(const std::string& dir, const std::string& target,
                           const std::string& build, ArchiveScope scope, bool dry_run) {
  ArchiveResult out;
  if (!flywheel_enabled(dir)) {
    out.error = "the shared corpus is off (" + std::string(kFlywheelDirEnv) +
                " or --flywheel is none): name its folder";
    return out;
  }
  SharedCorpusFilter filter;
  filter.target = target;
  for (const std::string& path : files_to_read(dir, filter, &out.error)) {
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    ArchiveFileResult file;
    file.file = path;
    file.archive = archive_of(dir, path);
    // Which lines stay: every line that is no record, and with kStale every record of the
    // build (is_stale, as the readers judge it).
    auto split = [&](const std::vector<std::string>& existing, std::vector<std::string>* kept,
                     std::vector<std::string>* moved) {
      file.stale = 0;
      for (const std::string& line : existing) {
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        const std::optional<CorpusRecord> r =
            j.is_discarded() ? std::nullopt : corpus_record_from_json(j, nullptr);
        const bool stale = r && is_stale(*r, build);
        file.stale += stale ? 1 : 0;
        (r && (stale || scope == ArchiveScope::kEveryRecord) ? moved : kept)->push_back(line);
      }
    };
    if (dry_run) {
      const LinesRead lines = read_lines_shared(path);
      if (!lines.error.empty()) {
        out.error = lines.error;
        return out;
      }
      std::vector<std::string> kept, stale;
      split(lines.lines, &kept, &stale);
      file.kept = static_cast<int>(kept.size());
      file.moved = static_cast<int>(stale.size());
      out.files.push_back(file);
      continue;
    }
    const bool ok = rewrite_lines_locked(
        path,
        [&](const std::vector<std::string>& existing,
            std::string* error) -> std::optional<std::vector<std::string>> {
          std::vector<std::string> kept, stale;
          split(existing, &kept, &stale);
          file.kept = static_cast<int>(kept.size());
          file.moved = static_cast<int>(stale.size());
          if (stale.empty()) return kept;
          const LinesRead archived = read_gz_lines(file.archive);
          if (!archived.error.empty()) {
            *error = archived.error;
            return std::nullopt;
          }
          const std::set<std::string> held(archived.lines.begin(), archived.lines.end());
          std::vector<std::string> fresh;
          for (const std::string& line : stale)
            if (!held.count(line)) fresh.push_back(line);
          if (!fresh.empty() && !append_gz_lines(file.archive, fresh, error)) return std::nullopt;
          file.written = static_cast<int>(fresh.size());
          return kept;
        },
        &out.error);
    if (!ok) return out;
    out.files.push_back(file);
  }
  return out;
}

std::vector<CorpusRecord> training_records(std::vector<CorpusRecord> own,
                                           std::vector<CorpusRecord> shared,
                                           const TrainingRequest& request, int* shared_used) {
  std::vector<CorpusRecord> out;
  std::set<std::pair<std::string, int>> seen;
  for (CorpusRecord& r : own) {
    if (r.target != request.target || r.device != request.device ||
        !eval::judged_alike(r.verdict.timed_position, r.verdict.objective, request.timed_position,
                            request.objective))
      continue;
    seen.emplace(r.run_id, r.trial);
    out.push_back(std::move(r));
  }
  int used = 0;
  if (request.device == "gpu") {
    const std::string key = target_file_key(request.target);
    for (CorpusRecord& r : shared) {
      if (target_file_key(r.target) != key || r.model != request.model || r.device != "gpu" ||
          seen.count({r.run_id, r.trial}) ||
          !eval::judged_alike(r.verdict.timed_position, r.verdict.objective, request.timed_position,
                              request.objective))
        continue;
      out.push_back(std::move(r));
      ++used;
    }
  }
  if (shared_used) *shared_used = used;
  return out;
}

}  // namespace megasched::flywheel
