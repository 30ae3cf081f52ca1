#include "flywheel/run_dir.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "flywheel/corpus.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

bool write_file(const std::string& path, const std::string& text, std::string* error) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    if (error) *error = "cannot write '" + path + "'";
    return false;
  }
  return true;
}

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

// The note of the verdict that names `position` on `path` (or, without a position, the first
// note naming a path): the errors in words, or which argmax differs.
std::string note_on(const eval::Verdict& v, const std::string& path, const json& position) {
  static const std::regex kAt(
      R"((ReferenceVm|GPU kernel|kernel argmax|program argmax).*?position (\d+))");
  for (const std::string& note : v.notes) {
    std::smatch m;
    if (!std::regex_search(note, m, kAt)) continue;
    const bool gpu = m[1] == "GPU kernel" || m[1] == "kernel argmax";
    if ((gpu ? "gpu" : "reference_vm") != path) continue;
    if (position.is_null() || std::stoi(m[2]) == position.get<int>()) return note;
  }
  return "";
}

// The first failing check (in the order checked): where, its errors, and the logit with the
// largest error with both values. Without a failing check, the first note naming a path and
// position (a verdict from before the checks), else the GPU's evidence, else null.
json first_failure(const eval::Verdict& v) {
  for (const json& c : v.checks) {
    if (c.value("pass", true)) continue;
    const std::string path = c.value("path", std::string("reference_vm"));
    const json worst = c.value("worst_logit", json::object());
    json f = {{"position", c.value("position", json())},
              {"path", path},
              {"rel_err", c.value("rel_err", json())},
              {"max_abs_err", c.value("max_abs_err", json())},
              {"argmax_match", c.value("argmax_match", json())},
              {"logit_index", worst.value("index", json())},
              {"value", worst.value("value", json())},
              {"reference", worst.value("reference", json())}};
    f["what"] = note_on(v, path, f["position"]);
    return f;
  }
  static const std::regex kAt(
      R"((ReferenceVm|GPU kernel|kernel argmax|program argmax).*?position (\d+))");
  for (const std::string& note : v.notes) {
    std::smatch m;
    if (!std::regex_search(note, m, kAt)) continue;
    const bool gpu = m[1] == "GPU kernel" || m[1] == "kernel argmax";
    return {{"position", std::stoi(m[2])}, {"path", gpu ? "gpu" : "reference_vm"}, {"what", note}};
  }
  if (v.kernel.is_object() && v.kernel.contains("evidence") && v.kernel["evidence"].is_array() &&
      !v.kernel["evidence"].empty())
    return {{"position", nullptr}, {"path", "gpu"}, {"what", v.kernel["evidence"][0]}};
  return nullptr;
}

}  // namespace

std::string new_run_id(double now_s) {
  // Microseconds since the epoch, strictly above the last id this process made: two runs started
  // in the same second (or microsecond) still sort in the order they were created.
  static std::atomic<int64_t> last_us{0};
  const int64_t now_us = static_cast<int64_t>(std::floor(now_s * 1e6));
  int64_t seen = last_us.load(), us = 0;
  do {
    us = std::max(now_us, seen + 1);
  } while (!last_us.compare_exchange_weak(seen, us));
  const int64_t seconds = us / 1000000;
  std::string compact;
  for (char c : utc_timestamp(static_cast<double>(seconds)))
    if (c != '-' && c != ':') compact += c;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%06lld", static_cast<long long>(us % 1000000));
  return "r" + compact + "-" + suffix;
}

bool is_run_id(const std::string& name) {
  static const std::regex kRunId(R"(r\d{8}T\d{6}Z-[0-9a-f]{4,})");
  return std::regex_match(name, kRunId);
}

std::optional<RunDir> open_run_dir(const std::string& root, const std::string& run_id,
                                   const std::string& kind, const std::string& command,
                                   double now_s, std::string* error) {
  RunDir run;
  run.run_id = run_id;
  run.path = (fs::path(root) / run_id).string();
  run.kind = kind;
  run.command = command;
  run.started_s = now_s;
  std::error_code ec;
  fs::create_directories(run.path, ec);
  if (ec || !fs::is_directory(run.path)) {
    if (error)
      *error = "cannot create the run directory '" + run.path +
               "': " + (ec ? ec.message() : "not a directory") + " (give another --runs-dir)";
    return std::nullopt;
  }
  if (!write_file(run.path + "/command.txt", command + "\n", error)) return std::nullopt;
  run.files.push_back("command.txt");
  return run;
}

bool write_run_json(RunDir& run, const std::string& name, const json& doc, std::string* error) {
  if (!write_file(run.path + "/" + name, doc.dump(2) + "\n", error)) return false;
  if (std::find(run.files.begin(), run.files.end(), name) == run.files.end())
    run.files.push_back(name);
  return true;
}

bool write_trial_files(RunDir& run, const json& config, const json& program,
                       const eval::Verdict& verdict, std::string* error) {
  if (!write_run_json(run, "config.json", config, error)) return false;
  if (!program.is_null() && !write_run_json(run, "program.json", program, error)) return false;
  return write_run_json(run, "verdict.json", eval::to_json(verdict), error) &&
         write_run_json(run, "correctness.json", correctness_report(verdict), error) &&
         write_run_json(run, "performance.json", performance_report(verdict), error);
}

bool finish_run_dir(RunDir& run, int exit_code, double now_s, std::string* error) {
  std::vector<std::string> files = run.files;
  files.push_back("run.json");
  const json manifest = {{"run_id", run.run_id},
                         {"kind", run.kind},
                         {"started", utc_timestamp(run.started_s)},
                         {"finished", utc_timestamp(now_s)},
                         {"exit_code", exit_code},
                         {"command", run.command},
                         {"files", files}};
  return write_run_json(run, "run.json", manifest, error);
}

json correctness_report(const eval::Verdict& v) {
  // One summary per path, in the order the paths were first checked.
  json paths = json::array();
  for (const json& c : v.checks) {
    const std::string path = c.value("path", std::string("reference_vm"));
    json* summary = nullptr;
    for (json& p : paths)
      if (p["path"] == path) summary = &p;
    if (summary == nullptr) {
      paths.push_back({{"path", path},
                       {"positions", json::array()},
                       {"max_abs_err", 0.0},
                       {"rel_err", 0.0},
                       {"pass", true}});
      summary = &paths.back();
    }
    (*summary)["positions"].push_back(c.value("position", 0));
    (*summary)["max_abs_err"] =
        std::max((*summary)["max_abs_err"].get<double>(), c.value("max_abs_err", 0.0));
    (*summary)["rel_err"] = std::max((*summary)["rel_err"].get<double>(), c.value("rel_err", 0.0));
    (*summary)["pass"] = (*summary)["pass"].get<bool>() && c.value("pass", false);
  }
  return {{"schedule_id", v.schedule_id},
          {"status", v.status},
          {"valid", v.valid},
          {"correct", v.correct},
          {"positions_checked", v.positions_checked},
          {"max_abs_err", v.max_abs_err},
          {"rel_err", v.rel_err},
          {"argmax_match", v.argmax_match},
          {"paths", paths},
          {"checks", v.checks},
          {"first_failure", first_failure(v)}};
}

json performance_report(const eval::Verdict& v) {
  const json& k = v.kernel.is_object() ? v.kernel : json::object();
  auto kernel_number = [&](const char* key) { return k.contains(key) ? k[key] : json(nullptr); };
  json spills = nullptr;
  if (k.contains("spill_store_bytes") || k.contains("spill_load_bytes"))
    spills = k.value("spill_store_bytes", int64_t{0}) + k.value("spill_load_bytes", int64_t{0});
  json smem = nullptr;
  if (k.contains("static_smem_bytes") || k.contains("dynamic_smem_bytes"))
    smem = k.value("static_smem_bytes", int64_t{0}) + k.value("dynamic_smem_bytes", int64_t{0});
  // Every baseline timed in the same run (kernel.baselines.<kind>.median_us), then the
  // strongest one the verdict names.
  json speedups = json::object();
  if (v.latency_us && *v.latency_us > 0 && k.contains("baselines") && k["baselines"].is_object())
    for (const auto& [kind, info] : k["baselines"].items())
      if (info.is_object() && info.contains("median_us") && info["median_us"].is_number())
        speedups[kind] = info["median_us"].get<double>() / *v.latency_us;
  if (v.speedup_vs_baseline)
    speedups[v.baseline_kind.empty() ? "baseline" : v.baseline_kind] = *v.speedup_vs_baseline;
  json achieved = nullptr;
  if (v.latency_us && *v.latency_us > 0)
    achieved = static_cast<double>(v.bytes_min) / (*v.latency_us * 1e3);  // B/us -> GB/s
  const bool measured = v.latency_kind == "measured-gpu";
  return {{"schedule_id", v.schedule_id},
          {"latency_kind", v.latency_kind},
          {"median_us", optional_number(v.latency_us)},
          {"p90_us", measured ? json(v.latency_p90_us) : json(nullptr)},
          {"spread_us", v.latency_spread_us},
          {"samples", v.samples_us.size()},
          {"timed_position", v.timed_position},
          {"floor_us", v.floor_us},
          {"pct_of_floor", optional_number(v.pct_of_floor)},
          {"bytes_min", v.bytes_min},
          {"achieved_gbs", achieved},
          {"registers", kernel_number("registers")},
          {"spill_bytes", spills},
          {"smem_bytes", smem},
          {"occupancy_blocks_per_sm", kernel_number("occupancy_blocks_per_sm")},
          {"grid_blocks", kernel_number("grid_blocks")},
          {"speedup_vs_baselines", speedups},
          {"bottleneck", v.bottleneck}};
}

std::vector<RunListing> list_runs(const std::string& root, std::string* error) {
  std::vector<RunListing> runs;
  std::error_code ec;
  if (!fs::exists(root, ec)) return runs;
  if (!fs::is_directory(root, ec)) {
    if (error) *error = "'" + root + "' is not a directory of runs";
    return runs;
  }
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !is_run_id(name)) continue;
    RunListing run{name, entry.path().string(), nullptr};
    std::ifstream in(entry.path() / "run.json");
    if (in) {
      json manifest = json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (!manifest.is_discarded()) run.manifest = manifest;
    }
    runs.push_back(std::move(run));
  }
  if (ec && error) *error = "cannot list '" + root + "': " + ec.message();
  std::sort(runs.begin(), runs.end(),
            [](const RunListing& a, const RunListing& b) { return a.run_id < b.run_id; });
  return runs;
}

std::optional<std::vector<std::string>> gc_runs(const std::string& root, int keep,
                                                std::string* error) {
  std::string why;
  std::vector<RunListing> runs = list_runs(root, &why);
  if (!why.empty()) {
    if (error) *error = why;
    return std::nullopt;
  }
  std::vector<std::string> removed;
  const size_t drop = runs.size() > static_cast<size_t>(keep) ? runs.size() - keep : 0;
  for (size_t i = 0; i < drop; ++i) {
    std::error_code ec;
    fs::remove_all(runs[i].path, ec);
    if (ec) {
      if (error) *error = "cannot remove '" + runs[i].path + "': " + ec.message();
      return std::nullopt;
    }
    removed.push_back(runs[i].run_id);
  }
  return removed;
}

}  // namespace megasched::flywheel
