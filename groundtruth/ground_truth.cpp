#include "groundtruth/ground_truth.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "groundtruth/closure.h"
#include "groundtruth/device_model.h"
#include "vm/reference_vm.h"

namespace megasched::groundtruth {

using schedule::GpuTarget;
using schedule::LaunchShape;
using schedule::Program;
using schedule::Weights;

namespace {

constexpr int64_t kRuntimeReservedSmem = 1024;  // bytes per resident block the CUDA runtime keeps
constexpr int64_t kRegistersPerThreadFloor = 32;

struct StateHash {
  size_t operator()(const std::vector<uint64_t>& s) const {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t w : s) h = (h ^ w) * 1099511628211ull + (h >> 29);
    return static_cast<size_t>(h);
  }
};

/// The first way `p` and its access records are not a program the explorer can run (a task's
/// waits outside the wait table, a counter that does not exist, a task queued other than once
/// (chained tasks: never), ...), or "" when none; *chained marks the tasks a chain names.
std::string malformation(const Program& p, const TaskAccesses& acc, std::vector<char>* chained) {
  const size_t n = p.tasks.size();
  if (acc.reads.size() != n || acc.writes.size() != n) {
    return "no access record for every task";
  }
  const size_t counters = p.counter_totals.size();
  for (size_t t = 0; t < n; ++t) {
    const ms_abi::Instr& in = p.tasks[t];
    if (static_cast<uint64_t>(in.wait_begin) + in.wait_count > p.waits.size()) {
      return "task " + std::to_string(t) + " has waits outside the wait table";
    }
    for (uint32_t w = 0; w < in.wait_count; ++w)
      if (p.waits[in.wait_begin + w].counter >= counters) {
        return "task " + std::to_string(t) + " waits on a counter that does not exist";
      }
    if (in.signal_increment > 0 && in.signal_counter >= counters) {
      return "task " + std::to_string(t) + " signals a counter that does not exist";
    }
  }
  std::vector<int> times(n, 0);
  for (const auto& q : p.queues)
    for (uint32_t t : q) {
      if (t >= n) {
        return "a queue names task " + std::to_string(t) + ", which does not exist";
      }
      ++times[t];
    }
  // Chained tasks (abi/abi.h, Last arrivers) run on their last arriver's block, in no queue.
  for (size_t t = 0; t < n; ++t) {
    const uint32_t chain = p.tasks[t].chain;
    if (chain == 0) continue;
    if (chain > n) {
      return "task " + std::to_string(t) + " chains a task that does not exist";
    }
    (*chained)[chain - 1] = 1;
  }
  for (size_t t = 0; t < n; ++t)
    if (times[t] != ((*chained)[t] ? 0 : 1)) {
      return "task " + std::to_string(t) + ((*chained)[t] ? " (chained)" : "") + " is queued " +
             std::to_string(times[t]) + " times";
    }
  return "";
}

class Explorer {
 public:
  Explorer(const Program& p, const GpuTarget& target, const TaskAccesses& acc,
           const GroundTruthOptions& opt)
      : p_(p),
        target_(target),
        acc_(acc),
        opt_(opt),
        n_(p.tasks.size()),
        words_((p.tasks.size() + 63) / 64),
        build_(device_build(p)) {}

  GroundTruth run() {
    launch_facts();
    if (n_ > opt_.max_tasks) {
      out_.complete = false;
      out_.findings.push_back("too large: " + std::to_string(n_) +
                              " tasks (the explorer takes at most " +
                              std::to_string(opt_.max_tasks) + ")");
      return out_;
    }
    if (!well_formed()) return out_;
    build_facts();
    epoch_facts();
    element_facts();
    for (uint32_t epoch : epochs()) {
      explore(epoch);
      if (!out_.complete || (opt_.stop_at_first && !out_.kinds.empty())) break;
    }
    return out_;
  }

 private:
  void find(const std::string& kind, const std::string& message) {
    out_.kinds.insert(kind);
    if (out_.findings.size() < 8) out_.findings.push_back(kind + ": " + message);
  }

  // How many blocks of this kernel one SM holds at once, from each resource separately. Shared
  // memory: the block's dynamic and static bytes and the runtime's reserve, in whole allocation
  // units (the occupancy calculator's rule). Registers: the floor of 32 per thread, since only the
  // compiled kernel knows its count.
  void launch_facts() {
    const LaunchShape& l = p_.launch;
    const int64_t threads = l.threads_per_block;
    if (threads < 32 || threads > 1024 || threads % 32 != 0) {
      find("launch", "a block of " + std::to_string(threads) + " threads cannot be launched");
      return;
    }
    const int64_t smem = l.smem_bytes;
    const int64_t static_smem = device_static_smem_bytes(build_);
    if (smem < static_cast<int64_t>(l.smem_pages) * l.smem_page_bytes || smem < 0)
      find("launch", "shared memory smaller than its pages");
    if (smem + static_smem > target_.smem_per_block_optin)
      find("launch", "dynamic + static shared memory above the per-block opt-in limit");
    const int64_t unit = target_.sm_arch >= 80 ? 128 : 256;
    const int64_t per_block =
        (std::max<int64_t>(smem, 0) + static_smem + kRuntimeReservedSmem + unit - 1) / unit * unit;
    int64_t per_sm = target_.max_blocks_per_sm;
    per_sm = std::min<int64_t>(per_sm, target_.max_threads_per_sm / threads);
    per_sm = std::min<int64_t>(per_sm, target_.smem_per_sm / per_block);
    per_sm = std::min<int64_t>(per_sm, target_.regs_per_sm / (threads * kRegistersPerThreadFloor));
    const int64_t resident = per_sm * target_.num_sms;
    if (l.grid_blocks < 1 || l.grid_blocks > resident)
      find("launch", std::to_string(l.grid_blocks) + " blocks but only " +
                         std::to_string(resident) +
                         " can be resident at once: a persistent grid would hang");
  }

  bool well_formed() {
    chained_.assign(n_, 0);
    if (const std::string why = malformation(p_, acc_, &chained_); !why.empty()) {
      find("malformed", why);
      return false;
    }
    if (!chains_run_once()) return false;
    if (p_.launch.dynamic_queue && p_.queues.size() != 1) {
      find("malformed", "a dynamic queue program without exactly one queue");
      return false;
    }
    for (size_t t = 0; t < n_; ++t)
      for (const auto* set : {&acc_.reads[t], &acc_.writes[t]})
        for (uint64_t key : *set) {
          const uint32_t buffer = static_cast<uint32_t>(key >> 56);
          if (buffer >= ms_abi::kBufCount ||
              (key & ((uint64_t{1} << 56) - 1)) >= p_.buffer_elements[buffer]) {
            find("malformed",
                 "task " + std::to_string(t) + " touches an element outside its buffer");
            return false;
          }
        }
    return true;
  }

  // What the kernel does with a chained task k (megakernel.cuh): a chainer t adds its increment
  // to its counter with an atomic that returns the old value and runs k when that add takes the
  // counter from below k's first wait target to it; k then signals. So k runs exactly once per
  // step after its wait holds iff k has one wait, on the counter every one of its chainers signals,
  // with a threshold of at least 1, and every producer of that counter chains k (otherwise the
  // crossing add may be one that does not run it); the kernel runs k only if it is an attn_combine
  // or argmax and does not follow k's own chain. Anything else: k may never run (a deadlock of
  // whatever waits for it) or run as the wrong opcode.
  bool chains_run_once() {
    for (size_t k = 0; k < n_; ++k) {
      if (!chained_[k]) continue;
      const ms_abi::Instr& in = p_.tasks[k];
      const std::string name = "chained task " + std::to_string(k);
      if (in.opcode != ms_abi::kAttnCombine && in.opcode != ms_abi::kArgmax) {
        find("malformed", name + " has an opcode the kernel does not run chained");
        return false;
      }
      if (in.chain != 0) {
        find("malformed", name + " chains a task itself; the kernel runs one level");
        return false;
      }
      if (in.wait_count != 1 || p_.waits[in.wait_begin].threshold == 0) {
        find("deadlock", name +
                             " does not wait once for a counter value above 0, so no arrival "
                             "crosses its target");
        return false;
      }
      const uint32_t c = p_.waits[in.wait_begin].counter;
      for (size_t t = 0; t < n_; ++t) {
        const ms_abi::Instr& x = p_.tasks[t];
        const bool signals_c = x.signal_increment > 0 && x.signal_counter == c;
        if (signals_c != (x.chain == k + 1)) {
          find("deadlock",
               "task " + std::to_string(t) +
                   (signals_c ? " signals the counter " + name + " waits on without chaining it"
                              : " chains " + name + " without signalling its counter"));
          return false;
        }
      }
    }
    return true;
  }

  // The kernel build (groundtruth/device_model.h): whether it compiles, and per weight-ring task
  // where its staging and pages land in shared memory, whether its loops advance and what it reads
  // beyond the ReferenceVm's accesses (added to its reads when inside the buffers).
  void build_facts() {
    for (const std::string& e : device_build_errors(build_)) find("build", e);
    if (!build_.weight_ring) return;
    const LaunchShape& l = p_.launch;
    const uint64_t x_bytes = static_cast<uint64_t>(std::max(build_.x_floats, 0)) * 4;
    const uint64_t pages = static_cast<uint64_t>(std::max(build_.ring_pages, 0));
    const uint64_t page_bytes = static_cast<uint64_t>(std::max(build_.ring_page_bytes, 0));
    // ring_layout: [x staging | pages | full mbarriers | empty mbarriers].
    if (x_bytes + pages * page_bytes + pages * 16 >
        static_cast<uint64_t>(std::max(l.smem_bytes, 0)))
      find("smem_overflow",
           "the weight ring's layout needs " + std::to_string(x_bytes + pages * (page_bytes + 16)) +
               " bytes of dynamic shared memory, the launch gives " + std::to_string(l.smem_bytes));
    for (uint32_t t = 0; t < n_; ++t) {
      const RingTaskModel m = ring_task_model(build_, p_, p_.tasks[t]);
      if (m.path == RingTaskModel::Path::kNone) continue;
      const std::string task = "task " + std::to_string(t);
      if (m.staged_floats * 4 > x_bytes)
        find("smem_overflow", task + " stages its input up to float " +
                                  std::to_string(m.staged_floats) + " of " +
                                  std::to_string(build_.x_floats) +
                                  ": into ring page 0, which the loader fills at the same time");
      if (m.page_bytes_used > page_bytes)
        find("smem_overflow", task + " copies " + std::to_string(m.page_bytes_used) +
                                  " bytes into a ring page of " + std::to_string(page_bytes));
      if (!m.loader_ends)
        find("hang", task +
                         ": a ring page holds no row piece (or segment), so the loader's step "
                         "is zero and the kernel never ends");
      for (const DeviceRange& r : m.reads) {
        if (r.buffer >= ms_abi::kBufCount || r.end > p_.buffer_elements[r.buffer]) {
          find("out_of_bounds",
               task + " reads " + std::to_string(r.begin) + ".." + std::to_string(r.end) +
                   " of buffer " + std::to_string(r.buffer) + " (its ring staging), beyond its " +
                   std::to_string(r.buffer < ms_abi::kBufCount ? p_.buffer_elements[r.buffer] : 0) +
                   " elements");
          continue;
        }
        std::vector<uint64_t>& reads = acc_.reads[t];
        for (uint64_t i = r.begin; i < r.end; ++i) reads.push_back(element_key(r.buffer, i));
        std::sort(reads.begin(), reads.end());
        reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
      }
    }
  }

  // Epoch 0, and the first epoch at which the largest counter's targets pass 2^32.
  std::vector<uint32_t> epochs() const {
    uint64_t largest = 0;
    for (uint32_t total : p_.counter_totals) largest = std::max<uint64_t>(largest, total);
    std::vector<uint32_t> out{0};
    if (opt_.wrap_epoch && largest > 0 && 0xffffffffull / largest > 0)
      out.push_back(static_cast<uint32_t>(0xffffffffull / largest));
    return out;
  }

  void epoch_facts() {
    const std::vector<uint64_t> sum = step_increments(p_);
    for (size_t c = 0; c < sum.size(); ++c)
      if (sum[c] != p_.counter_totals[c])
        find("epoch", "counter " + std::to_string(c) + " receives " + std::to_string(sum[c]) +
                          " per step but declares " + std::to_string(p_.counter_totals[c]));
  }

  // Written before the step by the host (from the model) or by earlier steps (the KV history):
  // never because the program marks a region input.
  bool is_input(uint64_t key,
                const std::unordered_map<uint64_t, std::vector<uint32_t>>& writers) const {
    const uint32_t buffer = static_cast<uint32_t>(key >> 56);
    const uint64_t index = key & ((uint64_t{1} << 56) - 1);
    const ms_abi::ModelParams& m = p_.model;
    if (buffer == ms_abi::kBufWeights) return true;
    if (buffer == ms_abi::kBufStep) return index < 3;
    if (buffer == ms_abi::kBufActivations)
      return index >= m.rope_table && index < uint64_t{m.rope_table} + m.head_dim / 2;
    if (buffer != ms_abi::kBufKv || m.head_dim == 0 || m.max_seq == 0) return false;
    // Row t of [layer][k|v][kv_head][max_seq][head_dim]: history when t < position and this step
    // appends the same head's row at the position (so step t appended row t).
    const uint64_t row = (index / m.head_dim) % m.max_seq;
    const uint64_t position = static_cast<uint64_t>(std::max(acc_.position, 0));
    if (row >= position) return false;
    return writers.count(element_key(buffer, index + (position - row) * m.head_dim)) > 0;
  }

  // Double writes, uninitialised reads, and per task the mask of tasks whose writes it touches.
  void element_facts() {
    std::unordered_map<uint64_t, std::vector<uint32_t>> writers;
    for (uint32_t t = 0; t < n_; ++t)
      for (uint64_t key : acc_.writes[t]) writers[key].push_back(t);
    bool doubled = false;
    for (const auto& [key, list] : writers)
      if (list.size() > 1 && !doubled) {
        find("double_write", "tasks " + std::to_string(list[0]) + " and " +
                                 std::to_string(list[1]) + " both write element " +
                                 std::to_string(key & ((uint64_t{1} << 56) - 1)) + " of buffer " +
                                 std::to_string(key >> 56));
        doubled = true;
      }
    conflict_.assign(n_ * words_, 0);
    bool uninit = false;
    for (uint32_t x = 0; x < n_; ++x) {
      for (const auto* set : {&acc_.reads[x], &acc_.writes[x]}) {
        const bool reading = set == &acc_.reads[x];
        for (uint64_t key : *set) {
          auto it = writers.find(key);
          if (it == writers.end()) {
            if (reading && !is_input(key, writers) && !uninit) {
              find("uninitialized_read", "task " + std::to_string(x) + " reads element " +
                                             std::to_string(key & ((uint64_t{1} << 56) - 1)) +
                                             " of buffer " + std::to_string(key >> 56) +
                                             ", which nothing writes");
              uninit = true;
            }
            continue;
          }
          for (uint32_t w : it->second)
            if (w != x) conflict_[x * words_ + w / 64] |= uint64_t{1} << (w % 64);
        }
      }
    }
  }

  bool done(const std::vector<uint64_t>& s, size_t t) const { return (s[t / 64] >> (t % 64)) & 1; }

  // Decides the step at `epoch` by closures (groundtruth/closure.h); false when not persistent.
  bool decide_by_closure(uint32_t epoch) {
    const auto conflicts = [&](uint32_t x, uint32_t w) {
      return ((conflict_[x * words_ + w / 64] >> (w % 64)) & 1) != 0;
    };
    const auto hazards = closure_hazards(p_, epoch, chained_, conflicts, opt_.stop_at_first);
    if (!hazards) return false;
    for (const ClosureHazard& h : *hazards) find(h.kind, h.message);
    return out_.by_closure = true;
  }

  void explore(uint32_t epoch) {
    if (opt_.closure_only) {
      out_.complete = out_.complete && decide_by_closure(epoch);
      return;
    }
    const bool dynamic = p_.launch.dynamic_queue;
    const std::vector<uint64_t> added = step_increments(p_);
    const std::string at = epoch == 0 ? "" : " at step epoch " + std::to_string(epoch);
    const size_t workers = static_cast<size_t>(std::max(1, p_.launch.grid_blocks));
    const size_t live_queues = dynamic ? 1 : std::min(p_.queues.size(), workers);
    std::unordered_set<std::vector<uint64_t>, StateHash> seen;
    std::vector<std::vector<uint64_t>> stack;
    std::vector<uint64_t> start(words_ + 1, 0);  // finished bits, then the claim cursor
    // With a worker for every task no claim ever waits for a worker, so claiming them all at once
    // reaches the same interleavings (and keeps the claim cursor out of the state space).
    if (dynamic && workers >= p_.queues[0].size()) start[words_] = p_.queues[0].size();
    seen.insert(start);
    stack.push_back(start);
    std::vector<uint64_t> value(p_.counter_totals.size());
    std::vector<uint32_t> enabled;
    while (!stack.empty()) {
      std::vector<uint64_t> s = std::move(stack.back());
      stack.pop_back();
      ++out_.states;
      if (out_.states > opt_.max_states) {
        if (opt_.closure_at_limit && decide_by_closure(epoch)) return;
        out_.complete = false;
        out_.findings.push_back("state limit reached");
        return;
      }
      std::fill(value.begin(), value.end(), 0);
      size_t finished = 0;
      for (size_t t = 0; t < n_; ++t)
        if (done(s, t)) {
          ++finished;
          if (p_.tasks[t].signal_increment > 0)
            value[p_.tasks[t].signal_counter] += p_.tasks[t].signal_increment;
        }
      auto can_start = [&](uint32_t t) { return device_waits_hold(p_, t, epoch, value, added); };
      enabled.clear();
      bool can_claim = false;
      if (dynamic) {
        const auto& q = p_.queues[0];
        const size_t cursor = s[words_];
        size_t in_flight = 0;
        for (size_t i = 0; i < cursor; ++i) {
          if (done(s, q[i])) continue;
          ++in_flight;
          if (can_start(q[i])) enabled.push_back(q[i]);
        }
        can_claim = in_flight < workers && cursor < q.size();
      } else {
        for (size_t qi = 0; qi < live_queues; ++qi) {
          for (uint32_t t : p_.queues[qi]) {
            if (done(s, t)) continue;
            if (can_start(t)) enabled.push_back(t);
            break;
          }
        }
      }
      // A chained task runs once its wait holds, on the block that arrived last: it needs no
      // free worker or queue head (chains_run_once proved the arrival that runs it happens).
      for (uint32_t t = 0; t < n_; ++t)
        if (chained_[t] && !done(s, t) && can_start(t)) enabled.push_back(t);
      for (uint32_t x : enabled) {
        const uint64_t* c = &conflict_[x * words_];
        for (size_t i = 0; i < words_; ++i) {
          const uint64_t hit = c[i] & ~s[i];
          if (hit == 0) continue;
          const uint32_t w = static_cast<uint32_t>(i * 64 + __builtin_ctzll(hit));
          const bool together = std::find(enabled.begin(), enabled.end(), w) != enabled.end();
          find(together ? "race" : "stale_read",
               "task " + std::to_string(x) + " can " +
                   (together ? "run concurrently with" : "run before") + " task " +
                   std::to_string(w) + ", which writes an element it accesses (after " +
                   std::to_string(finished) + " finished tasks" + at + ")");
          if (opt_.stop_at_first) return;
          break;
        }
      }
      if (enabled.empty() && !can_claim) {
        if (finished < n_) {
          find("deadlock", std::to_string(n_ - finished) + " tasks can never start after " +
                               std::to_string(finished) + " finished ones" + at);
          if (opt_.stop_at_first) return;
        }
        continue;
      }
      for (uint32_t x : enabled) {
        std::vector<uint64_t> next = s;
        next[x / 64] |= uint64_t{1} << (x % 64);
        if (seen.insert(next).second) stack.push_back(std::move(next));
      }
      if (can_claim) {
        std::vector<uint64_t> next = s;
        ++next[words_];
        if (seen.insert(next).second) stack.push_back(std::move(next));
      }
    }
  }

  const Program& p_;
  const GpuTarget& target_;
  TaskAccesses acc_;  // a copy: build_facts adds the device's reads beyond the ReferenceVm's
  const GroundTruthOptions& opt_;
  const size_t n_;
  const size_t words_;
  const DeviceBuild build_;
  std::vector<uint64_t> conflict_;  // n rows of `words_`: bit w of row x = w writes what x touches
  std::vector<char> chained_;       // tasks some task chains (well_formed)
  GroundTruth out_;
};

}  // namespace

bool record_accesses(const Program& program, const Weights& weights, int32_t position,
                     TaskAccesses* out, std::string* error) {
  const size_t n = program.tasks.size();
  for (size_t t = 0; t < n; ++t)
    if (program.tasks[t].opcode >= ms_abi::kOpcodeCount) {
      *error = "task " + std::to_string(t) + " has opcode " +
               std::to_string(program.tasks[t].opcode) + ", which the ReferenceVm cannot execute";
      return false;
    }
  out->reads.assign(n, {});
  out->writes.assign(n, {});
  out->position = position;
  vm::ReferenceVm machine(program, weights);
  machine.set_step(0, position);
  for (uint32_t t = 0; t < n; ++t) {
    std::vector<uint64_t>& r = out->reads[t];
    std::vector<uint64_t>& w = out->writes[t];
    const std::function<void(const vm::ElementAccess&)> record = [&](const vm::ElementAccess& a) {
      (a.write ? w : r).push_back(element_key(a.buffer, a.index));
    };
    machine.execute(t, &record);
    for (auto* v : {&r, &w}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
  }
  return true;
}

std::vector<int32_t> ground_truth_positions(const Program& program) {
  uint32_t parts = 1;
  for (const auto& in : program.tasks)
    if (in.opcode == ms_abi::kAttnPartial)
      parts = std::max(parts, std::min<uint32_t>(in.param2, 64));
  std::vector<int32_t> out;
  for (uint32_t pos = 0; pos < parts && pos < std::max<uint32_t>(program.model.max_seq, 1); ++pos)
    out.push_back(static_cast<int32_t>(pos));
  return out;
}

GroundTruth explore_ground_truth(const Program& program, const GpuTarget& target,
                                 const TaskAccesses& accesses, const GroundTruthOptions& options) {
  return Explorer(program, target, accesses, options).run();
}

DynamicCheck dynamic_check(const Program& program, const Weights& weights, int orders,
                           uint64_t seed, int32_t token, int32_t position) {
  DynamicCheck out;
  std::vector<float> first_act, first_logits;
  for (int i = 0; i < orders; ++i) {
    vm::ReferenceVm machine(program, weights);
    const vm::ReferenceVm::StepResult r =
        machine.step(token, position, vm::RunOrder::kRandomOrder, seed + static_cast<uint64_t>(i));
    ++out.orders;
    if (!r.completed) {
      out.completed = false;
      if (out.detail.empty()) out.detail = "order " + std::to_string(i) + " got stuck: " + r.stuck;
      continue;
    }
    if (i == 0) {
      first_act = machine.activations();
      first_logits = r.logits;
      continue;
    }
    const std::vector<float>& act = machine.activations();
    const bool same_act =
        act.size() == first_act.size() &&
        std::memcmp(act.data(), first_act.data(), act.size() * sizeof(float)) == 0;
    const bool same_logits =
        r.logits.size() == first_logits.size() &&
        std::memcmp(r.logits.data(), first_logits.data(), r.logits.size() * sizeof(float)) == 0;
    if (!same_act || !same_logits) {
      out.deterministic = false;
      if (out.detail.empty())
        out.detail = "order " + std::to_string(i) + " (seed " + std::to_string(seed + i) +
                     ") differs from order 0 in " +
                     (same_logits ? "the activations" : "the logits");
    }
  }
  return out;
}

}  // namespace megasched::groundtruth
