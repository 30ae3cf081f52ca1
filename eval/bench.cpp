// The comparison of `megasched bench` (see eval/bench.h): measuring on the GPU, then rendering.
#include "eval/bench.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "eval/baselines/baseline.h"
#include "eval/device.h"
#include "eval/evaluate.h"
#include "eval/gpu_trial.h"
#include "eval/prepare.h"
#include "eval/roofline.h"
#include "eval/timing.h"
#include "eval/trial_reference.h"
#include "schedule/format.h"

namespace megasched::eval {

using json = nlohmann::json;
using schedule::fmt;

namespace {

std::optional<double> number_at(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

json optional_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

size_t position_index(const BenchResult& r, int position) {
  const auto it = std::find(r.positions.begin(), r.positions.end(), position);
  return static_cast<size_t>(it - r.positions.begin());
}

/// The row's share of the bandwidth: the floor over its median, in percent.
std::optional<double> pct_of_bandwidth(const BenchResult& r, const BenchRow& row) {
  const size_t i = position_index(r, row.position);
  if (!row.median_us || *row.median_us <= 0 || i >= r.floor_us.size()) return std::nullopt;
  return 100.0 * r.floor_us[i] / *row.median_us;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::vector<std::string> bench_baseline_names(const BenchResult& result) {
  std::vector<std::string> names;
  for (const BenchRow& row : result.rows)
    if (row.kind == "baseline" && std::find(names.begin(), names.end(), row.name) == names.end())
      names.push_back(row.name);
  return names;
}

std::optional<double> bench_baseline_us(const BenchResult& result, const std::string& name,
                                        int position) {
  for (const BenchRow& row : result.rows)
    if (row.kind == "baseline" && row.name == name && row.position == position && row.median_us)
      return row.median_us;
  return std::nullopt;
}

json bench_to_json(const BenchResult& r) {
  const std::vector<std::string> baselines = bench_baseline_names(r);
  json rows = json::array();
  for (const BenchRow& row : r.rows) {
    json j = {{"name", row.name},
              {"kind", row.kind},
              {"position", row.position},
              {"status", row.status},
              {"median_us", optional_json(row.median_us)},
              {"p10_us", optional_json(row.p10_us)},
              {"p90_us", optional_json(row.p90_us)},
              {"pct_of_bandwidth", optional_json(pct_of_bandwidth(r, row))}};
    if (!row.message.empty()) j["message"] = row.message;
    for (const std::string& b : baselines) {
      const auto base = bench_baseline_us(r, b, row.position);
      j["x_vs_" + b] = base && row.median_us ? json(*base / *row.median_us) : json(nullptr);
    }
    if (!row.detail.empty()) j["detail"] = row.detail;
    rows.push_back(j);
  }
  return {{"model", r.model},
          {"device", r.device},
          {"bandwidth_gbs", r.bandwidth_gbs},
          {"bandwidth", r.measured_bandwidth ? "measured" : "datasheet"},
          {"positions", r.positions},
          {"floor_us", r.floor_us},
          {"baselines", baselines},
          {"rows", rows}};
}

std::optional<BenchResult> bench_from_json(const json& doc, std::string* error) {
  const auto fail = [&](const std::string& why) -> std::optional<BenchResult> {
    *error = "not a bench.json of megasched bench: " + why;
    return std::nullopt;
  };
  if (!doc.is_object()) return fail("the document is not a JSON object");
  for (const char* key : {"model", "device", "bandwidth_gbs", "positions", "rows"})
    if (!doc.contains(key)) return fail(std::string("no \"") + key + "\" field");
  BenchResult r;
  try {
    r.model = doc.at("model").get<std::string>();
    r.device = doc.at("device").get<std::string>();
    r.bandwidth_gbs = doc.at("bandwidth_gbs").get<double>();
    r.measured_bandwidth = doc.value("bandwidth", "") == "measured";
    r.positions = doc.at("positions").get<std::vector<int>>();
    r.floor_us = doc.value("floor_us", std::vector<double>{});
    const auto optional_us = [](const json& row, const char* key) -> std::optional<double> {
      if (!row.contains(key) || row.at(key).is_null()) return std::nullopt;
      return row.at(key).get<double>();
    };
    for (const json& row : doc.at("rows")) {
      BenchRow b;
      b.name = row.at("name").get<std::string>();
      b.kind = row.at("kind").get<std::string>();
      b.position = row.at("position").get<int>();
      b.status = row.value("status", "ok");
      b.message = row.value("message", "");
      b.median_us = optional_us(row, "median_us");
      b.p10_us = optional_us(row, "p10_us");
      b.p90_us = optional_us(row, "p90_us");
      b.detail = row.value("detail", json::object());
      r.rows.push_back(std::move(b));
    }
  } catch (const json::exception& e) {
    return fail(std::string("a field has the wrong type (") + e.what() + ")");
  }
  return r;
}

std::string bench_table(const BenchResult& r) {
  const std::vector<std::string> baselines = bench_baseline_names(r);
  std::ostringstream md;
  md << "model " << r.model << " on " << r.device << "; bandwidth " << fmt("%.0f", r.bandwidth_gbs)
     << " GB/s (" << (r.measured_bandwidth ? "measured" : "datasheet, not measured")
     << "); the floor row is computed, every other row measured (peers by their own scripts)\n\n";
  md << "| position | row | kind | median us | p10 us | p90 us | % of bandwidth |";
  for (const std::string& b : baselines) md << " x vs " << b << " |";
  md << "\n|---|---|---|---|---|---|---|";
  for (size_t i = 0; i < baselines.size(); ++i) md << "---|";
  md << "\n";
  auto num = [](const std::optional<double>& v, const char* f) {
    return v ? fmt(f, *v) : std::string("-");
  };
  for (int position : r.positions) {
    for (const BenchRow& row : r.rows) {
      if (row.position != position) continue;
      md << "| " << position << " | " << row.name << " | " << row.kind << " | "
         << (row.median_us ? fmt("%.1f", *row.median_us) : row.status) << " | "
         << num(row.p10_us, "%.1f") << " | " << num(row.p90_us, "%.1f") << " | "
         << num(pct_of_bandwidth(r, row), "%.1f") << " |";
      for (const std::string& b : baselines) {
        const auto base = bench_baseline_us(r, b, position);
        md << " " << (base && row.median_us ? fmt("%.2f", *base / *row.median_us) : "-") << " |";
      }
      md << "\n";
    }
  }
  return md.str();
}

std::string bench_svg(const BenchResult& r) {
  constexpr int kBar = 18, kGap = 4, kGroupGap = 24, kLabel = 260, kPlot = 520, kTop = 40;
  double max_us = 0.0;
  int bars = 0;
  for (const BenchRow& row : r.rows) {
    if (std::find(r.positions.begin(), r.positions.end(), row.position) == r.positions.end())
      continue;
    ++bars;
    if (row.median_us) max_us = std::max(max_us, *row.median_us);
  }
  if (max_us <= 0) max_us = 1.0;
  const int height =
      kTop + bars * (kBar + kGap) + static_cast<int>(r.positions.size()) * kGroupGap + 20;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kLabel + kPlot + 120
    << "\" height=\"" << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">"
    << "<path d=\"M0,6 L6,0\" stroke=\"#666\"/></pattern></defs>\n"
    << "<text x=\"8\" y=\"20\" font-size=\"14\">" << xml_escape(r.model) << " decode step on "
    << xml_escape(r.device) << ", median us (floor computed, hatched)</text>\n";
  int y = kTop;
  for (int position : r.positions) {
    s << "<text x=\"8\" y=\"" << y + 12 << "\" font-weight=\"bold\">position " << position
      << "</text>\n";
    y += kGroupGap - 6;
    for (const BenchRow& row : r.rows) {
      if (row.position != position) continue;
      const char* fill = row.kind == "floor"      ? "url(#hatch)"
                         : row.kind == "baseline" ? "#d95f02"
                         : row.kind == "peer"     ? "#7570b3"
                                                  : "#1b9e77";
      const double w = row.median_us ? kPlot * *row.median_us / max_us : 0.0;
      s << "<text x=\"" << kLabel - 6 << "\" y=\"" << y + kBar - 5 << "\" text-anchor=\"end\">"
        << xml_escape(row.name) << "</text>\n"
        << "<rect x=\"" << kLabel << "\" y=\"" << y << "\" width=\"" << fmt("%.1f", w)
        << "\" height=\"" << kBar << "\" fill=\"" << fill << "\" stroke=\"#333\"/>\n"
        << "<text x=\"" << kLabel + static_cast<int>(w) + 6 << "\" y=\"" << y + kBar - 5 << "\">"
        << (row.median_us ? fmt("%.1f", *row.median_us) : xml_escape(row.status)) << "</text>\n";
      y += kBar + kGap;
    }
    y += 6;
  }
  s << "</svg>\n";
  return s.str();
}

std::optional<std::vector<BenchRow>> peer_rows(const json& peers, std::string* error) {
  std::vector<BenchRow> out;
  if (peers.is_array()) {
    for (const json& doc : peers) {
      auto rows = peer_rows(doc, error);
      if (!rows) return std::nullopt;
      out.insert(out.end(), rows->begin(), rows->end());
    }
    return out;
  }
  if (!peers.is_object() || !peers.contains("rows") || !peers["rows"].is_array()) {
    *error = "a peers document is an object with a \"rows\" array (bench/peers/torch_peer.py)";
    return std::nullopt;
  }
  const std::string peer = peers.value("peer", "peer");
  for (const json& row : peers["rows"]) {
    if (!row.is_object() || !row.contains("name") || !row["name"].is_string() ||
        !row.contains("position") || !row["position"].is_number_integer()) {
      *error = "each peer row needs a string \"name\" and an integer \"position\": " +
               row.dump().substr(0, 120);
      return std::nullopt;
    }
    BenchRow r;
    r.name = peer + ": " + row["name"].get<std::string>();
    r.kind = "peer";
    r.position = row["position"].get<int>();
    r.median_us = number_at(row, "median_us");
    r.p10_us = number_at(row, "p10_us");
    r.p90_us = number_at(row, "p90_us");
    r.status = row.value("status", r.median_us ? "ok" : "no_latency");
    if (row.contains("message") && row["message"].is_string()) r.message = row["message"];
    r.detail = row;
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

/// The reference windows a config row at `position` is checked on: the one at position 0 and the
/// one holding `position` (once when they are the same), ascending.
std::vector<ReferenceWindow> row_windows(const TrialReference& reference, int position) {
  std::vector<ReferenceWindow> out;
  const ReferenceWindow* first = reference.window_at(0);
  const ReferenceWindow* at = reference.window_at(position);
  if (first) out.push_back(*first);
  if (at && at != first) out.push_back(*at);
  return out;
}

BenchRow config_row(const schedule::Weights& weights, const schedule::GpuTarget& target,
                    const TrialReference& reference, const std::vector<ReferenceWindow>& windows,
                    const std::string& label, const schedule::ScheduleConfig& config, int position,
                    const BenchOptions& options, std::vector<double>* samples) {
  BenchRow row;
  row.name = label;
  row.kind = "config";
  row.position = position;
  const PreparedProgram prepared = prepare_program(weights.shape, target, config);
  if (!prepared.program || !prepared.report.ok()) {
    row.status = prepared.program ? "rejected" : "lower_error";
    row.message = prepared.program ? schedule::to_json(prepared.report).dump().substr(0, 300)
                                   : prepared.error;
    return row;
  }
  GpuTrialOptions o;
  o.iterations = options.iterations;
  o.warmup = options.warmup;
  o.timed_position = position;
  o.baselines.clear();  // the baselines have rows of their own
  const GpuTrialResult t =
      run_gpu_trial(*prepared.program, weights, reference.tokens(), windows, o);
  json checked = json::array();
  for (const json& c : t.checks) checked.push_back(c.value("position", -1));
  row.detail = {{"max_abs_err", t.max_abs_err},
                {"rel_err", t.rel_err},
                {"checked_positions", checked},
                {"kernel", t.kernel}};
  if (t.status != "ok") {
    row.status = t.status;
    row.message = t.message;
    return row;
  }
  const SampleStats s = sample_stats(t.samples_us);
  row.median_us = s.median;
  row.p10_us = s.p10;
  row.p90_us = s.p90;
  *samples = t.samples_us;
  return row;
}

BenchRow baseline_row(const schedule::Weights& weights, const schedule::GpuTarget& target,
                      const std::string& kind, int position, const BenchOptions& options,
                      std::vector<double>* samples) {
  BenchRow row;
  row.name = kind;
  row.kind = "baseline";
  row.position = position;
  BaselineTiming timing;
  timing.kind = kind;
  timing.position = position;
  timing.warmup = options.warmup;
  timing.iterations = options.iterations;
  timing.seed = options.seed;
  std::string error;
  const auto out = time_baseline(weights, target, timing, &error, samples);
  if (!out) {
    row.status = "error";
    row.message = error;
    return row;
  }
  row.detail = {{"check_position_0", (*out)["check_position_0"]}, {"info", (*out)["info"]}};
  if (!(*out)["check_position_0"].value("pass", false)) {
    row.status = "incorrect";
    row.message = "its logits at position 0 differ from the eager reference";
    return row;
  }
  row.median_us = number_at(*out, "latency_us");
  row.p10_us = number_at(*out, "latency_p10_us");
  row.p90_us = number_at(*out, "latency_p90_us");
  if (!row.median_us) {
    row.status = "below_floor";
    row.message = out->value("note", "");
  }
  return row;
}

/// Floors the measured rows: a median below the floor is a timing or accounting error.
void withhold_below_floor(BenchRow* row, double floor_us) {
  if (!row->median_us || *row->median_us >= floor_us) return;
  row->status = "below_floor";
  row->message = "median " + fmt("%.1f", *row->median_us) + " us below the floor: withheld";
  row->median_us.reset();
}

}  // namespace

BenchRow pool_rounds(const std::vector<BenchRow>& rounds,
                     const std::vector<std::vector<double>>& samples) {
  for (const BenchRow& row : rounds)
    if (!row.median_us) return row;  // a failed round says more than the others' timings
  BenchRow pooled = rounds.front();
  if (rounds.size() < 2) return pooled;
  std::vector<double> all;
  json medians = json::array();
  for (size_t i = 0; i < rounds.size(); ++i) {
    all.insert(all.end(), samples[i].begin(), samples[i].end());
    medians.push_back(*rounds[i].median_us);
  }
  const SampleStats s = sample_stats(all);
  pooled.median_us = s.median;
  pooled.p10_us = s.p10;
  pooled.p90_us = s.p90;
  pooled.detail["round_medians_us"] = medians;
  return pooled;
}

std::vector<int> bench_check_positions(const std::vector<int>& positions) {
  std::vector<int> out = positions;
  out.push_back(0);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<BenchResult> run_bench(const schedule::Weights& weights,
                                     const schedule::GpuTarget& target, const BenchOptions& options,
                                     std::string* error,
                                     const std::function<void(const std::string&)>& progress) {
  if (!gpu_available(error)) return std::nullopt;
  BenchResult r;
  r.model = weights.shape.name;
  r.device = target.name;
  r.bandwidth_gbs = target.floor_bw_gbs();
  r.measured_bandwidth = target.measured_bw_gbs > 0;
  r.positions = options.positions;
  // The reference windows (the KV cache before each position and the logits of the steps from
  // it), from the disk cache or one pass of the GPU eager forward, as a loop's trials are checked.
  const std::vector<int> checked = bench_check_positions(options.positions);
  const int end = std::min(checked.back() + kBenchCheckSteps, weights.shape.max_seq);
  TrialReference reference(weights, trial_tokens(weights.shape.vocab, end, options.seed), checked);
  EvaluatorOptions reference_options;
  reference_options.device = "gpu";
  reference_options.reference = "auto";
  reference_options.check_steps = kBenchCheckSteps;
  reference_options.seed = options.seed;
  if (progress) reference_options.progress = progress;
  if (!reference.load(reference_options, error)) return std::nullopt;
  const std::vector<std::string> kinds =
      options.baselines.empty() ? baseline_kinds() : options.baselines;
  auto report = [&](const BenchRow& row) {
    if (progress)
      progress("position " + std::to_string(row.position) + " " + row.name + ": " +
               (row.median_us ? fmt("%.1f us", *row.median_us) : row.status + " " + row.message));
  };
  for (int position : options.positions) {
    const Floor floor = floor_for(weights.shape, target, position);
    r.floor_us.push_back(floor.floor_us);
    BenchRow f;
    f.name = "floor";
    f.kind = "floor";
    f.position = position;
    f.median_us = floor.floor_us;
    f.detail = {{"bytes_min", floor.bytes_min}, {"floor_datasheet_us", floor.floor_datasheet_us}};
    r.rows.push_back(f);
    // Every config row at this position is checked on the same windows (copied once: a window
    // holds the reference KV cache up to its start).
    const std::vector<ReferenceWindow> windows = row_windows(reference, position);
    // The rows at this position, each measured once a round, in turn.
    struct Measured {
      std::function<BenchRow(std::vector<double>*)> measure;
      std::vector<BenchRow> rounds;
      std::vector<std::vector<double>> samples;
    };
    std::vector<Measured> measured;
    for (const auto& [label, config] : options.configs)
      measured.push_back({[&, label = label, config = config](std::vector<double>* samples) {
                            BenchRow row = config_row(weights, target, reference, windows, label,
                                                      config, position, options, samples);
                            // The config itself: `bench --from-bench` fits a plan to it later.
                            row.detail["config"] = schedule::to_json(config);
                            return row;
                          },
                          {},
                          {}});
    for (const auto& [label, plan] : options.plans) {
      const schedule::PlanBucket& b = plan.buckets[schedule::plan_bucket_index(plan, position)];
      measured.push_back({[&, label = label, b = b](std::vector<double>* samples) {
                            BenchRow row = config_row(weights, target, reference, windows, label,
                                                      b.config, position, options, samples);
                            row.detail["bucket"] = schedule::bucket_label(b);
                            row.detail["config"] = schedule::to_json(b.config);
                            return row;
                          },
                          {},
                          {}});
    }
    for (const std::string& kind : kinds)
      measured.push_back({[&, kind = kind](std::vector<double>* samples) {
                            return baseline_row(weights, target, kind, position, options, samples);
                          },
                          {},
                          {}});
    // One round: each row is reported as it is measured. Several: each round's row as it is
    // measured, then the pooled rows.
    const int rounds = std::max(1, options.rounds);
    auto finish = [&](Measured& m) {
      r.rows.push_back(pool_rounds(m.rounds, m.samples));
      if (r.rows.back().kind == "config") withhold_below_floor(&r.rows.back(), floor.floor_us);
      report(r.rows.back());
    };
    for (int round = 0; round < rounds; ++round)
      for (Measured& m : measured) {
        if (!m.rounds.empty() && !m.rounds.back().median_us) continue;  // failed: measured enough
        std::vector<double> samples;
        m.rounds.push_back(m.measure(&samples));
        m.samples.push_back(std::move(samples));
        if (rounds == 1) {
          finish(m);
        } else if (progress) {
          const BenchRow& row = m.rounds.back();
          progress(
              "position " + std::to_string(position) + " round " + std::to_string(round + 1) + "/" +
              std::to_string(rounds) + " " + row.name + ": " +
              (row.median_us ? fmt("%.1f us", *row.median_us) : row.status + " " + row.message));
        }
      }
    if (rounds > 1)
      for (Measured& m : measured) finish(m);
  }
  for (const BenchRow& peer : options.peers) r.rows.push_back(peer);
  for (int position : options.positions)
    if (std::none_of(options.peers.begin(), options.peers.end(),
                     [&](const BenchRow& p) { return p.position == position; }) &&
        !options.peers.empty() && progress)
      progress("the peers have no row at position " + std::to_string(position));
  return r;
}

}  // namespace megasched::eval
