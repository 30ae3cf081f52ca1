#include "eval/trial_reference.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "eval/eager.h"
#include "eval/evaluate.h"
#include "eval/gpu_reference.h"
#include "eval/oracle.h"
#include "eval/reference_forward.h"
#include "eval/timing.h"
#include "schedule/format.h"

namespace megasched::eval {

using nlohmann::json;
using schedule::ModelShape;
using Clock = std::chrono::steady_clock;

bool TrialReference::load(const EvaluatorOptions& options, std::string* error) {
  const auto t0 = Clock::now();
  const ModelShape& shape = weights_->shape;
  const bool gpu =
      options.reference == "gpu" || (options.reference == "auto" && options.device == "gpu");
  const std::string dir = options.reference_cache_dir.empty()     ? default_reference_cache_dir()
                          : options.reference_cache_dir == "none" ? ""
                                                                  : options.reference_cache_dir;
  const std::string weights_id = weights_identity(*weights_);
  std::vector<WindowOrigin> origins;
  auto make_engine = [&](std::string* why) -> std::unique_ptr<ReferenceForward> {
    if (!gpu) return std::make_unique<CpuEagerForward>(*weights_);
    auto engine = make_gpu_reference(*weights_, why);
    if (!engine) *why = "the GPU reference cannot run: " + *why;
    return engine;
  };
  // A line when the pass has run 2 s, then every 5 s: the CPU eager forward of `small` to
  // position 4099 takes minutes, once per cache directory.
  auto last_line = t0 - std::chrono::seconds(3);
  WindowProgress progress;
  if (options.progress)
    progress = [&](int done, int total) {
      const auto now = Clock::now();
      if (now - last_line < std::chrono::seconds(5) && done < total) return;
      if (done == total && last_line == t0 - std::chrono::seconds(3)) return;  // never slow
      last_line = now;
      char line[256];
      std::snprintf(line, sizeof line,
                    "reference windows (%s eager forward, once; then cached in %s): position "
                    "%d of %d, %.0f s",
                    gpu ? "GPU" : "CPU", dir.empty() ? "no cache" : dir.c_str(), done, total,
                    std::chrono::duration<double>(now - t0).count());
      options.progress(line);
    };
  auto windows = reference_windows(*weights_, weights_id, tokens_, checked_, options.check_steps,
                                   ReferenceCache(dir), make_engine, &origins, error, progress);
  if (!windows) return false;
  windows_ = std::move(*windows);
  json listed = json::array();
  for (const WindowOrigin& o : origins)
    listed.push_back(
        {{"start", o.start}, {"lookup", o.lookup}, {"engine", o.engine}, {"note", o.note}});
  info_ = {
      {"steps", options.check_steps},
      {"weights_id", weights_id},
      {"cache_dir", dir},
      {"engine_on_miss", gpu ? "gpu-eager" : "cpu-eager"},
      {"reference_vm",
       weights_->layout.total_elements <= options.reference_vm_walk_elements ? "walk" : "sampled"},
      {"windows", listed}};
  reference_vm_threads_ = options.reference_vm_threads > 0
                              ? options.reference_vm_threads
                              : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1,
                                           kReferenceVmAutoThreads);
  if (sampled()) info_["reference_vm_threads"] = reference_vm_threads_;
  if (!cross_check_gpu_window(error)) return false;
  for (const ReferenceWindow& w : windows_)
    for (size_t i = 0; i < w.logits.size(); ++i)
      // The reference itself is not finite: the model (its constants or weights) is at fault, and
      // every schedule would be blamed for it.
      if (!std::all_of(w.logits[i].begin(), w.logits[i].end(),
                       [](float x) { return std::isfinite(x); })) {
        *error = "model " + shape.name + ": the " + w.engine +
                 " forward gives non-finite logits at position " +
                 std::to_string(w.start + static_cast<int>(i)) +
                 " (check its rope_theta, rms_norm_eps and weights)";
        return false;
      }
  info_["load_ms"] = ms_since(t0);
  return true;
}

bool TrialReference::cross_check_gpu_window(std::string* error) {
  // The GPU engine's window at position 0, when it just computed one, against the CPU eager forward
  // (a few CPU steps): a GPU reference that disagrees is never used.
  const ReferenceWindow& w = windows_.front();
  if (w.start != 0 || w.engine != "gpu-eager") return true;
  for (const json& o : info_["windows"])
    if (o["start"] == 0 && o["lookup"] == "hit") return true;
  CpuEagerForward cpu(*weights_);
  const ReferenceWindow c =
      compute_windows(cpu, weights_->shape, tokens_, {0}, static_cast<int>(w.logits.size()))[0];
  json per = json::array();
  for (size_t i = 0; i < w.logits.size(); ++i) {
    const Comparison cmp = compare_logits(w.logits[i], c.logits[i], weights_->shape.dtype);
    per.push_back({{"position", i}, {"rel_err", cmp.rel_err}, {"pass", cmp.pass}});
    if (cmp.pass) continue;
    *error = "the GPU reference differs from the CPU eager forward at position " +
             std::to_string(i) + " (rel_err " + schedule::fmt("%.4g", cmp.rel_err) +
             "): the reference is not trusted; rerun with a CPU reference or report it";
    return false;
  }
  info_["cross_check_cpu"] = per;
  return true;
}

const ReferenceWindow* TrialReference::window_at(int position) const {
  for (const ReferenceWindow& w : windows_)
    if (position >= w.start && position < w.start + static_cast<int>(w.logits.size())) return &w;
  return nullptr;
}

const ReferenceWindow* TrialReference::nearest_window_at(int position) const {
  const ReferenceWindow* best = nullptr;
  for (const ReferenceWindow& w : windows_)
    if (position >= w.start && position < w.start + static_cast<int>(w.logits.size()) &&
        (!best || w.start > best->start))
      best = &w;
  return best;
}

bool TrialReference::record_reference_vm_check(int position, int start,
                                               const vm::ReferenceVm::StepResult& step,
                                               const std::vector<float>& ref, Verdict* v) const {
  const Comparison c = compare_logits(step.logits, ref, weights_->shape.dtype);
  v->max_abs_err = std::max(v->max_abs_err, c.max_abs_err);
  v->rel_err = std::max(v->rel_err, c.rel_err);
  if (!c.finite || std::isnan(c.rel_err)) v->rel_err = v->max_abs_err = INFINITY;
  cap_errors(v);
  v->argmax_match = v->argmax_match && c.argmax_match;
  const bool argmax_ok = step.argmax == argmax(step.logits);
  v->checks.push_back({{"path", "reference_vm"},
                       {"position", position},
                       {"window_start", start},
                       {"rel_err", std::isfinite(c.rel_err) ? c.rel_err : 1e300},
                       {"max_abs_err", std::isfinite(c.max_abs_err) ? c.max_abs_err : 1e300},
                       {"argmax_match", c.argmax_match},
                       {"worst_logit", worst_logit_json(c)},
                       {"pass", c.pass && argmax_ok}});
  if (!argmax_ok)
    v->notes.push_back("program argmax task wrote " + std::to_string(step.argmax) +
                       " at position " + std::to_string(position) + " but the logits' argmax is " +
                       std::to_string(argmax(step.logits)));
  if (!c.pass)
    v->notes.push_back("ReferenceVm differs from the reference at position " +
                       std::to_string(position) + ": rel_err " + std::to_string(c.rel_err) +
                       ", max_abs_err " + std::to_string(c.max_abs_err) +
                       (c.argmax_match ? "" : ", argmax differs"));
  return c.pass && argmax_ok;
}

bool TrialReference::check_reference_vm(const schedule::Program& program,
                                        const std::vector<int>& timed, Verdict* v) const {
  vm::ReferenceVm ref(program, *weights_);
  // Sampled: the timed position alone (each objective position), from the reference KV cache
  // (a large model's ReferenceVm step takes most of a second on one thread: it runs in waves on
  // reference_vm_threads_, the same logits as in queue order). Loading a later position's KV
  // overwrites every row the earlier step read or wrote. A window's cache is the one before its
  // start: the window that starts last at or before p is taken (the one starting at p whenever the
  // timed position is a checked one), and its steps before p are run first (windows overlap when
  // checked positions are closer than the steps a window holds: [0, 2, 3, 4], three steps each).
  if (info_.value("reference_vm", "") == "sampled") {
    ref.set_threads(reference_vm_threads_);
    bool ok = true;
    for (const int p : timed) {
      const ReferenceWindow* w = nearest_window_at(p);
      if (!ref.load_kv(w->kv)) {
        v->notes.push_back("the reference KV cache does not fit the program's model");
        return false;
      }
      vm::ReferenceVm::StepResult step;
      for (int q = w->start; q <= p; ++q) {
        step = ref.step(tokens_[static_cast<size_t>(q)], q, vm::RunOrder::kWaves);
        if (!step.completed) {
          v->notes.push_back("ReferenceVm could not finish position " + std::to_string(q) + ": " +
                             step.stuck);
          return false;
        }
      }
      ok = record_reference_vm_check(p, w->start, step,
                                     w->logits[static_cast<size_t>(p - w->start)], v) &&
           ok;
    }
    return ok;
  }
  // Walk: every position from 0 to the last window position, its own KV cache throughout.
  bool ok = true;
  const int end = windows_.back().start + static_cast<int>(windows_.back().logits.size());
  for (int p = 0; p < end; ++p) {
    const auto step = ref.step(tokens_[static_cast<size_t>(p)], p);
    if (!step.completed) {
      v->notes.push_back("ReferenceVm could not finish position " + std::to_string(p) + ": " +
                         step.stuck);
      return false;
    }
    const ReferenceWindow* w = nearest_window_at(p);
    if (w)
      ok = record_reference_vm_check(p, 0, step, w->logits[static_cast<size_t>(p - w->start)], v) &&
           ok;
  }
  return ok;
}

}  // namespace megasched::eval
