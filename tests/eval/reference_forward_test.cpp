// The reference engines and what is built from them, on the CPU: windows computed in one pass
// equal a plain eager walk, a VM started from a window's KV cache gives the logits the walk gives,
// and the cross-check of two engines passes for equal ones and names the position (or the KV
// cache) where a perturbed one differs. The GPU engine against the CPU one is
// tests/eval/gpu_reference_test.cpp.
#include "eval/reference_forward.h"

#include <gtest/gtest.h>

#include "eval/evaluate.h"
#include "schedule/lower.h"
#include "vm/reference_vm.h"

namespace megasched::eval {
namespace {

schedule::Weights toy_weights(schedule::DType dtype) {
  schedule::ModelShape s = *schedule::find_preset("toy-2L");
  s.dtype = dtype;
  return schedule::generate_weights(s, 4);
}

/// A CPU eager engine whose logits at one position, or whose KV cache, is off by `delta`.
class PerturbedForward : public CpuEagerForward {
 public:
  PerturbedForward(const schedule::Weights& w, int position, float logit_delta, float kv_delta)
      : CpuEagerForward(w), position_(position), logit_delta_(logit_delta), kv_delta_(kv_delta) {}
  std::vector<float> step(int32_t token, int position) override {
    std::vector<float> l = CpuEagerForward::step(token, position);
    if (position == position_) l[3] += logit_delta_;
    return l;
  }
  vm::KvSnapshot kv_snapshot(int positions) override {
    vm::KvSnapshot kv = CpuEagerForward::kv_snapshot(positions);
    if (kv.elements() > 0) kv.set(kv.elements() / 2, kv.get(kv.elements() / 2) + kv_delta_);
    return kv;
  }

 private:
  int position_;
  float logit_delta_, kv_delta_;
};

TEST(ReferenceForward, WindowsEqualAPlainEagerWalk) {
  for (schedule::DType dtype : {schedule::DType::kF32, schedule::DType::kBF16}) {
    const schedule::Weights w = toy_weights(dtype);
    const auto tokens = trial_tokens(w.shape.vocab, 30, 5);
    CpuEagerForward cpu(w);
    // Overlapping windows (4 and 5), one at 0, one touching the end of the tokens.
    const auto windows = compute_windows(cpu, w.shape, tokens, {0, 4, 5, 27}, 3);
    ASSERT_EQ(windows.size(), 4u);
    EagerModel walk(w);
    std::vector<std::vector<float>> logits;
    for (int p = 0; p < 30; ++p) logits.push_back(walk.step(tokens[static_cast<size_t>(p)], p));
    for (const ReferenceWindow& win : windows) {
      ASSERT_EQ(win.logits.size(), 3u);
      EXPECT_EQ(win.kv.positions, win.start);
      for (size_t i = 0; i < 3; ++i)
        EXPECT_EQ(win.logits[i], logits[static_cast<size_t>(win.start) + i])
            << win.start << "+" << i;
    }
    EXPECT_EQ(windows[3].kv.bytes, walk.kv_snapshot(27).bytes);
  }
}

TEST(ReferenceForward, VmStartedFromTheReferenceKvMatchesTheWalk) {
  const schedule::Weights w = toy_weights(schedule::DType::kBF16);
  const auto tokens = trial_tokens(w.shape.vocab, 50, 6);
  CpuEagerForward cpu(w);
  const auto windows = compute_windows(cpu, w.shape, tokens, {40}, 2);
  std::string err;
  const auto program =
      schedule::lower(w.shape, *schedule::find_target("h100"), schedule::ScheduleConfig{}, &err);
  ASSERT_TRUE(program) << err;
  vm::ReferenceVm vm(*program, w);
  ASSERT_TRUE(vm.load_kv(windows[0].kv));
  for (int p = 40; p < 42; ++p) {
    const auto step = vm.step(tokens[static_cast<size_t>(p)], p);
    ASSERT_TRUE(step.completed);
    const Comparison c =
        compare_logits(step.logits, windows[0].logits[static_cast<size_t>(p - 40)], w.shape.dtype);
    EXPECT_TRUE(c.pass) << p << ": rel_err " << c.rel_err;
  }
  // Without the history the same step is wrong: the check depends on the loaded cache.
  vm::ReferenceVm cold(*program, w);
  const auto step = cold.step(tokens[40], 40);
  EXPECT_FALSE(compare_logits(step.logits, windows[0].logits[0], w.shape.dtype).pass);
  // A snapshot of another model does not load.
  vm::KvSnapshot other = windows[0].kv;
  other.kv_heads += 1;
  EXPECT_FALSE(vm.load_kv(other));
}

TEST(ReferenceForward, CrossCheckPassesForEqualEngines) {
  const schedule::Weights w = toy_weights(schedule::DType::kBF16);
  const auto tokens = trial_tokens(w.shape.vocab, 20, 1);
  CpuEagerForward a(w), b(w);
  const CrossCheck c = cross_check(a, b, tokens, {0, 7, 19}, w.shape.dtype);
  EXPECT_TRUE(c.pass) << c.message;
  EXPECT_EQ(c.kv_rel_err, 0.0);
  ASSERT_EQ(c.logits.size(), 3u);
  EXPECT_EQ(to_json(c)["logits"][2]["position"], 19);
}

TEST(ReferenceForward, CrossCheckNamesThePositionThatDiffers) {
  const schedule::Weights w = toy_weights(schedule::DType::kF32);
  const auto tokens = trial_tokens(w.shape.vocab, 20, 1);
  CpuEagerForward ref(w);
  PerturbedForward off(w, 7, 0.5f, 0.0f);
  const CrossCheck c = cross_check(off, ref, tokens, {0, 7, 19}, w.shape.dtype);
  EXPECT_FALSE(c.pass);
  EXPECT_TRUE(c.logits[0].pass);
  EXPECT_FALSE(c.logits[1].pass);
  EXPECT_TRUE(c.logits[2].pass);
  EXPECT_NE(c.message.find("position 7"), std::string::npos) << c.message;
}

TEST(ReferenceForward, CrossCheckCatchesADifferentKvCache) {
  const schedule::Weights w = toy_weights(schedule::DType::kF32);
  const auto tokens = trial_tokens(w.shape.vocab, 20, 1);
  CpuEagerForward ref(w);
  PerturbedForward off(w, -1, 0.0f, 0.25f);
  const CrossCheck c = cross_check(off, ref, tokens, {3, 10}, w.shape.dtype);
  EXPECT_FALSE(c.pass);
  EXPECT_GT(c.kv_rel_err, tolerance_for(w.shape.dtype).rel_err);
  EXPECT_NE(c.message.find("KV"), std::string::npos) << c.message;
}

}  // namespace
}  // namespace megasched::eval
