// The validator's rule families (private to validate(), schedule/validate.h), one file each, over
// one shared Context:
//   validate_launch.cpp     launch: the launch shape, launch_misfits and build_misfits
//   validate_structure.cpp  structure: operands, footprints, queues, regions, last arrivers
//   validate_deadlock.cpp   reachability (counter totals, wait thresholds) and deadlock (the
//                           greedy simulation of monotone counters)
//   validate_race.cpp       races: the guaranteed happens-before (HappensBefore), every read
//                           against its overlapping writers, tagged reads
//   validate_coverage.cpp   coverage: each element written once, every read covered by a write
//                           or an input, the logits written
// validate.cpp runs them in that order (structure fills the footprints, deadlock the producers and
// the tasks that ran, which the later rules read) and caps the diagnostics per rule.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "schedule/footprint.h"
#include "schedule/program.h"
#include "schedule/target.h"
#include "schedule/validate.h"

namespace megasched::schedule::validate_rules {

inline constexpr size_t kMaxDiagnosticsPerRule = 200;

inline std::string fmt_range(uint32_t buffer, uint64_t begin, uint64_t end) {
  return std::string(buffer_name(buffer)) + "[" + std::to_string(begin) + ":" +
         std::to_string(end) + "]";
}

// Names tasks, counters and ranges for messages, defensively: the program may be malformed.
class Labeler {
 public:
  explicit Labeler(const Program& p) : p_(p), tile_(p.tasks.size(), 0) {
    std::unordered_map<uint32_t, uint32_t> next;
    for (size_t i = 0; i < p.tasks.size(); ++i) tile_[i] = next[p.tasks[i].op_id]++;
  }

  std::string task(uint32_t t) const {
    std::string s = "task " + std::to_string(t);
    if (t >= p_.tasks.size()) return s + " (no such task)";
    const ms_abi::Instr& in = p_.tasks[t];
    const std::string op =
        in.op_id < p_.ops.size() ? p_.ops[in.op_id].name : "op " + std::to_string(in.op_id);
    return s + " (" + opcode_name(in.opcode) + " " + op + " tile " + std::to_string(tile_[t]) + ")";
  }

  std::string counter(uint32_t c) const {
    std::string s = "counter " + std::to_string(c);
    if (c < p_.counter_names.size() && !p_.counter_names[c].empty())
      s += " (" + p_.counter_names[c] + ")";
    return s;
  }

  std::string range(uint32_t buffer, uint64_t begin, uint64_t end) const {
    std::string s = fmt_range(buffer, begin, end);
    for (const Region& r : p_.regions) {
      if (r.buffer == buffer && r.begin <= begin && begin < r.end)
        return s + " (in " + r.name + ")";
    }
    return s;
  }

 private:
  const Program& p_;
  std::vector<uint32_t> tile_;
};

/// One task's write of [begin, end) of a buffer.
struct WriteRange {
  uint64_t begin, end;
  uint32_t task;
};

/// Sorted, disjoint element ranges [first, second) of one buffer.
using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

/// What the rules share: the program and target, the diagnostics so far, and what one rule
/// computes for the later ones.
struct Context {
  Context(const Program& program, const GpuTarget& gpu)
      : p(program), target(gpu), label(program), n(program.tasks.size()) {}

  const Program& p;
  const GpuTarget& target;
  Labeler label;
  const uint32_t n;  // tasks
  ValidationReport report;
  std::map<std::string, size_t> counts;  // diagnostics per rule, listed or not

  // Filled by check_structure: every task's accesses, task t at [fp_begin[t], fp_begin[t + 1])
  // (none for a malformed task).
  std::vector<Access> fp_all;
  std::vector<uint32_t> fp_begin;
  // Filled by check_structure: tasks some task chains (run by a last arriver, unqueued).
  std::vector<char> chained;
  // Filled by collect_producers: per counter, its producers (largest increment first) and the
  // increments they add per step.
  std::vector<std::vector<uint32_t>> producers;
  std::vector<uint64_t> actual_total;
  // Filled by check_deadlock: tasks the simulation ran.
  std::vector<char> ran;

  /// Records a diagnostic; past kMaxDiagnosticsPerRule of one rule it is only counted.
  void add(Diagnostic d);
  void add(const std::string& rule, const std::string& message, std::vector<uint32_t> tasks = {},
           std::vector<uint32_t> counters = {}, std::vector<std::string> buffers = {});
  /// Appends one "... and N more" diagnostic per rule that went past the cap.
  void finish();

  bool counter_ok(uint32_t c) const { return c < p.counter_totals.size(); }
  bool waits_ok(const ms_abi::Instr& in) const {
    return static_cast<uint64_t>(in.wait_begin) + in.wait_count <= p.waits.size();
  }
  std::span<const Access> footprint(uint32_t t) const {
    return {fp_all.data() + fp_begin[t], fp_all.data() + fp_begin[t + 1]};
  }
  /// Signal counter of t, or UINT32_MAX when it signals none.
  uint32_t signal_of(uint32_t t) const {
    const ms_abi::Instr& in = p.tasks[t];
    return in.signal_increment > 0 && counter_ok(in.signal_counter) ? in.signal_counter
                                                                    : UINT32_MAX;
  }
};

// ---- launch (validate_launch.cpp) ---------------------------------------------------------
void check_launch(Context& cx);

// ---- structure (validate_structure.cpp) ---------------------------------------------------
/// Operands, footprints (into cx.fp_all), queues and chains (cx.chained), regions.
void check_structure(Context& cx);
/// Last arrivers; needs cx.producers.
void check_chains(Context& cx);

// ---- reachability and deadlock (validate_deadlock.cpp) ------------------------------------
/// Fills cx.producers and cx.actual_total.
void collect_producers(Context& cx);
void check_reachability(Context& cx);
/// Fills cx.ran.
void check_deadlock(Context& cx);

// ---- happens-before and races (validate_race.cpp) -----------------------------------------
// Guaranteed happens-before: queue order (static queues only) and, for each wait (c, t), the
// producers it guarantees ("joins").
class HappensBefore {
 public:
  // A join is the set of producers a wait (c, t) guarantees. `full` joins hold every producer of c
  // (membership is then "signals c"); partial ones list their producers, sorted by id.
  struct Join {
    uint32_t counter = 0;
    uint32_t threshold = 0;
    bool full = false;
    std::vector<uint32_t> producers;
  };

  explicit HappensBefore(const Context& cx) : cx_(cx) {}
  /// Builds the queue order and the joins; needs cx.producers and cx.actual_total.
  void build();
  /// a happens-before b: same queue and earlier, a guaranteed producer of one of b's waits, or
  /// (failing those) an ancestor of b, found by one backward search per b (cached for the last b).
  bool happens_before(uint32_t a, uint32_t b);
  /// The join of wait index `wi`, or nullptr when the wait implies nothing.
  const Join* join_of_wait(uint32_t wi) const {
    return wait_join_[wi] >= 0 ? &joins_[static_cast<size_t>(wait_join_[wi])] : nullptr;
  }

 private:
  std::vector<uint32_t> guaranteed_simple(uint32_t c, uint64_t threshold) const;
  void refine_partial_joins();
  bool in_join(const Join& j, uint32_t a) const;
  void collect_ancestors(uint32_t b);

  const Context& cx_;
  std::vector<int32_t> queue_of_;     // static queues: task -> queue (-1 none)
  std::vector<uint32_t> pos_;         // task -> position in its queue
  std::vector<uint32_t> queue_pred_;  // task -> the task before it in its queue, or UINT32_MAX
  std::vector<Join> joins_;
  std::vector<int32_t> wait_join_;                // wait index -> join (-1: implies nothing)
  std::vector<uint32_t> anc_stamp_, join_stamp_;  // ancestor search marks
  uint32_t anc_epoch_ = 0;
  uint32_t anc_for_ = UINT32_MAX;   // task whose ancestors the marks hold
  bool has_empty_partial_ = false;  // some wait guarantees no producer by the simple rule
};

/// Every read against its overlapping writers (races), with the coverage checks of the reads and
/// the writes, in one pass over the footprints; needs cx.ran.
void check_accesses(Context& cx, HappensBefore& hb);

// ---- coverage (validate_coverage.cpp) -----------------------------------------------------
/// Overlapping writes of one buffer (`w` sorted by begin): a coverage error when ordered, a race
/// when not.
void check_double_writes(Context& cx, HappensBefore& hb, uint32_t buffer,
                         const std::vector<WriteRange>& w);
/// Per buffer, the merged ranges of `writes` (each sorted by begin).
std::vector<Ranges> covered_writes(const std::vector<std::vector<WriteRange>>& writes);
/// Per buffer, what a read may find: the merged `written` ranges and the model's inputs.
std::vector<Ranges> covered_reads(const Context& cx, const std::vector<Ranges>& written);
/// The read `a` of task x against `cover` (covered_reads of its buffer).
void check_covered(Context& cx, uint32_t x, const Access& a, const Ranges& cover);
void check_logits(Context& cx, const std::vector<Ranges>& written);

}  // namespace megasched::schedule::validate_rules
