// The renderings of the report's plan section (flywheel/plan_report.h): the latency-versus-
// position plot, terminal text, an HTML fragment and LESSONS.md's Markdown.
#include <algorithm>
#include <sstream>

#include "flywheel/plan_report.h"
#include "schedule/format.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;
using schedule::fmt;

const char* bucket_color(size_t bucket) {
  static const char* colors[] = {"#1e88e5", "#e53935", "#43a047", "#fb8c00",
                                 "#8e24aa", "#00897b", "#6d4c41", "#3949ab"};
  return colors[bucket % (sizeof colors / sizeof colors[0])];
}

std::string group_title(const json& g) {
  return g["model"].get<std::string>() + " on " + g["target"].get<std::string>() + " (" +
         g["device"].get<std::string>() + ", " +
         (g["latency_kind"] == "predicted" ? std::string("predicted latency")
                                           : g["latency_kind"].get<std::string>()) +
         ")";
}

std::string us_or_dash(const json& x) { return x.is_number() ? fmt("%.2f", x.get<double>()) : "-"; }

// One comparison as a sentence: "at 1024 (bucket 1): bucket 1's config 1190.2 us vs bucket 0's
// 1201.5 us: switching saves 0.9%".
std::string comparison_text(const json& b, const json& c) {
  const double saving = c["switch_saving_pct"].get<double>();
  return "at " + c["position"].dump() + " (bucket " + c["in_bucket"].dump() + "): bucket " +
         b["right"].dump() + "'s config " + fmt("%.2f us", c["right_us"].get<double>()) +
         " vs bucket " + b["left"].dump() + "'s " + fmt("%.2f us", c["left_us"].get<double>()) +
         ": switching " + (saving >= 0 ? "saves " : "costs ") + fmt("%.2f%%", std::abs(saving));
}

// The x range of a group's plot: the model's positions when known, else past the last point.
double x_max_of(const json& plan, const json& g) {
  double x = g["max_seq"].get<int>();
  if (x <= 0) {
    for (const json& s : g["series"])
      for (const json& p : s["points"]) x = std::max(x, p["position"].get<double>() + 1);
    for (const json& b : plan["buckets"]) x = std::max(x, b["begin"].get<double>() + 1);
  }
  return std::max(x, 1.0);
}

}  // namespace

std::string plan_positions_svg(const json& plan, const json& g) {
  const double width = 760, height = 340, left = 70, right = 20, top = 20, bottom = 45;
  std::vector<double> ys;
  for (const json& s : g["series"])
    for (const json& p : s["points"]) ys.push_back(p["latency_us"].get<double>());
  for (const json& p : g["best_per_position"]) ys.push_back(p["latency_us"].get<double>());
  double lo = *std::min_element(ys.begin(), ys.end()), hi = *std::max_element(ys.begin(), ys.end());
  if (hi <= lo) hi = lo * 1.05 + 1e-9;
  const double pad = 0.08 * (hi - lo);
  lo -= pad;
  hi += pad;
  const double xmax = x_max_of(plan, g);
  auto x_of = [&](double p) { return left + (width - left - right) * p / xmax; };
  auto y_of = [&](double us) {
    return top + (height - top - bottom) * (1.0 - (us - lo) / (hi - lo));
  };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height
      << "\" role=\"img\" aria-label=\"latency versus position per bucket config\">"
      << "<rect x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height
      << "\" fill=\"#ffffff\"/><g font-family=\"sans-serif\" font-size=\"11\" fill=\"#333\">";
  for (int t = 0; t <= 4; ++t) {
    const double us = lo + (hi - lo) * t / 4.0, y = y_of(us);
    svg << "<line x1=\"" << left << "\" x2=\"" << width - right << "\" y1=\"" << fmt("%.1f", y)
        << "\" y2=\"" << fmt("%.1f", y) << "\" stroke=\"#e0e0e0\"/><text x=\"" << left - 6
        << "\" y=\"" << fmt("%.1f", y + 4) << "\" text-anchor=\"end\">" << fmt("%.1f", us)
        << "</text>";
  }
  for (int t = 0; t <= 4; ++t)
    svg << "<text x=\"" << fmt("%.1f", x_of(xmax * t / 4.0)) << "\" y=\"" << height - bottom + 16
        << "\" text-anchor=\"middle\">" << fmt("%.0f", xmax * t / 4.0) << "</text>";
  svg << "<text x=\"" << (left + width - right) / 2 << "\" y=\"" << height - 6
      << "\" text-anchor=\"middle\">decode position</text><text x=\"14\" y=\""
      << (top + height - bottom) / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
      << (top + height - bottom) / 2 << ")\">"
      << (g["latency_kind"] == "predicted" ? "predicted latency (us)" : "latency (us)")
      << "</text><line x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << top << "\" y2=\""
      << height - bottom << "\" stroke=\"#333\"/><line x1=\"" << left << "\" x2=\"" << width - right
      << "\" y1=\"" << height - bottom << "\" y2=\"" << height - bottom
      << "\" stroke=\"#333\"/></g>";
  for (const json& b : plan["buckets"]) {
    if (b["begin"].get<int>() == 0) continue;
    const std::string x = fmt("%.1f", x_of(b["begin"].get<double>()));
    svg << "<line class=\"boundary\" x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << top
        << "\" y2=\"" << height - bottom
        << "\" stroke=\"#555\" stroke-width=\"1.5\"><title>boundary at " << b["begin"].dump()
        << "</title></line><text x=\"" << x << "\" y=\"" << top - 6
        << "\" font-family=\"sans-serif\" font-size=\"10\" text-anchor=\"middle\">"
        << b["begin"].dump() << "</text>";
  }
  for (const json& s : g["series"]) {
    const size_t bucket = s["bucket"].get<size_t>();
    const char* color = bucket_color(bucket);
    std::ostringstream solid, dashed;
    const json& pts = s["points"];
    for (size_t i = 1; i < pts.size(); ++i) {
      std::ostringstream& path =
          pts[i - 1]["inside"].get<bool>() && pts[i]["inside"].get<bool>() ? solid : dashed;
      path << "M" << fmt("%.1f", x_of(pts[i - 1]["position"].get<double>())) << " "
           << fmt("%.1f", y_of(pts[i - 1]["latency_us"].get<double>())) << " L"
           << fmt("%.1f", x_of(pts[i]["position"].get<double>())) << " "
           << fmt("%.1f", y_of(pts[i]["latency_us"].get<double>())) << " ";
    }
    svg << "<g class=\"bucket-config\" data-bucket=\"" << bucket << "\">";
    if (!solid.str().empty())
      svg << "<path d=\"" << solid.str() << "\" fill=\"none\" stroke=\"" << color
          << "\" stroke-width=\"2\"/>";
    if (!dashed.str().empty())
      svg << "<path d=\"" << dashed.str() << "\" fill=\"none\" stroke=\"" << color
          << "\" stroke-width=\"1.5\" stroke-dasharray=\"5 4\"/>";
    for (const json& p : pts)
      svg << "<circle cx=\"" << fmt("%.1f", x_of(p["position"].get<double>())) << "\" cy=\""
          << fmt("%.1f", y_of(p["latency_us"].get<double>())) << "\" r=\"3\" fill=\"" << color
          << "\"><title>bucket " << bucket << "'s config at " << p["position"].dump() << ": "
          << fmt("%.3f us", p["latency_us"].get<double>()) << " (median of " << p["n"].dump()
          << ")</title></circle>";
    svg << "</g>";
  }
  for (const json& p : g["best_per_position"])
    svg << "<circle class=\"best\" cx=\"" << fmt("%.1f", x_of(p["position"].get<double>()))
        << "\" cy=\"" << fmt("%.1f", y_of(p["latency_us"].get<double>()))
        << "\" r=\"6\" fill=\"none\" stroke=\"#000\" stroke-width=\"1.2\"><title>fastest at "
        << p["position"].dump() << ": " << p["schedule_id"].get<std::string>() << " "
        << fmt("%.3f us", p["latency_us"].get<double>()) << "</title></circle>";
  svg << "</svg>";
  return svg.str();
}

std::string plan_report_text(const json& plan) {
  std::ostringstream t;
  t << "plan over positions";
  if (plan["source"].is_string()) t << " (" << plan["source"].get<std::string>() << ")";
  t << ":";
  if (plan.contains("message")) t << " " << plan["message"].get<std::string>();
  t << "\n";
  for (const json& g : plan.value("groups", json::array())) {
    t << "  " << group_title(g) << "\n";
    for (const json& s : g["series"]) {
      t << "    bucket " << s["bucket"].dump() << " "
        << plan["buckets"][s["bucket"].get<size_t>()]["label"].get<std::string>() << ":";
      for (const json& p : s["points"])
        t << " " << p["position"].dump() << "=" << us_or_dash(p["latency_us"])
          << (p["inside"].get<bool>() ? "" : "(outside)");
      t << "\n";
    }
    t << "    fastest per position:";
    for (const json& p : g["best_per_position"])
      t << " " << p["position"].dump() << "=" << us_or_dash(p["latency_us"])
        << (p["bucket"].is_null() ? "" : "(bucket " + p["bucket"].dump() + ")");
    t << "\n";
    for (const json& b : g["boundaries"]) {
      t << "    boundary " << b["position"].dump() << ":";
      if (b["comparisons"].empty()) t << " no position measured with both configs";
      t << "\n";
      for (const json& c : b["comparisons"]) t << "      " << comparison_text(b, c) << "\n";
      for (const json& w : b["warnings"]) t << "      warning: " << w.get<std::string>() << "\n";
      for (const json& n : b["notes"]) t << "      note: " << n.get<std::string>() << "\n";
    }
  }
  return t.str();
}

namespace {

// The rows of a group's tables, as cells: latency per position (one column per bucket config,
// then the fastest measured and the plan's own), and the boundary comparisons.
struct Tables {
  std::vector<std::string> position_header;
  std::vector<std::vector<std::string>> positions;
  std::vector<std::vector<std::string>> boundaries;
  std::vector<std::string> warnings, notes;
};

Tables tables_of(const json& plan, const json& g) {
  Tables t;
  t.position_header = {"position"};
  for (const json& s : g["series"])
    t.position_header.push_back(
        "bucket " + s["bucket"].dump() + " " +
        plan["buckets"][s["bucket"].get<size_t>()]["label"].get<std::string>() + " us");
  for (const char* h : {"fastest measured us", "its config", "plan's config us", "plan vs fastest"})
    t.position_header.push_back(h);
  for (const json& best : g["best_per_position"]) {
    std::vector<std::string> row = {best["position"].dump()};
    for (const json& s : g["series"]) {
      std::string cell = "-";
      for (const json& p : s["points"])
        if (p["position"] == best["position"])
          cell = us_or_dash(p["latency_us"]) + (p["inside"].get<bool>() ? "" : " (outside)");
      row.push_back(cell);
    }
    row.push_back(us_or_dash(best["latency_us"]));
    row.push_back(best["bucket"].is_null() ? best["schedule_id"].get<std::string>()
                                           : "bucket " + best["bucket"].dump() + "'s");
    row.push_back(us_or_dash(best["plan_us"]));
    row.push_back(best["plan_gap_pct"].is_number()
                      ? fmt("%+.1f%%", best["plan_gap_pct"].get<double>())
                      : "-");
    t.positions.push_back(row);
  }
  for (const json& b : g["boundaries"]) {
    if (b["comparisons"].empty())
      t.boundaries.push_back(
          {b["position"].dump(), "-", "-", "-", "-", "no position measured with both configs"});
    for (const json& c : b["comparisons"])
      t.boundaries.push_back({b["position"].dump(), c["position"].dump(), c["in_bucket"].dump(),
                              us_or_dash(c["left_us"]), us_or_dash(c["right_us"]),
                              comparison_text(b, c)});
    for (const json& w : b["warnings"]) t.warnings.push_back(w.get<std::string>());
    for (const json& n : b["notes"]) t.notes.push_back(n.get<std::string>());
  }
  return t;
}

const std::vector<std::string> kBoundaryHeader = {
    "boundary", "position", "in bucket", "left config us", "right config us", "switching there"};

std::string html_text(const std::string& text) {
  std::string out;
  for (char c : text)
    out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return out;
}

std::string html_table(const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows) {
  std::string h = "<table><tr>";
  for (const std::string& c : header) h += "<th>" + html_text(c) + "</th>";
  h += "</tr>\n";
  for (const auto& row : rows) {
    h += "<tr>";
    for (const std::string& c : row) h += "<td>" + html_text(c) + "</td>";
    h += "</tr>\n";
  }
  return h + "</table>\n";
}

std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows) {
  std::string m = "|", rule = "|";
  for (const std::string& c : header) {
    m += " " + c + " |";
    rule += "---|";
  }
  m += "\n" + rule + "\n";
  for (const auto& row : rows) {
    m += "|";
    for (const std::string& c : row) m += " " + c + " |";
    m += "\n";
  }
  return m;
}

}  // namespace

std::string plan_report_html(const json& plan) {
  std::ostringstream h;
  h << "<h2>Plan over positions</h2>\n<p>";
  if (plan["source"].is_string())
    h << "plan <code>" << html_text(plan["source"].get<std::string>()) << "</code>: ";
  for (const json& b : plan.value("buckets", json::array()))
    h << "<span style=\"color:" << bucket_color(b["index"].get<size_t>()) << "\">bucket "
      << b["index"].dump() << " " << b["label"].get<std::string>() << "</span> ";
  h << "</p>\n";
  if (plan.contains("message"))
    h << "<p>" << html_text(plan["message"].get<std::string>()) << "</p>\n";
  for (const json& g : plan.value("groups", json::array())) {
    const Tables t = tables_of(plan, g);
    h << "<h3>" << html_text(group_title(g)) << "</h3>\n<p>A line per bucket config: solid inside "
      << "its bucket, dashed outside; grey verticals: the boundaries; black rings: the fastest "
      << "config measured at each position.</p>\n"
      << plan_positions_svg(plan, g) << "\n"
      << html_table(t.position_header, t.positions) << "<h4>Where a boundary pays</h4>\n"
      << (t.boundaries.empty() ? "<p>One bucket: no boundary.</p>\n"
                               : html_table(kBoundaryHeader, t.boundaries));
    for (const std::string& w : t.warnings)
      h << "<p class=\"warn\">warning: " << html_text(w) << "</p>\n";
    for (const std::string& n : t.notes) h << "<p>note: " << html_text(n) << "</p>\n";
  }
  return h.str();
}

std::string plan_report_markdown(const json& plan) {
  std::ostringstream md;
  md << "\n## Plan over positions\n\n";
  if (plan["source"].is_string()) md << "Plan `" << plan["source"].get<std::string>() << "`:";
  for (const json& b : plan.value("buckets", json::array()))
    md << " bucket " << b["index"].dump() << " " << b["label"].get<std::string>() << ";";
  md << "\n";
  if (plan.contains("message")) md << "\n" << plan["message"].get<std::string>() << "\n";
  const json groups = plan.value("groups", json::array());
  for (size_t i = 0; i < groups.size(); ++i) {
    const json& g = groups[i];
    const Tables t = tables_of(plan, g);
    md << "\n### " << group_title(g) << "\n\n";
    if (g.contains("svg_file"))
      md << "![latency against position](" << g["svg_file"].get<std::string>()
         << ") (a line per bucket config: solid inside its bucket, dashed outside; black rings: "
            "the fastest config measured at each position)\n\n";
    md << markdown_table(t.position_header, t.positions) << "\n#### Where a boundary pays\n\n"
       << (t.boundaries.empty() ? "One bucket: no boundary.\n"
                                : markdown_table(kBoundaryHeader, t.boundaries));
    if (!t.warnings.empty() || !t.notes.empty()) md << "\n";
    for (const std::string& w : t.warnings) md << "- **warning**: " << w << "\n";
    for (const std::string& n : t.notes) md << "- note: " << n << "\n";
  }
  return md.str();
}

}  // namespace megasched::flywheel
