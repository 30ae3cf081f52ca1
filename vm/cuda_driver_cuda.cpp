// The few CUDA driver API functions megasched calls, defined here and forwarded to the driver
// through cudart's entry-point query (cudaGetDriverEntryPointByVersion). The binary therefore does
// not link libcuda.so.1: it starts, and every CPU feature works, on a machine with the toolkit but
// no driver (CI); a driver call there fails with CUDA_ERROR_NO_DEVICE like any other CUDA failure.
#include <cuda.h>
#include <cuda_runtime.h>

namespace {

/// Resolves `symbol` once; nullptr when there is no driver.
template <typename Fn>
Fn resolve(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<Fn>(fn);
}

#define MS_DRIVER_FORWARD(name, params, args)   \
  extern "C" CUresult CUDAAPI name params {     \
    using Fn = CUresult(CUDAAPI*) params;       \
    static const Fn fn = resolve<Fn>(#name);    \
    return fn ? fn args : CUDA_ERROR_NO_DEVICE; \
  }

}  // namespace

MS_DRIVER_FORWARD(cuModuleLoadData, (CUmodule * module, const void* image), (module, image))
MS_DRIVER_FORWARD(cuModuleGetFunction, (CUfunction * hfunc, CUmodule hmod, const char* name),
                  (hfunc, hmod, name))
MS_DRIVER_FORWARD(cuFuncGetAttribute, (int* pi, CUfunction_attribute attrib, CUfunction hfunc),
                  (pi, attrib, hfunc))
MS_DRIVER_FORWARD(cuFuncSetAttribute, (CUfunction hfunc, CUfunction_attribute attrib, int value),
                  (hfunc, attrib, value))
MS_DRIVER_FORWARD(cuOccupancyMaxActiveBlocksPerMultiprocessor,
                  (int* num_blocks, CUfunction func, int block_size, size_t dynamic_smem),
                  (num_blocks, func, block_size, dynamic_smem))
MS_DRIVER_FORWARD(cuOccupancyMaxActiveClusters,
                  (int* num_clusters, CUfunction func, const CUlaunchConfig* config),
                  (num_clusters, func, config))
MS_DRIVER_FORWARD(cuLaunchKernel,
                  (CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                   unsigned block_x, unsigned block_y, unsigned block_z, unsigned smem,
                   CUstream stream, void** params, void** extra),
                  (f, grid_x, grid_y, grid_z, block_x, block_y, block_z, smem, stream, params,
                   extra))
MS_DRIVER_FORWARD(cuLaunchKernelEx,
                  (const CUlaunchConfig* config, CUfunction f, void** params, void** extra),
                  (config, f, params, extra))

extern "C" CUresult CUDAAPI cuGetErrorString(CUresult error, const char** text) {
  using Fn = CUresult(CUDAAPI*)(CUresult, const char**);
  static const Fn fn = resolve<Fn>("cuGetErrorString");
  if (fn) return fn(error, text);
  *text = "CUDA driver unavailable";
  return CUDA_SUCCESS;
}
