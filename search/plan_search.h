// The search of a plan (schedule/plan.h), bucket by bucket: `loop --plan-buckets` / `loop --plan`
// (HARNESS.md section 15). Each bucket runs the ordinary loop (search/loop.h), given by the caller
// as a BucketRunner, so a bucket's trials are the loop's trials, logged, deduplicated and kept by
// the same rules:
//   timed position  the bucket's midpoint (begin + end - 1) / 2: on a latency that grows about
//                   linearly with the position it is the bucket's mean step, the time a
//                   generation spends per step in the bucket; checked at its begin and end - 1
//                   (and the --positions inside it), so a bucket's config is correct at both ends
//   budget          the trials (and minutes) split evenly over the buckets, the remainder of the
//                   trials to the first buckets, at least one trial each
//   seed            the best config known at the bucket's timed position (the loop's warm start:
//                   a re-run continues from the last winners); when none is known, bucket 0: the
//                   default or --start, bucket i > 0: bucket i - 1's winner, or with a starting
//                   plan (--plan) its own config for the bucket
//   reuse           a schedule id names its timed position, so a config some run already timed at
//                   a bucket's timed position is known there: adopted as the seed, skipped as a
//                   proposal, never evaluated again
//   merge           adjacent buckets whose winners are one config become one bucket
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/config.h"
#include "schedule/plan.h"
#include "search/loop.h"

namespace megasched::search {

/// The buckets [b0, b1), [b1, b2), ..., [bn, max) of `--plan-buckets b0,b1,...,bn`, each with
/// the default config. nullopt with *error and a hint when the list is empty, does not start at
/// 0, is not strictly ascending or names a position at or past max_seq.
std::optional<schedule::Plan> plan_from_boundaries(const std::vector<int>& boundaries, int max_seq,
                                                   const std::string& model, std::string* error);

/// The position a bucket is timed at: its midpoint (begin + end - 1) / 2, "max" resolved.
int bucket_timed_position(const schedule::PlanBucket& bucket, int max_seq);

/// The trials of bucket `index` of `buckets`: budget / buckets, one more for the first
/// budget % buckets, at least 1.
int bucket_budget(int budget, int buckets, int index);

/// The plan with every run of adjacent buckets holding the same config (canonical JSON) merged
/// into one bucket.
schedule::Plan merge_equal_buckets(const schedule::Plan& plan);

/// What one bucket's loop is asked to do.
struct BucketSearch {
  size_t index = 0;
  schedule::PlanBucket bucket;  // its end resolved (never kPlanEndOfModel)
  int timed_position = 0;
  std::vector<int> positions;  // checked: its ends, the timed position and --positions inside it
  int budget = 1;
  double minutes = 0.0;  // 0: none
  /// Trial 0 when the logs know no correct trial at timed_position (the runner's loop warm-starts:
  /// LoopOptions::warm_start with start as the fallback); nullopt: the default.
  std::optional<schedule::ScheduleConfig> start;
};

/// Runs one bucket's loop (run_loop with an evaluator timed at search.timed_position). Its
/// summary is the loop's ("best": {"config", "latency_us", ...} or null).
using BucketRunner = std::function<LoopResult(const BucketSearch& search)>;

struct PlanSearchOptions {
  schedule::Plan buckets;    // the buckets searched; their configs are the seeds with use_configs
  bool use_configs = false;  // bucket i's seed is buckets[i].config (a starting plan)
  std::optional<schedule::ScheduleConfig> start;  // bucket 0's seed when !use_configs
  int max_seq = 0;
  std::vector<int> positions;               // --positions: checked where they fall inside a bucket
  int budget = 24;                          // trials over all buckets
  double minutes = 0.0;                     // over all buckets; 0: none
  const std::atomic<bool>* stop = nullptr;  // set: the buckets not yet searched are skipped
  const std::atomic<bool>* cancel = nullptr;  // set (the MCP server's cancel): likewise
  std::ostream* progress = nullptr;
};

struct PlanSearchResult {
  bool ok = true;
  std::string error;
  bool bad_arguments = false;          // with !ok: a bucket's loop refused its arguments
  bool complete = false;               // every bucket searched and has a winner
  std::optional<schedule::Plan> plan;  // the merged plan, when every bucket has a config
  nlohmann::json summary;              // "buckets" (one per bucket searched), "plan", "merged"
};

/// Searches every bucket in order, bucket i + 1 after bucket i. A bucket without a correct trial
/// leaves the plan incomplete (no plan; the summary says which bucket). A bucket's loop that
/// fails stops the search with its error. After a stop request the remaining buckets take their
/// left neighbour's winner unsearched ("searched": false in the summary).
PlanSearchResult search_plan(const PlanSearchOptions& options, const BucketRunner& run_bucket);

}  // namespace megasched::search
