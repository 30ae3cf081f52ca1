// The GPU half of a trial on CUDA (see eval/gpu_trial.h): kernel correctness at every checked
// position, then interleaved timing of the megakernel and the cuBLAS graph baseline, then the
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

namespace {}  // namespace

GpuTrialResult run_gpu_trial(const schedule::Program& program, const schedule::Weights& weights,
                             const std::vector<int32_t>& tokens,
                             const std::vector<std::vector<float>>& refs,
                             const std::vector<int>& positions, const GpuTrialOptions& options) {
  GpuTrialResult r;
  if (positions.empty() || refs.size() != positions.size() || tokens.empty()) {
    r.status = "crash";
    r.message = "run_gpu_trial needs one reference per checked position and at least one token";
    return r;
  }
  try {
    vm::GpuVmOptions vo;
    vo.hang_timeout_s = options.hang_timeout_s;
    vo.force_launch = options.force_launch;
    std::string error;
    bool rejected = false;
    std::unique_ptr<vm::GpuVm> gvm = vm::GpuVm::create(program, weights, vo, &error, &rejected);
    if (!gvm) {
      r.status = rejected ? "rejected" : "crash";
      r.message = error;
      return r;
    }
    r.kernel = gvm->kernel_info();
    const schedule::DType dtype = weights.shape.dtype;
    const int max_checked = *std::max_element(positions.begin(), positions.end());
    const int timed = options.timed_position >= 0 ? options.timed_position : max_checked;
    r.timed_position = timed;
    const int last = std::max(max_checked, timed);
    auto token_at = [&](int p) { return tokens[static_cast<size_t>(p) % tokens.size()]; };

    // Kernel correctness: every position up to the last one runs (the KV cache fills); the checked
    // ones are compared with the eager logits.
    r.argmax_match = true;
    bool ok = true;
    std::vector<std::string> evidence;
    std::vector<float> timed_logits;
    json checks = json::array();
    for (int p = 0; p <= last; ++p) {
      vm::StepOutput s = gvm->step(token_at(p), p);
      if (s.status != "ok") {
        r.status = s.status;
        r.message = s.message;
        r.hang_dump = s.hang_dump;
        return r;
      }
      if (p == timed) timed_logits = s.logits;
      for (size_t i = 0; i < positions.size(); ++i) {
        if (positions[i] != p) continue;
        const Comparison c = compare_logits(s.logits, refs[i], dtype);
        r.max_abs_err = std::max(r.max_abs_err, c.max_abs_err);
        r.rel_err = std::max(r.rel_err, c.rel_err);
        r.argmax_match = r.argmax_match && c.argmax_match;
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
    r.kernel["checks"] = checks;
    if (!ok) {
      r.status = "incorrect";
      r.message = evidence.front();
      r.kernel["evidence"] = evidence;
      return r;
    }

    // The baseline, filled to the same position; its own accuracy is reported, not gated.
    std::unique_ptr<CublasBaseline> base;
    if (options.time_baseline) {
      std::string berr;
      base = CublasBaseline::create(weights, &berr);
      if (!base) {
        r.kernel["baseline_error"] = berr;
      } else {
        json bchecks = json::array();
        for (int p = 0; p <= timed; ++p) {
          const std::vector<float> logits = base->step(token_at(p), p);
          for (size_t i = 0; i < positions.size(); ++i) {
            if (positions[i] != p) continue;
            const Comparison c = compare_logits(logits, refs[i], dtype);
            bchecks.push_back({{"position", p},
                               {"rel_err", c.rel_err},
                               {"max_abs_err", c.max_abs_err},
                               {"argmax_match", c.argmax_match}});
          }
        }
        r.kernel["baseline"] = base->info();
        r.kernel["baseline"]["checks"] = bchecks;
      }
    }

    // Timing: warm-up, then interleaved megakernel / baseline iterations, L2 flushed between
    // iterations when the model's bytes fit in twice the L2 (otherwise each step streams from HBM
    // anyway and the flush would only add noise).
    int l2 = 0;
    MS_CHECK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    const bool flush = weights.bytes() <= 2 * static_cast<int64_t>(l2);
    r.kernel["l2_flushed"] = flush;
    r.kernel["iterations"] = options.iterations;
    r.kernel["warmup"] = options.warmup;
    const int32_t tok = token_at(timed);
    for (int i = 0; i < options.warmup; ++i) {
      gvm->time_step_us(tok, timed, flush);
      if (base) base->time_step_us(tok, timed, flush);
    }
    for (int i = 0; i < options.iterations; ++i) {
      r.samples_us.push_back(gvm->time_step_us(tok, timed, flush));
      if (base) r.baseline_samples_us.push_back(base->time_step_us(tok, timed, flush));
    }
    if (gvm->hung()) {
      r.status = "hang";
      r.message = "the megakernel hit its spin bound during timing";
      r.samples_us.clear();
      return r;
    }

    // Re-check after timing: the same logits as before timing (the kernel is deterministic) and,
    // when the timed position is a checked one, the eager reference.
    vm::StepOutput s = gvm->step(tok, timed);
    if (s.status != "ok") {
      r.status = s.status;
      r.message = s.message + " (in the re-check after timing)";
      r.hang_dump = s.hang_dump;
      r.samples_us.clear();
      return r;
    }
    double drift = 0.0;
    for (size_t i = 0; i < s.logits.size() && i < timed_logits.size(); ++i) {
      drift = std::max(drift, static_cast<double>(std::abs(s.logits[i] - timed_logits[i])));
    }
    r.kernel["recheck_max_abs_drift"] = drift;
    for (size_t i = 0; i < positions.size(); ++i) {
      if (positions[i] != timed) continue;
      const Comparison c = compare_logits(s.logits, refs[i], dtype);
      if (!c.pass) {
        r.status = "incorrect";
        r.message = "GPU kernel differs from eager at position " + std::to_string(timed) +
                    " after timing: rel_err " + fmt("%.4g", c.rel_err) + ", max_abs_err " +
                    fmt("%.4g", c.max_abs_err);
        r.samples_us.clear();
        return r;
      }
    }
    if (drift != 0.0) {
      r.status = "incorrect";
      r.message = "GPU logits at position " + std::to_string(timed) +
                  " changed after timing (max abs drift " + fmt("%.4g", drift) +
                  "): the kernel is not deterministic";
      r.samples_us.clear();
      return r;
    }
    r.status = "ok";
    return r;
  } catch (const vm::GpuError& e) {
    r.status = "crash";
    r.message = e.what();
    r.samples_us.clear();
    return r;
  }
}

}  // namespace megasched::eval
