#include "search/loop_logs.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "flywheel/run_dir.h"
#include "flywheel/shared_corpus.h"
#include "schedule/format.h"

namespace megasched::search {
namespace {

using flywheel::CorpusRecord;
using nlohmann::json;
using schedule::fmt;
using schedule::ScheduleConfig;

// A verdict rebuilt from a results row (a schedule known only from results.tsv).
eval::Verdict verdict_from_row(const flywheel::ResultRow& row) {
  eval::Verdict v;
  v.valid = row.status != flywheel::kStatusRejected;
  v.correct = row.correct;
  v.latency_us = row.latency_us;
  v.latency_kind = row.latency_kind;
  v.floor_us = row.floor_us;
  v.schedule_id = row.schedule_id;
  v.status = row.correct ? "ok" : row.status;
  return v;
}

TrialOutcome outcome_of(const CorpusRecord& r, const ScheduleConfig& config) {
  TrialOutcome o;
  o.trial = r.trial;
  o.config = config;
  o.schedule_id = r.schedule_id;
  o.status = r.status;
  if (r.verdict.correct) o.latency_us = r.verdict.latency_us;
  o.changed_knobs = r.changed_knobs;
  return o;
}

// The first line of a file, and whether it ended in a newline (read at most `limit` bytes).
std::pair<std::string, bool> first_line(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  char c = 0;
  while (line.size() < limit && in.get(c)) {
    if (c == '\n') return {line, true};
    line += c;
  }
  return {line, false};
}

std::string check_results_file(const std::string& path) {
  const auto [line, complete] = first_line(path, 1 << 16);
  if (line.empty() && !complete) return "";  // new or empty
  const std::string header = flywheel::results_header();
  if (!complete && header.rfind(line, 0) == 0) return "";  // a torn first write
  std::set<std::string> cells;
  for (size_t start = 0;;) {
    const size_t tab = line.find('\t', start);
    cells.insert(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  if (cells.count("trial") && cells.count("status") && cells.count("schedule_id")) return "";
  return "--results " + path +
         " is not a results.tsv: its first line is not the header (trial, timestamp, run_id, "
         "...); name a new or existing results file (--corpus takes the .jsonl)";
}

std::string check_corpus_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // the last line without its newline: a torn write, not evidence
    if (line.empty()) continue;
    ++lines;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::string error;
    if (!j.is_discarded() && flywheel::corpus_record_from_json(j, &error)) return "";
  }
  if (lines == 0) return "";
  return "--corpus " + path + " is not a corpus.jsonl: none of its " + std::to_string(lines) +
         " lines is a trial record; name a new or existing corpus (--results takes the .tsv)";
}

}  // namespace

std::string check_log_paths(const std::string& results, const std::string& corpus) {
  if (flywheel::same_file(results, corpus))
    return "--results and --corpus both name " + results + ": give each log its own file";
  for (const auto& [flag, path] :
       {std::pair<std::string, std::string>{"--results", results}, {"--corpus", corpus}}) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      return flag + " " + path + " is " +
             (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
             " (a device or a pipe): name a log file";
  }
  if (std::string why = check_results_file(results); !why.empty()) return why;
  return check_corpus_file(corpus);
}

bool LoopLogs::open() {
  const LoopOptions& options = ctx_.options;
  if (const std::string why = check_log_paths(options.results_path, options.corpus_path);
      !why.empty()) {
    ctx_.result.bad_arguments = true;
    return ctx_.fail(why);
  }
  const std::string workload = ctx_.model + " / " + ctx_.target_name + " / " + ctx_.device;
  std::string error;
  std::string unguarded;
  if (!corpus_lock_.acquire(options.corpus_path, workload, &error, &unguarded) ||
      !results_lock_.acquire(options.results_path, workload, &error, &unguarded))
    return ctx_.fail(error);
  if (!unguarded.empty()) ctx_.warn(unguarded);
  // A torn last line (a kill mid-write) leaves the logs now, before anyone reads past it.
  for (const std::string* path : {&options.corpus_path, &options.results_path}) {
    bool repaired = false;
    if (!flywheel::repair_torn_tail(*path, &repaired, &error)) return ctx_.fail(error);
    if (repaired)
      ctx_.warn(*path + ": its torn last line (a write cut short) was moved to " +
                flywheel::quarantine_path(*path));
  }
  read_logs();
  for (const std::string* why : {&corpus_.error, &results_.error})
    if (!why->empty()) return ctx_.fail(*why);
  describe_trials();
  return true;
}

void LoopLogs::read_logs() {
  corpus_ = flywheel::read_corpus(ctx_.options.corpus_path);
  results_ = flywheel::read_results(ctx_.options.results_path);
  for (const auto& p : corpus_.problems) ctx_.warn(p);
  for (const auto& p : results_.problems) ctx_.warn(p);
  index_.add_corpus(corpus_.records);
  index_.add_results(results_.rows);
  for (const auto& row : results_.rows) row_of_.emplace(row.schedule_id, &row);
}

void LoopLogs::describe_trials() {
  versions_ = eval::trial_versions(ctx_.identity);
  fingerprint_ = ctx_.identity;
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) fingerprint_["host"] = host;
  fingerprint_["target_name"] = ctx_.target.name;
  fingerprint_["num_sms"] = ctx_.target.num_sms;
  fingerprint_["sm_arch"] = ctx_.target.sm_arch;
  fingerprint_["target_source"] = ctx_.target.source;
  shape_json_ = schedule::to_json(ctx_.shape);
}

bool LoopLogs::resume() {
  const LoopOptions& options = ctx_.options;
  std::vector<CorpusRecord> previous;
  if (options.resume) {
    for (const CorpusRecord& r : corpus_.records)
      if (r.model == ctx_.model && r.target == ctx_.target_name && r.device == ctx_.device)
        ctx_.run_id = r.run_id;
    for (const CorpusRecord& r : corpus_.records)
      if (!ctx_.run_id.empty() && r.run_id == ctx_.run_id) previous.push_back(r);
    std::sort(previous.begin(), previous.end(),
              [](const CorpusRecord& a, const CorpusRecord& b) { return a.trial < b.trial; });
  }
  ctx_.resumed = !ctx_.run_id.empty();
  if (!ctx_.resumed) ctx_.run_id = flywheel::new_run_id(ctx_.start_s);
  // The run id first (its rows, corpus records and run directory carry it).
  if (options.progress)
    *options.progress << "megasched loop: run " << ctx_.run_id << (ctx_.resumed ? " (resumed)" : "")
                      << "\n";

  for (const std::string& s : flywheel::status_vocabulary()) ctx_.counts[s] = 0;
  keep_.adopt(ScheduleConfig{}, ctx_.evaluator.schedule_id(ScheduleConfig{}), std::nullopt, 0);

  std::set<int> logged_trials;
  for (const auto& row : results_.rows)
    if (row.run_id == ctx_.run_id) logged_trials.insert(row.trial);
  for (const CorpusRecord& r : previous) {
    std::string error;
    auto config = schedule::parse_config(r.config, &error);
    if (!config) {
      ctx_.problems.push_back("run " + ctx_.run_id + " trial " + std::to_string(r.trial) + ": " +
                              error);
      continue;
    }
    // A kill between the corpus append and the results append: restore the row.
    if (!logged_trials.count(r.trial)) {
      if (!flywheel::append_result(options.results_path, flywheel::row_from_record(r), &error))
        return ctx_.fail(error);
      ++restored_rows_;
    }
    ++ctx_.counts[r.status];
    if (r.default_us) keep_.set_default_us(r.default_us);
    if (r.status == flywheel::kStatusKept) {
      keep_.adopt(*config, r.schedule_id, r.verdict, r.complexity);
      ctx_.since_keep = 0;
    } else {
      ++ctx_.since_keep;
    }
    ctx_.next_trial = std::max(ctx_.next_trial, r.trial + 1);
    ctx_.history.push_back(outcome_of(r, *config));
    ctx_.strategy.observe(ctx_.history.back());
  }
  for (const auto& o : ctx_.history) ctx_.this_run_ids.insert(o.schedule_id);
  return true;
}

std::pair<ScheduleConfig, std::string> LoopLogs::seed_choice() const {
  ScheduleConfig config{};
  std::string source = "default";
  const LoopOptions& options = ctx_.options;
  if (options.warm_start) {
    const CorpusRecord* best = nullptr;
    for (const CorpusRecord& r : corpus_.records) {
      if (r.model != ctx_.model || r.target != ctx_.target_name || r.device != ctx_.device)
        continue;
      if (!has_latency(r.verdict)) continue;
      if (!eval::judged_alike(r.verdict.timed_position, r.verdict.objective, options.timed_position,
                              options.objective))
        continue;  // another position or objective
      if (!best || *r.verdict.latency_us < *best->verdict.latency_us) best = &r;
    }
    if (best) {
      std::string error;
      if (auto c = schedule::parse_config(best->config, &error)) {
        config = *c;
        source = "warm-start";
      }
    }
  }
  if (options.start && source != "warm-start") {  // with warm_start: when nothing is known
    config = *options.start;
    source = "start";
  }
  return {config, source};
}

std::optional<std::pair<eval::Verdict, std::string>> LoopLogs::logged(const std::string& id) const {
  if (const CorpusRecord* known = index_.record(id)) return {{known->verdict, known->run_id}};
  const auto row = row_of_.find(id);
  if (row == row_of_.end()) return std::nullopt;
  return {{verdict_from_row(*row->second), row->second->run_id}};
}

CorpusRecord LoopLogs::make_record(int trial, const std::string& strategy_name,
                                   const ScheduleConfig& config, const std::string& id,
                                   const ScheduleConfig* parent, const std::string& parent_id,
                                   const eval::Verdict& verdict) const {
  CorpusRecord r;
  r.trial = trial;
  r.run_id = ctx_.run_id;
  r.strategy = strategy_name;
  r.schedule_id = id;
  r.parent_id = parent_id;
  r.config = schedule::to_json(config);
  r.changed_knobs = parent ? schedule::changed_knobs(*parent, config) : std::vector<std::string>{};
  r.complexity = schedule::complexity(config);
  r.verdict = verdict;
  r.model = ctx_.model;
  r.target = ctx_.target_name;
  r.device = ctx_.device;
  r.model_shape = shape_json_;
  r.device_fingerprint = fingerprint_;
  r.versions = versions_;
  return r;
}

bool LoopLogs::log_trial(CorpusRecord& record, const ScheduleConfig& config, double trial_s) {
  const LoopOptions& options = ctx_.options;
  std::string error;
  if (!flywheel::append_corpus(options.corpus_path, record, &error) ||
      !flywheel::append_result(options.results_path, flywheel::row_from_record(record), &error))
    return ctx_.fail(error);
  // The shared corpus is the project's memory, not this run's log: a failed append warns.
  if (bool appended = false; !flywheel::append_shared(options.flywheel_dir, record,
                                                      flywheel::kSourceLoop, &appended, &error))
    ctx_.warn("shared corpus: " + error);
  index_.add(record);
  ctx_.this_run_ids.insert(record.schedule_id);
  ++ctx_.counts[record.status];
  ctx_.history.push_back(outcome_of(record, config));
  ctx_.strategy.observe(ctx_.history.back());
  ++ctx_.trials_this_invocation;
  ctx_.trial_time_total += trial_s;
  if (options.progress || options.on_trial) {
    const std::string line = progress_line(record);
    if (options.progress) *options.progress << line << "\n" << std::flush;
    if (options.on_trial) options.on_trial(record.trial + 1, options.budget, line);
  }
  return true;
}

std::string LoopLogs::progress_line(const CorpusRecord& record) const {
  const LoopOptions& options = ctx_.options;
  const int done = record.trial + 1;
  const double elapsed = ctx_.clock.now_s() - ctx_.start_s;
  // With a pool, trials overlap: the rate so far, not the mean trial time, says what is left.
  double eta = (ctx_.pool ? elapsed : ctx_.trial_time_total) / ctx_.trials_this_invocation *
               std::max(0, options.budget - done);
  if (options.minutes > 0) eta = std::min(eta, std::max(0.0, options.minutes * 60 - elapsed));
  std::string latency =
      record.verdict.correct && record.verdict.latency_us
          ? fmt("%10.3f us", *record.verdict.latency_us) + " " +
                (record.verdict.latency_kind == "measured-gpu" ? "measured " : "predicted")
          : std::string(23, ' ');
  char head[64];
  std::snprintf(head, sizeof head, "trial %3d/%d  %-9s", record.trial, options.budget,
                record.status.c_str());
  return std::string(head) + " " + latency + "  best " + keep_.best_text() + "  elapsed " +
         format_duration(elapsed) + "  eta " + format_duration(eta) +
         (record.timed_on.empty() ? "" : "  on " + record.timed_on) + "  " + record.description;
}

void LoopLogs::add_to_summary(json& summary) const {
  summary["restored_rows"] = restored_rows_;
  summary["results"] = ctx_.options.results_path;
  summary["corpus"] = ctx_.options.corpus_path;
}

}  // namespace megasched::search
