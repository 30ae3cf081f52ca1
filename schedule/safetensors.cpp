#include "schedule/safetensors.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace megasched::schedule {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool failed(std::string* error, const std::string& message) {
  if (error != nullptr) *error = message;
  return false;
}

}  // namespace

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(data_, size_);
}

bool MappedFile::open(const fs::path& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return failed(error, path.string() + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return failed(error, path.string() + ": cannot stat");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return failed(error, path.string() + ": cannot mmap (" + std::strerror(errno) + ")");
    }
    data_ = p;
  }
  ::close(fd);
  return true;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool index_safetensors(const MappedFile& file, const std::string& name,
                       std::map<std::string, TensorRef>& tensors, std::string* error) {
  if (file.size() < 8) return failed(error, name + ": too short to be a safetensors file");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file.bytes()[i];
  if (header_len > file.size() - 8) {
    return failed(error, name + ": safetensors header length " + std::to_string(header_len) +
                             " exceeds the file size (truncated file?)");
  }
  const json header = json::parse(file.bytes() + 8, file.bytes() + 8 + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return failed(error, name + ": safetensors header is not a JSON object");
  }
  const uint8_t* base = file.bytes() + 8 + header_len;
  const size_t data_size = file.size() - 8 - header_len;
  for (const auto& [key, entry] : header.items()) {
    if (key == "__metadata__") continue;
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return failed(error, name + ": tensor " + key + " has a malformed header entry");
    }
    TensorRef ref;
    ref.file = name;
    ref.dtype = entry["dtype"].get<std::string>();
    for (const json& d : entry["shape"]) {
      if (!d.is_number_integer())
        return failed(error, name + ": tensor " + key + " has a non-integer shape");
      ref.shape.push_back(d.get<int64_t>());
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return failed(error, name + ": tensor " + key + " has malformed data_offsets");
    }
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    if (end < begin || end > data_size) {
      return failed(error, name + ": tensor " + key + " data_offsets [" + std::to_string(begin) +
                               ", " + std::to_string(end) + ") outside the file (truncated file?)");
    }
    ref.data = base + begin;
    ref.bytes = static_cast<size_t>(end - begin);
    tensors[key] = ref;
  }
  return true;
}

std::optional<int64_t> safetensors_dtype_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return std::nullopt;
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

bool write_safetensors(const fs::path& path, const std::vector<TensorWrite>& tensors,
                       std::string* error) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t cursor = 0;
  for (const TensorWrite& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {cursor, cursor + t.bytes}}};
    cursor += t.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as safetensors does
  std::ofstream out(path, std::ios::binary);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const TensorWrite& t : tensors) out.write(t.data, static_cast<std::streamsize>(t.bytes));
  out.close();
  if (!out) return failed(error, path.string() + ": write failed");
  return true;
}

}  // namespace megasched::schedule
