// Without the CUDA toolkit no GPU trial can run: every entry point says so (see eval/gpu_trial.h).
#include "eval/gpu_trial.h"

#include <cstdlib>
#include <filesystem>

namespace megasched::eval {

namespace {
constexpr const char* kNoCuda = "this megasched was built without the CUDA toolkit";
}

GpuTrialResult run_gpu_trial(const schedule::Program&, const schedule::Weights&,
                             const std::vector<int32_t>&, const std::vector<std::vector<float>>&,
                             const std::vector<int>&, const GpuTrialOptions&) {
  GpuTrialResult r;
  r.status = "crash";
  r.message = kNoCuda;
  return r;
}

bool gpu_available(std::string* why) {
  if (why) *why = kNoCuda;
  return false;
}

std::optional<schedule::GpuTarget> live_target(std::string* error) {
  if (error) *error = std::string("--gpu auto: ") + kNoCuda;
  return std::nullopt;
}

std::string device_json_path() {
  const char* ws = std::getenv("MEGASCHED_WORKSPACE");
  return (std::filesystem::path(ws && *ws ? ws : "workspace") / "device.json").string();
}

std::optional<double> measure_stream_bandwidth(int64_t, int, std::vector<double>*,
                                               std::string* error) {
  *error = kNoCuda;
  return std::nullopt;
}

}  // namespace megasched::eval
