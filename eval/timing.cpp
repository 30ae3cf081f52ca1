#include "eval/timing.h"

#include <algorithm>
#include <numeric>

namespace megasched::eval {

SampleStats sample_stats(std::vector<double> samples) {
  SampleStats s;
  s.n = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  auto pct = [&](double q) {
    const double pos = q * static_cast<double>(samples.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, samples.size() - 1);
    return samples[lo] + (samples[hi] - samples[lo]) * (pos - static_cast<double>(lo));
  };
  s.median = pct(0.5);
  s.p10 = pct(0.1);
  s.p90 = pct(0.9);
  s.mean =
      std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  s.min = samples.front();
  s.max = samples.back();
  return s;
}

}  // namespace megasched::eval
