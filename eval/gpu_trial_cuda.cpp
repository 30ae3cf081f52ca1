// The GPU half of a trial on CUDA (see eval/gpu_trial.h): kernel correctness at every checked
// position, then interleaved timing of the megakernel and the cuBLAS graph baseline, then the
// correctness re-check. Every expected failure is a status; a failed driver call is `crash`.
#include "eval/gpu_trial.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "eval/baseline.h"
#include "eval/eager.h"
#include "eval/oracle.h"
#include "eval/timing.h"
#include "schedule/format.h"
#include "vm/cuda_check.h"
#include "vm/gpu_vm.h"
#include "vm/nvrtc_build.h"

namespace megasched::eval {

using json = nlohmann::json;
using schedule::fmt;

namespace {}  // namespace

std::string device_json_path() {
  const char* ws = std::getenv("MEGASCHED_WORKSPACE");
  return (std::filesystem::path(ws && *ws ? ws : "workspace") / "device.json").string();
}

bool gpu_available(std::string* why) {
  try {
    return vm::device_info(why).has_value();
  } catch (const vm::GpuError& e) {
    if (why) *why = e.what();
    return false;
  }
}

std::optional<schedule::GpuTarget> live_target(std::string* error) {
  std::optional<vm::DeviceInfo> d;
  try {
    d = vm::device_info(error);
  } catch (const vm::GpuError& e) {
    if (error) *error = e.what();
    return std::nullopt;
  }
  if (!d) return std::nullopt;
  schedule::GpuTarget t;
  // Datasheet bandwidth from the registry entry the device's name matches (none: 0, and the floor
  // uses the measured figure only).
  std::optional<schedule::GpuTarget> known = schedule::find_target(d->name);
  if (!known) {
    std::string upper = d->name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const schedule::GpuTarget& r : schedule::target_registry()) {
      std::string key = r.name;
      for (char& c : key) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (upper.find(key) != std::string::npos && r.sm_arch == d->sm_arch) known = r;
    }
  }
  t.name = d->name;
  t.sm_arch = d->sm_arch;
  t.num_sms = d->num_sms;
  t.smem_per_sm = d->smem_per_sm;
  t.smem_per_block_optin = d->smem_per_block_optin;
  t.regs_per_sm = d->regs_per_sm;
  t.max_threads_per_sm = d->max_threads_per_sm;
  t.max_blocks_per_sm = d->max_blocks_per_sm;
  t.l2_bytes = d->l2_bytes;
  t.hbm_bytes = d->hbm_bytes;
  t.datasheet_bw_gbs = known ? known->datasheet_bw_gbs : 0.0;
  t.source = "live";
  std::ifstream in(device_json_path());
  if (in) {
    const json j = json::parse(in, nullptr, false);
    if (j.is_object() && j.value("name", "") == d->name &&
        j.value("pci_bus_id", "") == d->pci_bus_id) {
      t.measured_bw_gbs = j.value("measured_bw_gbs", 0.0);
    }
  }
  return t;
}

std::optional<double> measure_stream_bandwidth(int64_t buffer_bytes, int repeats,
                                               std::vector<double>* samples_gbs,
                                               std::string* error) {
  try {
    std::string why;
    const auto d = vm::device_info(&why);
    if (!d) {
      *error = why;
      return std::nullopt;
    }
    schedule::ModelShape shape;  // the probe kernel does not depend on the model: any valid build
    shape.head_dim = 64;
    shape.dtype = schedule::DType::kBF16;
    vm::BuildRequest req;
    req.entry = "vm/device/baseline.cuh";
    req.defines = vm::baseline_defines(shape);
    req.sm_arch = d->sm_arch;
    req.cache_dir = vm::default_cache_dir();
    const vm::BuildResult build = vm::build_cubin(req);
    if (!build.ok) {
      *error = build.error;
      return std::nullopt;
    }
    CUfunction fn =
        static_cast<CUfunction>(vm::load_functions(build.cubin, build.key, {"ms_stream_read"})[0]);
    const uint64_t n_vec = static_cast<uint64_t>(buffer_bytes) / 16;
    void* buf = nullptr;
    void* sink = nullptr;
    MS_CHECK_CUDA(cudaMalloc(&buf, n_vec * 16));
    MS_CHECK_CUDA(cudaMalloc(&sink, 16));
    MS_CHECK_CUDA(cudaMemset(buf, 0x5a, n_vec * 16));
    cudaStream_t stream = static_cast<cudaStream_t>(vm::shared_stream());
    cudaEvent_t e0, e1;
    MS_CHECK_CUDA(cudaEventCreate(&e0));
    MS_CHECK_CUDA(cudaEventCreate(&e1));
    int per_sm = 0;
    MS_CHECK_CUDA(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, 512, 0));
    const unsigned grid = static_cast<unsigned>(std::max(per_sm, 1) * d->num_sms);
    uint32_t never = 0x12345678u;
    std::vector<double> gbs;
    for (int i = 0; i < repeats + 2; ++i) {
      void* params[] = {&buf, const_cast<uint64_t*>(&n_vec), &never, &sink};
      MS_CHECK_CUDA(cudaEventRecord(e0, stream));
      MS_CHECK_CUDA(cuLaunchKernel(fn, grid, 1, 1, 512, 1, 1, 0, stream, params, nullptr));
      MS_CHECK_CUDA(cudaEventRecord(e1, stream));
      MS_CHECK_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      MS_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 2) gbs.push_back(static_cast<double>(n_vec * 16) / (ms * 1e-3) / 1e9);  // 2 warm-ups
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(buf);
    cudaFree(sink);
    if (samples_gbs) *samples_gbs = gbs;
    return sample_stats(gbs).median;
  } catch (const vm::GpuError& e) {
    *error = e.what();
    return std::nullopt;
  }
}

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
