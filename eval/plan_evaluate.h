// The trial of a plan (schedule/plan.h): each bucket's config is one trial (eval/evaluate.h) whose
// checked positions lie inside the bucket, its boundaries included (begin and end - 1, plus the
// --positions that fall in it), timed at the timed position when the bucket holds it, else at its
// begin. The verdicts fold into one: the timed bucket's latency and figures, valid and correct only
// when every bucket's are, and one entry per bucket in the verdict's "plan" field.
#pragma once

#include <optional>
#include <string>

#include "eval/evaluate.h"
#include "eval/verdict.h"
#include "schedule/plan.h"

namespace megasched::eval {

/// The checked positions of the bucket [begin, end) of a model of `max_seq` positions: begin,
/// end - 1 and the `positions` inside the bucket, ascending and distinct.
std::vector<int> bucket_positions(const schedule::PlanBucket& bucket, int max_seq,
                                  const std::vector<int>& positions);

/// One trial per bucket under `options` (its positions and timed position narrowed to each
/// bucket), folded into one verdict. nullopt with *error (and *environment, as
/// TrialEvaluator::create sets it) when an evaluator cannot be made, when the plan does not cover
/// the model's positions, or with an objective (a plan is timed at one position).
std::optional<Verdict> evaluate_plan(const EvaluatorOptions& options, const schedule::Plan& plan,
                                     std::string* error, bool* environment = nullptr);

}  // namespace megasched::eval
