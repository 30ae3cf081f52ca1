// A device allocation freed with its owner, and the upload of a host vector into one. CUDA-only:
// included by *_cuda.cpp files.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "vm/cuda_check.h"

namespace megasched::vm {

/// A device allocation, freed with its owner.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n) MS_CHECK_CUDA(cudaMalloc(&ptr, n));
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

/// A device copy of `v` (at least 16 bytes, so an empty table still has an address).
template <typename T>
std::unique_ptr<DeviceBuffer> upload(const std::vector<T>& v) {
  auto b = std::make_unique<DeviceBuffer>(std::max<size_t>(v.size() * sizeof(T), 16));
  if (!v.empty())
    MS_CHECK_CUDA(cudaMemcpy(b->ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

}  // namespace megasched::vm
