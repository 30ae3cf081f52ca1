#include "search/replay.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "flywheel/corpus.h"
#include "schedule/lookup.h"
#include "search/landscape_evaluator.h"
#include "search/loop.h"

namespace megasched::search {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Timestamps and run ids of a replay must not depend on the wall clock: one second a reading.
class ReplayClock : public Clock {
 public:
  double now_s() override { return now_ += 1.0; }

 private:
  double now_ = 1.8e9;
};

std::string scratch_root(const std::string& work_dir) {
  if (!work_dir.empty()) return work_dir;
  std::error_code ec;
  // tmpfs when there is one: the loop fsyncs every log line, and a benchmark writes thousands.
  const fs::path base =
      fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
  return (base / ("megasched_replay_" + std::to_string(::getpid()))).string();
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double at = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - lo) * (v[hi] - v[lo]);
}

}  // namespace

std::optional<ReplayRun> replay_once(const Landscape& landscape, const ReplayOptions& options,
                                     std::string* error) {
  static std::atomic<int> counter{0};
  auto shape = schedule::resolve_shape(landscape.header.model, error);
  if (!shape) return std::nullopt;
  auto target = schedule::find_target_named(landscape.header.target, error, false);
  if (!target) return std::nullopt;
  StrategyOptions so = options.strategy;
  so.shape = *shape;
  std::unique_ptr<Strategy> strategy = make_strategy(so, error);
  if (!strategy) return std::nullopt;
  LandscapeEvaluator evaluator(landscape, so.seed);
  const fs::path dir = fs::path(scratch_root(options.work_dir)) /
                       (so.name + "_" + std::to_string(so.seed) + "_" + std::to_string(counter++));
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) {
    *error = "cannot make the replay's scratch folder " + dir.string() + ": " + ec.message();
    return std::nullopt;
  }
  LoopOptions lo;
  lo.budget = options.budget;
  lo.results_path = (dir / "results.tsv").string();
  lo.corpus_path = (dir / "corpus.jsonl").string();
  lo.timed_position = landscape.header.position;
  lo.seed = so.seed;
  lo.progress = options.progress;
  ReplayClock clock;
  const LoopResult result = run_loop(evaluator, *shape, *target, *strategy, clock, lo);
  flywheel::CorpusRead read = flywheel::read_corpus(lo.corpus_path);
  fs::remove_all(dir, ec);
  if (!result.ok) {
    *error = "replay of " + so.name + " (seed " + std::to_string(so.seed) + "): " + result.error;
    return std::nullopt;
  }
  ReplayRun run;
  run.strategy = so.name;
  run.seed = so.seed;
  run.stop_reason = result.summary.value("stop_reason", "");
  std::sort(read.records.begin(), read.records.end(),
            [](const auto& a, const auto& b) { return a.trial < b.trial; });
  std::optional<double> incumbent;
  for (const flywheel::CorpusRecord& r : read.records) {
    run.schedule_ids.push_back(r.schedule_id);
    run.statuses.push_back(r.status);
    run.measured.push_back(r.verdict.latency_us);
    if (r.status == flywheel::kStatusKept) {
      auto config = schedule::parse_config(r.config, error);
      if (!config) return std::nullopt;
      incumbent = evaluator.true_latency_us(*config);
    }
    run.best_true_us.push_back(incumbent);
  }
  return run;
}

double random_expected_best_us(const Landscape& landscape, int n) {
  const bool any_sample = std::any_of(landscape.rows.begin(), landscape.rows.end(),
                                      [](const LandscapeRow& r) { return r.origin == "sample"; });
  std::vector<double> values;  // failures sort last: never the best while a latency is drawn
  int failures = 0;
  for (const LandscapeRow& r : landscape.rows) {
    if (any_sample && r.origin != "sample") continue;
    if (r.latency_us)
      values.push_back(*r.latency_us);
    else
      ++failures;
  }
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const int total = static_cast<int>(values.size()) + failures;
  n = std::clamp(n, 1, total);
  // P(the i-th smallest is the best of n) = C(total-i, n-1) / C(total, n), i from 1; as a running
  // product: p_1 = n / total, p_{i+1} = p_i * (total - i - n + 1) / (total - i).
  double p = static_cast<double>(n) / total, expected = 0.0, mass = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    expected += p * values[i];
    mass += p;
    const double k = static_cast<double>(i + 1);
    p = total - k > 0 ? p * (total - k - n + 1) / (total - k) : 0.0;
    if (p <= 0) break;
  }
  // Draws of only failures keep no latency; the expectation is over draws that hold one.
  return mass > 0 ? expected / mass : values.back();
}

std::optional<json> run_search_bench(const Landscape& landscape, const BenchOptions& options,
                                     std::string* error) {
  const LandscapeRow* optimum = landscape.optimum();
  if (!optimum) {
    *error = "the landscape has no ok row: nothing to find";
    return std::nullopt;
  }
  const int budget = *std::max_element(options.budgets.begin(), options.budgets.end());
  struct Job {
    size_t strategy;
    uint64_t seed;
  };
  std::vector<Job> jobs;
  for (size_t s = 0; s < options.strategies.size(); ++s)
    for (int i = 0; i < options.seeds; ++i) jobs.push_back({s, options.first_seed + i});
  std::vector<std::optional<ReplayRun>> runs(jobs.size());
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::string first_error;
  auto work = [&] {
    for (size_t j; (j = next++) < jobs.size();) {
      ReplayOptions ro;
      ro.strategy = options.strategy;
      ro.strategy.name = options.strategies[jobs[j].strategy];
      ro.strategy.seed = jobs[j].seed;
      ro.budget = budget;
      ro.work_dir = options.work_dir;
      if (options.jobs <= 1 && jobs[j].seed == options.first_seed) ro.progress = options.trace;
      std::string why;
      runs[j] = replay_once(landscape, ro, &why);
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!runs[j] && first_error.empty()) first_error = why;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::max(1, options.jobs); ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (!first_error.empty()) {
    *error = first_error;
    return std::nullopt;
  }
  const double opt_us = *optimum->latency_us;
  json doc = {{"landscape", to_json(landscape.header)},
              {"rows", landscape.rows.size()},
              {"optimum_us", opt_us},
              {"optimum_id", optimum->id},
              {"seeds", options.seeds},
              {"within", options.within},
              {"random_expected_us", json::object()},
              {"strategies", json::array()}};
  for (int b : options.budgets)
    doc["random_expected_us"][std::to_string(b)] = random_expected_best_us(landscape, b);
  for (size_t s = 0; s < options.strategies.size(); ++s) {
    json entry = {{"name", options.strategies[s]}, {"budgets", json::array()}};
    std::vector<const ReplayRun*> mine;
    for (size_t j = 0; j < jobs.size(); ++j)
      if (jobs[j].strategy == s) mine.push_back(&*runs[j]);
    for (int b : options.budgets) {
      const double r = random_expected_best_us(landscape, b);
      std::vector<double> scores, bests;
      for (const ReplayRun* run : mine) {
        std::optional<double> best;
        for (int t = 0; t < b && t < static_cast<int>(run->best_true_us.size()); ++t)
          if (run->best_true_us[t]) best = run->best_true_us[t];
        const double found = best ? *best : r;
        bests.push_back(found);
        scores.push_back(r - opt_us > 0 ? (r - found) / (r - opt_us) : (found <= opt_us ? 1 : 0));
      }
      entry["budgets"].push_back({{"budget", b},
                                  {"score_median", quantile(scores, 0.5)},
                                  {"score_p25", quantile(scores, 0.25)},
                                  {"score_p75", quantile(scores, 0.75)},
                                  {"best_median_us", quantile(bests, 0.5)}});
    }
    std::vector<double> needed;
    int reached = 0;
    for (const ReplayRun* run : mine) {
      double trials = budget + 1.0;  // never reached: more than the largest budget
      for (size_t t = 0; t < run->best_true_us.size(); ++t)
        if (run->best_true_us[t] && *run->best_true_us[t] <= opt_us * (1 + options.within)) {
          trials = t + 1.0;
          ++reached;
          break;
        }
      needed.push_back(trials);
    }
    const double median = quantile(needed, 0.5);
    entry["trials_to_within"] = {{"median", median > budget ? json(nullptr) : json(median)},
                                 {"reached", reached},
                                 {"runs", mine.size()}};
    doc["strategies"].push_back(entry);
  }
  return doc;
}

std::string format_search_bench(const json& doc) {
  std::string out;
  char line[256];
  const json& h = doc["landscape"];
  std::snprintf(line, sizeof line,
                "landscape %s on %s, position %d, %s, build %s: %zu rows, optimum %.1f us\n",
                h.value("model", "").c_str(), h.value("target", "").c_str(), h.value("position", 0),
                h.value("latency_kind", "").c_str(), h.value("build", "").c_str(),
                doc.value("rows", size_t{0}), doc.value("optimum_us", 0.0));
  out += line;
  std::snprintf(line, sizeof line,
                "score: 0 = random search's expected best, 1 = the optimum; median [p25, p75] over "
                "%d seeds\n",
                doc.value("seeds", 0));
  out += line;
  std::string head = "strategy    ";
  for (const json& b : doc["strategies"][0]["budgets"])
    head += "  " + std::string(14 - std::to_string(b.value("budget", 0)).size(), ' ') +
            "n=" + std::to_string(b.value("budget", 0)) + "  ";
  std::snprintf(line, sizeof line, "  trials to %.0f%%", 100 * doc.value("within", 0.02));
  out += head + line + "\n";
  for (const json& s : doc["strategies"]) {
    std::snprintf(line, sizeof line, "%-12s", s.value("name", "").c_str());
    out += line;
    for (const json& b : s["budgets"]) {
      std::snprintf(line, sizeof line, "  %5.2f [%5.2f,%5.2f]", b.value("score_median", 0.0),
                    b.value("score_p25", 0.0), b.value("score_p75", 0.0));
      out += line;
    }
    const json& t = s["trials_to_within"];
    std::string median = t["median"].is_null() ? "never" : std::to_string(t["median"].get<int>());
    std::snprintf(line, sizeof line, "  %6s (%d/%d reached)\n", median.c_str(),
                  t.value("reached", 0), t.value("runs", 0));
    out += line;
  }
  out += "random search's expected best (us):";
  for (const auto& [b, us] : doc["random_expected_us"].items()) {
    std::snprintf(line, sizeof line, " n=%s %.1f", b.c_str(), us.get<double>());
    out += line;
  }
  return out + "\n";
}

}  // namespace megasched::search
