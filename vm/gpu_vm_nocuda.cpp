// Without the CUDA toolkit there is no GPU VM: every entry point reports so (see vm/gpu_vm.h).
#include "vm/gpu_vm.h"

namespace megasched::vm {

namespace {
constexpr const char* kNoCuda = "this megasched was built without the CUDA toolkit";
}

struct GpuVm::Impl {};
GpuVm::~GpuVm() = default;

std::unique_ptr<GpuVm> GpuVm::create(const schedule::Program&, const schedule::Weights&,
                                     const GpuVmOptions&, std::string* error, bool* rejected) {
  if (rejected) *rejected = false;
  *error = kNoCuda;
  return nullptr;
}

std::unique_ptr<GpuVm> GpuVm::create_sharing_kv(const schedule::Program&, const schedule::Weights&,
                                                const GpuVmOptions&, GpuVm&, std::string* error,
                                                bool* rejected) {
  if (rejected) *rejected = false;
  *error = kNoCuda;
  return nullptr;
}

StepOutput GpuVm::step(int32_t, int32_t) {
  return {"crash", kNoCuda, {}, -1, nlohmann::json::array()};
}
StepOutput GpuVm::step_argmax(int32_t token, int32_t position) { return step(token, position); }
ProfileOutput GpuVm::profile_step(int32_t token, int32_t position) {
  ProfileOutput out;
  out.step = step(token, position);
  return out;
}
bool GpuVm::load_kv(const KvSnapshot&, std::string* error) {
  *error = kNoCuda;
  return false;
}
double GpuVm::time_step_us(int32_t, int32_t, bool) { return 0.0; }
bool GpuVm::hung() { return false; }

}  // namespace megasched::vm
