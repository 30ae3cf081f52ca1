// Without the CUDA toolkit there is no NVRTC: every build reports so (see vm/nvrtc_build.h).
#include "vm/nvrtc_build.h"

namespace megasched::vm {

BuildResult build_cubin(const BuildRequest& request) {
  BuildResult result;
  result.error = "cannot build " + request.entry +
                 ": this megasched was built without the CUDA toolkit (no NVRTC)";
  return result;
}

std::string nvrtc_version() { return "none"; }

bool nvrtc_available() { return false; }

}  // namespace megasched::vm
