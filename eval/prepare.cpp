#include "eval/prepare.h"

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
  prepared.program = schedule::lower(shape, target, config, &prepared.error);
  if (prepared.program) prepared.report = schedule::validate(*prepared.program, target);
  return prepared;
}

}  // namespace megasched::eval
