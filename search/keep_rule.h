// The incumbent and the keep rule of one loop invocation (search/loop.h states the rule): the
// incumbent of the evaluator's device type and, on a pool, one per other device type; the
// default config's latency; the judgement of each verdict, with the back-to-back re-measurement
// of a measured incumbent. Private to search/.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"
#include "flywheel/corpus.h"
#include "schedule/config.h"
#include "search/loop.h"

namespace megasched::search {

/// The loop's status for a verdict before the keep rule (kept / discarded decided later); "" for
/// a correct verdict.
std::string failure_status(const eval::Verdict& v);

/// Correct, with a positive latency: a verdict the keep rule can compare.
bool has_latency(const eval::Verdict& v);

struct Incumbent {
  schedule::ScheduleConfig config;
  std::string id;
  std::optional<eval::Verdict> verdict;  // with a latency, once one is known
  int complexity = 0;
  std::optional<double> fastest_us;  // the fastest latency kept in this run (bounds near-ties)
  std::optional<double> latency() const { return verdict ? verdict->latency_us : std::nullopt; }
};

class KeepRule {
 public:
  /// Times the incumbent again (nullopt: the harness failed or the run was cancelled).
  using Remeasure = std::function<std::optional<eval::Verdict>(const schedule::ScheduleConfig&)>;

  KeepRule(double min_gain, double sigmas, int confirm = 0)
      : min_gain_(min_gain), sigmas_(sigmas), confirm_(confirm) {}

  /// The keep rule for the verdict `v` of `candidate`: sets the record's status and keep evidence
  /// and returns the decision in words. A measured candidate that would be kept is judged again
  /// against the incumbent re-measured back to back; a difference of min_gain or more inside the
  /// noise, either way, goes through the confirm rounds (search/loop.h, rule 3b), which re-time
  /// both.
  std::string judge(const schedule::ScheduleConfig& candidate, const eval::Verdict& v,
                    flywheel::CorpusRecord* r, const Remeasure& remeasure);

  /// The record's config becomes the incumbent (and its latency the run's fastest, if it is).
  void adopt(const schedule::ScheduleConfig& config, const std::string& id,
             const std::optional<eval::Verdict>& verdict, int complexity);

  /// Swaps the incumbent with the one of `type` (a pool slot of another device type); a second
  /// call swaps back.
  void swap_device_type(const std::string& type) { std::swap(incumbent_, others_[type]); }

  const Incumbent& incumbent() const { return incumbent_; }
  const std::optional<double>& default_us() const { return default_us_; }
  void set_default_us(const std::optional<double>& us) { default_us_ = us; }
  /// "best ... (1.23x)" of a progress line.
  std::string best_text() const;

  /// The summary's "best" (null before a latency is known).
  nlohmann::json best_summary() const;
  /// The summary's "other_device_types": their incumbents.
  nlohmann::json others_summary() const;
  /// The summary's "confirm": this invocation's trials settled by rule 3b's rounds, by outcome
  /// (flywheel::confirm_counts) and the rounds a trial, {"rounds", "settled", "kept",
  /// "trades_refused", "not_confirmed", "timings"} (null without --confirm).
  nlohmann::json confirm_summary() const;

 private:
  /// Back to back: time the incumbent again now and judge the candidate against that.
  KeepDecision judge_again(const eval::Verdict& v, flywheel::CorpusRecord& r, KeepDecision d,
                           const Remeasure& remeasure);
  /// Rule 3b: confirm_ rounds of the candidate and the incumbent timed back to back, testing
  /// whether the candidate is faster (candidate_faster) or, against a near-tie trade, the
  /// incumbent is.
  KeepDecision confirm(const schedule::ScheduleConfig& candidate, flywheel::CorpusRecord& r,
                       KeepDecision d, const Remeasure& remeasure, bool candidate_faster);

  const double min_gain_, sigmas_;
  const int confirm_;
  std::vector<nlohmann::json> confirms_;  // this invocation's keep.confirm records
  Incumbent incumbent_;
  std::optional<double> default_us_;
  std::map<std::string, Incumbent> others_;  // device types other than the primary
};

}  // namespace megasched::search
