// The validator's structure rule (schedule/validate_rules.h): operands in bounds, opcode, flags and
// arity agree (the footprints), each task in exactly one queue or chained, regions inside their
// buffers, and the last arrivers' conditions.
#include <string>

#include "schedule/validate_rules.h"

namespace megasched::schedule::validate_rules {
namespace {

// Model constants and buffers every footprint depends on; false: no footprint is trustworthy.
bool check_model(Context& cx) {
  bool ok = true;
  const ms_abi::ModelParams& m = cx.p.model;
  if (m.weight_dtype > ms_abi::kDTypeBF16 || m.kv_dtype > ms_abi::kDTypeBF16) {
    cx.add("structure", "model dtypes (weights " + std::to_string(m.weight_dtype) + ", kv " +
                            std::to_string(m.kv_dtype) + ") are not f32 (0) or bf16 (1)");
    ok = false;
  }
  if (cx.p.buffer_elements[ms_abi::kBufStep] < 4) {
    cx.add("structure", "the step buffer has " +
                            std::to_string(cx.p.buffer_elements[ms_abi::kBufStep]) +
                            " elements; the step cell needs 4");
    ok = false;
  }
  return ok;
}

void check_queues(Context& cx) {
  const bool dynamic = cx.p.launch.dynamic_queue;
  if (dynamic && cx.p.queues.size() != 1)
    cx.add("structure", "a dynamic-queue program must have exactly one global queue, not " +
                            std::to_string(cx.p.queues.size()));
  if (!dynamic && cx.p.launch.grid_blocks > 0 &&
      cx.p.queues.size() > static_cast<size_t>(cx.p.launch.grid_blocks))
    cx.add("structure", std::to_string(cx.p.queues.size()) + " queues but only " +
                            std::to_string(cx.p.launch.grid_blocks) +
                            " blocks: the extra queues never run");
  std::vector<uint32_t> seen(cx.n, 0);
  for (size_t q = 0; q < cx.p.queues.size(); ++q) {
    for (uint32_t t : cx.p.queues[q]) {
      if (t >= cx.n) {
        cx.add("structure", "queue " + std::to_string(q) + " holds task " + std::to_string(t) +
                                ", but the program has " + std::to_string(cx.n) + " tasks");
      } else if (seen[t]++ == 1) {
        cx.add("structure", cx.label.task(t) + " appears more than once in the queues", {t});
      }
    }
  }
  cx.chained.assign(cx.n, 0);
  for (uint32_t t = 0; t < cx.n; ++t) {
    const uint32_t chain = cx.p.tasks[t].chain;
    if (chain == 0) continue;
    if (chain > cx.n)
      cx.add("structure",
             cx.label.task(t) + " chains task " + std::to_string(chain - 1) +
                 ", but the program has " + std::to_string(cx.n) + " tasks",
             {t});
    else
      cx.chained[chain - 1] = 1;
  }
  for (uint32_t t = 0; t < cx.n; ++t) {
    if (cx.chained[t] && seen[t] > 0)
      cx.add("structure",
             cx.label.task(t) +
                 " is chained (its last arriver runs it) and also queued, so it runs twice",
             {t});
    if (!cx.chained[t] && seen[t] == 0)
      cx.add("structure", cx.label.task(t) + " is in no queue, so it never runs", {t});
  }
}

}  // namespace

void check_structure(Context& cx) {
  const bool model_ok = check_model(cx);
  cx.fp_all.clear();
  cx.fp_begin.assign(cx.n + 1, 0);
  std::string error;
  for (uint32_t t = 0; t < cx.n; ++t) {
    const ms_abi::Instr& in = cx.p.tasks[t];
    bool ok = true;
    if (in.op_id >= cx.p.ops.size()) {
      cx.add("structure",
             cx.label.task(t) + " names op " + std::to_string(in.op_id) + " but the program has " +
                 std::to_string(cx.p.ops.size()) + " ops",
             {t});
    }
    if (!cx.waits_ok(in)) {
      cx.add("structure",
             cx.label.task(t) + " has waits [" + std::to_string(in.wait_begin) + ", +" +
                 std::to_string(in.wait_count) + ") beyond the wait table of " +
                 std::to_string(cx.p.waits.size()) + " entries",
             {t});
    } else {
      for (uint32_t w = 0; w < in.wait_count; ++w) {
        const ms_abi::Wait& wt = cx.p.waits[in.wait_begin + w];
        if (!cx.counter_ok(wt.counter))
          cx.add("structure",
                 cx.label.task(t) + " waits on counter " + std::to_string(wt.counter) +
                     ", but the program has " + std::to_string(cx.p.counter_totals.size()) +
                     " counters",
                 {t}, {wt.counter});
      }
    }
    if (in.signal_increment > 0 && !cx.counter_ok(in.signal_counter))
      cx.add("structure",
             cx.label.task(t) + " signals counter " + std::to_string(in.signal_counter) +
                 ", but the program has " + std::to_string(cx.p.counter_totals.size()) +
                 " counters",
             {t}, {in.signal_counter});
    error.clear();
    const size_t first = cx.fp_all.size();
    if (!model_ok) {
      ok = false;
    } else if (!task_footprint(cx.p, t, &cx.fp_all, &error)) {
      cx.add("structure", cx.label.task(t) + " is malformed: " + error, {t});
      ok = false;
    } else {
      for (size_t k = first; k < cx.fp_all.size(); ++k) {
        const Access& a = cx.fp_all[k];
        const uint64_t extent = a.buffer < ms_abi::kBufCount ? cx.p.buffer_elements[a.buffer] : 0;
        if (a.end > extent) {
          cx.add("structure",
                 cx.label.task(t) + (a.write ? " writes " : " reads ") +
                     fmt_range(a.buffer, a.begin, a.end) + ", beyond the buffer's " +
                     std::to_string(extent) + " elements",
                 {t}, {}, {fmt_range(a.buffer, a.begin, a.end)});
          ok = false;
        }
        if (a.write && a.buffer == ms_abi::kBufWeights) {
          cx.add("structure", cx.label.task(t) + " writes the read-only weights", {t});
          ok = false;
        }
      }
    }
    if (!ok) cx.fp_all.resize(first);
    cx.fp_begin[t + 1] = static_cast<uint32_t>(cx.fp_all.size());
  }
  check_queues(cx);
  for (size_t r = 0; r < cx.p.regions.size(); ++r) {
    const Region& reg = cx.p.regions[r];
    if (reg.buffer >= ms_abi::kBufCount || reg.begin > reg.end ||
        reg.end > cx.p.buffer_elements[reg.buffer])
      cx.add("structure", "region '" + reg.name + "' " + fmt_range(reg.buffer, reg.begin, reg.end) +
                              " is not inside its buffer");
  }
}
// Last arrivers (abi/abi.h): the chainer whose signal takes counter c to the chained task's one
// wait (c, t) runs it. That is exactly one task per step, and always one, when: the chained task
// waits once, on c, for t >= 1 (a target met before any signal is crossed by no one); every
// producer of c chains it (whichever arrives last knows it); it chains nothing (the kernel runs
// one level) and its opcode is chainable (it needs no weight stream or staging area).
void check_chains(Context& cx) {
  for (uint32_t k = 0; k < cx.n; ++k) {
    if (!cx.chained[k]) continue;
    const ms_abi::Instr& in = cx.p.tasks[k];
    std::string why;
    if (!ms_abi::chainable(in.opcode))
      why = std::string("its opcode ") + opcode_name(in.opcode) +
            " is not one the kernel runs chained (attn_combine, argmax)";
    else if (in.chain != 0)
      why = "it chains a task itself, and the kernel runs one level of chaining";
    else if (!cx.waits_ok(in) || in.wait_count != 1)
      why = "it has " + std::to_string(in.wait_count) +
            " waits, and a chained task waits exactly once, on its chainers' counter";
    if (!why.empty()) {
      cx.add("structure", cx.label.task(k) + " cannot be a chained task: " + why, {k});
      continue;
    }
    const ms_abi::Wait& w = cx.p.waits[in.wait_begin];
    if (!cx.counter_ok(w.counter)) continue;  // a structure error already
    if (w.threshold == 0) {
      cx.add("structure",
             cx.label.task(k) + " is chained on " + cx.label.counter(w.counter) +
                 " >= 0: a wait that holds before any signal is crossed by no arriver, so the "
                 "task never runs",
             {k}, {w.counter});
      continue;
    }
    for (uint32_t prod : cx.producers[w.counter]) {
      if (cx.p.tasks[prod].chain == k + 1) continue;
      cx.add("structure",
             cx.label.task(prod) + " signals " + cx.label.counter(w.counter) + ", which chained " +
                 cx.label.task(k) +
                 " waits on, but does not chain it: when it arrives last no "
                 "block runs the chained task",
             {prod, k}, {w.counter});
    }
  }
  for (uint32_t t = 0; t < cx.n; ++t) {
    const ms_abi::Instr& in = cx.p.tasks[t];
    if (in.chain == 0 || in.chain > cx.n || !cx.chained[in.chain - 1]) continue;
    const ms_abi::Instr& k = cx.p.tasks[in.chain - 1];
    const bool waits_on_mine = in.signal_increment > 0 && cx.waits_ok(k) && k.wait_count == 1 &&
                               cx.p.waits[k.wait_begin].counter == in.signal_counter;
    if (!waits_on_mine)
      cx.add("structure",
             cx.label.task(t) + " chains " + cx.label.task(in.chain - 1) +
                 ", which does not wait on the counter this task signals: the arrival it counts "
                 "says nothing about the chained task's wait",
             {t, in.chain - 1});
  }
}

}  // namespace megasched::schedule::validate_rules
