// The reference forward a trial is checked against, behind one interface with two engines: the
// CPU eager forward (eval/eager.h) and the fp32 eager forward on the GPU (eval/gpu_reference.h),
// which shares no code with the megakernel. Long positions are reached by feeding the token
// sequence once (the GPU engine batches it); the windows a trial needs (eval/reference_cache.h)
// come from the disk cache when it holds them, else from one pass of an engine, and are stored.
// cross_check compares two engines on one token sequence (logits and the KV cache they leave).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/eager.h"
#include "eval/oracle.h"
#include "eval/reference_cache.h"
#include "schedule/model.h"
#include "vm/kv_snapshot.h"

namespace megasched::eval {

class ReferenceForward {
 public:
  virtual ~ReferenceForward() = default;
  /// "cpu-eager" | "gpu-eager".
  virtual std::string name() const = 0;
  /// Forgets the KV cache (the next position fed is 0).
  virtual void reset() = 0;
  /// One decode step at `position` (positions are fed in order); the logits (vocab floats).
  virtual std::vector<float> step(int32_t token, int position) = 0;
  /// Feeds tokens[begin .. end) at positions begin .. end - 1 without their logits.
  virtual void prefill(const std::vector<int32_t>& tokens, int begin, int end) = 0;
  /// The KV cache of positions [0, positions), all fed already.
  virtual vm::KvSnapshot kv_snapshot(int positions) = 0;
};

/// The CPU eager forward (eval/eager.h) as an engine.
class CpuEagerForward : public ReferenceForward {
 public:
  explicit CpuEagerForward(const schedule::Weights& weights) : eager_(weights) {}
  std::string name() const override { return "cpu-eager"; }
  void reset() override { eager_.reset(); }
  std::vector<float> step(int32_t token, int position) override {
    return eager_.step(token, position);
  }
  void prefill(const std::vector<int32_t>& tokens, int begin, int end) override {
    for (int p = begin; p < end; ++p) eager_.step(tokens[static_cast<size_t>(p)], p);
  }
  vm::KvSnapshot kv_snapshot(int positions) override { return eager_.kv_snapshot(positions); }

 private:
  EagerModel eager_;
};

/// Told the positions done and the positions in all while windows are computed (a long pass: the
/// CPU eager forward of `small` to position 4099 takes minutes).
using WindowProgress = std::function<void(int done, int total)>;

/// The windows starting at `starts` (each `steps` long, clipped at max_seq), computed in one pass
/// of `engine` over `tokens` (which cover every window); `progress` (when given) after every
/// stretch of at most 64 positions.
std::vector<ReferenceWindow> compute_windows(ReferenceForward& engine,
                                             const schedule::ModelShape& shape,
                                             const std::vector<int32_t>& tokens,
                                             const std::vector<int>& starts, int steps,
                                             const WindowProgress& progress = {});

/// Where each window came from, for the verdict.
struct WindowOrigin {
  int start = 0;
  std::string lookup;  // lookup_name: "hit" | "miss" | "corrupt" (then computed and stored)
  std::string engine;  // the engine that computed it (from the file on a hit)
  std::string note;    // why a file was not trusted, or why it could not be stored
};

/// The windows for `starts`: from `cache` where it holds them, the rest computed by one engine
/// that `make_engine` makes (called at most once, only on a miss) and stored. nullopt with *error
/// when the engine cannot be made.
std::optional<std::vector<ReferenceWindow>> reference_windows(
    const schedule::Weights& weights, const std::string& weights_id,
    const std::vector<int32_t>& tokens, const std::vector<int>& starts, int steps,
    const ReferenceCache& cache,
    const std::function<std::unique_ptr<ReferenceForward>(std::string*)>& make_engine,
    std::vector<WindowOrigin>* origins, std::string* error, const WindowProgress& progress = {});

/// Two engines on one token sequence: the logits at `positions` and the KV caches after the last
/// position, compared under tolerance_for(dtype) (the KV by its largest difference relative to
/// its largest value).
struct CrossCheck {
  bool pass = false;
  std::vector<int> positions;
  std::vector<Comparison> logits;  // logits[i] at positions[i]: a against b
  double kv_rel_err = 0.0;         // max |kv_a - kv_b| / max |kv_b|
  std::string message;             // the first failure ("" when pass)
};
CrossCheck cross_check(ReferenceForward& a, ReferenceForward& b, const std::vector<int32_t>& tokens,
                       const std::vector<int>& positions, schedule::DType dtype);
nlohmann::json to_json(const CrossCheck& check);

}  // namespace megasched::eval
