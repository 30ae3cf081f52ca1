#include "eval/prepare.h"

#include <chrono>

#include "schedule/lower.h"

namespace megasched::eval {

std::string PreparedProgram::unsafe_message() const {
  return "the program is unsafe (" + report.rules() +
         "): " + (report.diagnostics.empty() ? std::string() : report.diagnostics.front().message);
}

PreparedProgram prepare_program(const schedule::ModelShape& shape,
                                const schedule::GpuTarget& target,
                                const schedule::ScheduleConfig& config) {
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  PreparedProgram prepared;
  const auto t0 = Clock::now();
  prepared.program = schedule::lower(shape, target, config, &prepared.error);
  const auto t1 = Clock::now();
  prepared.lower_ms = ms(t0, t1);
  if (prepared.program) {
    prepared.report = schedule::validate(*prepared.program, target);
    prepared.validate_ms = ms(t1, Clock::now());
  }
  return prepared;
}

}  // namespace megasched::eval
