// Lower, then validate: how every path that runs a config gets its program (evaluate, generate,
// profile, the GPU benchmark), so nothing reaches a VM that the validator has not seen.
#pragma once

#include <optional>
#include <string>

#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/program.h"
#include "schedule/target.h"
#include "schedule/validate.h"

namespace megasched::eval {

/// A config made into a program for one shape and target, and what the validator says of it.
struct PreparedProgram {
  std::optional<schedule::Program> program;  // nullopt: the config does not lower (see error)
  std::string error;                         // why it does not lower
  schedule::ValidationReport report;         // the validator's diagnostics (empty: safe)
  double lower_ms = 0.0;                     // wall time of lower()
  double validate_ms = 0.0;                  // wall time of validate() (0 when it did not lower)

  /// Lowered and safe to run.
  bool ok() const { return program.has_value() && report.ok(); }
  /// "the program is unsafe (<rules>): <the first diagnostic>", for a program that lowered.
  std::string unsafe_message() const;
};

PreparedProgram prepare_program(const schedule::ModelShape& shape,
                                const schedule::GpuTarget& target,
                                const schedule::ScheduleConfig& config);

}  // namespace megasched::eval
