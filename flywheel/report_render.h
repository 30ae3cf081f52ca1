// The analyst report (flywheel/report.h build_report) rendered for people: plain text for a
// terminal, or a self-contained HTML page with inline CSS and SVG plots (best-so-far per trial,
// status counts, knob effects, and with a "plan" section latency against position per bucket
// config, flywheel/plan_report.h; no scripts, no external files).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace megasched::flywheel {

/// Plain text for a terminal.
std::string report_text(const nlohmann::json& report);
/// A self-contained HTML page (inline CSS and SVG).
std::string report_html(const nlohmann::json& report);

}  // namespace megasched::flywheel
