#include "eval/reference_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "schedule/config.h"

namespace megasched::eval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr char kMagic[8] = {'M', 'S', 'R', 'E', 'F', '0', '0', '1'};
constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;

uint64_t mix(uint64_t h) {
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 29);
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/// The header a file carries: everything the key holds (the tokens by hash and count) and the
/// payload's geometry, so a file of another key or shape is told apart from a hash collision.
json header_for(const ReferenceKey& key, const ReferenceWindow& w) {
  return {{"weights_id", key.weights_id},
          {"tokens", key.tokens.size()},
          {"tokens_hash", hex16(hash_bytes(key.tokens.data(), key.tokens.size() * 4))},
          {"start", key.start},
          {"steps", key.steps},
          {"dtype", schedule::dtype_name(key.dtype)},
          {"vocab", w.logits.empty() ? 0 : w.logits.front().size()},
          {"kv", {w.kv.layers, w.kv.kv_heads, w.kv.head_dim, w.kv.positions}},
          {"engine", w.engine}};
}

template <typename T>
void put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

uint64_t hash_bytes(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = mix(seed ^ (bytes * kMul));
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, 8);
    h = (h ^ mix(w + kMul)) * 0xff51afd7ed558ccdull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, bytes - i);
  return mix(h ^ mix(tail + bytes));
}

std::string weights_identity(const schedule::Weights& weights, int threads) {
  json shape = schedule::to_json(weights.shape);
  shape.erase("name");  // a copied checkpoint is the same model
  const auto* bytes = static_cast<const uint8_t*>(weights.data());
  const size_t n = static_cast<size_t>(weights.bytes());
  // Fixed 16 MiB parts (the hash does not depend on the thread count), hashed in parallel.
  constexpr size_t kPart = size_t{16} << 20;
  const size_t parts = std::max<size_t>(1, (n + kPart - 1) / kPart);
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t workers = std::min(parts, threads > 0 ? static_cast<size_t>(threads) : hw);
  std::vector<uint64_t> h(parts);
  std::vector<std::thread> pool;
  for (size_t t = 0; t < workers; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = t; i < parts; i += workers) {
        const size_t begin = i * kPart;
        h[i] = hash_bytes(bytes + begin, std::min(n, begin + kPart) - begin, i);
      }
    });
  }
  for (auto& th : pool) th.join();
  return schedule::hash_hex(shape.dump()) + "-" + hex16(hash_bytes(h.data(), h.size() * 8, n));
}

std::string reference_file_name(const ReferenceKey& key) {
  std::string all = key.weights_id + "|" + schedule::dtype_name(key.dtype) + "|" +
                    std::to_string(key.start) + "|" + std::to_string(key.steps) + "|" +
                    hex16(hash_bytes(key.tokens.data(), key.tokens.size() * 4)) + "|" +
                    std::to_string(key.tokens.size());
  return schedule::hash_hex(all) + ".ref";
}

std::string default_reference_cache_dir() {
  if (const char* env = std::getenv("MEGASCHED_REFERENCE_CACHE"); env && *env) return env;
  const char* ws = std::getenv("MEGASCHED_WORKSPACE");
  return (fs::path(ws && *ws ? ws : "workspace") / "reference_cache").string();
}

const char* lookup_name(CacheLookup lookup) {
  switch (lookup) {
    case CacheLookup::kHit:
      return "hit";
    case CacheLookup::kMiss:
      return "miss";
    case CacheLookup::kCorrupt:
      return "corrupt";
  }
  return "miss";
}

std::string ReferenceCache::path_for(const ReferenceKey& key) const {
  return dir_.empty() ? "" : (fs::path(dir_) / reference_file_name(key)).string();
}

bool ReferenceCache::store(const ReferenceKey& key, const ReferenceWindow& w,
                           std::string* error) const {
  if (dir_.empty()) return true;
  const std::string head = header_for(key, w).dump();
  std::string out(kMagic, sizeof kMagic);
  put(&out, static_cast<uint64_t>(head.size()));
  out += head;
  for (const auto& l : w.logits) out.append(reinterpret_cast<const char*>(l.data()), l.size() * 4);
  out.append(reinterpret_cast<const char*>(w.kv.bytes.data()), w.kv.bytes.size());
  put(&out, hash_bytes(out.data(), out.size()));
  std::error_code ec;
  fs::create_directories(dir_, ec);
  const std::string path = path_for(key);
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    if (!f) {
      *error = "cannot write the reference cache file " + tmp +
               " (set MEGASCHED_REFERENCE_CACHE to a writable folder)";
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    *error = "cannot rename " + tmp + " to " + path + ": " + ec.message();
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

CacheLookup ReferenceCache::load(const ReferenceKey& key, ReferenceWindow* out,
                                 std::string* why) const {
  if (dir_.empty()) return CacheLookup::kMiss;
  const std::string path = path_for(key);
  std::ifstream f(path, std::ios::binary);
  if (!f) return CacheLookup::kMiss;
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  f.close();
  auto corrupt = [&](const std::string& what) {
    *why = "reference cache file " + path + " " + what + ": removed, the reference is rebuilt";
    std::error_code ec;
    fs::remove(path, ec);
    return CacheLookup::kCorrupt;
  };
  constexpr size_t kFixed = sizeof kMagic + 8 + 8;
  if (bytes.size() < kFixed || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return corrupt("is not a reference file of this version");
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (hash_bytes(bytes.data(), bytes.size() - 8) != stored) return corrupt("fails its checksum");
  uint64_t head_len = 0;
  std::memcpy(&head_len, bytes.data() + sizeof kMagic, 8);
  if (head_len > bytes.size() - kFixed) return corrupt("has a header longer than the file");
  const json head = json::parse(bytes.substr(sizeof kMagic + 8, head_len), nullptr, false);
  if (!head.is_object()) return corrupt("has an unreadable header");
  ReferenceWindow w;
  w.start = key.start;
  w.engine = head.value("engine", "");
  const size_t vocab = head.value("vocab", size_t{0});
  const std::vector<int> g = head.value("kv", std::vector<int>{});
  if (g.size() != 4) return corrupt("has no KV geometry");
  w.kv.layers = g[0];
  w.kv.kv_heads = g[1];
  w.kv.head_dim = g[2];
  w.kv.positions = g[3];
  w.kv.dtype = key.dtype;
  // Everything the key holds must match: a file of another key is not this key's reference.
  if (head.value("weights_id", "") != key.weights_id ||
      head.value("tokens", size_t{0}) != key.tokens.size() ||
      head.value("start", -1) != key.start || head.value("steps", -1) != key.steps ||
      head.value("dtype", "") != schedule::dtype_name(key.dtype) ||
      head.value("tokens_hash", "") != hex16(hash_bytes(key.tokens.data(), key.tokens.size() * 4)))
    return corrupt("belongs to another key");
  const size_t kv_bytes = w.kv.elements() * static_cast<size_t>(schedule::dtype_bytes(key.dtype));
  const size_t logit_bytes = static_cast<size_t>(key.steps) * vocab * 4;
  if (kFixed + head_len + logit_bytes + kv_bytes != bytes.size() || w.kv.positions != key.start)
    return corrupt("has the wrong size for its header");
  const char* p = bytes.data() + sizeof kMagic + 8 + head_len;
  w.logits.assign(static_cast<size_t>(key.steps), std::vector<float>(vocab));
  for (auto& l : w.logits) {
    std::memcpy(l.data(), p, vocab * 4);
    p += vocab * 4;
  }
  w.kv.bytes.assign(reinterpret_cast<const uint8_t*>(p),
                    reinterpret_cast<const uint8_t*>(p) + kv_bytes);
  *out = std::move(w);
  return CacheLookup::kHit;
}

}  // namespace megasched::eval
