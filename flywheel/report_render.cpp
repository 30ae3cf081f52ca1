#include "flywheel/report_render.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "flywheel/plan_report.h"
#include "flywheel/results.h"
#include "schedule/format.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;
using schedule::fmt;

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string value_text(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

std::string status_color(const std::string& status) {
  static const std::map<std::string, std::string> colors = {
      {kStatusKept, "#2e7d32"},      {kStatusDiscarded, "#9e9e9e"}, {kStatusRejected, "#ef6c00"},
      {kStatusIncorrect, "#c62828"}, {kStatusCrash, "#6a1b9a"},     {kStatusTimeout, "#795548"}};
  auto it = colors.find(status);
  return it == colors.end() ? "#000000" : it->second;
}

std::string number_or_dash(const json& j, const char* format) {
  return j.is_number() ? fmt(format, j.get<double>()) : "-";
}

// Best-so-far (step line) over every trial's latency (dots by status; failures as ticks on
// the axis).
std::string best_so_far_svg(const json& series) {
  const double width = 760, height = 320, left = 70, right = 20, top = 20, bottom = 45;
  std::vector<double> latencies;
  for (const json& p : series)
    if (p["latency_us"].is_number()) latencies.push_back(p["latency_us"].get<double>());
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height
      << "\" role=\"img\" aria-label=\"best so far versus trial\">";
  svg << "<rect x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height
      << "\" fill=\"#ffffff\"/>";
  if (latencies.empty()) {
    svg << "<text x=\"" << width / 2 << "\" y=\"" << height / 2
        << "\" text-anchor=\"middle\" font-size=\"14\">no trial has a latency yet</text></svg>";
    return svg.str();
  }
  std::sort(latencies.begin(), latencies.end());
  double lo = latencies.front();
  // Clip the axis at the 95th percentile so one terrible config does not flatten the rest.
  double hi = latencies[static_cast<size_t>(0.95 * static_cast<double>(latencies.size() - 1))];
  if (hi <= lo) hi = lo * 1.05 + 1e-9;
  const double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;
  const double n = static_cast<double>(std::max<size_t>(series.size(), 2) - 1);
  auto x_of = [&](double i) { return left + (width - left - right) * i / n; };
  auto y_of = [&](double us) {
    us = std::clamp(us, lo, hi);
    return top + (height - top - bottom) * (1.0 - (us - lo) / (hi - lo));
  };
  // Axes and grid.
  svg << "<g font-family=\"sans-serif\" font-size=\"11\" fill=\"#333\">";
  for (int t = 0; t <= 4; ++t) {
    const double us = lo + (hi - lo) * t / 4.0;
    const double y = y_of(us);
    svg << "<line x1=\"" << left << "\" x2=\"" << width - right << "\" y1=\"" << y << "\" y2=\""
        << y << "\" stroke=\"#e0e0e0\"/>";
    svg << "<text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
        << fmt("%.1f", us) << "</text>";
  }
  const int xticks = std::min<int>(static_cast<int>(series.size()), 6);
  for (int t = 0; t < xticks; ++t) {
    const double i = xticks > 1 ? n * t / (xticks - 1) : 0;
    svg << "<text x=\"" << x_of(i) << "\" y=\"" << height - bottom + 16
        << "\" text-anchor=\"middle\">" << static_cast<int>(std::lround(i)) << "</text>";
  }
  svg << "<text x=\"" << (left + width - right) / 2 << "\" y=\"" << height - 6
      << "\" text-anchor=\"middle\">trial (file order)</text>";
  svg << "<text x=\"14\" y=\"" << (top + height - bottom) / 2
      << "\" text-anchor=\"middle\" transform=\"rotate(-90 14 " << (top + height - bottom) / 2
      << ")\">latency (us)</text>";
  svg << "<line x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << top << "\" y2=\""
      << height - bottom << "\" stroke=\"#333\"/><line x1=\"" << left << "\" x2=\"" << width - right
      << "\" y1=\"" << height - bottom << "\" y2=\"" << height - bottom
      << "\" stroke=\"#333\"/></g>";
  // Best so far as a step line.
  std::ostringstream path;
  path.setf(std::ios::fixed);
  path.precision(1);
  bool started = false;
  double previous_y = -1;
  for (size_t i = 0; i < series.size(); ++i) {
    if (!series[i]["best_us"].is_number()) continue;
    const double x = x_of(static_cast<double>(i)), y = y_of(series[i]["best_us"].get<double>());
    if (!started)
      path << "M" << x << " " << y;
    else
      path << " L" << x << " " << previous_y << " L" << x << " " << y;
    started = true;
    previous_y = y;
  }
  if (started)
    svg << "<path d=\"" << path.str() << "\" fill=\"none\" stroke=\"#1e88e5\" stroke-width=\"2\"/>";
  for (size_t i = 0; i < series.size(); ++i) {
    const json& p = series[i];
    const std::string status = p["status"].get<std::string>();
    const double x = x_of(static_cast<double>(i));
    if (p["latency_us"].is_number()) {
      svg << "<circle cx=\"" << fmt("%.1f", x) << "\" cy=\""
          << fmt("%.1f", y_of(p["latency_us"].get<double>())) << "\" r=\"3.5\" fill=\""
          << status_color(status) << "\"><title>trial " << p["trial"].get<int>() << " " << status
          << " " << fmt("%.3f us", p["latency_us"].get<double>()) << "</title></circle>";
    } else {
      const double y = height - bottom;
      svg << "<line x1=\"" << fmt("%.1f", x) << "\" x2=\"" << fmt("%.1f", x) << "\" y1=\"" << y - 8
          << "\" y2=\"" << y << "\" stroke=\"" << status_color(status)
          << "\" stroke-width=\"2\"><title>trial " << p["trial"].get<int>() << " " << status
          << "</title></line>";
    }
  }
  svg << "</svg>";
  return svg.str();
}

std::string status_svg(const json& counts, int trials) {
  const double width = 420, row = 22, label = 80;
  const auto& statuses = status_vocabulary();
  std::ostringstream svg;
  const double height = row * static_cast<double>(statuses.size()) + 6;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" role=\"img\" aria-label=\"status counts\"><g font-family=\"sans-serif\" "
         "font-size=\"12\">";
  for (size_t i = 0; i < statuses.size(); ++i) {
    const int count = counts.value(statuses[i], 0);
    const double y = 3 + row * static_cast<double>(i);
    const double bar = trials > 0 ? (width - label - 60) * count / trials : 0;
    svg << "<text x=\"" << label - 6 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\">"
        << statuses[i] << "</text>";
    svg << "<rect x=\"" << label << "\" y=\"" << y + 3 << "\" width=\"" << fmt("%.1f", bar)
        << "\" height=\"15\" fill=\"" << status_color(statuses[i]) << "\"/>";
    svg << "<text x=\"" << label + bar + 6 << "\" y=\"" << y + 15 << "\">" << count << "</text>";
  }
  svg << "</g></svg>";
  return svg.str();
}

std::string bar_svg(double fraction, const std::string& color) {
  const double width = 220;
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", width) +
         "\" height=\"12\"><rect x=\"0\" y=\"1\" width=\"" +
         fmt("%.1f", width * std::clamp(fraction, 0.0, 1.0)) + "\" height=\"10\" fill=\"" + color +
         "\"/></svg>";
}

// One line of a group's confirm_rounds (flywheel/report.h): "4 trials settled: 4 kept, 0 trades
// refused, 0 not confirmed (24 timings); kept: trial 104 (0.98%), ...".
std::string confirm_summary(const json& c) {
  std::string line = std::to_string(c["settled"].get<int>()) +
                     " trials settled: " + std::to_string(c["kept"].get<int>()) + " kept, " +
                     std::to_string(c["trades_refused"].get<int>()) + " trades refused, " +
                     std::to_string(c["not_confirmed"].get<int>()) + " not confirmed (" +
                     std::to_string(c["timings"].get<int>()) + " timings)";
  std::string kept;
  for (const json& t : c["trials"]) {
    if (!t["confirmed"].get<bool>() || t["faster"] != "candidate") continue;
    kept += (kept.empty() ? "" : ", ") + ("trial " + std::to_string(t["trial"].get<int>())) +
            (t["median_gain_share"].is_number()
                 ? fmt(" (%.2f%%)", 100.0 * t["median_gain_share"].get<double>())
                 : std::string());
  }
  return kept.empty() ? line : line + "; kept: " + kept;
}

}  // namespace

std::string report_text(const json& report) {
  std::ostringstream t;
  for (const json& p : report.value("problems", json::array()))
    t << "warning: " << p.get<std::string>() << "\n";
  if (report["groups"].empty()) t << "no trials logged yet\n";
  for (const json& g : report["groups"]) {
    t << "== " << g["model"].get<std::string>() << " on " << g["target"].get<std::string>() << " ("
      << g["device"].get<std::string>()
      << (g["latency_kind"].get<std::string>().empty()
              ? ""
              : ", " + g["latency_kind"].get<std::string>())
      << ")\n";
    t << "trials " << g["trials"].get<int>() << " in " << g["runs"].size() << " run(s); keep rate "
      << number_or_dash(g["keep_rate"].is_number() ? json(100.0 * g["keep_rate"].get<double>())
                                                   : json(nullptr),
                        "%.1f%%")
      << "\nstatus:";
    for (const auto& [status, count] : g["status_counts"].items())
      t << " " << status << "=" << count.get<int>();
    t << "\n";
    if (g.contains("bottleneck_counts")) {
      t << "bottleneck:";
      for (const auto& [name, count] : g["bottleneck_counts"].items())
        t << " " << name << "=" << count.get<int>();
      t << "\n";
    }
    if (g.contains("confirm_rounds") && g["confirm_rounds"]["settled"].get<int>() > 0)
      t << "confirm rounds: " << confirm_summary(g["confirm_rounds"]) << "\n";
    const json& best = g["best"];
    if (best.is_null()) {
      t << "best: none (no correct trial with a latency)\n";
    } else {
      t << "best: " << fmt("%.3f us", best["latency_us"].get<double>()) << " ("
        << best["latency_kind"].get<std::string>() << "), "
        << number_or_dash(best["pct_of_floor"], "%.1f%%") << " of floor, "
        << number_or_dash(best["speedup_vs_default"], "%.3fx") << " vs default; "
        << best["schedule_id"].get<std::string>() << " (run " << best["run_id"].get<std::string>()
        << ", trial " << best["trial"].get<int>() << ")\n";
      if (best.contains("faster_not_kept")) {
        const json& f = best["faster_not_kept"];
        t << "  (the loop's incumbent; trial " << f["trial"].get<int>() << " of run "
          << f["run_id"].get<std::string>() << " was faster, "
          << fmt("%.3f us", f["latency_us"].get<double>()) << ", but "
          << f["status"].get<std::string>() << ": " << f["description"].get<std::string>() << ")\n";
      }
      if (best["config"].is_object()) t << "best config: " << best["config"].dump() << "\n";
    }
    t << "best so far:";
    const json& series = g["best_so_far"];
    std::optional<double> last;
    for (const json& p : series) {
      if (!p["best_us"].is_number()) continue;
      double b = p["best_us"].get<double>();
      if (!last || b != *last) t << " #" << p["index"].get<int>() << "=" << fmt("%.3f", b);
      last = b;
    }
    t << "\nknob effects (value: median us over n trials with a latency / n trials):\n";
    for (const json& e : g["knob_effects"]) {
      t << "  " << e["knob"].get<std::string>() << ":";
      for (const json& v : e["values"])
        t << "  " << value_text(v["value"]) << ": " << number_or_dash(v["median_us"], "%.3f")
          << " (" << v["with_latency"].get<int>() << "/" << v["count"].get<int>() << ")";
      t << "\n";
    }
    t << "\n";
  }
  if (report.contains("plan")) t << plan_report_text(report["plan"]);
  return t.str();
}

std::string report_html(const json& report) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>megasched "
       "report</title>\n"
       "<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}"
       "h1{font-size:22px}h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ccc}"
       "table{border-collapse:collapse;font-size:13px}td,th{padding:3px "
       "8px;text-align:left;border-bottom:1px solid #eee}"
       "th{background:#f5f5f5}.num{text-align:right;font-variant-numeric:tabular-nums}"
       "pre{background:#f7f7f7;padding:8px;font-size:12px;overflow-x:auto}.warn{color:#b71c1c}"
       ".legend span{display:inline-block;margin-right:12px;font-size:12px}"
       ".sw{display:inline-block;width:10px;height:10px;margin-right:4px}</style></head><body>\n";
  h << "<h1>megasched report</h1>\n";
  if (report.contains("sources"))
    h << "<p>results: <code>" << html_escape(report["sources"].value("results", ""))
      << "</code>, corpus: <code>" << html_escape(report["sources"].value("corpus", ""))
      << "</code></p>\n";
  for (const json& p : report.value("problems", json::array()))
    h << "<p class=\"warn\">warning: " << html_escape(p.get<std::string>()) << "</p>\n";
  if (report["groups"].empty()) h << "<p>No trials logged yet.</p>\n";
  for (const json& g : report["groups"]) {
    h << "<h2>" << html_escape(g["model"].get<std::string>()) << " on "
      << html_escape(g["target"].get<std::string>()) << " ("
      << html_escape(g["device"].get<std::string>()) << ")</h2>\n";
    const json& best = g["best"];
    h << "<table><tr><th>trials</th><td class=\"num\">" << g["trials"].get<int>() << "</td></tr>"
      << "<tr><th>runs</th><td class=\"num\">" << g["runs"].size() << "</td></tr>"
      << "<tr><th>keep rate</th><td class=\"num\">"
      << number_or_dash(g["keep_rate"].is_number() ? json(100.0 * g["keep_rate"].get<double>())
                                                   : json(nullptr),
                        "%.1f%%")
      << "</td></tr><tr><th>default</th><td class=\"num\">"
      << number_or_dash(g["default_us"], "%.3f us") << "</td></tr>";
    if (!best.is_null()) {
      const json& v = best["verdict"];
      h << "<tr><th>best</th><td class=\"num\">" << fmt("%.3f us", best["latency_us"].get<double>())
        << " (" << html_escape(best["latency_kind"].get<std::string>()) << ")</td></tr>"
        << "<tr><th>floor</th><td class=\"num\">" << fmt("%.3f us", best["floor_us"].get<double>())
        << ", best at " << number_or_dash(best["pct_of_floor"], "%.1f%%") << " of floor</td></tr>"
        << "<tr><th>speedup vs default</th><td class=\"num\">"
        << number_or_dash(best["speedup_vs_default"], "%.3fx")
        << "</td></tr><tr><th>schedule</th><td><code>"
        << html_escape(best["schedule_id"].get<std::string>()) << "</code> (run "
        << html_escape(best["run_id"].get<std::string>()) << ", trial " << best["trial"].get<int>()
        << ")</td></tr>";
      if (v.is_object())
        h << "<tr><th>verdict</th><td>valid " << (v.value("valid", false) ? "yes" : "no")
          << ", correct " << (v.value("correct", false) ? "yes" : "no") << ", rel_err "
          << fmt("%.2e", v.value("rel_err", 0.0)) << ", argmax "
          << (v.value("argmax_match", false) ? "matches" : "differs") << ", tasks "
          << v.value("tasks", 0) << "</td></tr>";
    }
    if (g.contains("confirm_rounds") && g["confirm_rounds"]["settled"].get<int>() > 0)
      h << "<tr><th>confirm rounds</th><td>" << html_escape(confirm_summary(g["confirm_rounds"]))
        << "</td></tr>";
    h << "</table>\n";
    h << "<h3>Best so far versus trial</h3>\n<div class=\"legend\">";
    for (const std::string& s : status_vocabulary())
      h << "<span><i class=\"sw\" style=\"background:" << status_color(s) << "\"></i>" << s
        << "</span>";
    h << "<span><i class=\"sw\" style=\"background:#1e88e5\"></i>best so far</span></div>\n";
    h << best_so_far_svg(g["best_so_far"]) << "\n";
    h << "<h3>Status counts</h3>\n"
      << status_svg(g["status_counts"], g["trials"].get<int>()) << "\n";
    // Knob effects: bars scaled between the fastest and slowest median of the group.
    double lo = 0, hi = 0;
    bool any = false;
    for (const json& e : g["knob_effects"])
      for (const json& v : e["values"])
        if (v["median_us"].is_number()) {
          double m = v["median_us"].get<double>();
          lo = any ? std::min(lo, m) : m;
          hi = any ? std::max(hi, m) : m;
          any = true;
        }
    h << "<h3>Knob effects</h3>\n<p>Median latency of the trials with each value (bar: from the "
         "fastest median, "
      << number_or_dash(any ? json(lo) : json(nullptr), "%.3f us") << ", to the slowest, "
      << number_or_dash(any ? json(hi) : json(nullptr), "%.3f us") << ").</p>\n";
    h << "<table><tr><th>knob</th><th>value</th><th class=\"num\">trials</th><th "
         "class=\"num\">with latency</th>"
         "<th class=\"num\">median us</th><th></th></tr>\n";
    for (const json& e : g["knob_effects"]) {
      bool first = true;
      for (const json& v : e["values"]) {
        h << "<tr><td>" << (first ? html_escape(e["knob"].get<std::string>()) : "") << "</td><td>"
          << html_escape(value_text(v["value"])) << "</td><td class=\"num\">"
          << v["count"].get<int>() << "</td><td class=\"num\">" << v["with_latency"].get<int>()
          << "</td><td class=\"num\">" << number_or_dash(v["median_us"], "%.3f") << "</td><td>";
        if (v["median_us"].is_number() && hi > lo)
          h << bar_svg(0.05 + 0.95 * (v["median_us"].get<double>() - lo) / (hi - lo), "#5c6bc0");
        else if (v["median_us"].is_number())
          h << bar_svg(0.05, "#5c6bc0");
        h << "</td></tr>\n";
        first = false;
      }
    }
    h << "</table>\n";
    if (!best.is_null() && best["config"].is_object())
      h << "<h3>Best config</h3>\n<pre>" << html_escape(best["config"].dump(2)) << "</pre>\n";
  }
  if (report.contains("plan")) h << plan_report_html(report["plan"]);
  h << "</body></html>\n";
  return h.str();
}

}  // namespace megasched::flywheel
