// The synthetic landscape the search tests and CI's `search-bench` run replay
// (tests/data/synthetic.landscape.jsonl is this generator's output; a test keeps them equal):
// toy on h100, every fitting combination of four knobs with the others at their defaults, the
// latency separable, 100 us times one factor per knob, so the optimum is known (gemv rows 16,
// 3 blocks per SM, 8-byte vectors, unroll 4: exactly 100 us). Each row has a repeat sigma of 0.3%
// over 10 repeats, as a measured landscape would.
#pragma once

#include <map>
#include <string>

#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/search.h"
#include "search/landscape.h"
#include "tests/h100_target.h"

namespace megasched::search::testing_support {

inline const std::map<std::string, std::map<int, double>>& synthetic_factors() {
  static const std::map<std::string, std::map<int, double>> factors = {
      {"tiling.gemv_rows_per_task",
       {{0, 1.30}, {8, 1.15}, {16, 1.00}, {32, 1.06}, {64, 1.12}, {128, 1.20}, {256, 1.30}}},
      {"launch.blocks_per_sm", {{1, 1.18}, {2, 1.08}, {3, 1.00}, {4, 1.05}}},
      {"kernel.vector_bytes", {{4, 1.14}, {8, 1.00}, {16, 1.06}}},
      {"kernel.unroll", {{1, 1.10}, {2, 1.05}, {4, 1.00}, {8, 1.07}}}};
  return factors;
}

inline Landscape synthetic_landscape() {
  Landscape land;
  LandscapeHeader& h = land.header;
  h.model = "toy";
  h.target = "h100";
  h.device = "gpu";
  h.latency_kind = "measured-gpu";
  h.build = "synthetic";
  h.versions = {{"build", "synthetic"}};
  h.note = "separable over four knobs, optimum 100 us (tests/search/synthetic_landscape.h)";
  const schedule::ModelShape shape = *schedule::find_preset("toy");
  const schedule::GpuTarget target = ::megasched::testing_support::h100_target();
  const auto& f = synthetic_factors();
  const auto& rows = f.at("tiling.gemv_rows_per_task");
  const auto& bps = f.at("launch.blocks_per_sm");
  const auto& vec = f.at("kernel.vector_bytes");
  const auto& unroll = f.at("kernel.unroll");
  std::string ignored;
  for (const auto& [r, fr] : rows)
    for (const auto& [b, fb] : bps)
      for (const auto& [v, fv] : vec)
        for (const auto& [u, fu] : unroll) {
          schedule::ScheduleConfig c;
          schedule::set_knob(&c, "tiling.gemv_rows_per_task", r, &ignored);
          schedule::set_knob(&c, "launch.blocks_per_sm", b, &ignored);
          schedule::set_knob(&c, "kernel.vector_bytes", v, &ignored);
          schedule::set_knob(&c, "kernel.unroll", u, &ignored);
          if (!schedule::config_fits(c, shape, target)) continue;
          LandscapeRow row;
          row.config = c;
          row.id = schedule::hash_hex(schedule::canonical_string(c) + "|synthetic");
          row.status = "ok";
          row.latency_us = 100.0 * fr * fb * fv * fu;
          row.sigma_us = 0.003 * *row.latency_us;
          row.repeats = 10;
          row.origin = "sample";
          land.by_config[schedule::canonical_string(c)] = land.rows.size();
          land.rows.push_back(row);
        }
  return land;
}

/// The file form: the header line and one line per row.
inline std::string synthetic_landscape_text() {
  const Landscape land = synthetic_landscape();
  std::string text = to_json(land.header).dump() + "\n";
  for (const LandscapeRow& r : land.rows) text += to_json(r).dump() + "\n";
  return text;
}

}  // namespace megasched::search::testing_support
