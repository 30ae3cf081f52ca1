// The reference windows' disk cache: keys (weights, tokens, start, steps, dtype), a round trip that
// gives back exactly what was stored, a corrupted or foreign file detected and removed (never
// trusted) and rebuilt by reference_windows, and a changed checkpoint never served a stale window.
#include "eval/reference_cache.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "eval/evaluate.h"
#include "eval/reference_forward.h"
#include "schedule/checkpoint.h"

namespace megasched::eval {
namespace {

namespace fs = std::filesystem;

/// A scratch folder removed when the test ends.
class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(fs::temp_directory_path() /
              ("megasched_refcache_" + tag + "_" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

schedule::Weights toy_weights(schedule::DType dtype, uint64_t seed = 3) {
  schedule::ModelShape s = *schedule::find_preset("toy");
  s.dtype = dtype;
  return schedule::generate_weights(s, seed);
}

/// The windows of `starts` computed by the CPU eager forward and through the cache in `dir`.
std::vector<ReferenceWindow> windows_via_cache(
    const schedule::Weights& w, const std::vector<int32_t>& tokens, const std::vector<int>& starts,
    const std::string& dir, std::vector<WindowOrigin>* origins, int* engines_made) {
  std::string error;
  auto make = [&](std::string*) -> std::unique_ptr<ReferenceForward> {
    ++*engines_made;
    return std::make_unique<CpuEagerForward>(w);
  };
  auto out = reference_windows(w, weights_identity(w), tokens, starts, 3, ReferenceCache(dir), make,
                               origins, &error);
  EXPECT_TRUE(out) << error;
  return out ? *out : std::vector<ReferenceWindow>{};
}

TEST(ReferenceCache, KeysDifferInEveryField) {
  ReferenceKey k;
  k.weights_id = "w";
  k.tokens = {1, 2, 3, 4};
  k.start = 1;
  k.steps = 3;
  const std::string base = reference_file_name(k);
  ReferenceKey o = k;
  o.weights_id = "v";
  EXPECT_NE(reference_file_name(o), base);
  o = k;
  o.tokens[2] = 9;
  EXPECT_NE(reference_file_name(o), base);
  o = k;
  o.start = 0;
  EXPECT_NE(reference_file_name(o), base);
  o = k;
  o.steps = 2;
  EXPECT_NE(reference_file_name(o), base);
  o = k;
  o.dtype = schedule::DType::kBF16;
  EXPECT_NE(reference_file_name(o), base);
  EXPECT_EQ(reference_file_name(k), base);
}

TEST(ReferenceCache, WeightsIdentityFollowsEveryWeightAndNotTheThreadCount) {
  schedule::Weights w = toy_weights(schedule::DType::kBF16);
  const std::string id = weights_identity(w, 1);
  EXPECT_EQ(weights_identity(w, 4), id);
  w.bf16[w.bf16.size() / 2] ^= 1;  // one bit of one weight
  EXPECT_NE(weights_identity(w, 1), id);
  schedule::Weights f = toy_weights(schedule::DType::kF32);
  EXPECT_NE(weights_identity(f), id);
}

TEST(ReferenceCache, StoredWindowComesBackExactly) {
  TempDir dir("roundtrip");
  const schedule::Weights w = toy_weights(schedule::DType::kBF16);
  const auto tokens = trial_tokens(w.shape.vocab, 12, 1);
  CpuEagerForward cpu(w);
  const auto computed = compute_windows(cpu, w.shape, tokens, {9}, 3);
  ASSERT_EQ(computed.size(), 1u);
  ReferenceKey key{weights_identity(w), tokens, 9, 3, w.shape.dtype};
  const ReferenceCache cache(dir.str());
  std::string why;
  ReferenceWindow back;
  EXPECT_EQ(cache.load(key, &back, &why), CacheLookup::kMiss);
  ASSERT_TRUE(cache.store(key, computed[0], &why)) << why;
  ASSERT_EQ(cache.load(key, &back, &why), CacheLookup::kHit) << why;
  EXPECT_EQ(back.start, 9);
  EXPECT_EQ(back.logits, computed[0].logits);
  EXPECT_EQ(back.kv.bytes, computed[0].kv.bytes);
  EXPECT_EQ(back.kv.positions, 9);
  EXPECT_EQ(back.engine, "cpu-eager");
  // Another start or token sequence is not this file's.
  key.tokens[0] ^= 1;
  EXPECT_EQ(cache.load(key, &back, &why), CacheLookup::kMiss);
}

TEST(ReferenceCache, CorruptedFileIsDetectedRemovedAndRebuilt) {
  TempDir dir("corrupt");
  const schedule::Weights w = toy_weights(schedule::DType::kF32);
  const auto tokens = trial_tokens(w.shape.vocab, 40, 2);
  std::vector<WindowOrigin> origins;
  int made = 0;
  const auto first = windows_via_cache(w, tokens, {0, 20}, dir.str(), &origins, &made);
  EXPECT_EQ(made, 1);
  ASSERT_EQ(origins.size(), 2u);
  EXPECT_EQ(origins[0].lookup, "miss");
  // Every byte region matters: flip one byte in the middle of each file (KV or logits).
  int flipped = 0;
  for (const auto& e : fs::directory_iterator(dir.str())) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = fs::file_size(e.path());
    f.seekg(static_cast<std::streamoff>(size / 2));
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.write(&c, 1);
    ++flipped;
  }
  ASSERT_EQ(flipped, 2);
  const auto second = windows_via_cache(w, tokens, {0, 20}, dir.str(), &origins, &made);
  EXPECT_EQ(made, 2);  // rebuilt, not trusted
  for (const WindowOrigin& o : origins) {
    EXPECT_EQ(o.lookup, "corrupt");
    EXPECT_NE(o.note.find("checksum"), std::string::npos) << o.note;
  }
  ASSERT_EQ(second.size(), first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(second[i].logits, first[i].logits);
    EXPECT_EQ(second[i].kv.bytes, first[i].kv.bytes);
  }
  // The rebuilt files are whole again.
  windows_via_cache(w, tokens, {0, 20}, dir.str(), &origins, &made);
  EXPECT_EQ(made, 2);
  for (const WindowOrigin& o : origins) EXPECT_EQ(o.lookup, "hit");
}

TEST(ReferenceCache, TruncatedAndForeignFilesAreNotTrusted) {
  TempDir dir("truncated");
  const schedule::Weights w = toy_weights(schedule::DType::kF32);
  const auto tokens = trial_tokens(w.shape.vocab, 10, 2);
  CpuEagerForward cpu(w);
  const auto win = compute_windows(cpu, w.shape, tokens, {5}, 3);
  const ReferenceKey key{weights_identity(w), tokens, 5, 3, w.shape.dtype};
  const ReferenceCache cache(dir.str());
  std::string why;
  ASSERT_TRUE(cache.store(key, win[0], &why));
  const std::string path = cache.path_for(key);
  fs::resize_file(path, fs::file_size(path) - 5);
  ReferenceWindow back;
  EXPECT_EQ(cache.load(key, &back, &why), CacheLookup::kCorrupt);
  EXPECT_FALSE(fs::exists(path));
  // Another key's whole file copied under this key's name: its header says whose it is.
  ReferenceKey other = key;
  other.start = 4;
  const auto win4 = compute_windows(cpu, w.shape, tokens, {4}, 3);
  ASSERT_TRUE(cache.store(other, win4[0], &why));
  fs::copy_file(cache.path_for(other), path);
  EXPECT_EQ(cache.load(key, &back, &why), CacheLookup::kCorrupt);
  EXPECT_NE(why.find("another key"), std::string::npos) << why;
}

TEST(ReferenceCache, ChangedCheckpointIsNeverServedItsOldWindows) {
  TempDir cache_dir("ckpt_cache");
  TempDir ckpt("ckpt");
  schedule::Weights w = toy_weights(schedule::DType::kBF16, 11);
  std::string error;
  ASSERT_TRUE(schedule::save_checkpoint(w, ckpt.str(), &error)) << error;
  EvaluatorOptions o;
  o.model = ckpt.str();
  o.positions = {0, 5};
  o.timed_position = 9;
  o.reference_cache_dir = cache_dir.str();
  auto lookups = [&] {
    auto ev = TrialEvaluator::create(o, &error);
    EXPECT_TRUE(ev) << error;
    const Verdict v = ev->evaluate(schedule::ScheduleConfig{});
    EXPECT_TRUE(v.correct) << to_json(v).dump();
    std::vector<std::string> out;
    for (const auto& win : v.reference["windows"]) out.push_back(win["lookup"]);
    return out;
  };
  EXPECT_EQ(lookups(), (std::vector<std::string>{"miss", "miss", "miss"}));
  EXPECT_EQ(lookups(), (std::vector<std::string>{"hit", "hit", "hit"}));
  // One weight of the checkpoint changes: its windows are other keys.
  w.bf16[static_cast<size_t>(w.layout.layer[0].wq) + 7] ^= 0x40;
  ASSERT_TRUE(schedule::save_checkpoint(w, ckpt.str(), &error)) << error;
  EXPECT_EQ(lookups(), (std::vector<std::string>{"miss", "miss", "miss"}));
}

// The pass that computes missing windows reports its progress in stretches of at most 64
// positions (promote on `small` was silent for minutes here), and the same windows come out.
TEST(ReferenceCache, ComputingWindowsReportsProgressToTheLastPosition) {
  const schedule::Weights w = toy_weights(schedule::DType::kF32);
  std::vector<int32_t> tokens(static_cast<size_t>(w.shape.max_seq));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 % 200);
  const std::vector<int> starts = {0, 120};
  std::vector<std::pair<int, int>> calls;
  CpuEagerForward told(w), silent(w);
  const auto with = compute_windows(told, w.shape, tokens, starts, 3,
                                    [&](int done, int total) { calls.emplace_back(done, total); });
  const auto without = compute_windows(silent, w.shape, tokens, starts, 3);
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls.back(), std::make_pair(123, 123));
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GT(calls[i].first, calls[i - 1].first);
    EXPECT_LE(calls[i].first - calls[i - 1].first, 64);
  }
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) EXPECT_EQ(with[i].logits, without[i].logits);
}

}  // namespace
}  // namespace megasched::eval
