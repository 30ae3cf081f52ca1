// What the gate benchmarks share (bench/gate_bench.cpp, bench/mlp_bench.cpp): random bf16 data, the
// error against an fp64 reference, the bandwidth their figures are relative to and the live sm_90
// target they need. Header-only: each bench is one translation unit.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "eval/device.h"
#include "schedule/config.h"

namespace megasched::gate_common {

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

inline uint64_t splitmix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Uniform in [-1, 1).
inline float uniform(uint64_t* s) {
  return static_cast<float>(splitmix(s) >> 40) * 0x1p-23f - 1.0f;
}

inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float bf16_value(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// max|y - ref| / max|ref| (infinite when y holds a NaN: a poisoned output, or a wrong result).
inline double relative_error(const std::vector<float>& y, const std::vector<double>& ref) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) return INFINITY;
    err = std::max(err, std::fabs(double(y[i]) - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return scale > 0 ? err / scale : err;
}

/// The streaming-read bandwidth the figures are relative to: `doctor --measure`'s stored figure,
/// else measured once here (`who` names the bench in the message when the probe fails).
inline double measured_bw_gbs(const schedule::GpuTarget& t, const char* who) {
  static double bw = 0.0;
  if (bw > 0.0) return bw;
  bw = t.measured_bw_gbs;
  if (bw <= 0.0) {
    std::string err;
    const auto m =
        eval::measure_stream_bandwidth(eval::default_probe_bytes(t.l2_bytes), 10, nullptr, &err);
    bw = m ? *m : t.floor_bw_gbs();
    if (!m)
      std::fprintf(stderr, "%s: bandwidth probe failed (%s); using %.0f GB/s\n", who, err.c_str(),
                   bw);
  }
  return bw;
}

/// The live GPU's target when it is an sm_90 part; nullopt after marking `state` skipped
/// otherwise (`needs`: what of sm_90 the kernel uses, for the message).
inline std::optional<schedule::GpuTarget> live_sm90_target_or_skip(benchmark::State& state,
                                                                   const std::string& needs) {
  std::string why;
  if (!eval::gpu_available(&why)) {
    state.SkipWithError(("no GPU: " + why).c_str());
    return std::nullopt;
  }
  auto t = eval::live_target(&why);
  if (!t) {
    state.SkipWithError(("no GPU target: " + why).c_str());
    return std::nullopt;
  }
  if (t->sm_arch != 90) {
    state.SkipWithError(
        ("the kernel needs sm_90 (" + needs + "); this GPU is sm_" + std::to_string(t->sm_arch))
            .c_str());
    return std::nullopt;
  }
  return t;
}

}  // namespace megasched::gate_common
