// The GPU half of a trial on CUDA (see eval/gpu_trial.h): kernel correctness over every reference
// window (its KV cache loaded, then consecutive steps), then interleaved timing of the megakernel
// and every baseline kind, then the
// correctness re-check. Every expected failure is a status; a failed driver call is `crash`.
#include "eval/gpu_trial.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "eval/baselines/baseline.h"
#include "eval/eager.h"
#include "eval/oracle.h"
#include "eval/timing.h"
#include "schedule/format.h"
#include "vm/cuda_check.h"
#include "vm/gpu_vm.h"

namespace megasched::eval {

using json = nlohmann::json;
using schedule::fmt;

/// One kind's baseline as built and checked by the first trial that selected it: the baseline
/// (null when it could not be built) with its info, or the error.
struct CachedBaseline {
  std::unique_ptr<Baseline> base;
  json info;
  std::string error;
};

struct BaselineCache {
  std::map<std::string, CachedBaseline> kinds;
};

std::shared_ptr<BaselineCache> make_baseline_cache() { return std::make_shared<BaselineCache>(); }

namespace {

/// One GPU trial: the VM, the checked positions and their eager logits, and the result being
/// filled. Each phase returns false when the trial ends there (its status set).
class GpuTrial {
 public:
  GpuTrial(const schedule::Program& program, const schedule::Weights& weights,
           const std::vector<int32_t>& tokens, const std::vector<ReferenceWindow>& windows,
           const GpuTrialOptions& options)
      : program_(program),
        weights_(weights),
        tokens_(tokens),
        windows_(windows),
        options_(options) {}

  GpuTrialResult run() {
    if (const std::string why = check_windows(); !why.empty()) return fail("crash", why);
    try {
      if (!phase("compile_and_load", [&] { return create(); })) return std::move(r_);
      const bool checked = phase("gpu_check", [&] { return check_kernel(); });
      if (r_.phases_ms.contains("kv_load"))  // gpu_check is the steps alone
        r_.phases_ms["gpu_check"] = std::max(
            0.0, r_.phases_ms["gpu_check"].get<double>() - r_.phases_ms["kv_load"].get<double>());
      if (!checked) return std::move(r_);
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
  int32_t token_at(int p) const { return tokens_[static_cast<size_t>(p)]; }

  /// Why the windows cannot drive a trial ("" when they can): ascending starts, tokens for every
  /// window position, the timed position inside a window.
  std::string check_windows() {
    if (windows_.empty()) return "run_gpu_trial needs at least one reference window";
    const ReferenceWindow& last = windows_.back();
    timed_ = options_.timed_position >= 0 ? options_.timed_position
                                          : last.start + static_cast<int>(last.logits.size()) - 1;
    bool timed_in = false;
    for (size_t i = 0; i < windows_.size(); ++i) {
      const ReferenceWindow& w = windows_[i];
      const int end = w.start + static_cast<int>(w.logits.size());
      if (w.logits.empty() || (i > 0 && w.start <= windows_[i - 1].start) ||
          end > static_cast<int>(tokens_.size()) || w.kv.positions != w.start)
        return "run_gpu_trial: window " + std::to_string(i) + " (start " + std::to_string(w.start) +
               ") is empty, out of order, past the tokens or has a KV snapshot of another length";
      timed_in = timed_in || (timed_ >= w.start && timed_ < end);
    }
    if (!timed_in)
      return "run_gpu_trial: the timed position " + std::to_string(timed_) +
             " lies in no reference window";
    r_.timed_position = timed_;
    return "";
  }

  bool create() {
    vm::GpuVmOptions vo;
    vo.hang_timeout_s = options_.hang_timeout_s;
    vo.force_launch = options_.force_launch;
    vo.test_defines = options_.test_kernel_defines;
    std::string error;
    bool rejected = false;
    gvm_ = vm::GpuVm::create(program_, weights_, vo, &error, &rejected);
    if (!gvm_) {
      r_.status = rejected ? "rejected" : "crash";
      r_.message = error;
      return false;
    }
    r_.kernel = gvm_->kernel_info();
    return true;
  }

  /// Kernel correctness: for each window, the reference KV cache of the positions before it is
  /// loaded and the kernel steps through the window; every position with reference logits is
  /// compared. Later windows' loads rewrite the earlier positions with the same reference values
  /// (one token sequence), so the state at the timed position is the reference's when timing runs.
  bool check_kernel() {
    r_.argmax_match = true;
    bool ok = true;
    std::vector<std::string> evidence;
    double load_ms = 0.0;
    for (const ReferenceWindow& w : windows_) {
      const auto t_load = std::chrono::steady_clock::now();
      std::string error;
      if (!gvm_->load_kv(w.kv, &error)) return fail_bool("crash", error);
      load_ms += ms_since(t_load);
      for (size_t i = 0; i < w.logits.size(); ++i) {
        const int p = w.start + static_cast<int>(i);
        vm::StepOutput s = gvm_->step(token_at(p), p);
        if (s.status != "ok") {
          r_.status = s.status;
          r_.message = s.message;
          r_.hang_dump = s.hang_dump;
          return false;
        }
        if (p == timed_) timed_logits_ = s.logits;
        if (w.logits[i].empty()) continue;
        ok = compare(s, w.logits[i], p, w.start, &evidence) && ok;
      }
    }
    r_.phases_ms["kv_load"] = load_ms;
    r_.kernel["checks"] = r_.checks;
    if (ok) return true;
    r_.status = "incorrect";
    r_.message = evidence.front();
    r_.kernel["evidence"] = evidence;
    return false;
  }

  bool fail_bool(const std::string& status, const std::string& message) {
    r_.status = status;
    r_.message = message;
    return false;
  }

  /// One position's logits and argmax against the reference; the check goes into r_.checks.
  bool compare(const vm::StepOutput& s, const std::vector<float>& ref, int p, int start,
               std::vector<std::string>* evidence) {
    const Comparison c = compare_logits(s.logits, ref, weights_.shape.dtype);
    r_.max_abs_err = std::max(r_.max_abs_err, c.max_abs_err);
    r_.rel_err = std::max(r_.rel_err, c.rel_err);
    r_.argmax_match = r_.argmax_match && c.argmax_match;
    const bool argmax_task_ok = s.argmax == argmax(s.logits);
    r_.checks.push_back({{"path", "gpu"},
                         {"position", p},
                         {"window_start", start},
                         {"rel_err", std::isfinite(c.rel_err) ? c.rel_err : 1e300},
                         {"max_abs_err", std::isfinite(c.max_abs_err) ? c.max_abs_err : 1e300},
                         {"argmax_match", c.argmax_match},
                         {"kernel_argmax", s.argmax},
                         {"worst_logit", worst_logit_json(c)},
                         {"pass", c.pass && argmax_task_ok}});
    if (!c.pass)
      evidence->push_back("GPU kernel differs from the reference at position " + std::to_string(p) +
                          ": rel_err " + fmt("%.4g", c.rel_err) + ", max_abs_err " +
                          fmt("%.4g", c.max_abs_err) + (c.finite ? "" : ", non-finite logits") +
                          (c.argmax_match ? "" : ", argmax differs"));
    if (!argmax_task_ok)
      evidence->push_back("kernel argmax task wrote " + std::to_string(s.argmax) + " at position " +
                          std::to_string(p) + " but the logits' argmax is " +
                          std::to_string(argmax(s.logits)));
    return c.pass && argmax_task_ok;
  }

  /// The selected baseline kinds (their own accuracy is reported, not gated), from the options'
  /// cache when an earlier trial built them, else built and checked here (build_baseline).
  void start_baseline() {
    for (const std::string& kind : baselines_for(options_.baselines, weights_.shape)) {
      CachedBaseline built;
      CachedBaseline* b = &built;
      bool reused = false;
      if (options_.baseline_cache) {
        auto& kinds = options_.baseline_cache->kinds;
        reused = kinds.count(kind) > 0;
        b = &kinds[kind];
      }
      if (!reused) build_baseline(kind, b);
      if (!b->base) {
        r_.kernel["baseline_errors"][kind] = b->error;
        continue;
      }
      json info = b->info;
      info["reused"] = reused;  // built and checked by an earlier trial of these weights
      if (kind == "cublas") r_.kernel["baseline"] = info;
      r_.kernel["baselines"][kind] = info;
      r_.baselines.push_back({kind, {}});
      bases_.push_back(b->base.get());
      if (b == &built) owned_.push_back(std::move(built.base));
    }
  }

  /// Builds the baseline of `kind` into *b and checks it over the first window when that starts
  /// at 0; its timing at the timed position later reads a KV cache filled only that far, which
  /// changes no work (attention reads every position up to it either way).
  void build_baseline(const std::string& kind, CachedBaseline* b) {
    const ReferenceWindow& first = windows_.front();
    const int filled = first.start == 0 ? static_cast<int>(first.logits.size()) : 0;
    b->base = create_baseline(kind, weights_, &b->error);
    if (!b->base) return;
    json checks = json::array();
    for (int p = 0; p < filled; ++p) {
      const std::vector<float> logits = b->base->step(token_at(p), p);
      const std::vector<float>& ref = first.logits[static_cast<size_t>(p)];
      if (ref.empty()) continue;
      const Comparison c = compare_logits(logits, ref, weights_.shape.dtype);
      checks.push_back({{"position", p},
                        {"rel_err", c.rel_err},
                        {"max_abs_err", c.max_abs_err},
                        {"argmax_match", c.argmax_match}});
    }
    b->info = b->base->info();
    b->info["checks"] = checks;
    b->info["kv_filled_to"] = filled;
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
      if (options_.stop_above_us > 0.0 && i + 1 == options_.stop_check_iterations &&
          i + 1 < options_.iterations) {
        const double median = sample_stats(r_.samples_us).median;
        if (median > options_.stop_above_us) {
          r_.kernel["timing_stopped"] = {{"after_iterations", i + 1},
                                         {"median_us", median},
                                         {"above_us", options_.stop_above_us}};
          r_.kernel["iterations"] = i + 1;
          break;
        }
      }
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
    for (const ReferenceWindow& w : windows_) {
      const int i = timed_ - w.start;
      if (i < 0 || i >= static_cast<int>(w.logits.size()) ||
          w.logits[static_cast<size_t>(i)].empty())
        continue;
      const Comparison c =
          compare_logits(s.logits, w.logits[static_cast<size_t>(i)], weights_.shape.dtype);
      if (!c.pass) {
        r_.status = "incorrect";
        r_.message = "GPU kernel differs from the reference at position " + std::to_string(timed_) +
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
  const std::vector<ReferenceWindow>& windows_;
  const GpuTrialOptions& options_;
  GpuTrialResult r_;
  std::unique_ptr<vm::GpuVm> gvm_;
  std::vector<Baseline*> bases_;                  // in r_.baselines order
  std::vector<std::unique_ptr<Baseline>> owned_;  // those built for this trial alone (no cache)
  int timed_ = 0;                                 // the position timed
  std::vector<float> timed_logits_;
};

}  // namespace

GpuTrialResult run_gpu_trial(const schedule::Program& program, const schedule::Weights& weights,
                             const std::vector<int32_t>& tokens,
                             const std::vector<ReferenceWindow>& windows,
                             const GpuTrialOptions& options) {
  return GpuTrial(program, weights, tokens, windows, options).run();
}

}  // namespace megasched::eval
