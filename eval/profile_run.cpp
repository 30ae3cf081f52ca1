#include "eval/profile_run.h"

#include <exception>
#include <vector>

#include "eval/evaluate.h"
#include "eval/profile.h"
#include "vm/cuda_runtime.h"
#include "vm/gpu_vm.h"

namespace megasched::eval {

ProfileRun profile_on_gpu(const schedule::Program& program, const schedule::Weights& weights,
                          const ProfileRunOptions& options) {
  ProfileRun run;
  auto fail = [&run](const std::string& status, const std::string& message) {
    run.status = status;
    run.message = message;
    return run;
  };
  try {
    vm::GpuVmOptions vo;
    vo.profile = true;
    bool rejected = false;
    std::string error;
    auto gvm = vm::GpuVm::create(program, weights, vo, &error, &rejected);
    if (!gvm) return fail(rejected ? "rejected" : "error", error);
    const int p = options.position;
    const std::vector<int32_t> tokens = trial_tokens(weights.shape.vocab, p + 1, options.seed);
    const int32_t token = options.token >= 0 ? options.token : tokens[static_cast<size_t>(p)];
    // The KV cache up to p - 1, then the warm-up at p (evaluate's timed steps repeat p too).
    auto step_fails = [&](int32_t tok, int at) {
      const vm::StepOutput s = gvm->step(tok, at);
      if (s.status != "ok")
        fail("failed", s.status + " at position " + std::to_string(at) + ": " + s.message);
      return s.status != "ok";
    };
    for (int q = 0; q < p; ++q)
      if (step_fails(tokens[static_cast<size_t>(q)], q)) return run;
    for (int i = 0; i < options.warmup; ++i)
      if (step_fails(token, p)) return run;
    const vm::ProfileOutput prof = gvm->profile_step(token, p);
    std::string why, device;
    if (auto d = vm::device_info(&why)) device = d->name;
    run.doc = {
        {"model", weights.shape.name},
        {"device", device},
        {"position", p},
        {"token", token},
        {"warmup", options.warmup},
        {"status", prof.step.status},
        {"argmax", prof.step.argmax},
        {"wall_us", prof.wall_us},
        {"kernel_info", gvm->kernel_info()},
        {"note",
         "stamping adds a timer read and a block barrier per task: these times show where the "
         "step's time goes, they are not its latency (measure that with `megasched evaluate "
         "--device gpu`)"}};
    if (prof.stamps.size() == program.tasks.size())
      run.doc.update(analyze_profile(program, prof.stamps, prof.wall_us));
    if (prof.step.status != "ok") {
      run.doc["message"] = prof.step.message;
      run.doc["hang_dump"] = prof.step.hang_dump;
      return fail("unfinished", "the profiled step did not finish (" + prof.step.status +
                                    "): " + prof.step.message);
    }
    run.status = "ok";
    return run;
  } catch (const std::exception& e) {
    return fail("error", e.what());
  }
}

}  // namespace megasched::eval
