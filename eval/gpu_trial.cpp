// The walk-from-0 form of run_gpu_trial as one window (see eval/gpu_trial.h).
#include <algorithm>

#include "eval/gpu_trial.h"

namespace megasched::eval {

GpuTrialResult run_gpu_trial(const schedule::Program& program, const schedule::Weights& weights,
                             const std::vector<int32_t>& tokens,
                             const std::vector<std::vector<float>>& refs,
                             const std::vector<int>& positions, const GpuTrialOptions& options) {
  if (positions.empty() || refs.size() != positions.size() || tokens.empty()) {
    GpuTrialResult r;
    r.status = "crash";
    r.message = "run_gpu_trial needs one reference per checked position and at least one token";
    return r;
  }
  const int last =
      std::max(*std::max_element(positions.begin(), positions.end()), options.timed_position);
  ReferenceWindow w;
  w.start = 0;
  w.kv = vm::KvSnapshot::zeros(weights.shape, 0);
  w.logits.resize(static_cast<size_t>(last) + 1);
  for (size_t i = 0; i < positions.size(); ++i)
    w.logits[static_cast<size_t>(positions[i])] = refs[i];
  // Positions past the given tokens repeat them (as the kernel fill always did).
  std::vector<int32_t> fed(static_cast<size_t>(last) + 1);
  for (size_t p = 0; p < fed.size(); ++p) fed[p] = tokens[p % tokens.size()];
  GpuTrialOptions o = options;
  if (o.timed_position < 0)
    o.timed_position = *std::max_element(positions.begin(), positions.end());
  return run_gpu_trial(program, weights, fed, std::vector<ReferenceWindow>{std::move(w)}, o);
}

}  // namespace megasched::eval
