// LESSONS.md (`megasched report --lessons`): what a search has learned, from the corpus, per
// (model, target, device, latency kind, timed position):
//   knob effects      per knob and value change (from -> to), the effect on latency in % with a
//                     95% confidence interval, from the pairs of correct trials whose configs
//                     differ only in that knob (method "pairs"); for a knob with fewer than
//                     min_pairs such pairs, a ridge regression of log latency on every knob's
//                     value (one-hot, off the default) over all correct trials (method
//                     "regression", the effect of the value against the knob's default)
//   failures          the configs that failed and why: rejected ones grouped by validator rule,
//                     incorrect ones by their first failing position (and path), crash and
//                     timeout by status; failed trials are rows here like any other
//   bottlenecks       the bottleneck classes (eval/bottleneck.h) over time, in windows of trials
//   plan              with `report --plan` (or a plan run found): "Plan over positions", latency
//                     against position per bucket config and where a boundary pays
// One JSON document (build_lessons) and its Markdown (lessons_markdown).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flywheel/corpus.h"

namespace megasched::flywheel {

struct LessonsOptions {
  int min_pairs = 2;  // fewer pairs than this for a knob: the regression instead
  int window = 10;    // trials per window of the bottleneck table
};

/// One group per model, target, device, timed position and objective (eval/objective.h: trials
/// judged over several positions are never mixed with trials timed at one; "objective", its
/// canonical text, is present only for such a group).
/// {"groups": [{"model", "target", "device", "latency_kind", "timed_position", "trials",
///   "correct", "effects": [{"knob", "from", "to", "method", "n", "effect_pct", "ci_low_pct",
///   "ci_high_pct"}], "failures": [{"status", "why", "count", "examples": [schedule ids],
///   "knobs": [changed knobs of the examples]}], "bottlenecks": [{"trials": "0-9", "memory", ...,
///   "none"}]}]}. Effects are in % of latency (negative: faster); a CI is null with one pair.
nlohmann::json build_lessons(const std::vector<CorpusRecord>& records,
                             const LessonsOptions& options = {});

/// The Markdown of build_lessons' document (source names the corpus it came from); a "plan" key
/// (flywheel/plan_report.h's section) adds the section "Plan over positions".
std::string lessons_markdown(const nlohmann::json& lessons, const std::string& source);

}  // namespace megasched::flywheel
