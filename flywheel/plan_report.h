// Plans over positions in the report (`megasched report --plan`, HARNESS.md "Plan over
// positions"): latency against decode position for each bucket config of a plan (schedule/plan.h),
// from the corpus records timed at each position, the fastest config measured at each position,
// and per bucket boundary whether switching configs there pays. Only measured (or predicted,
// labelled so by latency_kind) latencies; nothing is interpolated.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flywheel/corpus.h"
#include "schedule/plan.h"

namespace megasched::flywheel {

/// The plan section of the report. Records count when correct with a latency and timed at one
/// position (no objective); one group per (model, target, device, latency_kind) that measured a
/// bucket's config at least once; several records of one config at one position: their median.
/// {"source", "buckets": [{"index", "begin", "end" (int | "max"), "label", "config"}],
///  "message"?: why there is no group,
///  "groups": [{"model", "target", "device", "latency_kind", "max_seq" (0: unknown),
///    "series": [{"bucket", "points": [{"position", "latency_us", "n", "inside"}]}],
///    "best_per_position": [{"position", "latency_us", "schedule_id" (its id there), "bucket" (a
///       bucket whose config it is, or null; a tie goes to a bucket's config), "plan_bucket",
///       "plan_us" (the plan's own config there, or null), "plan_gap_pct" ((plan_us - latency_us) /
///       latency_us, or null)}],
///    "boundaries": [{"position", "left", "right", "comparisons": [{"position", "in_bucket",
///       "left_us", "right_us", "switch_saving_pct" ((left - right) / left: > 0 when the right
///       bucket's config is faster there)}], "warnings": [..], "notes": [..]}]}]}
/// A warning: the right config is slower at a position inside the right bucket (the boundary is
/// misplaced there); a note: it is faster already inside the left bucket (it could come earlier).
nlohmann::json build_plan_report(const schedule::Plan& plan, const std::string& source,
                                 const std::vector<CorpusRecord>& records);

/// The section without a plan: {"source": null, "message": why} (rendered as that line).
nlohmann::json no_plan_report(const std::string& message);

/// The plot of one group: latency (y) against position (x), a line per bucket config (solid
/// inside its bucket, dashed outside), a vertical line per boundary, the fastest config per
/// position as black rings.
std::string plan_positions_svg(const nlohmann::json& plan_report, const nlohmann::json& group);

/// Renderings of the section: terminal text, an HTML fragment (with the plots), Markdown for
/// LESSONS.md (a group's "svg_file", when set: the plot's file beside LESSONS.md, linked).
std::string plan_report_text(const nlohmann::json& plan_report);
std::string plan_report_html(const nlohmann::json& plan_report);
std::string plan_report_markdown(const nlohmann::json& plan_report);

}  // namespace megasched::flywheel
