#include "eval/prepare.h"

#include <chrono>

#include "eval/timing.h"

#include "schedule/lower.h"

namespace megasched::eval {

std::string PreparedProgram::unsafe_message() const {
  return "the program is unsafe (" + report.rules() +
         "): " + (report.diagnostics.empty() ? std::string() : report.diagnostics.front().message);
}

PreparedProgram prepare_program(const schedule::ModelShape& shape,
                                const schedule::GpuTarget& target,
                                const schedule::ScheduleConfig& config) {
  PreparedProgram prepared;
  const auto t0 = std::chrono::steady_clock::now();
  prepared.program = schedule::lower(shape, target, config, &prepared.error);
  prepared.lower_ms = ms_since(t0);
  if (prepared.program) {
    const auto t1 = std::chrono::steady_clock::now();
    prepared.report = schedule::validate(*prepared.program, target);
    prepared.validate_ms = ms_since(t1);
  }
  return prepared;
}

}  // namespace megasched::eval
