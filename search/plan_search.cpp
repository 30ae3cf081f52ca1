#include "search/plan_search.h"

#include <algorithm>

#include "eval/plan_evaluate.h"
#include "schedule/format.h"

namespace megasched::search {

using nlohmann::json;
using schedule::Plan;
using schedule::PlanBucket;
using schedule::ScheduleConfig;

std::optional<Plan> plan_from_boundaries(const std::vector<int>& boundaries, int max_seq,
                                         const std::string& model, std::string* error) {
  const std::string hint =
      " (hint: --plan-buckets lists each bucket's first position, ascending from 0, every one "
      "below the model's max_seq " +
      std::to_string(max_seq) + ", e.g. 0,512,2048; the last bucket ends at max)";
  auto refuse = [&](const std::string& why) -> std::optional<Plan> {
    if (error) *error = "--plan-buckets: " + why + hint;
    return std::nullopt;
  };
  if (boundaries.empty()) return refuse("no bucket given");
  if (boundaries.front() != 0)
    return refuse("the first bucket begins at " + std::to_string(boundaries.front()) +
                  ", not 0: positions [0, " + std::to_string(boundaries.front()) +
                  ") would have no bucket");
  Plan plan;
  for (size_t i = 0; i < boundaries.size(); ++i) {
    const int b = boundaries[i];
    if (i > 0 && b <= boundaries[i - 1])
      return refuse(std::to_string(b) + " follows " + std::to_string(boundaries[i - 1]) +
                    ": the boundaries must be strictly ascending");
    if (b >= max_seq)
      return refuse(std::to_string(b) + " is at or past the last position " +
                    std::to_string(max_seq - 1) + " of model " + model);
    PlanBucket bucket;
    bucket.begin = b;
    bucket.end = i + 1 < boundaries.size() ? boundaries[i + 1] : schedule::kPlanEndOfModel;
    plan.buckets.push_back(bucket);
  }
  return plan;
}

int bucket_timed_position(const PlanBucket& bucket, int max_seq) {
  return (bucket.begin + schedule::bucket_end(bucket, max_seq) - 1) / 2;
}

int bucket_budget(int budget, int buckets, int index) {
  const int share = budget / buckets + (index < budget % buckets ? 1 : 0);
  return std::max(1, share);
}

Plan merge_equal_buckets(const Plan& plan) {
  Plan out;
  for (const PlanBucket& b : plan.buckets) {
    if (!out.buckets.empty() &&
        schedule::to_json(out.buckets.back().config) == schedule::to_json(b.config)) {
      out.buckets.back().end = b.end;
      continue;
    }
    out.buckets.push_back(b);
  }
  return out;
}

namespace {

// The summary entry of one bucket's loop: where it was timed, what it ran, what won.
json bucket_entry(const BucketSearch& s, const json& loop, bool searched) {
  json entry = {{"begin", s.bucket.begin},
                {"end", s.bucket.end},
                {"timed_position", s.timed_position},
                {"positions_checked", s.positions},
                {"budget", s.budget},
                {"searched", searched}};
  if (!searched) return entry;
  entry["seed"] = loop.value("seed", json(nullptr));
  for (const char* key : {"run_id", "trials", "trials_this_invocation", "evaluations",
                          "skipped_known", "stop_reason", "default_us", "confirm"})
    entry[key] = loop.value(key, json(nullptr));
  const json best = loop.value("best", json(nullptr));
  entry["best"] = best.is_object() ? json{{"schedule_id", best.value("schedule_id", "")},
                                          {"latency_us", best.value("latency_us", json(nullptr))},
                                          {"latency_kind", best.value("latency_kind", "")},
                                          {"config", best.value("config", json::object())}}
                                   : json(nullptr);
  return entry;
}

// The search of one bucket: its loop, then its winner (nullopt: no correct trial).
struct BucketRun {
  LoopResult loop;
  std::optional<ScheduleConfig> winner;
};

BucketRun run_one(const BucketSearch& search, const BucketRunner& run_bucket) {
  BucketRun out;
  out.loop = run_bucket(search);
  if (!out.loop.ok) return out;
  const json best = out.loop.summary.value("best", json(nullptr));
  if (best.is_object() && best.contains("config")) {
    std::string error;
    out.winner = schedule::parse_config(best["config"], &error);
  }
  return out;
}

}  // namespace

PlanSearchResult search_plan(const PlanSearchOptions& options, const BucketRunner& run_bucket) {
  PlanSearchResult result;
  const size_t n = options.buckets.buckets.size();
  Plan found;
  json buckets = json::array();
  std::optional<ScheduleConfig> previous;  // the left neighbour's winner
  std::string incomplete;
  for (size_t i = 0; i < n; ++i) {
    BucketSearch s;
    s.index = i;
    s.bucket = options.buckets.buckets[i];
    s.bucket.end = schedule::bucket_end(s.bucket, options.max_seq);
    s.timed_position = bucket_timed_position(s.bucket, options.max_seq);
    std::vector<int> wanted = options.positions;
    wanted.push_back(s.timed_position);
    s.positions = eval::bucket_positions(s.bucket, options.max_seq, wanted);
    s.budget = bucket_budget(options.budget, static_cast<int>(n), static_cast<int>(i));
    s.minutes = options.minutes / static_cast<double>(n);
    s.start = options.use_configs ? std::optional(options.buckets.buckets[i].config)
              : i == 0            ? options.start
                                  : previous;
    PlanBucket kept = options.buckets.buckets[i];
    if ((options.stop && options.stop->load()) || (options.cancel && options.cancel->load())) {
      // Stopped: the bucket takes its neighbour's winner unsearched (or its starting config).
      if (!options.use_configs && previous) kept.config = *previous;
      if (!options.use_configs && !previous) incomplete = "stopped before the first bucket";
      found.buckets.push_back(kept);
      buckets.push_back(bucket_entry(s, nullptr, false));
      continue;
    }
    if (options.progress)
      *options.progress << "plan: bucket " << i << " " << schedule::bucket_label(kept)
                        << ": timed at " << s.timed_position << ", checked at "
                        << json(s.positions).dump() << ", " << s.budget << " trials"
                        << ", seed: the best known there, else "
                        << (s.start ? "the " + std::string(i == 0 || options.use_configs
                                                               ? "given config"
                                                               : "left neighbour's winner")
                                    : std::string("the default"))
                        << "\n";
    BucketRun run = run_one(s, run_bucket);
    if (!run.loop.ok) {
      result.ok = false;
      result.bad_arguments = run.loop.bad_arguments;
      result.error = "bucket " + schedule::bucket_label(kept) + ": " + run.loop.error;
      buckets.push_back(bucket_entry(s, run.loop.summary, true));
      break;
    }
    buckets.push_back(bucket_entry(s, run.loop.summary, true));
    if (!run.winner) {
      if (incomplete.empty())
        incomplete = "bucket " + schedule::bucket_label(kept) +
                     " has no correct trial at position " + std::to_string(s.timed_position);
      continue;
    }
    previous = run.winner;
    kept.config = *run.winner;
    found.buckets.push_back(kept);
  }
  result.summary = {{"buckets", buckets}};
  if (!result.ok) return result;
  if (!incomplete.empty() || found.buckets.size() != n) {
    result.summary["plan"] = nullptr;
    result.summary["incomplete"] = incomplete;
    return result;
  }
  result.complete = true;
  for (const json& b : buckets) result.complete = result.complete && b["searched"].get<bool>();
  Plan merged = merge_equal_buckets(found);
  result.summary["merged"] = static_cast<int>(found.buckets.size() - merged.buckets.size());
  result.summary["plan"] = schedule::to_json(merged);
  result.plan = std::move(merged);
  return result;
}

}  // namespace megasched::search
