// Without the CUDA toolkit no GPU trial can run: every entry point says so (see eval/gpu_trial.h).
#include "eval/gpu_trial.h"

namespace megasched::eval {

namespace {
constexpr const char* kNoCuda = "this megasched was built without the CUDA toolkit";
}

struct BaselineCache {};

std::shared_ptr<BaselineCache> make_baseline_cache() { return std::make_shared<BaselineCache>(); }

GpuTrialResult run_gpu_trial(const schedule::Program&, const schedule::Weights&,
                             const std::vector<int32_t>&, const std::vector<ReferenceWindow>&,
                             const GpuTrialOptions&) {
  GpuTrialResult r;
  r.status = "crash";
  r.message = kNoCuda;
  return r;
}

}  // namespace megasched::eval
