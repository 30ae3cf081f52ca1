// A KV cache on the host: the keys and values of positions [0, positions) of every layer and KV
// head, stored in the model's KV dtype, in the order of the device's kBufKv (abi/abi.h:
// [layer][k|v][kv_head][position][head_dim]) but with `positions` rows per head instead of max_seq.
// The reference (eval/reference_cache.h) produces one, the ReferenceVm and the GpuVm load one, so a
// check at position P starts from the reference's history instead of recomputing it.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "schedule/model.h"

namespace megasched::vm {

struct KvSnapshot {
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int positions = 0;                              // rows per (layer, k|v, kv head)
  schedule::DType dtype = schedule::DType::kF32;  // element type of `bytes`
  std::vector<uint8_t> bytes;                     // elements() values of dtype_bytes(dtype) bytes

  /// An empty (zero-filled) snapshot of `positions` rows for `shape`.
  static KvSnapshot zeros(const schedule::ModelShape& shape, int positions) {
    KvSnapshot s;
    s.layers = shape.layers;
    s.kv_heads = shape.kv_heads;
    s.head_dim = shape.head_dim;
    s.positions = positions;
    s.dtype = shape.dtype;
    s.bytes.assign(s.elements() * static_cast<size_t>(schedule::dtype_bytes(s.dtype)), 0);
    return s;
  }
  /// Rows of head_dim values: layers x 2 x kv_heads x positions.
  size_t rows() const { return static_cast<size_t>(layers) * 2 * kv_heads * positions; }
  size_t elements() const { return rows() * static_cast<size_t>(head_dim); }
  /// Element index of (layer, kv = 0 keys | 1 values, kv head, position, d).
  size_t index(int layer, int kv, int kv_head, int position, int d) const {
    return ((((static_cast<size_t>(layer) * 2 + kv) * kv_heads + kv_head) * positions + position) *
            head_dim) +
           d;
  }
  /// Stores `value` (already representable in dtype: it is rounded again, which is exact then).
  void set(size_t i, float value) {
    if (dtype == schedule::DType::kBF16) {
      const uint16_t b = schedule::f32_to_bf16(value);
      std::memcpy(bytes.data() + i * 2, &b, 2);
    } else {
      std::memcpy(bytes.data() + i * 4, &value, 4);
    }
  }
  float get(size_t i) const {
    if (dtype == schedule::DType::kBF16) {
      uint16_t b = 0;
      std::memcpy(&b, bytes.data() + i * 2, 2);
      return schedule::bf16_to_f32(b);
    }
    float f = 0.0f;
    std::memcpy(&f, bytes.data() + i * 4, 4);
    return f;
  }
  /// Whether it fits `shape` (same geometry and dtype, positions within max_seq).
  bool fits(const schedule::ModelShape& shape) const {
    return layers == shape.layers && kv_heads == shape.kv_heads && head_dim == shape.head_dim &&
           dtype == shape.dtype && positions >= 0 && positions <= shape.max_seq &&
           bytes.size() == elements() * static_cast<size_t>(schedule::dtype_bytes(dtype));
  }
};

}  // namespace megasched::vm
