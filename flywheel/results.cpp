#include "flywheel/results.h"

#include <charconv>
#include <cstdio>
#include <map>

#include "flywheel/locked_file.h"

namespace megasched::flywheel {
namespace {

std::string clean(const std::string& text) {
  std::string out = text;
  for (char& c : out)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return out;
}

std::string number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.3f", value);
  return buffer;
}

std::string optional_cell(const std::optional<double>& value) {
  return value ? number(*value) : std::string();
}

std::optional<double> parse_double(const std::string& cell) {
  if (cell.empty()) return std::nullopt;
  double value = 0.0;
  auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  if (ec != std::errc() || ptr != cell.data() + cell.size()) return std::nullopt;
  return value;
}

std::optional<int> parse_int(const std::string& cell) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  if (cell.empty() || ec != std::errc() || ptr != cell.data() + cell.size()) return std::nullopt;
  return value;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> cells;
  size_t start = 0;
  for (;;) {
    size_t tab = line.find('\t', start);
    cells.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  return cells;
}

std::string knob_value_text(const nlohmann::json& config, const std::string& path) {
  const nlohmann::json* node = &config;
  size_t start = 0;
  while (node->is_object()) {
    size_t dot = path.find('.', start);
    auto it =
        node->find(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (it == node->end()) return "?";
    node = &*it;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return node->is_string() ? node->get<std::string>() : node->dump();
}

}  // namespace

const std::vector<std::string>& results_columns() {
  static const std::vector<std::string> columns = {
      "trial",        "timestamp",   "run_id",    "model",         "target",
      "device",       "strategy",    "status",    "correct",       "latency_us",
      "latency_kind", "spread_us",   "floor_us",  "pct_of_floor",  "speedup_vs_default",
      "best_us",      "schedule_id", "parent_id", "changed_knobs", "complexity",
      "description",  "timed_on"};
  return columns;
}

std::string results_header() {
  std::string header;
  for (const std::string& column : results_columns()) {
    if (!header.empty()) header += '\t';
    header += column;
  }
  return header;
}

ResultRow row_from_record(const CorpusRecord& r) {
  ResultRow row;
  row.trial = r.trial;
  row.timestamp = r.timestamp;
  row.run_id = r.run_id;
  row.model = r.model;
  row.target = r.target;
  row.device = r.device;
  row.strategy = r.strategy;
  row.status = r.status;
  row.correct = r.verdict.correct;
  row.latency_us = r.verdict.correct ? r.verdict.latency_us : std::nullopt;
  row.latency_kind = row.latency_us ? r.verdict.latency_kind : std::string();
  row.spread_us = r.verdict.latency_spread_us;
  row.floor_us = r.verdict.floor_us;
  if (row.latency_us && *row.latency_us > 0 && row.floor_us > 0)
    row.pct_of_floor = 100.0 * row.floor_us / *row.latency_us;
  if (row.latency_us && *row.latency_us > 0 && r.default_us)
    row.speedup_vs_default = *r.default_us / *row.latency_us;
  row.best_us = r.best_us;
  row.schedule_id = r.schedule_id;
  row.parent_id = r.parent_id;
  for (const std::string& path : r.changed_knobs) {
    if (!row.changed_knobs.empty()) row.changed_knobs += ',';
    row.changed_knobs += path + "=" + knob_value_text(r.config, path);
  }
  row.complexity = r.complexity;
  row.description = r.description;
  row.timed_on = r.timed_on;
  return row;
}

std::string format_row(const ResultRow& row) {
  const std::vector<std::string> cells = {std::to_string(row.trial),
                                          clean(row.timestamp),
                                          clean(row.run_id),
                                          clean(row.model),
                                          clean(row.target),
                                          clean(row.device),
                                          clean(row.strategy),
                                          clean(row.status),
                                          row.correct ? "1" : "0",
                                          optional_cell(row.latency_us),
                                          clean(row.latency_kind),
                                          number(row.spread_us),
                                          number(row.floor_us),
                                          optional_cell(row.pct_of_floor),
                                          optional_cell(row.speedup_vs_default),
                                          optional_cell(row.best_us),
                                          clean(row.schedule_id),
                                          clean(row.parent_id),
                                          clean(row.changed_knobs),
                                          std::to_string(row.complexity),
                                          clean(row.description),
                                          clean(row.timed_on)};
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i) line += '\t';
    line += cells[i];
  }
  return line;
}

namespace {

// The cells of `row` in the order of `header` (a file written before a column was added keeps its
// own columns: a cell it has no column for is left out, a column this build lacks left empty).
std::string format_row_as(const ResultRow& row, const std::vector<std::string>& header) {
  const std::vector<std::string>& columns = results_columns();
  const std::vector<std::string> cells = split_tabs(format_row(row));
  std::string line;
  for (size_t i = 0; i < header.size(); ++i) {
    if (i) line += '\t';
    for (size_t c = 0; c < columns.size(); ++c)
      if (columns[c] == header[i]) line += cells[c];
  }
  return line;
}

}  // namespace

bool append_result(const std::string& path, const ResultRow& row, std::string* error) {
  std::string line = format_row(row);
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    // An existing file keeps its header (written once, never rewritten): rows follow its columns.
    std::string first;
    for (int c = std::fgetc(f); c != EOF && c != '\n'; c = std::fgetc(f)) first += static_cast<char>(c);
    std::fclose(f);
    if (!first.empty() && first != results_header()) line = format_row_as(row, split_tabs(first));
  }
  return append_lines_locked(path, results_header(), {line}, error);
}

ResultsRead read_results(const std::string& path) {
  ResultsRead out;
  LinesRead lines = read_lines_shared(path);
  out.exists = lines.exists;
  out.error = lines.error;
  if (lines.lines.empty()) {
    for (int number : lines.torn_line_numbers)
      out.problems.push_back(path + ":" + std::to_string(number) + ": truncated line (skipped)");
    return out;
  }
  std::vector<std::string> header = split_tabs(lines.lines[0]);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < header.size(); ++i) index[header[i]] = i;
  for (const char* required : {"trial", "status", "schedule_id"}) {
    if (!index.count(required)) {
      out.problems.push_back(path + ":1: header lacks column '" + required + "'");
      return out;
    }
  }
  for (size_t i = 1; i < lines.lines.size(); ++i) {
    const std::string where = path + ":" + std::to_string(lines.line_numbers[i]) + ": ";
    std::vector<std::string> cells = split_tabs(lines.lines[i]);
    if (cells.size() != header.size()) {
      out.problems.push_back(where + "torn or malformed line: " + std::to_string(cells.size()) +
                             " cells, header has " + std::to_string(header.size()) + " (skipped)");
      continue;
    }
    auto cell = [&](const char* name) -> std::string {
      auto it = index.find(name);
      return it == index.end() ? std::string() : cells[it->second];
    };
    ResultRow row;
    auto trial = parse_int(cell("trial"));
    if (!trial) {
      out.problems.push_back(where + "trial is not a number (skipped)");
      continue;
    }
    row.trial = *trial;
    row.timestamp = cell("timestamp");
    row.run_id = cell("run_id");
    row.model = cell("model");
    row.target = cell("target");
    row.device = cell("device");
    row.strategy = cell("strategy");
    row.status = cell("status");
    row.correct = cell("correct") == "1";
    row.latency_us = parse_double(cell("latency_us"));
    row.latency_kind = cell("latency_kind");
    row.spread_us = parse_double(cell("spread_us")).value_or(0.0);
    row.floor_us = parse_double(cell("floor_us")).value_or(0.0);
    row.pct_of_floor = parse_double(cell("pct_of_floor"));
    row.speedup_vs_default = parse_double(cell("speedup_vs_default"));
    row.best_us = parse_double(cell("best_us"));
    row.schedule_id = cell("schedule_id");
    row.parent_id = cell("parent_id");
    row.changed_knobs = cell("changed_knobs");
    row.complexity = parse_int(cell("complexity")).value_or(0);
    row.description = cell("description");
    row.timed_on = cell("timed_on");
    out.rows.push_back(std::move(row));
  }
  for (int number : lines.torn_line_numbers)
    out.problems.push_back(path + ":" + std::to_string(number) +
                           ": truncated last line, a write cut short (skipped)");
  return out;
}

}  // namespace megasched::flywheel
