#include "search/landscape_recorder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "flywheel/locked_file.h"
#include "flywheel/measured_records.h"
#include "flywheel/run_dir.h"
#include "flywheel/shared_corpus.h"
#include "schedule/search.h"
#include "search/loop.h"

namespace megasched::search {
namespace {

using schedule::ScheduleConfig;

bool fits(const ScheduleConfig& c, const schedule::ModelShape& shape,
          const schedule::GpuTarget& target) {
  return schedule::config_fits(c, shape, target) && schedule::knob_conflict(c).empty();
}

// Redraws one knob at a time (to a fitting choice) until the config fits; false after 64 tries.
bool repair(ScheduleConfig* c, const std::vector<std::vector<nlohmann::json>>& choices,
            const schedule::ModelShape& shape, const schedule::GpuTarget& target,
            std::mt19937_64& rng) {
  const auto& specs = schedule::knob_specs();
  std::uniform_int_distribution<size_t> knob(0, specs.size() - 1);
  std::string ignored;
  for (int attempt = 0; attempt < 64; ++attempt) {
    if (fits(*c, shape, target)) return true;
    const size_t k = knob(rng);
    std::uniform_int_distribution<size_t> pick(0, choices[k].size() - 1);
    schedule::set_knob(c, specs[k].path, choices[k][pick(rng)], &ignored);
  }
  return fits(*c, shape, target);
}

// Reads (or creates) the file; the canonical configs it holds go to *done.
bool open_landscape(const RecordOptions& options, std::set<std::string>* done,
                    RecordResult* result) {
  std::error_code ec;
  if (!std::filesystem::exists(options.path, ec)) {
    if (!write_landscape_header(options.path, options.header, &result->error)) return false;
    return true;
  }
  bool repaired = false;
  if (!flywheel::repair_torn_tail(options.path, &repaired, &result->error)) return false;
  if (repaired && options.progress)
    *options.progress << "landscape: a torn last line moved to "
                      << flywheel::quarantine_path(options.path) << "\n";
  auto existing = read_landscape(options.path, &result->error);
  if (!existing) {
    result->bad_arguments = true;
    return false;
  }
  const LandscapeHeader& a = existing->header;
  const LandscapeHeader& b = options.header;
  // Targets compare by the shared corpus's key: "NVIDIA H200" (a header of --gpu auto) is h200.
  const bool same_target =
      flywheel::target_file_key(a.target) == flywheel::target_file_key(b.target);
  if (a.model != b.model || !same_target || a.device != b.device || a.position != b.position ||
      a.build != b.build || a.objective != b.objective) {
    result->error = options.path + " is a landscape of " + a.model + " on " + a.target + " (" +
                    a.device + ", position " + std::to_string(a.position) + ", build " +
                    a.build.substr(0, 12) + "), not of this recording (" + b.model + " on " +
                    b.target + ", " + b.device + ", position " + std::to_string(b.position) +
                    ", build " + b.build.substr(0, 12) + "); record into a new file";
    result->bad_arguments = true;
    return false;
  }
  // A measured landscape is one GPU model's: rows timed on another (a `--gpu h100` recording
  // resumed on an H200 host lowers for the same target but times another device) never join it.
  if (a.device == "gpu" && !a.device_name.empty() && !b.device_name.empty() &&
      a.device_name != b.device_name) {
    result->error = options.path + " was measured on " + a.device_name + ", and this recording " +
                    "runs on " + b.device_name + "; record into a new file (hint: `--gpu auto` " +
                    "names the live GPU's target, so the default --out is that GPU's file)";
    result->bad_arguments = true;
    return false;
  }
  for (const LandscapeRow& r : existing->rows) done->insert(schedule::canonical_string(r.config));
  result->already = static_cast<int>(existing->rows.size());
  return true;
}

void report(const RecordOptions& options, const RecordResult& r, const LandscapeRow& row) {
  if (!options.progress) return;
  char line[160];
  std::snprintf(
      line, sizeof line, "landscape %4d/%d  %-9s %10s  %s\n", r.already + r.recorded, r.planned,
      row.status.c_str(),
      row.latency_us ? (std::to_string(*row.latency_us).substr(0, 9) + " us").c_str() : "",
      row.origin.c_str());
  *options.progress << line;
  if (options.compile_pool && r.recorded % 10 == 0)
    *options.progress << options.compile_pool->status_line() << "\n";
}

/// Keeps the kernels of the first configs of `upcoming` (plan indices, in the order they will
/// run) queued for compile-ahead, as many as its queue holds; ids already queued are kept.
template <typename Indices>
void feed_ahead(const RecordOptions& options, const std::vector<PlannedConfig>& plan,
                const Indices& upcoming) {
  if (!options.compile_pool) return;
  int n = 0;
  for (size_t index : upcoming) {
    if (n++ >= options.compile_pool->capacity()) break;
    options.compile_pool->submit(schedule::canonical_string(plan[index].config),
                                 plan[index].config);
  }
}

/// The config at plan[index] is about to run: its build, if not started, is the trial's own.
void take_back(const RecordOptions& options, const PlannedConfig& planned) {
  if (options.compile_pool)
    options.compile_pool->withdraw(schedule::canonical_string(planned.config));
}

}  // namespace

std::vector<PlannedConfig> space_filling_sample(const schedule::ModelShape& shape,
                                                const schedule::GpuTarget& target, int count,
                                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto& specs = schedule::knob_specs();
  std::vector<std::vector<nlohmann::json>> choices(specs.size());
  std::vector<std::vector<nlohmann::json>> columns(specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    for (const nlohmann::json& c : specs[k].choices)
      if (schedule::knob_value_fits(specs[k].path, c, shape)) choices[k].push_back(c);
    if (choices[k].empty()) choices[k].push_back(specs[k].default_value);
    for (int i = 0; i < count; ++i) columns[k].push_back(choices[k][i % choices[k].size()]);
    std::shuffle(columns[k].begin(), columns[k].end(), rng);
  }
  std::vector<PlannedConfig> out;
  std::set<std::string> seen;
  std::string ignored;
  for (int i = 0; i < count; ++i) {
    ScheduleConfig c;
    for (size_t k = 0; k < specs.size(); ++k)
      schedule::set_knob(&c, specs[k].path, columns[k][i], &ignored);
    if (!repair(&c, choices, shape, target, rng)) c = schedule::random_config(shape, target, rng);
    for (int again = 0; again < 20 && !seen.insert(schedule::canonical_string(c)).second; ++again)
      c = schedule::random_config(shape, target, rng);
    out.push_back({c, "sample"});
  }
  return out;
}

std::vector<PlannedConfig> plan_landscape(
    const schedule::ModelShape& shape, const schedule::GpuTarget& target, int sample_count,
    const std::vector<std::pair<std::string, ScheduleConfig>>& named, uint64_t seed) {
  std::vector<PlannedConfig> plan;
  std::set<std::string> seen;
  auto add = [&](const ScheduleConfig& c, const std::string& origin) {
    if (seen.insert(schedule::canonical_string(c)).second) plan.push_back({c, origin});
  };
  for (const auto& [name, config] : named) add(config, "named:" + name);
  for (const auto& [name, config] : named)
    for (const ScheduleConfig& n : schedule::neighbours(config, shape, target))
      add(n, "neighbour:" + name);
  for (const PlannedConfig& p : space_filling_sample(shape, target, sample_count, seed))
    add(p.config, p.origin);
  return plan;
}

LandscapeRow landscape_row(const PlannedConfig& planned, const eval::Verdict& v) {
  LandscapeRow row;
  row.id = v.schedule_id;
  row.config = planned.config;
  row.origin = planned.origin;
  if (v.correct && v.latency_us) {
    row.status = "ok";
    row.latency_us = v.latency_us;
    row.sigma_us = latency_sigma_us(v);
    row.repeats = static_cast<int>(v.samples_us.size());
  } else if (v.status == "crash") {
    row.status = "crash";
  } else if (v.status == "timeout" || v.status == "hang") {
    row.status = "timeout";
  } else if (!v.valid || v.status == "rejected") {
    row.status = "rejected";
  } else {
    row.status = "incorrect";
  }
  return row;
}

namespace {

/// Appends a GPU row to the shared corpus as a `landscape` record: trial `trial` of run `run_id`.
/// A failure warns (the landscape file holds the row either way).
void share_row(const RecordOptions& options, const std::string& run_id, int trial,
               const PlannedConfig& planned, const eval::Verdict& verdict,
               const nlohmann::json& identity) {
  if (!flywheel::flywheel_enabled(options.flywheel_dir) || verdict.device != "gpu") return;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  flywheel::MeasuredTrial t;
  t.run_id = run_id;
  t.trial = trial;
  t.strategy = "landscape";
  t.description = "landscape row (" + planned.origin + ")";
  t.config = planned.config;
  t.verdict = verdict;
  t.shape = options.shape;
  t.identity = identity;
  bool appended = false;
  std::string error;
  if (!flywheel::append_shared(options.flywheel_dir, flywheel::measured_record(t, now),
                               flywheel::kSourceLandscape, &appended, &error) &&
      options.progress)
    *options.progress << "landscape: warning: shared corpus: " << error << "\n";
}

std::string recording_run_id() {
  return flywheel::new_run_id(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}

/// The plan indexes not yet in the landscape, in plan order.
std::deque<size_t> pending(const std::vector<PlannedConfig>& plan,
                           const std::set<std::string>& done) {
  std::deque<size_t> out;
  for (size_t i = 0; i < plan.size(); ++i)
    if (!done.count(schedule::canonical_string(plan[i].config))) out.push_back(i);
  return out;
}

/// One measured config: its row appended to the landscape (false with result->error when it
/// cannot be), shared, counted and reported.
bool record_row(const RecordOptions& options, const std::string& run_id,
                const PlannedConfig& planned, const eval::Verdict& verdict,
                const nlohmann::json& identity, RecordResult* result) {
  const LandscapeRow row = landscape_row(planned, verdict);
  if (!append_landscape_row(options.path, row, &result->error)) return result->ok = false;
  share_row(options, run_id, result->recorded, planned, verdict, identity);
  ++result->recorded;
  report(options, *result, row);
  return true;
}

}  // namespace

RecordResult record_landscape(eval::Evaluator& evaluator, const std::vector<PlannedConfig>& plan,
                              const RecordOptions& options) {
  RecordResult result;
  result.planned = static_cast<int>(plan.size());
  std::set<std::string> done;
  if (!(result.ok = open_landscape(options, &done, &result))) return result;
  const std::string run_id = recording_run_id();
  std::deque<size_t> upcoming = pending(plan, done);
  while (!upcoming.empty()) {
    if (options.stop && options.stop->load()) break;
    const PlannedConfig& p = plan[upcoming.front()];
    upcoming.pop_front();
    take_back(options, p);
    feed_ahead(options, plan, upcoming);
    const eval::Verdict v = evaluator.evaluate(p.config);
    if (const std::string why = evaluator.harness_failure(); !why.empty()) {
      result.ok = false;
      result.error = "the evaluator failed on the harness side: " + why;
      return result;
    }
    if (!record_row(options, run_id, p, v, evaluator.identity(), &result)) return result;
  }
  return result;
}

RecordResult record_landscape_on_pool(TrialPool& pool, const std::vector<PlannedConfig>& plan,
                                      const RecordOptions& options) {
  RecordResult result;
  result.planned = static_cast<int>(plan.size());
  std::set<std::string> done;
  if (!(result.ok = open_landscape(options, &done, &result))) return result;
  const std::string run_id = recording_run_id();
  std::deque<size_t> queue = pending(plan, done);
  std::map<uint64_t, int> losses;                        // plan index -> times its slot was lost
  std::vector<std::optional<size_t>> busy(pool.size());  // slot -> plan index in flight
  auto in_flight = [&] {
    return std::any_of(busy.begin(), busy.end(), [](const auto& b) { return b.has_value(); });
  };
  while (!queue.empty() || in_flight()) {
    const bool stopping = options.stop && options.stop->load();
    for (int s = 0; s < pool.size() && !stopping; ++s) {
      if (busy[s] || !pool.alive(s) || queue.empty()) continue;
      busy[s] = queue.front();
      queue.pop_front();
      take_back(options, plan[*busy[s]]);
      pool.submit(s, *busy[s], plan[*busy[s]].config);
    }
    feed_ahead(options, plan, queue);
    if (!in_flight()) break;  // stopping, or every slot lost
    std::optional<PoolEvent> e = pool.wait(1.0);
    if (!e) continue;
    const size_t index = e->ticket;
    busy[e->slot].reset();
    if (e->lost || !e->harness_failure.empty()) {
      if (++losses[index] < 2)
        queue.push_back(index);  // once more, elsewhere
      else
        ++result.lost;
      if (options.progress)
        *options.progress << "landscape: " << pool.label(e->slot) << " lost a config ("
                          << (e->lost ? e->lost_reason : e->harness_failure) << ")\n";
      continue;
    }
    if (!record_row(options, run_id, plan[index], e->verdict, pool.identity(e->slot), &result))
      return result;
  }
  return result;
}

}  // namespace megasched::search
