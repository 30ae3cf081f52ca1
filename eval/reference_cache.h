// The reference a trial is checked against, computed once and kept on disk. A check at position P
// needs the reference logits at P and the reference KV cache of positions [0, P), so the kernel
// under test starts from that history instead of recomputing it (O(1) in P); a window holds the
// logits of a few consecutive steps from P, so the kernel's own KV writes are read back too.
// Windows are cached per (weights content hash, token sequence, start, steps, dtype): every trial
// of a loop and every later loop on the same weights reuses them. A file whose checksum, header or
// size does not match is never trusted: it is removed and the window is rebuilt. Changed weights
// (an edited checkpoint) hash differently, so their windows are never looked up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/model.h"
#include "vm/kv_snapshot.h"

namespace megasched::eval {

/// The reference from position `start`: logits of `logits.size()` consecutive steps and the KV
/// cache the steps before `start` left.
struct ReferenceWindow {
  int start = 0;
  std::vector<std::vector<float>> logits;  // logits[i]: vocab floats at position start + i
  vm::KvSnapshot kv;                       // positions [0, start)
  std::string engine;                      // what computed it: "cpu-eager" | "gpu-eager"
};

/// What a cached window is a function of.
struct ReferenceKey {
  std::string weights_id;       // weights_identity(weights)
  std::vector<int32_t> tokens;  // the tokens fed at positions 0 .. start + steps - 1
  int start = 0;
  int steps = 1;
  schedule::DType dtype = schedule::DType::kF32;
};

/// 64-bit hash of a byte range, eight bytes at a time (the cache files' checksum and the weights'
/// content hash).
uint64_t hash_bytes(const void* data, size_t bytes, uint64_t seed = 0);

/// The weights' identity: their shape (every field that changes the forward) and a hash of every
/// weight byte (computed on `threads` threads, 0: hardware concurrency). Editing one weight of a
/// checkpoint changes it.
std::string weights_identity(const schedule::Weights& weights, int threads = 0);

/// The file name of a key's window: 16 hex digits of its hash and ".ref".
std::string reference_file_name(const ReferenceKey& key);

/// $MEGASCHED_REFERENCE_CACHE, else <$MEGASCHED_WORKSPACE or workspace>/reference_cache.
std::string default_reference_cache_dir();

enum class CacheLookup : uint8_t {
  kHit,      // the file was there, whole, and is the key's
  kMiss,     // no file (or the cache is disabled)
  kCorrupt,  // a file was there but failed its checksum, header or size: removed, never used
};
const char* lookup_name(CacheLookup lookup);  // "hit" | "miss" | "corrupt"

class ReferenceCache {
 public:
  /// `dir` empty: disabled (every lookup misses, nothing is stored).
  explicit ReferenceCache(std::string dir) : dir_(std::move(dir)) {}

  /// Reads the key's window into *out. kCorrupt leaves *why saying what failed.
  CacheLookup load(const ReferenceKey& key, ReferenceWindow* out, std::string* why) const;
  /// Writes the window (a temporary file renamed into place, so readers never see half a file).
  /// False with *error when the folder cannot be written (the trial goes on without the cache).
  bool store(const ReferenceKey& key, const ReferenceWindow& window, std::string* error) const;
  /// The file of a key ("" when disabled).
  std::string path_for(const ReferenceKey& key) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace megasched::eval
