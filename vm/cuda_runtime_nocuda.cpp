// Without the CUDA toolkit there is no device (see vm/cuda_runtime.h).
#include "vm/cuda_runtime.h"

namespace megasched::vm {

int device_count(std::string* why) {
  if (why) *why = "this megasched was built without the CUDA toolkit";
  return 0;
}
std::optional<DeviceInfo> device_info(std::string* why) {
  if (why) *why = "this megasched was built without the CUDA toolkit";
  return std::nullopt;
}
void flush_l2() {}
uint64_t device_weights(const schedule::Weights&) { return 0; }
void* shared_stream() { return nullptr; }
std::vector<void*> load_functions(const std::vector<char>&, const std::string&,
                                  const std::vector<std::string>&) {
  return {};
}

}  // namespace megasched::vm
