// Without the CUDA toolkit there is no live device: every entry point says so (see
// eval/device.h).
#include "eval/device.h"

namespace megasched::eval {

namespace {
constexpr const char* kNoCuda = "this megasched was built without the CUDA toolkit";
}

bool gpu_available(std::string* why) {
  if (why) *why = kNoCuda;
  return false;
}

int gpu_count(std::string* why) {
  if (why) *why = kNoCuda;
  return 0;
}

std::optional<schedule::GpuTarget> live_target(std::string* error) {
  if (error) *error = std::string("--gpu auto: ") + kNoCuda;
  return std::nullopt;
}

std::optional<double> measure_stream_bandwidth(int64_t, int, std::vector<double>*,
                                               std::string* error) {
  *error = kNoCuda;
  return std::nullopt;
}

}  // namespace megasched::eval
