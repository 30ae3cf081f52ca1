// The safetensors format (Hugging Face's tensor files): an 8-byte little-endian header length, a
// JSON header naming each tensor's dtype, shape and byte range [begin, end) after the header, then
// the bytes. Reading memory-maps the file and indexes the header without copying a tensor;
// writing lays the tensors out back to back after a header padded to 8 bytes. Every failure is a
// false return with a one-line message naming the file and the tensor; nothing throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace megasched::schedule {

/// A read-only memory map of one file, unmapped on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  /// Maps `path`; false with a message on failure.
  bool open(const std::filesystem::path& path, std::string* error);

  const uint8_t* bytes() const { return static_cast<const uint8_t*>(data_); }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

/// One tensor entry of a safetensors header, with its bytes inside a mapped file.
struct TensorRef {
  std::string file;   // file name, for messages
  std::string dtype;  // "F32" | "F16" | "BF16" | anything else (rejected on use)
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
};

/// Indexes the header of a mapped safetensors file (`name` for messages) into `tensors`.
bool index_safetensors(const MappedFile& file, const std::string& name,
                       std::map<std::string, TensorRef>& tensors, std::string* error);

/// Bytes per element of a safetensors dtype this reader converts (F32, F16, BF16).
std::optional<int64_t> safetensors_dtype_bytes(const std::string& dtype);

/// "[2, 3]".
std::string shape_string(const std::vector<int64_t>& shape);

/// IEEE binary16 bits -> fp32 (exact; subnormals, inf and NaN included).
float f16_to_f32(uint16_t bits);

/// One tensor to write.
struct TensorWrite {
  std::string name;
  std::string dtype;  // "F32" | "BF16"
  std::vector<int64_t> shape;
  const char* data = nullptr;
  int64_t bytes = 0;
};

/// Writes `tensors` in order to `path` (metadata {"format": "pt"}). False with *error when the
/// write fails.
bool write_safetensors(const std::filesystem::path& path, const std::vector<TensorWrite>& tensors,
                       std::string* error);

}  // namespace megasched::schedule
