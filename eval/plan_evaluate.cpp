#include "eval/plan_evaluate.h"

#include <algorithm>
#include <set>

#include "schedule/lookup.h"

namespace megasched::eval {

namespace {

// Folds the bucket verdict `b` of bucket `label` into the plan's `out`.
void fold(const Verdict& b, const std::string& label, bool timed, Verdict* out) {
  out->valid = out->valid && b.valid;
  out->correct = out->correct && b.correct;
  out->argmax_match = out->argmax_match && b.argmax_match;
  out->max_abs_err = std::max(out->max_abs_err, b.max_abs_err);
  out->rel_err = std::max(out->rel_err, b.rel_err);
  if (timed) return;  // the timed bucket's own fields are out's already
  if (out->rejected_reason.empty() && !b.rejected_reason.empty())
    out->rejected_reason = "bucket " + label + ": " + b.rejected_reason;
  if (out->status == "ok" && b.status != "ok") out->status = b.status;
  for (const auto& d : b.diagnostics) out->diagnostics.push_back(d);
  for (const auto& c : b.checks) out->checks.push_back(c);
  for (const std::string& n : b.notes) out->notes.push_back("bucket " + label + ": " + n);
}

}  // namespace

std::vector<int> bucket_positions(const schedule::PlanBucket& bucket, int max_seq,
                                  const std::vector<int>& positions) {
  const int end = schedule::bucket_end(bucket, max_seq);
  std::set<int> out = {bucket.begin, end - 1};
  for (int p : positions)
    if (p >= bucket.begin && p < end) out.insert(p);
  return {out.begin(), out.end()};
}

std::optional<Verdict> evaluate_plan(const EvaluatorOptions& options, const schedule::Plan& plan,
                                     std::string* error, bool* environment) {
  if (environment) *environment = false;
  if (!options.objective.empty()) {
    if (error)
      *error =
          "--objective with a plan of several buckets: a plan is timed at one position "
          "(hint: pass --timed-position P; the bucket that holds P is timed there)";
    return std::nullopt;
  }
  auto shape = schedule::resolve_shape(options.model, error);
  if (!shape) return std::nullopt;
  if (!schedule::check_plan_covers(plan, shape->max_seq, error)) {
    if (error) *error = "the plan does not fit model " + shape->name + ": " + *error;
    return std::nullopt;
  }
  if (options.timed_position < 0 || options.timed_position >= shape->max_seq) {
    if (error)
      *error = "--timed-position " + std::to_string(options.timed_position) + " lies outside [0, " +
               std::to_string(shape->max_seq - 1) + "] for model " + shape->name;
    return std::nullopt;
  }
  const size_t timed = schedule::plan_bucket_index(plan, options.timed_position);
  std::vector<Verdict> verdicts;
  for (size_t i = 0; i < plan.buckets.size(); ++i) {
    const schedule::PlanBucket& b = plan.buckets[i];
    EvaluatorOptions o = options;
    o.positions = bucket_positions(b, shape->max_seq, options.positions);
    o.timed_position = i == timed ? options.timed_position : b.begin;
    auto evaluator = TrialEvaluator::create(o, error, environment);
    if (!evaluator) {
      if (error) *error = "bucket " + schedule::bucket_label(b) + ": " + *error;
      return std::nullopt;
    }
    verdicts.push_back(evaluator->evaluate(b.config));
  }
  Verdict out = verdicts[timed];
  out.plan = nlohmann::json::array();
  for (size_t i = 0; i < plan.buckets.size(); ++i) {
    const schedule::PlanBucket& b = plan.buckets[i];
    const Verdict& v = verdicts[i];
    fold(v, schedule::bucket_label(b), i == timed, &out);
    out.plan.push_back({{"begin", b.begin},
                        {"end", schedule::bucket_end(b, shape->max_seq)},
                        {"schedule_id", v.schedule_id},
                        {"positions_checked", v.positions_checked},
                        {"timed_position", v.timed_position},
                        {"valid", v.valid},
                        {"correct", v.correct},
                        {"status", v.status},
                        {"rel_err", v.rel_err},
                        {"latency_us", v.latency_us ? nlohmann::json(*v.latency_us) : nullptr}});
  }
  std::set<int> checked;
  for (const Verdict& v : verdicts)
    checked.insert(v.positions_checked.begin(), v.positions_checked.end());
  out.positions_checked.assign(checked.begin(), checked.end());
  if (!(out.valid && out.correct)) {
    // A plan gets a latency only when every bucket is correct: no figure of a plan that fails.
    out.latency_us.reset();
    out.pct_of_floor.reset();
    out.pct_of_datasheet.reset();
    out.speedup_vs_baseline.reset();
    out.latency_kind.clear();
    if (out.status == "ok") out.status = out.valid ? "incorrect" : "rejected";
  }
  return out;
}

}  // namespace megasched::eval
