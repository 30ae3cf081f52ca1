// Without the CUDA toolkit there is no GPU reference (see eval/gpu_reference.h).
#include "eval/gpu_reference.h"

namespace megasched::eval {

std::unique_ptr<ReferenceForward> make_gpu_reference(const schedule::Weights&, std::string* error) {
  *error = "this megasched was built without the CUDA toolkit (no GPU reference)";
  return nullptr;
}

}  // namespace megasched::eval
