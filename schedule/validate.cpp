#include "schedule/validate.h"

#include <algorithm>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "schedule/validate_rules.h"

// How the rules are decided (dev/validator_notes.md has the argument in full):
//   - Footprints (schedule/footprint.h) over-approximate every task's element accesses.
//   - Deadlock is an exact greedy simulation: counters only grow and running a task only adds
//     increments, so running every ready task as soon as it is ready reaches the unique maximal
//     state; a program deadlocks iff that state leaves a queue undrained. With a dynamic queue the
//     claimed prefix grows whenever a worker is free, which the simulation does the same way.
//   - Happens-before edges: queue order (static queues only) and, for each wait (c, t), the
//     producers it guarantees ("joins"): p is guaranteed when the producers that could have
//     signalled without p (the others, less those known to run after p) add less than t.
//   - Races: for every read, every overlapping writer must happen before the reader. The check is
//     O(1) per (writer, reader) pair in the common cases (same queue and earlier; a guaranteed
//     producer of one of the reader's waits; a whole run of writers signalling a counter the reader
//     waits for in full) and otherwise a backward search from the reader over the edges above,
//     done once per reader and cached. No quadratic structure is ever allocated.
// Each rule family has its own file (schedule/validate_rules.h lists them); this one runs them in
// order over one context and caps the diagnostics per rule.
namespace megasched::schedule {
namespace validate_rules {

void Context::add(Diagnostic d) {
  size_t& count = counts[d.rule];
  if (count++ < kMaxDiagnosticsPerRule) report.diagnostics.push_back(std::move(d));
}

void Context::add(const std::string& rule, const std::string& message, std::vector<uint32_t> tasks,
                  std::vector<uint32_t> counters, std::vector<std::string> buffers) {
  add(Diagnostic{rule, message, std::move(tasks), std::move(counters), std::move(buffers)});
}

void Context::finish() {
  for (const auto& [rule, count] : counts) {
    if (count > kMaxDiagnosticsPerRule) {
      add(Diagnostic{rule,
                     "... and " + std::to_string(count - kMaxDiagnosticsPerRule) + " more " + rule +
                         " violations (the first " + std::to_string(kMaxDiagnosticsPerRule) +
                         " are listed)",
                     {},
                     {},
                     {}});
      report.diagnostics.back().rule = rule;
    }
  }
}

namespace {

// The rules in order: each later one reads what the earlier ones filled in (validate_rules.h).
ValidationReport check_all(const Program& program, const GpuTarget& target) {
  Context cx(program, target);
  check_launch(cx);
  check_structure(cx);
  collect_producers(cx);
  check_chains(cx);
  check_reachability(cx);
  check_deadlock(cx);
  HappensBefore hb(cx);
  hb.build();
  check_accesses(cx, hb);
  cx.finish();
  return std::move(cx.report);
}

}  // namespace
}  // namespace validate_rules

std::string ValidationReport::rules() const {
  std::vector<std::string> seen;
  for (const Diagnostic& d : diagnostics)
    if (std::find(seen.begin(), seen.end(), d.rule) == seen.end()) seen.push_back(d.rule);
  std::string out;
  for (const std::string& r : seen) out += (out.empty() ? "" : ",") + r;
  return out;
}

ValidationReport validate(const Program& program, const GpuTarget& target) {
  if (program.tasks.size() >= UINT32_MAX) {
    ValidationReport r;
    r.diagnostics.push_back(
        {"structure", "the program has more tasks than a 32-bit task id can name", {}, {}, {}});
    return r;
  }
  try {
    return validate_rules::check_all(program, target);
  } catch (const std::exception& e) {
    ValidationReport r;
    r.diagnostics.push_back({"structure",
                             std::string("the program could not be analysed (") + e.what() +
                                 "); it is too large for this machine's memory",
                             {},
                             {},
                             {}});
    return r;
  }
}

nlohmann::json to_json(const Diagnostic& d) {
  return {{"rule", d.rule},
          {"message", d.message},
          {"tasks", d.tasks},
          {"counters", d.counters},
          {"buffers", d.buffers}};
}

nlohmann::json to_json(const ValidationReport& report) {
  nlohmann::json diags = nlohmann::json::array();
  for (const Diagnostic& d : report.diagnostics) diags.push_back(to_json(d));
  return {{"ok", report.ok()}, {"rules", report.rules()}, {"diagnostics", diags}};
}

}  // namespace megasched::schedule
