// Order statistics of timing samples: the median is the reported latency, p10/p90 give the spread
// the keep rule compares against.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

namespace megasched::eval {

struct SampleStats {
  size_t n = 0;
  double median = 0.0;
  double p10 = 0.0;
  double p90 = 0.0;
  double mean = 0.0;
  double min = 0.0;
  double max = 0.0;
};

/// Linear-interpolated percentiles; all zero for an empty input.
SampleStats sample_stats(std::vector<double> samples);

/// Wall milliseconds since t0 (a trial's phase in Verdict::breakdown_ms).
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace megasched::eval
