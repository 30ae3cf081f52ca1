// The one check macro for CUDA driver, runtime, NVRTC and cuBLAS calls: on failure it throws
// GpuError naming the call, the library's error string and the file and line. Host code only
// (*_cuda.cpp files); run_gpu_trial turns a GpuError into a `crash` verdict.
#pragma once

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <stdexcept>
#include <string>

namespace megasched::vm {

/// A failed driver/library call (a sticky CUDA error leaves the context unusable: the worker that
/// sees one is restarted by the loop).
class GpuError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline const char* status_string(CUresult r) {
  const char* s = nullptr;
  cuGetErrorString(r, &s);
  return s ? s : "unknown CUresult";
}
inline const char* status_string(cudaError_t r) { return cudaGetErrorString(r); }
inline const char* status_string(nvrtcResult r) { return nvrtcGetErrorString(r); }
inline const char* status_string(cublasStatus_t r) { return cublasGetStatusString(r); }
inline bool status_ok(CUresult r) { return r == CUDA_SUCCESS; }
inline bool status_ok(cudaError_t r) { return r == cudaSuccess; }
inline bool status_ok(nvrtcResult r) { return r == NVRTC_SUCCESS; }
inline bool status_ok(cublasStatus_t r) { return r == CUBLAS_STATUS_SUCCESS; }

template <typename Status>
void check_status(Status status, const char* call, const char* file, int line) {
  if (!status_ok(status)) {
    throw GpuError(std::string(call) + " failed: " + status_string(status) + " (" + file + ":" +
                   std::to_string(line) + ")");
  }
}

}  // namespace megasched::vm

#define MS_CHECK_CUDA(call) ::megasched::vm::check_status((call), #call, __FILE__, __LINE__)
