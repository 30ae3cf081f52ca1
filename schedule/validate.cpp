#include "schedule/validate.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <memory>
#include <queue>
#include <span>
#include <unordered_map>
#include <utility>

#include "schedule/build_fit.h"
#include "schedule/footprint.h"
#include "schedule/launch_fit.h"

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
namespace megasched::schedule {
namespace {

constexpr size_t kMaxDiagnosticsPerRule = 200;
constexpr size_t kMaxRefinedProducers =
    64;  // partial waits on larger counters keep the simple rule

std::string fmt_range(uint32_t buffer, uint64_t begin, uint64_t end) {
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

struct WriteRange {
  uint64_t begin, end;
  uint32_t task;
};

class Checker {
 public:
  Checker(const Program& p, const GpuTarget& t)
      : p_(p), target_(t), label_(p), n_(p.tasks.size()) {}

  ValidationReport run() {
    check_launch();
    check_structure();
    collect_producers();
    check_chains();
    check_reachability();
    check_deadlock();
    build_happens_before();
    check_accesses();
    finish();
    return std::move(report_);
  }

 private:
  // ---- diagnostics ------------------------------------------------------------------------
  void add(Diagnostic d) {
    size_t& count = counts_[d.rule];
    if (count++ < kMaxDiagnosticsPerRule) report_.diagnostics.push_back(std::move(d));
  }
  void add(const std::string& rule, const std::string& message, std::vector<uint32_t> tasks = {},
           std::vector<uint32_t> counters = {}, std::vector<std::string> buffers = {}) {
    add(Diagnostic{rule, message, std::move(tasks), std::move(counters), std::move(buffers)});
  }
  void finish() {
    for (const auto& [rule, count] : counts_) {
      if (count > kMaxDiagnosticsPerRule) {
        add(Diagnostic{rule,
                       "... and " + std::to_string(count - kMaxDiagnosticsPerRule) + " more " +
                           rule + " violations (the first " +
                           std::to_string(kMaxDiagnosticsPerRule) + " are listed)",
                       {},
                       {},
                       {}});
        report_.diagnostics.back().rule = rule;
      }
    }
  }

  // ---- launch -----------------------------------------------------------------------------
  void check_launch() {
    const LaunchShape& l = p_.launch;
    const int64_t threads = l.threads_per_block, bps = l.blocks_per_sm, smem = l.smem_bytes;
    auto fail = [&](const std::string& m) { add("launch", m); };
    if (target_.num_sms <= 0 || target_.max_threads_per_sm <= 0 || target_.max_blocks_per_sm <= 0 ||
        target_.smem_per_sm <= 0 || target_.regs_per_sm <= 0) {
      fail("target '" + target_.name +
           "' has no SM count, thread, block, shared-memory or register limits, so no launch can "
           "be proven co-resident");
      return;
    }
    if (threads < 32 || threads > 1024 || threads % 32 != 0)
      fail("threads_per_block " + std::to_string(threads) +
           " is not a multiple of 32 in [32, 1024]");
    if (bps < 1) fail("blocks_per_sm " + std::to_string(bps) + " is below 1");
    if (l.smem_pages < 0 || l.smem_page_bytes < 0 || smem < 0 ||
        smem < static_cast<int64_t>(l.smem_pages) * l.smem_page_bytes)
      fail("smem_bytes " + std::to_string(smem) + " does not hold " + std::to_string(l.smem_pages) +
           " pages of " + std::to_string(l.smem_page_bytes) + " bytes");
    const KernelBuild& b = p_.build;
    if (b.weight_ring()) {
      // The ring build keeps its pages, the input staging area and two mbarriers a page in
      // smem_bytes (schedule/target.h ring_smem_bytes).
      if (l.smem_pages < 1 || l.smem_page_bytes < 16 || l.smem_page_bytes % 16 != 0)
        fail("the weight ring needs at least one page of whole 16-byte units, not " +
             std::to_string(l.smem_pages) + " pages of " + std::to_string(l.smem_page_bytes) +
             " bytes");
      const int64_t need = ring_smem_bytes(l.smem_pages, l.smem_page_bytes, b.x_floats);
      if (smem < need)
        fail("smem_bytes " + std::to_string(smem) + " does not hold the weight ring's pages, " +
             std::to_string(b.x_floats) + " staged input floats and its mbarriers (" +
             std::to_string(need) + " bytes)");
    }
    if (l.prefetch_depth < 0)
      fail("prefetch_depth " + std::to_string(l.prefetch_depth) + " is negative");
    // Whether the blocks fit their SMs: the check the search shares (schedule/launch_fit.h).
    const LaunchRequest request{
        l.threads_per_block, l.blocks_per_sm, smem, static_cast<int>(p_.model.head_dim),
        b.weight_ring(),     l.dynamic_queue};
    for (const std::string& misfit : launch_misfits(request, target_)) fail(misfit);
    // The kernel build: every field the device divides by, indexes with or loops on.
    size_t more_tasks = 0;
    for (BuildMisfit& misfit : build_misfits(p_, kMaxDiagnosticsPerRule, &more_tasks)) {
      if (misfit.task == UINT32_MAX)
        fail(misfit.message);
      else
        add("launch", label_.task(misfit.task) + " " + misfit.message, {misfit.task});
    }
    counts_["launch"] += more_tasks;
    if (bps < 1) return;
    const int64_t resident = static_cast<int64_t>(target_.num_sms) * bps;
    if (l.grid_blocks != resident)
      fail("grid_blocks " + std::to_string(l.grid_blocks) +
           " is not num_sms x blocks_per_sm = " + std::to_string(resident) +
           (l.grid_blocks > resident
                ? ": a persistent grid larger than that is not co-resident and deadlocks"
                : ": the persistent grid must fill the co-resident slots exactly"));
  }

  // ---- structure --------------------------------------------------------------------------
  bool counter_ok(uint32_t c) const { return c < p_.counter_totals.size(); }
  bool waits_ok(const ms_abi::Instr& in) const {
    return static_cast<uint64_t>(in.wait_begin) + in.wait_count <= p_.waits.size();
  }

  void check_structure() {
    const bool model_ok = check_model();
    fp_all_.clear();
    fp_begin_.assign(n_ + 1, 0);
    std::string error;
    for (uint32_t t = 0; t < n_; ++t) {
      const ms_abi::Instr& in = p_.tasks[t];
      bool ok = true;
      if (in.op_id >= p_.ops.size()) {
        add("structure",
            label_.task(t) + " names op " + std::to_string(in.op_id) + " but the program has " +
                std::to_string(p_.ops.size()) + " ops",
            {t});
      }
      if (!waits_ok(in)) {
        add("structure",
            label_.task(t) + " has waits [" + std::to_string(in.wait_begin) + ", +" +
                std::to_string(in.wait_count) + ") beyond the wait table of " +
                std::to_string(p_.waits.size()) + " entries",
            {t});
      } else {
        for (uint32_t w = 0; w < in.wait_count; ++w) {
          const ms_abi::Wait& wt = p_.waits[in.wait_begin + w];
          if (!counter_ok(wt.counter))
            add("structure",
                label_.task(t) + " waits on counter " + std::to_string(wt.counter) +
                    ", but the program has " + std::to_string(p_.counter_totals.size()) +
                    " counters",
                {t}, {wt.counter});
        }
      }
      if (in.signal_increment > 0 && !counter_ok(in.signal_counter))
        add("structure",
            label_.task(t) + " signals counter " + std::to_string(in.signal_counter) +
                ", but the program has " + std::to_string(p_.counter_totals.size()) + " counters",
            {t}, {in.signal_counter});
      error.clear();
      const size_t first = fp_all_.size();
      if (!model_ok) {
        ok = false;
      } else if (!task_footprint(p_, t, &fp_all_, &error)) {
        add("structure", label_.task(t) + " is malformed: " + error, {t});
        ok = false;
      } else {
        for (size_t k = first; k < fp_all_.size(); ++k) {
          const Access& a = fp_all_[k];
          const uint64_t extent = a.buffer < ms_abi::kBufCount ? p_.buffer_elements[a.buffer] : 0;
          if (a.end > extent) {
            add("structure",
                label_.task(t) + (a.write ? " writes " : " reads ") +
                    fmt_range(a.buffer, a.begin, a.end) + ", beyond the buffer's " +
                    std::to_string(extent) + " elements",
                {t}, {}, {fmt_range(a.buffer, a.begin, a.end)});
            ok = false;
          }
          if (a.write && a.buffer == ms_abi::kBufWeights) {
            add("structure", label_.task(t) + " writes the read-only weights", {t});
            ok = false;
          }
        }
      }
      if (!ok) fp_all_.resize(first);
      fp_begin_[t + 1] = static_cast<uint32_t>(fp_all_.size());
    }
    check_queues();
    for (size_t r = 0; r < p_.regions.size(); ++r) {
      const Region& reg = p_.regions[r];
      if (reg.buffer >= ms_abi::kBufCount || reg.begin > reg.end ||
          reg.end > p_.buffer_elements[reg.buffer])
        add("structure", "region '" + reg.name + "' " + fmt_range(reg.buffer, reg.begin, reg.end) +
                             " is not inside its buffer");
    }
  }

  // Model constants and buffers every footprint depends on; false: no footprint is trustworthy.
  bool check_model() {
    bool ok = true;
    const ms_abi::ModelParams& m = p_.model;
    if (m.weight_dtype > ms_abi::kDTypeBF16 || m.kv_dtype > ms_abi::kDTypeBF16) {
      add("structure", "model dtypes (weights " + std::to_string(m.weight_dtype) + ", kv " +
                           std::to_string(m.kv_dtype) + ") are not f32 (0) or bf16 (1)");
      ok = false;
    }
    if (p_.buffer_elements[ms_abi::kBufStep] < 4) {
      add("structure", "the step buffer has " +
                           std::to_string(p_.buffer_elements[ms_abi::kBufStep]) +
                           " elements; the step cell needs 4");
      ok = false;
    }
    return ok;
  }

  void check_queues() {
    const bool dynamic = p_.launch.dynamic_queue;
    if (dynamic && p_.queues.size() != 1)
      add("structure", "a dynamic-queue program must have exactly one global queue, not " +
                           std::to_string(p_.queues.size()));
    if (!dynamic && p_.launch.grid_blocks > 0 &&
        p_.queues.size() > static_cast<size_t>(p_.launch.grid_blocks))
      add("structure", std::to_string(p_.queues.size()) + " queues but only " +
                           std::to_string(p_.launch.grid_blocks) +
                           " blocks: the extra queues never run");
    std::vector<uint32_t> seen(n_, 0);
    for (size_t q = 0; q < p_.queues.size(); ++q) {
      for (uint32_t t : p_.queues[q]) {
        if (t >= n_) {
          add("structure", "queue " + std::to_string(q) + " holds task " + std::to_string(t) +
                               ", but the program has " + std::to_string(n_) + " tasks");
        } else if (seen[t]++ == 1) {
          add("structure", label_.task(t) + " appears more than once in the queues", {t});
        }
      }
    }
    chained_.assign(n_, 0);
    for (uint32_t t = 0; t < n_; ++t) {
      const uint32_t chain = p_.tasks[t].chain;
      if (chain == 0) continue;
      if (chain > n_)
        add("structure",
            label_.task(t) + " chains task " + std::to_string(chain - 1) +
                ", but the program has " + std::to_string(n_) + " tasks",
            {t});
      else
        chained_[chain - 1] = 1;
    }
    for (uint32_t t = 0; t < n_; ++t) {
      if (chained_[t] && seen[t] > 0)
        add("structure",
            label_.task(t) +
                " is chained (its last arriver runs it) and also queued, so it runs twice",
            {t});
      if (!chained_[t] && seen[t] == 0)
        add("structure", label_.task(t) + " is in no queue, so it never runs", {t});
    }
  }

  // Last arrivers (abi/abi.h): the chainer whose signal takes counter c to the chained task's one
  // wait (c, t) runs it. That is exactly one task per step, and always one, when: the chained task
  // waits once, on c, for t >= 1 (a target met before any signal is crossed by no one); every
  // producer of c chains it (whichever arrives last knows it); it chains nothing (the kernel runs
  // one level) and its opcode is chainable (it needs no weight stream or staging area).
  void check_chains() {
    for (uint32_t k = 0; k < n_; ++k) {
      if (!chained_[k]) continue;
      const ms_abi::Instr& in = p_.tasks[k];
      std::string why;
      if (!ms_abi::chainable(in.opcode))
        why = std::string("its opcode ") + opcode_name(in.opcode) +
              " is not one the kernel runs chained (attn_combine, argmax)";
      else if (in.chain != 0)
        why = "it chains a task itself, and the kernel runs one level of chaining";
      else if (!waits_ok(in) || in.wait_count != 1)
        why = "it has " + std::to_string(in.wait_count) +
              " waits, and a chained task waits exactly once, on its chainers' counter";
      if (!why.empty()) {
        add("structure", label_.task(k) + " cannot be a chained task: " + why, {k});
        continue;
      }
      const ms_abi::Wait& w = p_.waits[in.wait_begin];
      if (!counter_ok(w.counter)) continue;  // a structure error already
      if (w.threshold == 0) {
        add("structure",
            label_.task(k) + " is chained on " + label_.counter(w.counter) +
                " >= 0: a wait that holds before any signal is crossed by no arriver, so the "
                "task never runs",
            {k}, {w.counter});
        continue;
      }
      for (uint32_t prod : producers_[w.counter]) {
        if (p_.tasks[prod].chain == k + 1) continue;
        add("structure",
            label_.task(prod) + " signals " + label_.counter(w.counter) + ", which chained " +
                label_.task(k) +
                " waits on, but does not chain it: when it arrives last no "
                "block runs the chained task",
            {prod, k}, {w.counter});
      }
    }
    for (uint32_t t = 0; t < n_; ++t) {
      const ms_abi::Instr& in = p_.tasks[t];
      if (in.chain == 0 || in.chain > n_ || !chained_[in.chain - 1]) continue;
      const ms_abi::Instr& k = p_.tasks[in.chain - 1];
      const bool waits_on_mine = in.signal_increment > 0 && waits_ok(k) && k.wait_count == 1 &&
                                 p_.waits[k.wait_begin].counter == in.signal_counter;
      if (!waits_on_mine)
        add("structure",
            label_.task(t) + " chains " + label_.task(in.chain - 1) +
                ", which does not wait on the counter this task signals: the arrival it counts "
                "says nothing about the chained task's wait",
            {t, in.chain - 1});
    }
  }

  // ---- counters ---------------------------------------------------------------------------
  void collect_producers() {
    const size_t c_count = p_.counter_totals.size();
    producers_.assign(c_count, {});
    actual_total_.assign(c_count, 0);
    for (uint32_t t = 0; t < n_; ++t) {
      const ms_abi::Instr& in = p_.tasks[t];
      if (in.signal_increment == 0 || !counter_ok(in.signal_counter)) continue;
      producers_[in.signal_counter].push_back(t);
      actual_total_[in.signal_counter] += in.signal_increment;
    }
    // Largest increment first: the guaranteed producers of a wait are then a prefix (simple rule).
    for (auto& list : producers_) {
      std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
        return p_.tasks[a].signal_increment > p_.tasks[b].signal_increment;
      });
    }
  }

  void check_reachability() {
    for (uint32_t c = 0; c < p_.counter_totals.size(); ++c) {
      if (p_.counter_totals[c] != actual_total_[c])
        add("reachability",
            label_.counter(c) + " declares " + std::to_string(p_.counter_totals[c]) +
                " increments per step but its producers add " + std::to_string(actual_total_[c]) +
                ", so epoch-scaled thresholds are wrong from the second step on",
            {}, {c});
      // The VMs compare 32-bit counters with 32-bit targets wrap-safely (ms_abi::counter_reached),
      // which is exact only while a step's increments stay below 2^31.
      const uint64_t total = std::max<uint64_t>(p_.counter_totals[c], actual_total_[c]);
      if (total > ms_abi::kMaxCounterTotal)
        add("reachability",
            label_.counter(c) + " receives " + std::to_string(total) +
                " increments per step, more than 2^31 - 1: counters and wait targets are 32-bit "
                "and wrap, and the wrap-safe comparison (ms_abi::counter_reached) tells a counter "
                "that is behind its target from one that is past it only while a step adds less "
                "than 2^31, so a wait could pass before its producers ran; hint: signal smaller "
                "increments (lowering signals 1 per tile) or split the counter",
            {}, {c});
    }
    for (uint32_t t = 0; t < n_; ++t) {
      const ms_abi::Instr& in = p_.tasks[t];
      if (!waits_ok(in)) continue;
      for (uint32_t w = 0; w < in.wait_count; ++w) {
        const ms_abi::Wait& wt = p_.waits[in.wait_begin + w];
        if (!counter_ok(wt.counter)) continue;
        if (wt.threshold > actual_total_[wt.counter])
          add("reachability",
              label_.task(t) + " waits for " + label_.counter(wt.counter) +
                  " >= " + std::to_string(wt.threshold) + ", but its producers add only " +
                  std::to_string(actual_total_[wt.counter]) + " per step",
              {t}, {wt.counter});
      }
    }
  }

  // ---- deadlock ---------------------------------------------------------------------------
  // First wait of `task` not satisfied by `value`; -1 when all hold, -2 when a wait is malformed.
  // Counters only grow, so waits before `from` that held once still hold.
  int first_unsatisfied(uint32_t task, const std::vector<uint64_t>& value,
                        uint32_t from = 0) const {
    const ms_abi::Instr& in = p_.tasks[task];
    if (!waits_ok(in)) return -2;
    for (uint32_t w = from; w < in.wait_count; ++w) {
      const ms_abi::Wait& wt = p_.waits[in.wait_begin + w];
      if (!counter_ok(wt.counter)) return -2;
      if (value[wt.counter] < wt.threshold) return static_cast<int>(w);
    }
    return -1;
  }

  // Greedy simulation shared by both queue kinds: `slots` are the places a task can wait in (queue
  // heads, or claimed tasks of the dynamic queue); refill(slot) loads the next task into a slot.
  void check_deadlock() {
    const size_t c_count = p_.counter_totals.size();
    std::vector<uint64_t> value(c_count, 0);
    using Waiter = std::pair<uint64_t, uint32_t>;  // (threshold, slot)
    std::vector<std::priority_queue<Waiter, std::vector<Waiter>, std::greater<Waiter>>> blocked(
        c_count);
    const bool dynamic = p_.launch.dynamic_queue && p_.queues.size() == 1;
    const std::vector<uint32_t> empty;
    // Slots: static -> one per queue; dynamic -> one per worker.
    const size_t workers =
        dynamic ? static_cast<size_t>(std::max(1, p_.launch.grid_blocks)) : p_.queues.size();
    const size_t slot_count =
        dynamic ? std::min<size_t>(workers, p_.queues[0].size()) : p_.queues.size();
    std::vector<int64_t> slot_task(slot_count, -1);  // task waiting in the slot, -1 none
    std::vector<size_t> pos(p_.queues.size(), 0);    // next entry of each queue
    std::vector<int> malformed(slot_count, 0);
    std::vector<uint32_t> cursor(slot_count,
                                 0);  // first wait of the slot's task not yet seen to hold
    std::vector<uint32_t> work;
    auto refill = [&](uint32_t s) {
      const std::vector<uint32_t>& q = dynamic ? p_.queues[0] : p_.queues[s];
      size_t& next = dynamic ? pos[0] : pos[s];
      while (next < q.size() && q[next] >= n_)
        ++next;  // ids out of range: a structure error already
      slot_task[s] = next < q.size() ? static_cast<int64_t>(q[next++]) : -1;
      cursor[s] = 0;
    };
    for (uint32_t s = 0; s < slot_count; ++s) {
      refill(s);
      work.push_back(s);
    }
    ran_.assign(n_, 0);
    while (!work.empty()) {
      const uint32_t s = work.back();
      work.pop_back();
      while (slot_task[s] >= 0) {
        const uint32_t t = static_cast<uint32_t>(slot_task[s]);
        const int w = first_unsatisfied(t, value, cursor[s]);
        if (w == -2) {
          malformed[s] = 1;
          break;
        }
        if (w >= 0) {
          cursor[s] = static_cast<uint32_t>(w);
          const ms_abi::Wait& wt = p_.waits[p_.tasks[t].wait_begin + w];
          blocked[wt.counter].push({wt.threshold, s});
          break;
        }
        ran_[t] = 1;
        refill(s);
        // The task's signal, and a chained task its arrival completes (it runs on this block
        // at once, waits for nothing more, and signals in turn).
        for (uint32_t r = t; r != UINT32_MAX;) {
          const ms_abi::Instr& in = p_.tasks[r];
          uint32_t next = UINT32_MAX;
          if (in.signal_increment > 0 && counter_ok(in.signal_counter)) {
            const uint32_t c = in.signal_counter;
            value[c] += in.signal_increment;
            while (!blocked[c].empty() && blocked[c].top().first <= value[c]) {
              work.push_back(blocked[c].top().second);
              blocked[c].pop();
            }
            if (in.chain != 0 && in.chain <= n_ && chained_[in.chain - 1] && !ran_[in.chain - 1] &&
                first_unsatisfied(in.chain - 1, value) == -1) {
              next = in.chain - 1;
              ran_[next] = 1;
            }
          }
          r = next;
        }
      }
    }
    for (uint32_t s = 0; s < slot_count; ++s) {
      if (slot_task[s] < 0) continue;
      report_stuck(s, static_cast<uint32_t>(slot_task[s]), dynamic, value, malformed[s] != 0);
    }
    if (dynamic && slot_count > 0 && slot_count == workers && pos[0] < p_.queues[0].size()) {
      bool all_stuck = true;
      for (uint32_t s = 0; s < slot_count; ++s) all_stuck = all_stuck && slot_task[s] >= 0;
      if (all_stuck)
        add("deadlock", "all " + std::to_string(workers) +
                            " workers of the dynamic queue hold tasks that cannot start, so the " +
                            std::to_string(p_.queues[0].size() - pos[0]) +
                            " unclaimed tasks they wait for never run");
    }
  }

  void report_stuck(uint32_t slot, uint32_t t, bool dynamic, const std::vector<uint64_t>& value,
                    bool malformed) {
    const std::string where =
        dynamic ? "worker " + std::to_string(slot) + " of the dynamic queue holds "
                : "queue " + std::to_string(slot) + " is stuck at ";
    if (malformed) {
      add("deadlock",
          where + label_.task(t) + ", whose waits name a counter or wait entry that does not exist",
          {t});
      return;
    }
    const int w = first_unsatisfied(t, value);
    if (w < 0) return;  // not blocked (cannot happen after the simulation drains every ready slot)
    const ms_abi::Wait& wt = p_.waits[p_.tasks[t].wait_begin + w];
    const uint32_t c = wt.counter;
    std::vector<uint32_t> tasks{t};
    std::string missing;
    size_t listed = 0, unfinished = 0;
    for (uint32_t prod : producers_[c]) {
      if (ran_[prod]) continue;
      ++unfinished;
      if (listed++ < 3) {
        missing += (missing.empty() ? "" : ", ") + label_.task(prod);
        tasks.push_back(prod);
      }
    }
    std::string msg = where + label_.task(t) + ", which waits for " + label_.counter(c) +
                      " >= " + std::to_string(wt.threshold) + " but the counter stops at " +
                      std::to_string(value[c]) + " of " + std::to_string(actual_total_[c]);
    if (unfinished > 0)
      msg += ": its producers " + missing +
             (unfinished > listed ? " and " + std::to_string(unfinished - listed) + " more" : "") +
             " never run";
    else
      msg += ": no producer is left to raise it";
    add("deadlock", msg, std::move(tasks), {c});
  }

  // ---- happens-before ---------------------------------------------------------------------
  // A join is the set of producers a wait (c, t) guarantees. `full` joins hold every producer of c
  // (membership is then "signals c"); partial ones list their producers, sorted by id.
  struct Join {
    uint32_t counter = 0;
    uint32_t threshold = 0;
    bool full = false;
    std::vector<uint32_t> producers;
  };

  // Producers of c that wait (c, t) guarantees by the simple rule: increment > total - t.
  std::vector<uint32_t> guaranteed_simple(uint32_t c, uint64_t threshold) const {
    const std::vector<uint32_t>& prods = producers_[c];
    const uint64_t total = actual_total_[c];
    if (threshold > total)
      return prods;  // unreachable: the waiter never runs, every edge is vacuous
    std::vector<uint32_t> out;
    for (uint32_t prod : prods) {
      if (total - p_.tasks[prod].signal_increment >= threshold) break;  // sorted by increment
      out.push_back(prod);
    }
    return out;
  }

  void build_happens_before() {
    const bool dynamic = p_.launch.dynamic_queue;
    queue_of_.assign(n_, -1);
    pos_.assign(n_, 0);
    queue_pred_.assign(n_, UINT32_MAX);
    if (!dynamic) {
      for (size_t q = 0; q < p_.queues.size(); ++q)
        for (size_t i = 0; i < p_.queues[q].size(); ++i) {
          const uint32_t t = p_.queues[q][i];
          if (t < n_ && queue_of_[t] < 0) {
            queue_of_[t] = static_cast<int32_t>(q);
            pos_[t] = static_cast<uint32_t>(i);
            if (i > 0 && p_.queues[q][i - 1] < n_) queue_pred_[t] = p_.queues[q][i - 1];
          }
        }
    }
    wait_join_.assign(p_.waits.size(), -1);
    // Per counter, the joins made so far as (threshold, join); nearly always one entry.
    std::vector<std::vector<std::pair<uint32_t, int32_t>>> join_of(p_.counter_totals.size());
    for (uint32_t t = 0; t < n_; ++t) {
      const ms_abi::Instr& in = p_.tasks[t];
      if (!waits_ok(in)) continue;
      for (uint32_t w = 0; w < in.wait_count; ++w) {
        const uint32_t wi = in.wait_begin + w;
        const ms_abi::Wait& wt = p_.waits[wi];
        if (!counter_ok(wt.counter) || wt.threshold == 0) continue;
        auto& known = join_of[wt.counter];
        auto it = std::find_if(known.begin(), known.end(),
                               [&](const auto& e) { return e.first == wt.threshold; });
        if (it == known.end()) {
          Join j;
          j.counter = wt.counter;
          j.threshold = wt.threshold;
          j.producers = guaranteed_simple(wt.counter, wt.threshold);
          j.full = j.producers.size() == producers_[wt.counter].size();
          std::sort(j.producers.begin(), j.producers.end());
          int32_t id = -1;
          if (!j.producers.empty()) {
            id = static_cast<int32_t>(joins_.size());
            joins_.push_back(std::move(j));
          } else if (!producers_[wt.counter].empty()) {
            has_empty_partial_ = true;
          }
          known.push_back({wt.threshold, id});
          it = known.end() - 1;
        }
        wait_join_[wi] = it->second;
      }
    }
    refine_partial_joins();
  }

  // A partial wait also guarantees p when the producers not known to run after p cannot reach the
  // threshold alone (a producer that runs after p cannot have signalled before p). "Known" uses
  // the simple joins, which are sound, so the refined joins are sound too.
  void refine_partial_joins() {
    std::vector<std::pair<size_t, std::vector<uint32_t>>> grown;
    // Partial waits with no guaranteed producer have no join yet: give them one if refinement finds
    // any.
    std::unordered_map<uint64_t, std::vector<uint32_t>> empty_waits;  // key -> wait indices
    for (uint32_t t = 0; t < n_ && has_empty_partial_; ++t) {
      const ms_abi::Instr& in = p_.tasks[t];
      if (!waits_ok(in)) continue;
      for (uint32_t w = 0; w < in.wait_count; ++w) {
        const uint32_t wi = in.wait_begin + w;
        const ms_abi::Wait& wt = p_.waits[wi];
        if (wait_join_[wi] >= 0 || !counter_ok(wt.counter) || wt.threshold == 0) continue;
        empty_waits[(static_cast<uint64_t>(wt.counter) << 32) | wt.threshold].push_back(wi);
      }
    }
    auto refine = [&](uint32_t c, uint64_t threshold, const std::vector<uint32_t>& have) {
      std::vector<uint32_t> out = have;
      const std::vector<uint32_t>& prods = producers_[c];
      if (prods.size() > kMaxRefinedProducers) return out;
      for (uint32_t prod : prods) {
        if (std::binary_search(have.begin(), have.end(), prod)) continue;
        uint64_t others = 0;
        for (uint32_t q : prods) {
          if (q == prod || happens_before(prod, q)) continue;
          others += p_.tasks[q].signal_increment;
          if (others >= threshold) break;
        }
        if (others < threshold) out.push_back(prod);
      }
      std::sort(out.begin(), out.end());
      return out;
    };
    for (size_t j = 0; j < joins_.size(); ++j) {
      if (joins_[j].full) continue;
      std::vector<uint32_t> r = refine(joins_[j].counter, joins_[j].threshold, joins_[j].producers);
      if (r.size() != joins_[j].producers.size()) grown.push_back({j, std::move(r)});
    }
    std::vector<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>>
        fresh;  // (producers, waits)
    for (const auto& [key, waits] : empty_waits) {
      std::vector<uint32_t> r = refine(static_cast<uint32_t>(key >> 32), key & 0xffffffffu, {});
      if (!r.empty()) fresh.push_back({std::move(r), waits});
    }
    for (auto& [j, r] : grown) {
      joins_[j].full = r.size() == producers_[joins_[j].counter].size();
      joins_[j].producers = std::move(r);
    }
    for (auto& [r, waits] : fresh) {
      Join jn;
      jn.counter = p_.waits[waits[0]].counter;
      jn.threshold = p_.waits[waits[0]].threshold;
      jn.full = r.size() == producers_[jn.counter].size();
      jn.producers = std::move(r);
      for (uint32_t wi : waits) wait_join_[wi] = static_cast<int32_t>(joins_.size());
      joins_.push_back(std::move(jn));
    }
    anc_for_ = UINT32_MAX;  // the cached ancestor set used the simple joins
  }

  bool in_join(const Join& j, uint32_t a) const {
    if (j.full) return p_.tasks[a].signal_increment > 0 && p_.tasks[a].signal_counter == j.counter;
    return std::binary_search(j.producers.begin(), j.producers.end(), a);
  }

  // a happens-before b: same queue and earlier, a guaranteed producer of one of b's waits, or
  // (failing those) an ancestor of b, found by one backward search per b (cached for the last b).
  bool happens_before(uint32_t a, uint32_t b) {
    if (a == b) return false;
    if (queue_of_[a] >= 0 && queue_of_[a] == queue_of_[b] && pos_[a] < pos_[b]) return true;
    const ms_abi::Instr& in = p_.tasks[b];
    if (waits_ok(in))
      for (uint32_t w = 0; w < in.wait_count; ++w) {
        const int32_t j = wait_join_[in.wait_begin + w];
        if (j >= 0 && in_join(joins_[static_cast<size_t>(j)], a)) return true;
      }
    if (anc_for_ != b) collect_ancestors(b);
    return anc_stamp_[a] == anc_epoch_;
  }

  void collect_ancestors(uint32_t b) {
    if (anc_stamp_.size() != n_) {
      anc_stamp_.assign(n_, 0);
      join_stamp_.assign(joins_.size(), 0);
    }
    if (join_stamp_.size() != joins_.size()) join_stamp_.assign(joins_.size(), 0);
    ++anc_epoch_;
    anc_for_ = b;
    std::vector<uint32_t> stack{b};
    auto visit = [&](uint32_t v) {
      if (anc_stamp_[v] == anc_epoch_) return;
      anc_stamp_[v] = anc_epoch_;
      stack.push_back(v);
    };
    while (!stack.empty()) {
      const uint32_t v = stack.back();
      stack.pop_back();
      if (queue_pred_[v] != UINT32_MAX) visit(queue_pred_[v]);
      const ms_abi::Instr& in = p_.tasks[v];
      if (!waits_ok(in)) continue;
      for (uint32_t w = 0; w < in.wait_count; ++w) {
        const int32_t j = wait_join_[in.wait_begin + w];
        if (j < 0 || join_stamp_[static_cast<size_t>(j)] == anc_epoch_) continue;
        join_stamp_[static_cast<size_t>(j)] = anc_epoch_;
        for (uint32_t prod : joins_[static_cast<size_t>(j)].producers) visit(prod);
      }
    }
  }

  // ---- races and coverage -----------------------------------------------------------------
  // Signal counter of t, or UINT32_MAX when it signals none.
  uint32_t signal_of(uint32_t t) const {
    const ms_abi::Instr& in = p_.tasks[t];
    return in.signal_increment > 0 && counter_ok(in.signal_counter) ? in.signal_counter
                                                                    : UINT32_MAX;
  }

  void check_accesses() {
    // Writes per buffer, sorted by begin, with a running maximum of `end` for overlap queries and
    // the end of each run of writers that signal the same counter (skipped at once when the reader
    // waits for that counter in full).
    std::vector<std::vector<WriteRange>> writes(ms_abi::kBufCount);
    for (uint32_t t = 0; t < n_; ++t)
      for (const Access& a : footprint(t))
        if (a.write) writes[a.buffer].push_back({a.begin, a.end, t});
    std::vector<std::vector<uint64_t>> max_end(ms_abi::kBufCount);
    std::vector<std::vector<uint32_t>> run_end(ms_abi::kBufCount);
    for (uint32_t b = 0; b < ms_abi::kBufCount; ++b) {
      auto& w = writes[b];
      std::sort(w.begin(), w.end(), [](const WriteRange& x, const WriteRange& y) {
        return x.begin != y.begin ? x.begin < y.begin : x.task < y.task;
      });
      max_end[b].resize(w.size());
      uint64_t m = 0;
      for (size_t i = 0; i < w.size(); ++i) max_end[b][i] = m = std::max(m, w[i].end);
      run_end[b].resize(w.size());
      for (size_t i = w.size(); i-- > 0;) {
        const bool same = i + 1 < w.size() && signal_of(w[i].task) != UINT32_MAX &&
                          signal_of(w[i].task) == signal_of(w[i + 1].task);
        run_end[b][i] = same ? run_end[b][i + 1] : static_cast<uint32_t>(i + 1);
      }
      check_double_writes(b, w);
    }
    // Elements a read may find without a writer in this step: whatever some task writes, and the
    // inputs, which come from the model and the loader, never from the program's own region flags
    // (model_inputs). The KV history has no exemption: earlier steps wrote it with this program's
    // own appends, which the footprints widen to whole heads alike, so a KV read is covered
    // exactly when some task appends to that head.
    const std::vector<std::vector<std::pair<uint64_t, uint64_t>>> written = covered_writes(writes);
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> inputs = model_inputs(),
                                                            covered(ms_abi::kBufCount);
    for (uint32_t b = 0; b < ms_abi::kBufCount; ++b) {
      std::sort(inputs[b].begin(), inputs[b].end());
      std::merge(written[b].begin(), written[b].end(), inputs[b].begin(), inputs[b].end(),
                 std::back_inserter(covered[b]));
      merge_sorted(&covered[b]);
    }

    std::vector<uint32_t> full_mark(p_.counter_totals.size(),
                                    UINT32_MAX);  // counter -> reader waiting on it in full
    for (uint32_t x = 0; x < n_; ++x) {
      if (footprint(x).empty()) continue;
      const ms_abi::Instr& in = p_.tasks[x];
      if (waits_ok(in))
        for (uint32_t w = 0; w < in.wait_count; ++w) {
          const int32_t j = wait_join_[in.wait_begin + w];
          if (j >= 0 && joins_[static_cast<size_t>(j)].full)
            full_mark[joins_[static_cast<size_t>(j)].counter] = x;
        }
      size_t reported = 0;
      for (const Access& a : footprint(x)) {
        if (a.write || a.buffer == ms_abi::kBufWeights) continue;
        check_covered(x, a, covered[a.buffer]);
        if (!ran_[x]) continue;  // never runs (deadlock, reported): it cannot race
        const auto& w = writes[a.buffer];
        const auto& me = max_end[a.buffer];
        size_t i =
            static_cast<size_t>(std::upper_bound(me.begin(), me.end(), a.begin) - me.begin());
        while (i < w.size() && w[i].begin < a.end) {
          const WriteRange& wr = w[i];
          if (wr.end <= a.begin) {
            ++i;
            continue;
          }
          if (wr.task == x) {
            const uint64_t lo = std::max(a.begin, wr.begin), hi = std::min(a.end, wr.end);
            add("race",
                label_.task(x) + " reads " + label_.range(a.buffer, lo, hi) +
                    ", which it also writes: threads of one task would race",
                {x}, {}, {fmt_range(a.buffer, lo, hi)});
            ++i;
            continue;
          }
          const uint32_t c = signal_of(wr.task);
          if (c != UINT32_MAX && full_mark[c] == x) {
            i = run_end[a.buffer][i];
            continue;
          }
          ++i;
          if (!ran_[wr.task] || happens_before(wr.task, x)) continue;
          if (reported++ > 0) continue;  // one diagnostic per reader
          const uint64_t lo = std::max(a.begin, wr.begin), hi = std::min(a.end, wr.end);
          const std::string how = happens_before(x, wr.task) ? ", but it runs before that writer"
                                                             : " with no ordering between them";
          add("race",
              label_.task(x) + " reads " + label_.range(a.buffer, lo, hi) + " written by " +
                  label_.task(wr.task) + how + shared_counter_hint(x, wr.task),
              {x, wr.task}, {}, {fmt_range(a.buffer, lo, hi)});
        }
      }
    }
    check_tagged(writes, max_end);
    check_logits(written);
  }

  // A kFlagTagIn task reads before it acquires its waits (abi/abi.h, Tagged words): each element
  // it reads that the step writes must come as a tagged word, so every writer of it must write
  // one (kFlagTagOut). Each element has one writer per step (check_double_writes), and the reads
  // above prove that writer ordered before the reader by its waits, so the word with this step's
  // tag is the value the waits promise.
  void check_tagged(const std::vector<std::vector<WriteRange>>& writes,
                    const std::vector<std::vector<uint64_t>>& max_end) {
    for (uint32_t x = 0; x < n_; ++x) {
      if ((p_.tasks[x].flags & ms_abi::kFlagTagIn) == 0) continue;
      bool reported = false;
      for (const Access& a : footprint(x)) {
        if (a.write || a.buffer == ms_abi::kBufWeights || reported) continue;
        const auto& w = writes[a.buffer];
        const auto& me = max_end[a.buffer];
        size_t i =
            static_cast<size_t>(std::upper_bound(me.begin(), me.end(), a.begin) - me.begin());
        for (; i < w.size() && w[i].begin < a.end; ++i) {
          const WriteRange& wr = w[i];
          if (wr.end <= a.begin || (p_.tasks[wr.task].flags & ms_abi::kFlagTagOut) != 0) continue;
          const uint64_t lo = std::max(a.begin, wr.begin), hi = std::min(a.end, wr.end);
          add("race",
              label_.task(x) + " reads " + label_.range(a.buffer, lo, hi) +
                  " as tagged words, before it acquires its waits, but " + label_.task(wr.task) +
                  " writes it without tagged words (kFlagTagOut), so the read could see an "
                  "earlier value; hint: lower with pipeline.tagged_inputs, which tags exactly "
                  "such writers, or clear the reader's kFlagTagIn",
              {x, wr.task}, {}, {fmt_range(a.buffer, lo, hi)});
          reported = true;
          break;
        }
      }
    }
  }

  // The reason a partial wait of `reader` on `writer`'s counter proves nothing when the counter is
  // shared by several ops: the validator proves a producer of a partial wait only from orderings
  // that hold without that wait (no induction over the execution; dev/validator_notes.md, "Counters
  // shared by dependent ops"). Empty when the reader does not wait on that counter or one op
  // signals it alone.
  std::string shared_counter_hint(uint32_t reader, uint32_t writer) const {
    const uint32_t c = signal_of(writer);
    const ms_abi::Instr& in = p_.tasks[reader];
    if (c == UINT32_MAX || !waits_ok(in)) return "";
    uint32_t threshold = 0;
    for (uint32_t w = 0; w < in.wait_count; ++w)
      if (p_.waits[in.wait_begin + w].counter == c)
        threshold = std::max(threshold, p_.waits[in.wait_begin + w].threshold);
    if (threshold == 0 || threshold >= actual_total_[c]) return "";
    std::vector<uint32_t> ops;
    for (uint32_t prod : producers_[c])
      if (std::find(ops.begin(), ops.end(), p_.tasks[prod].op_id) == ops.end())
        ops.push_back(p_.tasks[prod].op_id);
    if (ops.size() < 2) return "";
    std::string names;
    for (size_t i = 0; i < ops.size() && i < 3; ++i)
      names += (i == 0 ? "" : ", ") +
               (ops[i] < p_.ops.size() ? p_.ops[ops[i]].name : "op " + std::to_string(ops[i]));
    if (ops.size() > 3) names += " and " + std::to_string(ops.size() - 3) + " more";
    return ": its wait for " + label_.counter(c) + " >= " + std::to_string(threshold) + " of " +
           std::to_string(actual_total_[c]) + " does not prove that writer ran, because ops " +
           names +
           " share that counter and the validator proves a partial wait only from orderings that "
           "hold without it (it does not assume the wait's own ordering to show that another op's "
           "producers signal later); hint: give each op its own counter, as lowering does";
  }

  void check_double_writes(uint32_t buffer, const std::vector<WriteRange>& w) {
    size_t holder = 0;  // the write with the largest end so far
    for (size_t i = 1; i < w.size(); ++i) {
      if (w[i].begin < w[holder].end && w[i].task != w[holder].task) {
        const uint32_t a = w[holder].task, b = w[i].task;
        const uint64_t lo = w[i].begin, hi = std::min(w[i].end, w[holder].end);
        const bool ordered = !ran_[a] || !ran_[b] || happens_before(a, b) || happens_before(b, a);
        if (ordered)
          add("coverage",
              label_.range(buffer, lo, hi) + " is written by both " + label_.task(a) + " and " +
                  label_.task(b) + ": each element must be written exactly once per step",
              {a, b}, {}, {fmt_range(buffer, lo, hi)});
        else
          add("race",
              label_.task(a) + " and " + label_.task(b) + " both write " +
                  label_.range(buffer, lo, hi) + " with no ordering between them",
              {a, b}, {}, {fmt_range(buffer, lo, hi)});
      }
      if (w[i].end > w[holder].end) holder = i;
    }
  }

  // Merges touching or overlapping ranges of a list sorted by begin.
  static void merge_sorted(std::vector<std::pair<uint64_t, uint64_t>>* v) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const auto& r : *v) {
      if (!out.empty() && r.first <= out.back().second)
        out.back().second = std::max(out.back().second, r.second);
      else
        out.push_back(r);
    }
    *v = std::move(out);
  }

  // First element range of [begin, end) not inside the merged, sorted `cover`; {end, end} if none.
  static std::pair<uint64_t, uint64_t> first_gap(
      uint64_t begin, uint64_t end, const std::vector<std::pair<uint64_t, uint64_t>>& cover) {
    auto it = std::upper_bound(cover.begin(), cover.end(), std::make_pair(begin, UINT64_MAX));
    uint64_t at = begin;
    if (it != cover.begin() && std::prev(it)->second > at) at = std::prev(it)->second;
    if (at >= end) return {end, end};
    const uint64_t gap_end = it != cover.end() ? std::min(end, it->first) : end;
    return {at, gap_end};
  }

  // What a step may read that no task of it writes, by buffer: the step cell's token, position
  // and epoch, and the rope table (head_dim / 2 floats at model.rope_table, which the loader
  // writes from the model). Weights are never checked; the KV history is covered by the appends.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> model_inputs() const {
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> inputs(ms_abi::kBufCount);
    inputs[ms_abi::kBufStep].push_back({0, 3});
    const uint64_t rope_begin = p_.model.rope_table;
    const uint64_t rope_end =
        std::min(rope_begin + p_.model.head_dim / 2, p_.buffer_elements[ms_abi::kBufActivations]);
    if (rope_begin < rope_end) inputs[ms_abi::kBufActivations].push_back({rope_begin, rope_end});
    return inputs;
  }

  void check_covered(uint32_t x, const Access& a,
                     const std::vector<std::pair<uint64_t, uint64_t>>& cover) {
    const auto [lo, hi] = first_gap(a.begin, a.end, cover);
    if (lo >= hi) return;
    std::string why;
    if (a.buffer == ms_abi::kBufKv)
      why =
          ", which no task appends: the KV history a step reads was written by this program's "
          "own K/V appends in earlier steps, so every head attention reads needs an append";
    else if (a.buffer == ms_abi::kBufActivations)
      why =
          ", which no task writes and which is not an input (the activation inputs are the "
          "rope table " +
          fmt_range(ms_abi::kBufActivations, p_.model.rope_table,
                    uint64_t{p_.model.rope_table} + p_.model.head_dim / 2) +
          ", which the loader writes; a region the program marks input does not count)";
    else
      why = ", which no task writes and which is not an input";
    add("coverage", label_.task(x) + " reads " + label_.range(a.buffer, lo, hi) + why, {x}, {},
        {fmt_range(a.buffer, lo, hi)});
  }

  static std::vector<std::vector<std::pair<uint64_t, uint64_t>>> covered_writes(
      const std::vector<std::vector<WriteRange>>& writes) {
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> out(writes.size());
    for (size_t b = 0; b < writes.size(); ++b) {
      for (const WriteRange& w : writes[b])
        out[b].push_back({w.begin, w.end});  // sorted by begin already
      merge_sorted(&out[b]);
    }
    return out;
  }

  void check_logits(const std::vector<std::vector<std::pair<uint64_t, uint64_t>>>& written) {
    for (const Region& r : p_.regions) {
      if (r.name != "logits" || r.buffer >= ms_abi::kBufCount || r.begin >= r.end) continue;
      const auto [lo, hi] = first_gap(r.begin, r.end, written[r.buffer]);
      if (lo < hi)
        add("coverage", "the logits " + label_.range(r.buffer, lo, hi) + " are never written", {},
            {}, {fmt_range(r.buffer, lo, hi)});
    }
  }

  const Program& p_;
  const GpuTarget& target_;
  Labeler label_;
  const uint32_t n_;
  ValidationReport report_;
  std::map<std::string, size_t> counts_;
  std::vector<Access> fp_all_;  // every task's accesses, task t at [fp_begin_[t], fp_begin_[t + 1])
  std::vector<uint32_t> fp_begin_;
  std::span<const Access> footprint(uint32_t t) const {
    return {fp_all_.data() + fp_begin_[t], fp_all_.data() + fp_begin_[t + 1]};
  }
  std::vector<std::vector<uint32_t>> producers_;
  std::vector<uint64_t> actual_total_;
  std::vector<char> ran_;             // tasks the deadlock simulation ran
  std::vector<char> chained_;         // tasks some task chains (run by a last arriver, unqueued)
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

}  // namespace

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
    return Checker(program, target).run();
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
