// The process-wide CUDA runtime on CUDA (see vm/cuda_runtime.h).
#include "vm/cuda_runtime.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>

#include "vm/cuda_check.h"
#include "vm/device_buffer.h"

namespace megasched::vm {
namespace {

void ensure_context() {
  static std::once_flag once;
  std::call_once(once, [] {
    MS_CHECK_CUDA(cudaSetDevice(0));
    MS_CHECK_CUDA(cudaFree(nullptr));  // creates the primary context the driver calls use
  });
}

std::string fingerprint(const schedule::Weights& w) {
  const auto* bytes = static_cast<const unsigned char*>(w.data());
  const int64_t n = w.bytes();
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(n);
  for (int i = 0; i < 4096 && n > 0; ++i) {
    const int64_t at = (n / 4096) * i + (i % 7);
    h = (h ^ bytes[std::min<int64_t>(at, n - 1)]) * 1099511628211ull;
  }
  return w.shape.name + "/" + schedule::dtype_name(w.shape.dtype) + "/" + std::to_string(n) + "/" +
         std::to_string(h);
}

}  // namespace

int device_count(std::string* why) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    if (why)
      *why = rc != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(rc)
                               : "no CUDA device";
    return 0;
  }
  return count;
}

std::optional<DeviceInfo> device_info(std::string* why) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    // Without a driver the runtime says "CUDA driver version is insufficient": say what it means.
    std::error_code ec;
    const bool driver = std::filesystem::exists("/proc/driver/nvidia/version", ec);
    if (why == nullptr) return std::nullopt;
    if (rc == cudaSuccess || rc == cudaErrorNoDevice)
      *why = "no CUDA device: no GPU found on this machine";
    else if (rc == cudaErrorInsufficientDriver && !driver)
      *why = "no CUDA device: no NVIDIA driver on this machine (no GPU found)";
    else
      *why =
          std::string("no CUDA device: ") + cudaGetErrorString(rc) +
          (rc == cudaErrorInsufficientDriver ? " (the NVIDIA driver is older than the CUDA runtime)"
                                             : "");
    return std::nullopt;
  }
  ensure_context();
  cudaDeviceProp p{};
  MS_CHECK_CUDA(cudaGetDeviceProperties(&p, 0));
  DeviceInfo d;
  d.name = p.name;
  d.sm_arch = p.major * 10 + p.minor;
  d.num_sms = p.multiProcessorCount;
  d.l2_bytes = p.l2CacheSize;
  d.hbm_bytes = static_cast<int64_t>(p.totalGlobalMem);
  d.smem_per_sm = static_cast<int>(p.sharedMemPerMultiprocessor);
  d.smem_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
  d.regs_per_sm = p.regsPerMultiprocessor;
  d.max_threads_per_sm = p.maxThreadsPerMultiProcessor;
  d.max_blocks_per_sm = p.maxBlocksPerMultiProcessor;
  MS_CHECK_CUDA(cudaDriverGetVersion(&d.driver_version));
  MS_CHECK_CUDA(cudaRuntimeGetVersion(&d.runtime_version));
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, 0) == cudaSuccess) d.pci_bus_id = bus;
  return d;
}

void* shared_stream() {
  static cudaStream_t stream = [] {
    ensure_context();
    cudaStream_t s = nullptr;
    MS_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

void flush_l2() {
  static DeviceBuffer* scratch = [] {
    ensure_context();
    int l2 = 0;
    MS_CHECK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    return new DeviceBuffer(static_cast<size_t>(std::max(l2, 1 << 20)) * 2);
  }();
  static int value = 0;
  MS_CHECK_CUDA(cudaMemsetAsync(scratch->ptr, (++value) & 0xff, scratch->bytes,
                                static_cast<cudaStream_t>(shared_stream())));
}

uint64_t device_weights(const schedule::Weights& weights) {
  static std::mutex mu;
  static std::string key;
  static std::unique_ptr<DeviceBuffer> buffer;
  std::lock_guard<std::mutex> lock(mu);
  ensure_context();
  const std::string k = fingerprint(weights);
  if (!buffer || key != k) {
    buffer.reset();  // one model resident at a time
    buffer = std::make_unique<DeviceBuffer>(static_cast<size_t>(weights.bytes()));
    MS_CHECK_CUDA(cudaMemcpy(buffer->ptr, weights.data(), static_cast<size_t>(weights.bytes()),
                             cudaMemcpyHostToDevice));
    key = k;
  }
  return reinterpret_cast<uint64_t>(buffer->ptr);
}

std::vector<void*> load_functions(const std::vector<char>& cubin, const std::string& key,
                                  const std::vector<std::string>& names) {
  static std::mutex mu;
  static std::map<std::string, CUmodule> modules;
  std::lock_guard<std::mutex> lock(mu);
  ensure_context();
  CUmodule& mod = modules[key];
  if (!mod) MS_CHECK_CUDA(cuModuleLoadData(&mod, cubin.data()));
  std::vector<void*> fns;
  for (const std::string& n : names) {
    CUfunction f = nullptr;
    MS_CHECK_CUDA(cuModuleGetFunction(&f, mod, n.c_str()));
    fns.push_back(f);
  }
  return fns;
}

}  // namespace megasched::vm
