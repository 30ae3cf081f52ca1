// NVRTC's log of one embedded device source built on its own, for the tests of the bench-only
// kernels (vm/device/gate.cuh, vm/device/mlp_gate.cuh), which vm::build_kernel does not build.
#pragma once

#include <string>
#include <vector>

#include "vm/embedded_sources.h"
#include "vm/nvrtc_build.h"
#if MS_HAVE_CUDA
#include <nvrtc.h>
#endif

namespace megasched::vm {

/// Whether NVRTC is here to build with.
inline bool have_nvrtc() {
#if MS_HAVE_CUDA
  return nvrtc_version() != "none" && nvrtc_version() != "unknown";
#else
  return false;
#endif
}

/// The log of `path` (an embedded source, e.g. "vm/device/gate.cuh") built with `opts`; *ok is
/// whether it compiled ("built without the CUDA toolkit" and false without NVRTC).
inline std::string nvrtc_log(const std::string& path, const std::vector<std::string>& opts,
                             bool* ok) {
  *ok = false;
#if MS_HAVE_CUDA
  std::vector<const char*> names, texts;
  for (const EmbeddedSource& s : embedded_sources()) {
    names.push_back(s.path);
    texts.push_back(s.text);
  }
  const std::string src = "#include \"" + path + "\"\n";
  nvrtcProgram prog = nullptr;
  if (nvrtcCreateProgram(&prog, src.c_str(), "bench_kernel.cu", static_cast<int>(names.size()),
                         texts.data(), names.data()) != NVRTC_SUCCESS)
    return "nvrtcCreateProgram failed";
  std::vector<const char*> copts;
  for (const std::string& o : opts) copts.push_back(o.c_str());
  *ok = nvrtcCompileProgram(prog, static_cast<int>(copts.size()), copts.data()) == NVRTC_SUCCESS;
  size_t size = 0;
  nvrtcGetProgramLogSize(prog, &size);
  std::string log(size, '\0');
  if (size > 0) nvrtcGetProgramLog(prog, log.data());
  nvrtcDestroyProgram(&prog);
  return log;
#else
  (void)path, (void)opts;
  return "built without the CUDA toolkit";
#endif
}

}  // namespace megasched::vm
