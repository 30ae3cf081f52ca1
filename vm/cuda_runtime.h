// The process-wide CUDA runtime every GPU user shares: the device (device_info), one context and
// one stream, one resident copy of a model's weights, one loaded module per build, and the L2
// flush between timed iterations. Implemented in vm/cuda_runtime_cuda.cpp; without the toolkit
// vm/cuda_runtime_nocuda.cpp reports that there is no device. No CUDA types appear here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedule/model.h"

namespace megasched::vm {

/// The live device as read from cudaGetDeviceProperties and the driver.
struct DeviceInfo {
  std::string name;
  int sm_arch = 0;  // major * 10 + minor
  int num_sms = 0;
  int64_t l2_bytes = 0;
  int64_t hbm_bytes = 0;
  int smem_per_sm = 0;
  int smem_per_block_optin = 0;
  int regs_per_sm = 0;
  int max_threads_per_sm = 0;
  int max_blocks_per_sm = 0;
  int driver_version = 0;  // e.g. 13000
  int runtime_version = 0;
  std::string pci_bus_id;
};

/// CUDA devices this process sees (cudaGetDeviceCount, so CUDA_VISIBLE_DEVICES applies); 0 with
/// *why when there is no toolkit, no driver or no device.
int device_count(std::string* why);

/// Reads device 0 (nullopt + *why when there is no toolkit, no driver or no device).
std::optional<DeviceInfo> device_info(std::string* why);

/// Flushes the L2 (writes a buffer twice its size) on the shared stream; used between timed
/// iterations when the model fits in L2.
void flush_l2();

/// The process's device copy of a model's weights: uploaded on first use, reused by every later
/// trial of the same weights (keyed by model name, size and a content fingerprint). Returns the
/// device pointer as an integer.
uint64_t device_weights(const schedule::Weights& weights);

/// The one stream every GpuVm and the baseline run on (a cudaStream_t, as void*).
void* shared_stream();

/// The loaded cubin functions of a build, cached per process by build key: `names` in order.
/// Returns CUfunction handles as void*.
std::vector<void*> load_functions(const std::vector<char>& cubin, const std::string& key,
                                  const std::vector<std::string>& names);

}  // namespace megasched::vm
