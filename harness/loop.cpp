#include "harness/loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include <unistd.h>

#include "flywheel/corpus.h"
#include "flywheel/dedup.h"
#include "flywheel/results.h"

namespace megasched::harness {
namespace {

using flywheel::CorpusRecord;
using nlohmann::json;
using schedule::ScheduleConfig;

std::string fmt(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

// The loop's status for a verdict before the keep rule (kept / discarded decided later).
std::string failure_status(const eval::Verdict& v) {
  if (v.status == "crash") return flywheel::kStatusCrash;
  if (v.status == "timeout" || v.status == "hang") return flywheel::kStatusTimeout;
  if (v.status == "rejected" || !v.valid) return flywheel::kStatusRejected;
  if (v.status == "incorrect" || !v.correct) return flywheel::kStatusIncorrect;
  return "";
}

bool has_latency(const eval::Verdict& v) {
  return failure_status(v).empty() && v.correct && v.latency_us && *v.latency_us > 0;
}

struct Incumbent {
  ScheduleConfig config;
  std::string id;
  std::optional<eval::Verdict> verdict;  // with a latency, once one is known
  int complexity = 0;
  std::optional<double> latency() const { return verdict ? verdict->latency_us : std::nullopt; }
};

std::string make_run_id(double now_s, uint64_t seed) {
  std::string stamp = flywheel::utc_timestamp(now_s);
  std::string compact;
  for (char c : stamp)
    if (c != '-' && c != ':') compact += c;
  std::mt19937_64 rng(
      seed ^ static_cast<uint64_t>(now_s * 1e6) ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%04x", static_cast<unsigned>(rng() & 0xffff));
  return "r" + compact + "-" + suffix;
}

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

}  // namespace

double SystemClock::now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string format_duration(double seconds) {
  long total = std::lround(std::max(0.0, seconds));
  long h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char buffer[32];
  if (h > 0)
    std::snprintf(buffer, sizeof buffer, "%ld:%02ld:%02ld", h, m, s);
  else
    std::snprintf(buffer, sizeof buffer, "%ld:%02ld", m, s);
  return buffer;
}

double latency_sigma_us(const eval::Verdict& v) {
  if (v.samples_us.size() >= 2) {
    double mean = 0;
    for (double s : v.samples_us) mean += s;
    mean /= static_cast<double>(v.samples_us.size());
    double var = 0;
    for (double s : v.samples_us) var += (s - mean) * (s - mean);
    return std::sqrt(var / static_cast<double>(v.samples_us.size() - 1));
  }
  if (v.latency_spread_us > 0) return v.latency_spread_us / 2.563;
  return 0.0;
}

KeepDecision decide_keep(const eval::Verdict& candidate, int candidate_complexity,
                         const eval::Verdict& incumbent, int incumbent_complexity, double min_gain,
                         double sigmas) {
  KeepDecision d;
  const double cand = *candidate.latency_us, inc = *incumbent.latency_us;
  const double sc = latency_sigma_us(candidate), si = latency_sigma_us(incumbent);
  const double noise = sigmas * std::sqrt(sc * sc + si * si);
  d.margin_us = std::max(min_gain * inc, noise);
  d.gain_us = inc - cand;
  const std::string pct = fmt("%.2f%%", 100.0 * d.gain_us / inc);
  const std::string margin = fmt("%.3f us", d.margin_us) +
                             (noise > min_gain * inc ? " (" + fmt("%.1f", sigmas) + " sigma)"
                                                     : " (" + fmt("%.0f%%", 100 * min_gain) + ")");
  if (d.gain_us > d.margin_us) {
    d.keep = true;
    d.reason = "faster by " + fmt("%.3f us", d.gain_us) + " (" + pct + ") > margin " + margin;
  } else if (std::abs(d.gain_us) <= d.margin_us && candidate_complexity < incumbent_complexity) {
    d.keep = true;
    d.reason = "near-tie (" + pct + ", margin " + margin +
               "), simpler: " + std::to_string(candidate_complexity) + " knobs off default vs " +
               std::to_string(incumbent_complexity);
  } else if (std::abs(d.gain_us) < 5e-4) {
    d.reason = "as fast as the incumbent, and not simpler (" +
               std::to_string(candidate_complexity) + " knobs off default vs " +
               std::to_string(incumbent_complexity) + ")";
  } else if (std::abs(d.gain_us) <= d.margin_us) {
    d.reason = (d.gain_us > 0 ? "faster by " + fmt("%.3f us", d.gain_us) + " (" + pct + ") but"
                              : "slower by " + fmt("%.3f us", -d.gain_us) + " (" +
                                    fmt("%.2f%%", -100.0 * d.gain_us / inc) + "),") +
               " within margin " + margin + ", and not simpler (" +
               std::to_string(candidate_complexity) + " knobs off default vs " +
               std::to_string(incumbent_complexity) + ")";
  } else {
    d.reason = "slower by " + fmt("%.3f us", -d.gain_us) + " (" +
               fmt("%.2f%%", -100.0 * d.gain_us / inc) + ")";
  }
  return d;
}

LoopResult run_loop(eval::Evaluator& evaluator, const schedule::ModelShape& shape,
                    const schedule::GpuTarget& target, Strategy& strategy, Clock& clock,
                    const LoopOptions& options) {
  LoopResult result;
  const double start_s = clock.now_s();
  const json identity = evaluator.identity();
  const std::string model = identity.value("model", shape.name);
  const std::string target_name = identity.value("target", target.name);
  const std::string device = identity.value("device", "cpu");
  json problems = json::array();

  // What every earlier run left behind.
  flywheel::CorpusRead corpus = flywheel::read_corpus(options.corpus_path);
  flywheel::ResultsRead results = flywheel::read_results(options.results_path);
  for (const auto& p : corpus.problems) problems.push_back(p);
  for (const auto& p : results.problems) problems.push_back(p);
  if (options.progress)
    for (const auto& p : problems) *options.progress << "warning: " << p.get<std::string>() << "\n";
  flywheel::ScheduleIndex index;
  index.add_corpus(corpus.records);
  index.add_results(results.rows);
  std::map<std::string, const flywheel::ResultRow*> row_of;
  for (const auto& row : results.rows) row_of.emplace(row.schedule_id, &row);

  const json versions = eval::trial_versions(identity);
  json fingerprint = identity;
  {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) == 0) fingerprint["host"] = host;
    fingerprint["target_name"] = target.name;
    fingerprint["num_sms"] = target.num_sms;
    fingerprint["sm_arch"] = target.sm_arch;
    fingerprint["target_source"] = target.source;
  }
  const json shape_json = flywheel::shape_to_json(shape);

  // The run: a new one, or the last one of this model / target / device when resuming.
  std::string run_id;
  std::vector<CorpusRecord> previous;
  if (options.resume) {
    for (const CorpusRecord& r : corpus.records)
      if (r.model == model && r.target == target_name && r.device == device) run_id = r.run_id;
    for (const CorpusRecord& r : corpus.records)
      if (!run_id.empty() && r.run_id == run_id) previous.push_back(r);
    std::sort(previous.begin(), previous.end(),
              [](const CorpusRecord& a, const CorpusRecord& b) { return a.trial < b.trial; });
  }
  const bool resumed = !run_id.empty();
  if (!resumed) run_id = make_run_id(start_s, options.seed);

  std::vector<TrialOutcome> history;
  std::map<std::string, int> counts;
  for (const std::string& s : flywheel::status_vocabulary()) counts[s] = 0;
  Incumbent incumbent;
  incumbent.config = ScheduleConfig{};
  incumbent.id = evaluator.schedule_id(incumbent.config);
  std::optional<double> default_us;
  int next_trial = 0;
  int since_keep = 0;
  int evaluations = 0;
  int skipped_known = 0;
  int restored_rows = 0;
  json seed = nullptr;

  auto outcome_of = [](const CorpusRecord& r, const ScheduleConfig& config) {
    TrialOutcome o;
    o.trial = r.trial;
    o.config = config;
    o.schedule_id = r.schedule_id;
    o.status = r.status;
    if (r.verdict.correct) o.latency_us = r.verdict.latency_us;
    o.changed_knobs = r.changed_knobs;
    return o;
  };

  std::set<int> logged_trials;
  for (const auto& row : results.rows)
    if (row.run_id == run_id) logged_trials.insert(row.trial);
  for (const CorpusRecord& r : previous) {
    std::string error;
    auto config = schedule::parse_config(r.config, &error);
    if (!config) {
      problems.push_back("run " + run_id + " trial " + std::to_string(r.trial) + ": " + error);
      continue;
    }
    // A kill between the corpus append and the results append: restore the row.
    if (!logged_trials.count(r.trial)) {
      if (!flywheel::append_result(options.results_path, flywheel::row_from_record(r), &error)) {
        result.ok = false;
        result.error = error;
        return result;
      }
      ++restored_rows;
    }
    ++counts[r.status];
    if (r.default_us) default_us = r.default_us;
    if (r.status == flywheel::kStatusKept) {
      incumbent.config = *config;
      incumbent.id = r.schedule_id;
      incumbent.verdict = r.verdict;
      incumbent.complexity = r.complexity;
      since_keep = 0;
    } else {
      ++since_keep;
    }
    next_trial = std::max(next_trial, r.trial + 1);
    history.push_back(outcome_of(r, *config));
    strategy.observe(history.back());
  }

  std::set<std::string> this_run_ids;
  for (const auto& o : history) this_run_ids.insert(o.schedule_id);
  auto is_new = [&](const ScheduleConfig& c) {
    const std::string id = evaluator.schedule_id(c);
    return !index.contains(id) && !this_run_ids.count(id);
  };

  double trial_time_total = 0.0;
  int trials_this_invocation = 0;
  std::string stop_reason;

  // Appends the record and its row, updates the state, prints the progress line.
  auto log_trial = [&](CorpusRecord& record, const ScheduleConfig& config, double trial_s) {
    std::string error;
    if (!flywheel::append_corpus(options.corpus_path, record, &error) ||
        !flywheel::append_result(options.results_path, flywheel::row_from_record(record), &error)) {
      result.ok = false;
      result.error = error;
      return false;
    }
    index.add(record);
    this_run_ids.insert(record.schedule_id);
    ++counts[record.status];
    history.push_back(outcome_of(record, config));
    strategy.observe(history.back());
    ++trials_this_invocation;
    trial_time_total += trial_s;
    if (options.progress) {
      const int done = record.trial + 1;
      const double elapsed = clock.now_s() - start_s;
      double eta = (trial_time_total / trials_this_invocation) * std::max(0, options.budget - done);
      if (options.minutes > 0) eta = std::min(eta, std::max(0.0, options.minutes * 60 - elapsed));
      std::string latency =
          record.verdict.correct && record.verdict.latency_us
              ? fmt("%10.3f us", *record.verdict.latency_us) + " " +
                    (record.verdict.latency_kind == "measured-gpu" ? "measured " : "predicted")
              : std::string(23, ' ');
      std::string best = incumbent.latency() ? fmt("%.3f us", *incumbent.latency()) : "-";
      if (incumbent.latency() && default_us)
        best += fmt(" (%.2fx)", *default_us / *incumbent.latency());
      char head[64];
      std::snprintf(head, sizeof head, "trial %3d/%d  %-9s", record.trial, options.budget,
                    record.status.c_str());
      *options.progress << head << " " << latency << "  best " << best << "  elapsed "
                        << format_duration(elapsed) << "  eta " << format_duration(eta) << "  "
                        << record.description << "\n";
      options.progress->flush();
    }
    return true;
  };

  auto make_record = [&](int trial, const std::string& strategy_name, const ScheduleConfig& config,
                         const std::string& id, const ScheduleConfig* parent,
                         const std::string& parent_id, const eval::Verdict& verdict) {
    CorpusRecord r;
    r.trial = trial;
    r.run_id = run_id;
    r.strategy = strategy_name;
    r.schedule_id = id;
    r.parent_id = parent_id;
    r.config = schedule::to_json(config);
    r.changed_knobs =
        parent ? schedule::changed_knobs(*parent, config) : std::vector<std::string>{};
    r.complexity = schedule::complexity(config);
    r.verdict = verdict;
    r.model = model;
    r.target = target_name;
    r.device = device;
    r.model_shape = shape_json;
    r.device_fingerprint = fingerprint;
    r.versions = versions;
    return r;
  };

  // Trial 0: the default config or the best known one (a known schedule is adopted, not re-run).
  if (next_trial == 0 && history.empty()) {
    ScheduleConfig seed_config{};
    std::string seed_source = "default";
    if (options.warm_start) {
      const CorpusRecord* best = nullptr;
      for (const CorpusRecord& r : corpus.records) {
        if (r.model != model || r.target != target_name || r.device != device) continue;
        if (!has_latency(r.verdict)) continue;
        if (r.verdict.timed_position != options.timed_position) continue;  // another position
        if (!best || *r.verdict.latency_us < *best->verdict.latency_us) best = &r;
      }
      if (best) {
        std::string error;
        if (auto c = schedule::parse_config(best->config, &error)) {
          seed_config = *c;
          seed_source = "warm-start";
        }
      }
    }
    if (options.start) {
      seed_config = *options.start;
      seed_source = "start";
    }
    const std::string seed_id = evaluator.schedule_id(seed_config);
    const CorpusRecord* known = index.record(seed_id);
    const auto row_it = row_of.find(seed_id);
    if (known || row_it != row_of.end()) {
      const eval::Verdict v = known ? known->verdict : verdict_from_row(*row_it->second);
      incumbent.config = seed_config;
      incumbent.id = seed_id;
      incumbent.complexity = schedule::complexity(seed_config);
      if (has_latency(v)) incumbent.verdict = v;
      if (seed_source == "default" && has_latency(v)) default_us = v.latency_us;
      if (seed_source == "warm-start") {
        const CorpusRecord* def = index.record(evaluator.schedule_id(ScheduleConfig{}));
        if (def && has_latency(def->verdict)) default_us = def->verdict.latency_us;
      }
      seed = {{"source", seed_source},
              {"schedule_id", seed_id},
              {"from_run", known ? json(known->run_id) : json(row_it->second->run_id)},
              {"latency_us", v.latency_us ? json(*v.latency_us) : json(nullptr)},
              {"evaluated", false}};
      if (options.progress)
        *options.progress << "trial 0 seed (" << seed_source << ") " << seed_id
                          << " is known from run " << seed["from_run"].get<std::string>()
                          << ": adopted without re-evaluating\n";
    } else if (!(options.stop && options.stop->load()) && options.budget > 0) {
      const double t0 = clock.now_s();
      eval::Verdict v = evaluator.evaluate(seed_config);
      ++evaluations;
      const double t1 = clock.now_s();
      CorpusRecord r = make_record(0, seed_source, seed_config, seed_id, nullptr, "", v);
      std::string status = failure_status(v);
      if (status.empty())
        status = has_latency(v) ? flywheel::kStatusKept : flywheel::kStatusDiscarded;
      r.status = status;
      incumbent.config = seed_config;
      incumbent.id = seed_id;
      incumbent.complexity = schedule::complexity(seed_config);
      if (has_latency(v)) {
        incumbent.verdict = v;
        if (seed_source == "default") default_us = v.latency_us;
        r.keep = {{"reason", "trial 0: the baseline"}};
        r.description = seed_source + ": baseline";
      } else {
        r.keep = {{"reason", "trial 0 has no latency: " +
                                 (v.rejected_reason.empty() ? v.status : v.rejected_reason)}};
        r.description =
            seed_source + ": " + status + (v.notes.empty() ? "" : " (" + v.notes.front() + ")");
      }
      r.default_us = default_us;
      r.best_us = incumbent.latency();
      r.timestamp = flywheel::utc_timestamp(t1);
      seed = {{"source", seed_source}, {"schedule_id", seed_id}, {"evaluated", true}};
      if (!log_trial(r, seed_config, t1 - t0)) return result;
      since_keep = 0;
      next_trial = 1;
    }
  }

  std::vector<Proposal> queue;
  int duplicate_rounds = 0;
  while (result.ok) {
    if (next_trial >= options.budget) {
      stop_reason = "budget";
      break;
    }
    if (options.stop && options.stop->load()) {
      stop_reason = "interrupted";
      break;
    }
    if (options.minutes > 0 && clock.now_s() - start_s >= options.minutes * 60.0) {
      stop_reason = "minutes";
      break;
    }
    if (options.plateau > 0 && since_keep >= options.plateau) {
      stop_reason = "plateau";
      break;
    }
    if (queue.empty()) {
      SearchState state;
      state.shape = &shape;
      state.target = &target;
      state.identity = identity;
      state.incumbent = incumbent.config;
      state.incumbent_id = incumbent.id;
      state.incumbent_latency_us = incumbent.latency();
      state.history = &history;
      state.trials_left = options.budget - next_trial;
      state.is_new = is_new;
      queue = strategy.propose(state, 1);
      std::reverse(queue.begin(), queue.end());
      if (queue.empty()) {
        stop_reason = strategy.last_error().empty() ? "exhausted: the strategy has nothing new"
                                                    : "strategy failed: " + strategy.last_error();
        break;
      }
    }
    Proposal proposal = std::move(queue.back());
    queue.pop_back();
    const std::string id = evaluator.schedule_id(proposal.config);
    if (index.contains(id) || this_run_ids.count(id)) {
      ++skipped_known;
      if (++duplicate_rounds >= strategy.duplicate_patience()) {
        stop_reason = "exhausted: " + std::to_string(strategy.duplicate_patience()) +
                      " proposals in a row were already evaluated";
        break;
      }
      continue;
    }
    duplicate_rounds = 0;
    const ScheduleConfig parent = proposal.parent ? *proposal.parent : incumbent.config;
    const std::string parent_id = evaluator.schedule_id(parent);

    const double t0 = clock.now_s();
    eval::Verdict v = evaluator.evaluate(proposal.config);
    ++evaluations;
    CorpusRecord r =
        make_record(next_trial, strategy.name(), proposal.config, id, &parent, parent_id, v);
    std::string status = failure_status(v);
    std::string decision;
    if (status.empty() && !has_latency(v)) {
      status = flywheel::kStatusDiscarded;
      decision = "correct but no latency reported" +
                 (v.notes.empty() ? std::string() : ": " + v.notes.front());
    } else if (status.empty() && !incumbent.latency()) {
      status = flywheel::kStatusKept;
      decision = "first correct latency of the run";
      r.keep = {{"incumbent_id", incumbent.id}, {"incumbent_us", nullptr}, {"reason", decision}};
    } else if (status.empty()) {
      KeepDecision d = decide_keep(v, r.complexity, *incumbent.verdict, incumbent.complexity,
                                   options.min_gain, options.sigmas);
      r.keep = {{"incumbent_id", incumbent.id},
                {"incumbent_us", *incumbent.latency()},
                {"margin_us", d.margin_us},
                {"gain_us", d.gain_us}};
      if (d.keep && v.latency_kind == "measured-gpu") {
        // Back to back: time the incumbent again now and judge against that.
        eval::Verdict again = evaluator.evaluate(incumbent.config);
        ++evaluations;
        if (has_latency(again)) {
          r.keep["remeasured_incumbent_us"] = *again.latency_us;
          incumbent.verdict = again;
          d = decide_keep(v, r.complexity, again, incumbent.complexity, options.min_gain,
                          options.sigmas);
          r.keep["margin_us"] = d.margin_us;
          r.keep["gain_us"] = d.gain_us;
          d.reason +=
              " (against the incumbent re-measured at " + fmt("%.3f us", *again.latency_us) + ")";
        } else {
          r.keep["remeasured_incumbent_status"] = again.status;
          d.reason += " (the incumbent's re-measurement failed: " + again.status + ")";
        }
      }
      r.keep["reason"] = d.reason;
      status = d.keep ? flywheel::kStatusKept : flywheel::kStatusDiscarded;
      decision = d.reason;
    } else {
      decision = v.rejected_reason.empty() ? (v.notes.empty() ? v.status : v.notes.front())
                                           : v.rejected_reason;
    }
    r.status = status;
    if (status == flywheel::kStatusKept) {
      incumbent.config = proposal.config;
      incumbent.id = id;
      incumbent.verdict = v;
      incumbent.complexity = r.complexity;
      since_keep = 0;
    } else {
      ++since_keep;
    }
    const double t1 = clock.now_s();
    r.default_us = default_us;
    r.best_us = incumbent.latency();
    r.timestamp = flywheel::utc_timestamp(t1);
    r.description = proposal.description + "; " + status + ": " + decision;
    if (!log_trial(r, proposal.config, t1 - t0)) break;
    ++next_trial;
  }

  json best = nullptr;
  if (incumbent.verdict) {
    const eval::Verdict& v = *incumbent.verdict;
    best = {
        {"schedule_id", incumbent.id},
        {"latency_us", *v.latency_us},
        {"latency_kind", v.latency_kind},
        {"pct_of_floor", v.floor_us > 0 ? json(100.0 * v.floor_us / *v.latency_us) : json(nullptr)},
        {"speedup_vs_default", default_us ? json(*default_us / *v.latency_us) : json(nullptr)},
        {"complexity", incumbent.complexity},
        {"config", schedule::to_json(incumbent.config)},
        {"verdict", eval::to_json(v)}};
  }
  int kept = counts[flywheel::kStatusKept];
  int trials = static_cast<int>(history.size());
  result.summary = {
      {"run_id", run_id},
      {"model", model},
      {"target", target_name},
      {"device", device},
      {"strategy", strategy.name()},
      {"resumed", resumed},
      {"seed", seed},
      {"stop_reason", result.ok ? stop_reason : "error: " + result.error},
      {"trials", trials},
      {"trials_this_invocation", trials_this_invocation},
      {"evaluations", evaluations},
      {"skipped_known", skipped_known},
      {"restored_rows", restored_rows},
      {"status_counts", counts},
      {"keep_rate", trials > 0 ? json(static_cast<double>(kept) / trials) : json(nullptr)},
      {"default_us", default_us ? json(*default_us) : json(nullptr)},
      {"best", best},
      {"results", options.results_path},
      {"corpus", options.corpus_path},
      {"elapsed_s", clock.now_s() - start_s},
      {"problems", problems}};
  return result;
}

}  // namespace megasched::harness
