// One stamped decode step on the GPU (`megasched profile`): build the megakernel with per-task
// stamps (vm::GpuVmOptions::profile), fill the KV cache by running positions 0 .. P-1, run the
// warm-up steps at P, then one stamped step at P, and analyse it (eval/profile.h). Stamping adds a
// timer read and a block barrier per task: the times locate the step's time, they are not its
// latency.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "schedule/model.h"
#include "schedule/program.h"

namespace megasched::eval {

struct ProfileRunOptions {
  int position = 0;    // the position profiled
  int32_t token = -1;  // the token fed there; -1: the seeded token sequence of evaluate
  int warmup = 3;      // unstamped steps at `position` before the stamped one
  uint64_t seed = 0;   // the token sequence's seed
};

struct ProfileRun {
  /// "ok"; "unfinished" (the stamped step hung or timed out: `doc` holds what ran); "failed" (a
  /// step before it did not finish); "rejected" (the grid is not co-resident, nothing launched);
  /// "error" (the build, the driver or the device failed).
  std::string status;
  std::string message;  // one line when status != "ok"
  /// When the stamped step ran: {"model", "device", "position", "token", "warmup", "status",
  /// "argmax", "wall_us", "kernel_info", "note"} and analyze_profile's analysis (or "message" and
  /// "hang_dump" when it did not finish).
  nlohmann::json doc;
};

/// Profiles `program` (validated by the caller) with `weights` on the live device.
ProfileRun profile_on_gpu(const schedule::Program& program, const schedule::Weights& weights,
                          const ProfileRunOptions& options);

}  // namespace megasched::eval
