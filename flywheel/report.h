// The analyst report over results.tsv and corpus.jsonl, per (model, target, device): the best
// config and its verdict, status counts, keep rate, best-so-far versus trial, and the effect of
// each knob value (median latency and count). One JSON document (build_report); its text and
// HTML renderings are flywheel/report_render.h.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flywheel/corpus.h"
#include "flywheel/results.h"

namespace megasched::flywheel {

/// The report document:
///   {"sources": {"results": path, "corpus": path}, "problems": [..],
///    "groups": [{"model", "target", "device", "latency_kind", "trials", "runs": [run ids],
///                "status_counts": {status: n}, "keep_rate", "default_us",
///                "best": {"schedule_id", "run_id", "trial", "latency_us", "pct_of_floor",
///                         "speedup_vs_default", "floor_us", "config", "verdict",
///                         "faster_not_kept"?: {"schedule_id", "run_id", "trial", "latency_us",
///                                              "status", "description"}} | null,
///                  best: the loop's incumbent (per run its last kept trial, the fastest of
///                  those; without kept rows the fastest correct trial); a faster correct trial
///                  the loop discarded (a near-tie of a simpler config) is faster_not_kept.
///                "best_so_far": [{"index", "run_id", "trial", "status", "latency_us", "best_us"}],
///                "knob_effects": [{"knob", "values": [{"value", "count", "with_latency",
///                                                      "median_us"}]}],
///                "bottleneck_counts": {"memory", "latency-sync", "compute", "launch", "none"},
///                "confirm_rounds": {"settled", "kept", "trades_refused", "not_confirmed",
///                                   "timings", "trials": [{"run_id", "trial", "faster",
///                                                          "confirmed", "median_gain_share"}]}}]}
///   confirm_rounds: the trials the keep rule settled by back-to-back rounds (loop --confirm):
///   kept (a faster candidate confirmed), trades_refused (a simpler slower candidate refused, the
///   incumbent's lead confirmed), not_confirmed (a round lost: the margin's verdict stood), and
///   the timings the rounds took (two a recorded round): confirm_counts, with the trials.
/// Rows are grouped in order of first appearance; best_so_far follows file order.
nlohmann::json build_report(const std::vector<ResultRow>& rows,
                            const std::vector<CorpusRecord>& records);

/// Median of a non-empty list (mean of the middle two for an even count).
double median(std::vector<double> values);

/// The keep rule's confirm rounds (the records' keep.confirm objects) counted by outcome:
/// {"settled", "kept", "trades_refused", "not_confirmed", "timings"}, timings two a recorded round.
/// The report's confirm_rounds and the loop summary's confirm (search/keep_rule.h) both count so.
nlohmann::json confirm_counts(const std::vector<const nlohmann::json*>& confirms);

}  // namespace megasched::flywheel
