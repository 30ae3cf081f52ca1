// The GPU half of a trial on CUDA (see eval/gpu_trial.h): kernel correctness at every checked
// position, then interleaved timing of the megakernel and every baseline kind, then the
// correctness re-check. Every expected failure is a status; a failed driver call is `crash`.
#include "eval/gpu_trial.h"

#include <algorithm>
#include <chrono>

#include "eval/baseline.h"
#include "eval/eager.h"
#include "eval/oracle.h"
#include "eval/timing.h"
#include "schedule/format.h"
#include "vm/cuda_check.h"
#include "vm/gpu_vm.h"

namespace megasched::eval {

using json = nlohmann::json;
using schedule::fmt;

namespace {

/// One GPU trial: the VM, the checked positions and their eager logits, and the result being
/// filled. Each phase returns false when the trial ends there (its status set).
class GpuTrial {
 public:
  GpuTrial(const schedule::Program& program, const schedule::Weights& weights,
           const std::vector<int32_t>& tokens, const std::vector<std::vector<float>>& refs,
           const std::vector<int>& positions, const GpuTrialOptions& options)
      : program_(program),
        weights_(weights),
        tokens_(tokens),
        refs_(refs),
        positions_(positions),
        options_(options) {}

  GpuTrialResult run() {
    if (positions_.empty() || refs_.size() != positions_.size() || tokens_.empty())
      return fail("crash",
                  "run_gpu_trial needs one reference per checked position and at least one token");
    try {
      if (!phase("compile_and_load", [&] { return create(); }) ||
          !phase("gpu_check", [&] { return check_kernel(); }))
        return std::move(r_);
      phase("baseline", [&] {
        start_baseline();
        return true;
      });
      if (!phase("time", [&] { return time_interleaved(); }) ||
          !phase("recheck", [&] { return recheck(); }))
        return std::move(r_);
      r_.status = "ok";
      return std::move(r_);
    } catch (const vm::GpuError& e) {
      r_.samples_us.clear();
      return fail("crash", e.what());
    }
  }

 private:
  /// Runs one phase and records its wall time in r_.phases_ms.
  template <class F>
  bool phase(const char* name, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = f();
    r_.phases_ms[name] = ms_since(t0);
    return ok;
  }
  GpuTrialResult fail(const std::string& status, const std::string& message) {
    r_.status = status;
    r_.message = message;
    return std::move(r_);
  }
  int32_t token_at(int p) const { return tokens_[static_cast<size_t>(p) % tokens_.size()]; }

  bool create() {
    vm::GpuVmOptions vo;
    vo.hang_timeout_s = options_.hang_timeout_s;
    vo.force_launch = options_.force_launch;
    std::string error;
    bool rejected = false;
    gvm_ = vm::GpuVm::create(program_, weights_, vo, &error, &rejected);
    if (!gvm_) {
      r_.status = rejected ? "rejected" : "crash";
      r_.message = error;
      return false;
    }
    r_.kernel = gvm_->kernel_info();
    const int max_checked = *std::max_element(positions_.begin(), positions_.end());
    timed_ = options_.timed_position >= 0 ? options_.timed_position : max_checked;
    r_.timed_position = timed_;
    last_ = std::max(max_checked, timed_);
    return true;
  }

  /// Kernel correctness: every position up to the last one runs (the KV cache fills); the checked
  /// ones are compared with the eager logits.
  bool check_kernel() {
    const schedule::DType dtype = weights_.shape.dtype;
    r_.argmax_match = true;
    bool ok = true;
    std::vector<std::string> evidence;
    json checks = json::array();
    for (int p = 0; p <= last_; ++p) {
      vm::StepOutput s = gvm_->step(token_at(p), p);
      if (s.status != "ok") {
        r_.status = s.status;
        r_.message = s.message;
        r_.hang_dump = s.hang_dump;
        return false;
      }
      if (p == timed_) timed_logits_ = s.logits;
      for (size_t i = 0; i < positions_.size(); ++i) {
        if (positions_[i] != p) continue;
        const Comparison c = compare_logits(s.logits, refs_[i], dtype);
        r_.max_abs_err = std::max(r_.max_abs_err, c.max_abs_err);
        r_.rel_err = std::max(r_.rel_err, c.rel_err);
        r_.argmax_match = r_.argmax_match && c.argmax_match;
        checks.push_back({{"position", p},
                          {"rel_err", c.rel_err},
                          {"max_abs_err", c.max_abs_err},
                          {"argmax_match", c.argmax_match},
                          {"kernel_argmax", s.argmax}});
        if (!c.pass) {
          ok = false;
          evidence.push_back("GPU kernel differs from eager at position " + std::to_string(p) +
                             ": rel_err " + fmt("%.4g", c.rel_err) + ", max_abs_err " +
                             fmt("%.4g", c.max_abs_err) + (c.finite ? "" : ", non-finite logits") +
                             (c.argmax_match ? "" : ", argmax differs"));
        }
        if (s.argmax != argmax(s.logits)) {
          ok = false;
          evidence.push_back("kernel argmax task wrote " + std::to_string(s.argmax) +
                             " at position " + std::to_string(p) + " but the logits' argmax is " +
                             std::to_string(argmax(s.logits)));
        }
      }
    }
    r_.kernel["checks"] = checks;
    if (ok) return true;
    r_.status = "incorrect";
    r_.message = evidence.front();
    r_.kernel["evidence"] = evidence;
    return false;
  }

  /// Every baseline kind, filled to the same position; their own accuracy is reported, not gated.
  void start_baseline() {
    if (!options_.time_baseline) return;
    for (const std::string& kind : baseline_kinds()) {
      std::string error;
      auto base = create_baseline(kind, weights_, &error);
      if (!base) {
        r_.kernel["baseline_errors"][kind] = error;
        continue;
      }
      json checks = json::array();
      for (int p = 0; p <= timed_; ++p) {
        const std::vector<float> logits = base->step(token_at(p), p);
        for (size_t i = 0; i < positions_.size(); ++i) {
          if (positions_[i] != p) continue;
          const Comparison c = compare_logits(logits, refs_[i], weights_.shape.dtype);
          checks.push_back({{"position", p},
                            {"rel_err", c.rel_err},
                            {"max_abs_err", c.max_abs_err},
                            {"argmax_match", c.argmax_match}});
        }
      }
      json info = base->info();
      info["checks"] = checks;
      if (kind == "cublas") r_.kernel["baseline"] = info;
      r_.kernel["baselines"][kind] = info;
      r_.baselines.push_back({kind, {}});
      bases_.push_back(std::move(base));
    }
  }

  /// Warm-up, then interleaved megakernel / baseline iterations, L2 flushed between iterations
  /// when the model's bytes fit in twice the L2 (otherwise each step streams from HBM anyway and
  /// the flush would only add noise).
  bool time_interleaved() {
    int l2 = 0;
    MS_CHECK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    const bool flush = weights_.bytes() <= 2 * static_cast<int64_t>(l2);
    r_.kernel["l2_flushed"] = flush;
    r_.kernel["iterations"] = options_.iterations;
    r_.kernel["warmup"] = options_.warmup;
    const int32_t tok = token_at(timed_);
    for (int i = 0; i < options_.warmup; ++i) {
      gvm_->time_step_us(tok, timed_, flush);
      for (auto& base : bases_) base->time_step_us(tok, timed_, flush);
    }
    for (int i = 0; i < options_.iterations; ++i) {
      r_.samples_us.push_back(gvm_->time_step_us(tok, timed_, flush));
      for (size_t b = 0; b < bases_.size(); ++b)
        r_.baselines[b].samples_us.push_back(bases_[b]->time_step_us(tok, timed_, flush));
    }
    for (const auto& b : r_.baselines)
      if (b.kind == "cublas") r_.baseline_samples_us = b.samples_us;
    if (!gvm_->hung()) return true;
    r_.status = "hang";
    r_.message = "the megakernel hit its spin bound during timing";
    r_.samples_us.clear();
    return false;
  }

  /// Re-check after timing: the same logits as before timing (the kernel is deterministic) and,
  /// when the timed position is a checked one, the eager reference.
  bool recheck() {
    vm::StepOutput s = gvm_->step(token_at(timed_), timed_);
    if (s.status != "ok") {
      r_.status = s.status;
      r_.message = s.message + " (in the re-check after timing)";
      r_.hang_dump = s.hang_dump;
      r_.samples_us.clear();
      return false;
    }
    double drift = 0.0;
    for (size_t i = 0; i < s.logits.size() && i < timed_logits_.size(); ++i)
      drift = std::max(drift, static_cast<double>(std::abs(s.logits[i] - timed_logits_[i])));
    r_.kernel["recheck_max_abs_drift"] = drift;
    for (size_t i = 0; i < positions_.size(); ++i) {
      if (positions_[i] != timed_) continue;
      const Comparison c = compare_logits(s.logits, refs_[i], weights_.shape.dtype);
      if (!c.pass) {
        r_.status = "incorrect";
        r_.message = "GPU kernel differs from eager at position " + std::to_string(timed_) +
                     " after timing: rel_err " + fmt("%.4g", c.rel_err) + ", max_abs_err " +
                     fmt("%.4g", c.max_abs_err);
        r_.samples_us.clear();
        return false;
      }
    }
    if (drift == 0.0) return true;
    r_.status = "incorrect";
    r_.message = "GPU logits at position " + std::to_string(timed_) +
                 " changed after timing (max abs drift " + fmt("%.4g", drift) +
                 "): the kernel is not deterministic";
    r_.samples_us.clear();
    return false;
  }

  const schedule::Program& program_;
  const schedule::Weights& weights_;
  const std::vector<int32_t>& tokens_;
  const std::vector<std::vector<float>>& refs_;
  const std::vector<int>& positions_;
  const GpuTrialOptions& options_;
  GpuTrialResult r_;
  std::unique_ptr<vm::GpuVm> gvm_;
  std::vector<std::unique_ptr<Baseline>> bases_;  // in r_.baselines order
  int timed_ = 0;                                 // the position timed
  int last_ = 0;                                  // the last position run before timing
  std::vector<float> timed_logits_;
};

}  // namespace

GpuTrialResult run_gpu_trial(const schedule::Program& program, const schedule::Weights& weights,
                             const std::vector<int32_t>& tokens,
                             const std::vector<std::vector<float>>& refs,
                             const std::vector<int>& positions, const GpuTrialOptions& options) {
  return GpuTrial(program, weights, tokens, refs, positions, options).run();
}

}  // namespace megasched::eval
