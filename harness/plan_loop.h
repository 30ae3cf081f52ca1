// `megasched loop --plan-buckets B0,B1,...` / `loop --plan FILE`: the search of a plan, bucket by
// bucket (search/plan_search.h), each bucket an ordinary loop (run_loop_command, harness/verbs.h)
// timed at the bucket's midpoint and checked at its ends. The document: the per-bucket summaries
// and the merged plan; the run directory holds summary.json and plan.json (a plan document,
// schemas/plan.schema.json), which `promote --plan RUN_DIR` reads (HARNESS.md section 15).
#pragma once

#include <string>

#include "harness/verbs.h"

namespace megasched::harness {

struct PlanLoopFlags {
  std::string buckets;   // --plan-buckets: each bucket's first position, ascending from 0
  std::string plan;      // --plan: a starting plan (file, -, best:MODEL:GPU): its buckets and seeds
  std::string runs_dir;  // "": runs/ beside the loop's results file
  bool no_run_dir = false;  // write no run directory
  bool given() const { return !buckets.empty() || !plan.empty(); }
};

/// The plan search `flags` and the loop flags of `command` describe. Exit 0 with a plan, 1 when a
/// bucket had no correct trial (no plan), 2 for bad flags (an unsorted --plan-buckets, --objective
/// or --timed-position with a plan, ...), 3 when a bucket's loop could not run.
VerbResult run_plan_loop_command(LoopCommand& command, const PlanLoopFlags& flags);

}  // namespace megasched::harness
