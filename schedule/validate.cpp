#include "schedule/validate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <queue>
#include <unordered_map>
#include <utility>

#include "schedule/footprint.h"

// How the rules are decided (dev/validator_notes.md has the argument in full):
//   - Footprints (schedule/footprint.h) over-approximate every task's element accesses.
//   - Deadlock is an exact greedy simulation: counters only grow and running a task only adds
//     increments, so running every ready task as soon as it is ready reaches the unique maximal
//     state; a program deadlocks iff that state leaves a queue undrained. With a dynamic queue the
//     claimed prefix grows whenever a worker is free, which the simulation does the same way.
//   - Happens-before is a DAG over the tasks plus one virtual "join" node per distinct
//     (counter, set of guaranteed producers). A wait (c, t) guarantees producer p when the
//     producers that could have signalled without p cannot reach t on their own; those are the
//     other producers not already known to run after p. Ancestor sets are bitset rows built in
//     topological order, so a race check is one bit test per (writer, reader) pair.
namespace megasched::schedule {
namespace {

constexpr size_t kMaxDiagnosticsPerRule = 200;
constexpr int64_t kReservedSmemPerBlock = 1024;  // bytes the runtime reserves per resident block
constexpr int64_t kMinRegistersPerThread = 32;

std::string fmt_range(uint32_t buffer, uint64_t begin, uint64_t end) {
  return std::string(buffer_name(buffer)) + "[" + std::to_string(begin) + ":" + std::to_string(end) + "]";
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
    const std::string op = in.op_id < p_.ops.size() ? p_.ops[in.op_id].name : "op " + std::to_string(in.op_id);
    return s + " (" + opcode_name(in.opcode) + " " + op + " tile " + std::to_string(tile_[t]) + ")";
  }

  std::string counter(uint32_t c) const {
    std::string s = "counter " + std::to_string(c);
    if (c < p_.counter_names.size() && !p_.counter_names[c].empty()) s += " (" + p_.counter_names[c] + ")";
    return s;
  }

  std::string range(uint32_t buffer, uint64_t begin, uint64_t end) const {
    std::string s = fmt_range(buffer, begin, end);
    for (const Region& r : p_.regions) {
      if (r.buffer == buffer && r.begin <= begin && begin < r.end) return s + " (in " + r.name + ")";
    }
    return s;
  }

 private:
  const Program& p_;
  std::vector<uint32_t> tile_;
};

// A growable set of fixed-width bit rows.
class BitRows {
 public:
  BitRows(size_t rows, size_t bits) : words_((bits + 63) / 64), data_(rows * words_, 0) {}
  uint64_t* row(size_t r) { return data_.data() + r * words_; }
  const uint64_t* row(size_t r) const { return data_.data() + r * words_; }
  void or_into(size_t dst, size_t src) {
    uint64_t* d = row(dst);
    const uint64_t* s = row(src);
    for (size_t i = 0; i < words_; ++i) d[i] |= s[i];
  }
  void set(size_t r, size_t bit) { row(r)[bit / 64] |= uint64_t{1} << (bit % 64); }
  bool test(size_t r, size_t bit) const { return (row(r)[bit / 64] >> (bit % 64)) & 1; }

 private:
  size_t words_;
  std::vector<uint64_t> data_;
};

struct WriteRange {
  uint64_t begin, end;
  uint32_t task;
};

class Checker {
 public:
  Checker(const Program& p, const GpuTarget& t) : p_(p), target_(t), label_(p), n_(p.tasks.size()) {}

  ValidationReport run() {
    check_launch();
    check_structure();
    collect_producers();
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
        add(Diagnostic{rule, "... and " + std::to_string(count - kMaxDiagnosticsPerRule) + " more " + rule +
                                 " violations (the first " + std::to_string(kMaxDiagnosticsPerRule) + " are listed)",
                       {}, {}, {}});
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
      fail("target '" + target_.name + "' has no SM count, thread, block, shared-memory or register limits, so no launch can be proven co-resident");
      return;
    }
    if (threads < 32 || threads > 1024 || threads % 32 != 0)
      fail("threads_per_block " + std::to_string(threads) + " is not a multiple of 32 in [32, 1024]");
    if (p_.build.threads_per_block != l.threads_per_block)
      fail("the kernel is built for " + std::to_string(p_.build.threads_per_block) + " threads per block but launched with " +
           std::to_string(threads));
    if (bps < 1) fail("blocks_per_sm " + std::to_string(bps) + " is below 1");
    if (l.smem_pages < 0 || l.smem_page_bytes < 0 || smem < 0 ||
        smem < static_cast<int64_t>(l.smem_pages) * l.smem_page_bytes)
      fail("smem_bytes " + std::to_string(smem) + " does not hold " + std::to_string(l.smem_pages) + " pages of " +
           std::to_string(l.smem_page_bytes) + " bytes");
    if (smem > target_.smem_per_block_optin)
      fail("smem_bytes " + std::to_string(smem) + " exceeds the opt-in cap of " + std::to_string(target_.smem_per_block_optin) +
           " bytes per block on " + target_.name);
    if (l.prefetch_depth < 0) fail("prefetch_depth " + std::to_string(l.prefetch_depth) + " is negative");
    if (bps < 1) return;
    if (bps > target_.max_blocks_per_sm)
      fail(std::to_string(bps) + " blocks per SM exceed the limit of " + std::to_string(target_.max_blocks_per_sm) + " on " + target_.name);
    if (bps * threads > target_.max_threads_per_sm)
      fail(std::to_string(bps) + " blocks of " + std::to_string(threads) + " threads exceed " +
           std::to_string(target_.max_threads_per_sm) + " threads per SM: the grid is not co-resident");
    if (bps * (std::max<int64_t>(smem, 0) + kReservedSmemPerBlock) > target_.smem_per_sm)
      fail(std::to_string(bps) + " blocks of " + std::to_string(smem) + " + 1024 reserved bytes of shared memory exceed " +
           std::to_string(target_.smem_per_sm) + " bytes per SM: the grid is not co-resident");
    if (threads > 0 && target_.regs_per_sm / (threads * bps) < kMinRegistersPerThread)
      fail(std::to_string(bps) + " blocks of " + std::to_string(threads) + " threads leave fewer than 32 registers per thread");
    const int64_t resident = static_cast<int64_t>(target_.num_sms) * bps;
    if (l.grid_blocks != resident)
      fail("grid_blocks " + std::to_string(l.grid_blocks) + " is not num_sms x blocks_per_sm = " + std::to_string(resident) +
           (l.grid_blocks > resident ? ": a persistent grid larger than that is not co-resident and deadlocks"
                                     : ": the persistent grid must fill the co-resident slots exactly"));
  }

  // ---- structure --------------------------------------------------------------------------
  bool counter_ok(uint32_t c) const { return c < p_.counter_totals.size(); }
  bool waits_ok(const ms_abi::Instr& in) const {
    return static_cast<uint64_t>(in.wait_begin) + in.wait_count <= p_.waits.size();
  }

  void check_structure() {
    const ModelParamsCheck mp = check_model();
    footprints_.assign(n_, {});
    task_ok_.assign(n_, false);
    std::string error;
    for (uint32_t t = 0; t < n_; ++t) {
      const ms_abi::Instr& in = p_.tasks[t];
      bool ok = true;
      if (in.op_id >= p_.ops.size()) {
        add("structure", label_.task(t) + " names op " + std::to_string(in.op_id) + " but the program has " +
                             std::to_string(p_.ops.size()) + " ops", {t});
      }
      if (!waits_ok(in)) {
        add("structure", label_.task(t) + " has waits [" + std::to_string(in.wait_begin) + ", +" + std::to_string(in.wait_count) +
                             ") beyond the wait table of " + std::to_string(p_.waits.size()) + " entries", {t});
      } else {
        for (uint32_t w = 0; w < in.wait_count; ++w) {
          const ms_abi::Wait& wt = p_.waits[in.wait_begin + w];
          if (!counter_ok(wt.counter))
            add("structure", label_.task(t) + " waits on counter " + std::to_string(wt.counter) + ", but the program has " +
                                 std::to_string(p_.counter_totals.size()) + " counters", {t}, {wt.counter});
        }
      }
      if (in.signal_increment > 0 && !counter_ok(in.signal_counter))
        add("structure", label_.task(t) + " signals counter " + std::to_string(in.signal_counter) + ", but the program has " +
                             std::to_string(p_.counter_totals.size()) + " counters", {t}, {in.signal_counter});
      error.clear();
      std::vector<Access>& fp = footprints_[t];
      if (!mp.ok) {
        ok = false;
      } else if (!task_footprint(p_, t, &fp, &error)) {
        add("structure", label_.task(t) + " is malformed: " + error, {t});
        ok = false;
      } else {
        for (const Access& a : fp) {
          const uint64_t extent = a.buffer < ms_abi::kBufCount ? p_.buffer_elements[a.buffer] : 0;
          if (a.end > extent) {
            add("structure", label_.task(t) + (a.write ? " writes " : " reads ") + fmt_range(a.buffer, a.begin, a.end) +
                                 ", beyond the buffer's " + std::to_string(extent) + " elements", {t}, {},
                {fmt_range(a.buffer, a.begin, a.end)});
            ok = false;
          }
          if (a.write && a.buffer == ms_abi::kBufWeights) {
            add("structure", label_.task(t) + " writes the read-only weights", {t});
            ok = false;
          }
        }
      }
      if (!ok) fp.clear();
      task_ok_[t] = ok;
    }
    check_queues();
    for (size_t r = 0; r < p_.regions.size(); ++r) {
      const Region& reg = p_.regions[r];
      if (reg.buffer >= ms_abi::kBufCount || reg.begin > reg.end || reg.end > p_.buffer_elements[reg.buffer])
        add("structure", "region '" + reg.name + "' " + fmt_range(reg.buffer, reg.begin, reg.end) + " is not inside its buffer");
    }
  }

  struct ModelParamsCheck {
    bool ok;
  };
  ModelParamsCheck check_model() {
    bool ok = true;
    const ms_abi::ModelParams& m = p_.model;
    if (m.weight_dtype > ms_abi::kDTypeBF16 || m.kv_dtype > ms_abi::kDTypeBF16) {
      add("structure", "model dtypes (weights " + std::to_string(m.weight_dtype) + ", kv " + std::to_string(m.kv_dtype) +
                           ") are not f32 (0) or bf16 (1)");
      ok = false;
    }
    if (p_.buffer_elements[ms_abi::kBufStep] < 4) {
      add("structure", "the step buffer has " + std::to_string(p_.buffer_elements[ms_abi::kBufStep]) +
                           " elements; the step cell needs 4");
      ok = false;
    }
    return {ok};
  }

  void check_queues() {
    const bool dynamic = p_.launch.dynamic_queue;
    if (dynamic && p_.queues.size() != 1)
      add("structure", "a dynamic-queue program must have exactly one global queue, not " + std::to_string(p_.queues.size()));
    if (!dynamic && p_.launch.grid_blocks > 0 && p_.queues.size() > static_cast<size_t>(p_.launch.grid_blocks))
      add("structure", std::to_string(p_.queues.size()) + " queues but only " + std::to_string(p_.launch.grid_blocks) +
                           " blocks: the extra queues never run");
    std::vector<uint32_t> seen(n_, 0);
    for (size_t q = 0; q < p_.queues.size(); ++q) {
      for (uint32_t t : p_.queues[q]) {
        if (t >= n_) {
          add("structure", "queue " + std::to_string(q) + " holds task " + std::to_string(t) + ", but the program has " +
                               std::to_string(n_) + " tasks");
        } else if (seen[t]++ == 1) {
          add("structure", label_.task(t) + " appears more than once in the queues", {t});
        }
      }
    }
    for (uint32_t t = 0; t < n_; ++t)
      if (seen[t] == 0) add("structure", label_.task(t) + " is in no queue, so it never runs", {t});
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
        add("reachability", label_.counter(c) + " declares " + std::to_string(p_.counter_totals[c]) +
                                " increments per step but its producers add " + std::to_string(actual_total_[c]) +
                                ", so epoch-scaled thresholds are wrong from the second step on",
            {}, {c});
    }
    for (uint32_t t = 0; t < n_; ++t) {
      const ms_abi::Instr& in = p_.tasks[t];
      if (!waits_ok(in)) continue;
      for (uint32_t w = 0; w < in.wait_count; ++w) {
        const ms_abi::Wait& wt = p_.waits[in.wait_begin + w];
        if (!counter_ok(wt.counter)) continue;
        if (wt.threshold > actual_total_[wt.counter])
          add("reachability", label_.task(t) + " waits for " + label_.counter(wt.counter) + " >= " + std::to_string(wt.threshold) +
                                  ", but its producers add only " + std::to_string(actual_total_[wt.counter]) + " per step",
              {t}, {wt.counter});
      }
    }
  }

  // ---- deadlock ---------------------------------------------------------------------------
  // First wait of `task` not satisfied by `value`; -1 when all hold, -2 when a wait is malformed.
  int first_unsatisfied(uint32_t task, const std::vector<uint64_t>& value) const {
    const ms_abi::Instr& in = p_.tasks[task];
    if (!waits_ok(in)) return -2;
    for (uint32_t w = 0; w < in.wait_count; ++w) {
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
    std::vector<std::priority_queue<Waiter, std::vector<Waiter>, std::greater<Waiter>>> blocked(c_count);
    const bool dynamic = p_.launch.dynamic_queue && p_.queues.size() == 1;
    const std::vector<uint32_t> empty;
    // Slots: static -> one per queue; dynamic -> one per worker.
    const size_t workers = dynamic ? static_cast<size_t>(std::max(1, p_.launch.grid_blocks)) : p_.queues.size();
    const size_t slot_count = dynamic ? std::min<size_t>(workers, p_.queues[0].size()) : p_.queues.size();
    std::vector<int64_t> slot_task(slot_count, -1);  // task waiting in the slot, -1 none
    std::vector<size_t> pos(p_.queues.size(), 0);    // next entry of each queue
    std::vector<int> malformed(slot_count, 0);
    std::vector<uint32_t> work;
    auto refill = [&](uint32_t s) {
      const std::vector<uint32_t>& q = dynamic ? p_.queues[0] : p_.queues[s];
      size_t& next = dynamic ? pos[0] : pos[s];
      while (next < q.size() && q[next] >= n_) ++next;  // ids out of range: a structure error already
      slot_task[s] = next < q.size() ? static_cast<int64_t>(q[next++]) : -1;
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
        const int w = first_unsatisfied(t, value);
        if (w == -2) {
          malformed[s] = 1;
          break;
        }
        if (w >= 0) {
          const ms_abi::Wait& wt = p_.waits[p_.tasks[t].wait_begin + w];
          blocked[wt.counter].push({wt.threshold, s});
          break;
        }
        ran_[t] = 1;
        const ms_abi::Instr& in = p_.tasks[t];
        refill(s);
        if (in.signal_increment > 0 && counter_ok(in.signal_counter)) {
          const uint32_t c = in.signal_counter;
          value[c] += in.signal_increment;
          while (!blocked[c].empty() && blocked[c].top().first <= value[c]) {
            work.push_back(blocked[c].top().second);
            blocked[c].pop();
          }
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
        add("deadlock", "all " + std::to_string(workers) + " workers of the dynamic queue hold tasks that cannot start, so the " +
                            std::to_string(p_.queues[0].size() - pos[0]) + " unclaimed tasks they wait for never run");
    }
  }

  void report_stuck(uint32_t slot, uint32_t t, bool dynamic, const std::vector<uint64_t>& value, bool malformed) {
    const std::string where = dynamic ? "worker " + std::to_string(slot) + " of the dynamic queue holds "
                                      : "queue " + std::to_string(slot) + " is stuck at ";
    if (malformed) {
      add("deadlock", where + label_.task(t) + ", whose waits name a counter or wait entry that does not exist", {t});
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
    std::string msg = where + label_.task(t) + ", which waits for " + label_.counter(c) + " >= " + std::to_string(wt.threshold) +
                      " but the counter stops at " + std::to_string(value[c]) + " of " + std::to_string(actual_total_[c]);
    if (unfinished > 0)
      msg += ": its producers " + missing + (unfinished > listed ? " and " + std::to_string(unfinished - listed) + " more" : "") +
             " never run";
    else
      msg += ": no producer is left to raise it";
    add("deadlock", msg, std::move(tasks), {c});
  }

  // ---- happens-before ---------------------------------------------------------------------
  // Guaranteed producers of wait (c, t): the simple rule takes those whose increment exceeds
  // total - t (a prefix of producers_[c]); with `refine`, p is also guaranteed when the producers
  // that are not known to run after p add less than t.
  std::vector<uint32_t> guaranteed(uint32_t c, uint64_t threshold, const BitRows* known) const {
    const std::vector<uint32_t>& prods = producers_[c];
    const uint64_t total = actual_total_[c];
    std::vector<uint32_t> out;
    if (threshold == 0) return out;
    if (threshold > total) return prods;  // unreachable: the waiter never runs, every edge is vacuous
    for (uint32_t prod : prods) {
      const uint64_t inc = p_.tasks[prod].signal_increment;
      if (total - inc < threshold) {
        out.push_back(prod);
        continue;
      }
      if (known == nullptr) break;  // sorted by increment: no later producer qualifies
      uint64_t others = 0;
      for (uint32_t q : prods) {
        if (q == prod || known->test(q, prod)) continue;  // q runs after prod: it cannot help without it
        others += p_.tasks[q].signal_increment;
        if (others >= threshold) break;
      }
      if (others < threshold) out.push_back(prod);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Builds ancestor rows; `known` (ancestors from a previous pass) enables the refined rule.
  bool build_rows(const BitRows* known, std::unique_ptr<BitRows>* rows_out, std::vector<char>* done_out) {
    const bool dynamic = p_.launch.dynamic_queue;
    std::map<std::vector<uint32_t>, uint32_t> join_of;  // producer set -> join node index
    std::vector<std::vector<uint32_t>> joins;           // join node -> producer tasks
    std::vector<std::vector<uint32_t>> task_joins(n_);  // task -> join nodes it waits on
    std::unordered_map<uint64_t, int64_t> join_of_wait;  // (counter << 32 | threshold) -> join, -1 none
    bool refined_any = false;
    for (uint32_t t = 0; t < n_; ++t) {
      const ms_abi::Instr& in = p_.tasks[t];
      if (!waits_ok(in)) continue;
      for (uint32_t w = 0; w < in.wait_count; ++w) {
        const ms_abi::Wait& wt = p_.waits[in.wait_begin + w];
        if (!counter_ok(wt.counter)) continue;
        const uint64_t key = (static_cast<uint64_t>(wt.counter) << 32) | wt.threshold;
        auto cached = join_of_wait.find(key);
        if (cached == join_of_wait.end()) {
          std::vector<uint32_t> g = guaranteed(wt.counter, wt.threshold, known);
          if (known != nullptr && g.size() != guaranteed(wt.counter, wt.threshold, nullptr).size()) refined_any = true;
          int64_t id = -1;
          if (!g.empty()) {
            auto [it, inserted] = join_of.emplace(std::move(g), static_cast<uint32_t>(joins.size()));
            if (inserted) joins.push_back(it->first);
            id = it->second;
          }
          cached = join_of_wait.emplace(key, id).first;
        }
        if (cached->second >= 0) task_joins[t].push_back(static_cast<uint32_t>(cached->second));
      }
    }
    if (known != nullptr && !refined_any) return false;
    // Node ids: tasks [0, n), joins [n, n + J). Edges pred -> succ in CSR form.
    const size_t nodes = n_ + joins.size();
    std::vector<uint32_t> indegree(nodes, 0);
    std::vector<std::vector<uint32_t>> succ(nodes);
    auto edge = [&](uint32_t a, uint32_t b) {
      succ[a].push_back(b);
      ++indegree[b];
    };
    for (size_t j = 0; j < joins.size(); ++j)
      for (uint32_t prod : joins[j]) edge(prod, static_cast<uint32_t>(n_ + j));
    for (uint32_t t = 0; t < n_; ++t)
      for (uint32_t j : task_joins[t]) edge(static_cast<uint32_t>(n_ + j), t);
    if (!dynamic) {
      for (const std::vector<uint32_t>& q : p_.queues) {
        int64_t prev = -1;
        for (uint32_t t : q) {
          if (t >= n_) continue;
          if (prev >= 0) edge(static_cast<uint32_t>(prev), t);
          prev = t;
        }
      }
    }
    auto rows = std::make_unique<BitRows>(nodes, n_);
    std::vector<char> done(nodes, 0);
    std::vector<uint32_t> ready;
    for (uint32_t v = 0; v < nodes; ++v)
      if (indegree[v] == 0) ready.push_back(v);
    while (!ready.empty()) {
      const uint32_t v = ready.back();
      ready.pop_back();
      done[v] = 1;
      for (uint32_t s : succ[v]) {
        rows->or_into(s, v);
        if (v < n_) rows->set(s, v);
        if (--indegree[s] == 0) ready.push_back(s);
      }
    }
    *rows_out = std::move(rows);
    *done_out = std::move(done);
    return true;
  }

  void build_happens_before() {
    build_rows(nullptr, &hb_, &hb_done_);
    // One refinement pass: only partial waits on multi-producer counters can gain edges.
    std::unique_ptr<BitRows> refined;
    std::vector<char> refined_done;
    if (build_rows(hb_.get(), &refined, &refined_done)) {
      hb_ = std::move(refined);
      hb_done_ = std::move(refined_done);
    }
  }
  bool ordered_before(uint32_t a, uint32_t b) const { return hb_->test(b, a); }

  // ---- races and coverage -----------------------------------------------------------------
  void check_accesses() {
    // Writes per buffer, sorted by begin, with a running maximum of `end` for overlap queries.
    std::vector<std::vector<WriteRange>> writes(ms_abi::kBufCount);
    for (uint32_t t = 0; t < n_; ++t)
      for (const Access& a : footprints_[t])
        if (a.write) writes[a.buffer].push_back({a.begin, a.end, t});
    std::vector<std::vector<uint64_t>> max_end(ms_abi::kBufCount);
    for (uint32_t b = 0; b < ms_abi::kBufCount; ++b) {
      auto& w = writes[b];
      std::sort(w.begin(), w.end(), [](const WriteRange& x, const WriteRange& y) {
        return x.begin != y.begin ? x.begin < y.begin : x.task < y.task;
      });
      max_end[b].resize(w.size());
      uint64_t m = 0;
      for (size_t i = 0; i < w.size(); ++i) max_end[b][i] = m = std::max(m, w[i].end);
      check_double_writes(b, w);
    }
    // Elements a read may find without a writer in this step: inputs (weights, the step cell's
    // token/position/epoch, the KV history, regions marked input) and whatever some task writes.
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> covered(ms_abi::kBufCount);
    for (uint32_t b = 0; b < ms_abi::kBufCount; ++b)
      for (const WriteRange& w : writes[b]) covered[b].push_back({w.begin, w.end});
    covered[ms_abi::kBufStep].push_back({0, 3});
    for (const Region& r : p_.regions)
      if (r.input && r.buffer < ms_abi::kBufCount && r.begin < r.end) covered[r.buffer].push_back({r.begin, r.end});
    for (auto& c : covered) merge(&c);

    for (uint32_t x = 0; x < n_; ++x) {
      size_t reported = 0;
      for (const Access& a : footprints_[x]) {
        if (a.write || a.buffer == ms_abi::kBufWeights) continue;
        if (a.buffer != ms_abi::kBufKv) check_covered(x, a, covered[a.buffer]);
        const auto& w = writes[a.buffer];
        // Writers with begin < a.end, walked down while some earlier one may still reach a.begin.
        size_t i = static_cast<size_t>(std::lower_bound(w.begin(), w.end(), a.end,
                                                        [](const WriteRange& r, uint64_t e) { return r.begin < e; }) -
                                       w.begin());
        while (i > 0 && max_end[a.buffer][i - 1] > a.begin) {
          --i;
          const WriteRange& wr = w[i];
          if (wr.end <= a.begin) continue;
          if (wr.task == x) {
            add("race", label_.task(x) + " reads " + label_.range(a.buffer, std::max(a.begin, wr.begin), std::min(a.end, wr.end)) +
                            ", which it also writes: threads of one task would race", {x}, {},
                {fmt_range(a.buffer, std::max(a.begin, wr.begin), std::min(a.end, wr.end))});
            continue;
          }
          if (!hb_done_[x] || !hb_done_[wr.task]) continue;  // in a happens-before cycle: never runs (deadlock)
          if (ordered_before(wr.task, x)) continue;
          if (reported++ > 0) continue;  // one diagnostic per reader
          const uint64_t lo = std::max(a.begin, wr.begin), hi = std::min(a.end, wr.end);
          const std::string how = ordered_before(x, wr.task) ? ", but it runs before that writer"
                                                             : " with no ordering between them";
          add("race", label_.task(x) + " reads " + label_.range(a.buffer, lo, hi) + " written by " + label_.task(wr.task) + how,
              {x, wr.task}, {}, {fmt_range(a.buffer, lo, hi)});
        }
      }
    }
    check_logits(covered_writes(writes));
  }

  void check_double_writes(uint32_t buffer, const std::vector<WriteRange>& w) {
    size_t holder = 0;  // the write with the largest end so far
    for (size_t i = 1; i < w.size(); ++i) {
      if (w[i].begin < w[holder].end && w[i].task != w[holder].task) {
        const uint32_t a = w[holder].task, b = w[i].task;
        const uint64_t lo = w[i].begin, hi = std::min(w[i].end, w[holder].end);
        const bool ordered = !hb_done_[a] || !hb_done_[b] || ordered_before(a, b) || ordered_before(b, a);
        if (ordered)
          add("coverage", label_.range(buffer, lo, hi) + " is written by both " + label_.task(a) + " and " + label_.task(b) +
                              ": each element must be written exactly once per step", {a, b}, {}, {fmt_range(buffer, lo, hi)});
        else
          add("race", label_.task(a) + " and " + label_.task(b) + " both write " + label_.range(buffer, lo, hi) +
                          " with no ordering between them", {a, b}, {}, {fmt_range(buffer, lo, hi)});
      }
      if (w[i].end > w[holder].end) holder = i;
    }
  }

  static void merge(std::vector<std::pair<uint64_t, uint64_t>>* v) {
    std::sort(v->begin(), v->end());
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
  static std::pair<uint64_t, uint64_t> first_gap(uint64_t begin, uint64_t end,
                                                 const std::vector<std::pair<uint64_t, uint64_t>>& cover) {
    auto it = std::upper_bound(cover.begin(), cover.end(), std::make_pair(begin, UINT64_MAX));
    uint64_t at = begin;
    if (it != cover.begin() && std::prev(it)->second > at) at = std::prev(it)->second;
    if (at >= end) return {end, end};
    const uint64_t gap_end = it != cover.end() ? std::min(end, it->first) : end;
    return {at, gap_end};
  }

  void check_covered(uint32_t x, const Access& a, const std::vector<std::pair<uint64_t, uint64_t>>& cover) {
    const auto [lo, hi] = first_gap(a.begin, a.end, cover);
    if (lo >= hi) return;
    add("coverage", label_.task(x) + " reads " + label_.range(a.buffer, lo, hi) + ", which no task writes and which is not an input",
        {x}, {}, {fmt_range(a.buffer, lo, hi)});
  }

  static std::vector<std::vector<std::pair<uint64_t, uint64_t>>> covered_writes(
      const std::vector<std::vector<WriteRange>>& writes) {
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> out(writes.size());
    for (size_t b = 0; b < writes.size(); ++b) {
      for (const WriteRange& w : writes[b]) out[b].push_back({w.begin, w.end});
      merge(&out[b]);
    }
    return out;
  }

  void check_logits(const std::vector<std::vector<std::pair<uint64_t, uint64_t>>>& written) {
    for (const Region& r : p_.regions) {
      if (r.name != "logits" || r.buffer >= ms_abi::kBufCount || r.begin >= r.end) continue;
      const auto [lo, hi] = first_gap(r.begin, r.end, written[r.buffer]);
      if (lo < hi)
        add("coverage", "the logits " + label_.range(r.buffer, lo, hi) + " are never written", {}, {}, {fmt_range(r.buffer, lo, hi)});
    }
  }

  const Program& p_;
  const GpuTarget& target_;
  Labeler label_;
  const uint32_t n_;
  ValidationReport report_;
  std::map<std::string, size_t> counts_;
  std::vector<std::vector<Access>> footprints_;
  std::vector<char> task_ok_;
  std::vector<std::vector<uint32_t>> producers_;
  std::vector<uint64_t> actual_total_;
  std::vector<char> ran_;  // tasks the deadlock simulation ran
  std::unique_ptr<BitRows> hb_;
  std::vector<char> hb_done_;
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
    r.diagnostics.push_back({"structure", "the program has more tasks than a 32-bit task id can name", {}, {}, {}});
    return r;
  }
  try {
    return Checker(program, target).run();
  } catch (const std::exception& e) {
    ValidationReport r;
    r.diagnostics.push_back({"structure", std::string("the program could not be analysed (") + e.what() +
                                              "); it is too large for this machine's memory", {}, {}, {}});
    return r;
  }
}

nlohmann::json to_json(const Diagnostic& d) {
  return {{"rule", d.rule}, {"message", d.message}, {"tasks", d.tasks}, {"counters", d.counters}, {"buffers", d.buffers}};
}

nlohmann::json to_json(const ValidationReport& report) {
  nlohmann::json diags = nlohmann::json::array();
  for (const Diagnostic& d : report.diagnostics) diags.push_back(to_json(d));
  return {{"ok", report.ok()}, {"rules", report.rules()}, {"diagnostics", diags}};
}

}  // namespace megasched::schedule
