// The whole-program passes of lower() (schedule/lower_passes.h).
#include "schedule/lower_passes.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "schedule/build_fit.h"
#include "schedule/footprint.h"

namespace megasched::schedule {

using ms_abi::Instr;

/// Sorts waits by counter and keeps one per counter, with the largest threshold.
void merge_waits(std::vector<ms_abi::Wait>& waits) {
  std::sort(waits.begin(), waits.end(), [](const ms_abi::Wait& a, const ms_abi::Wait& b) {
    return a.counter != b.counter ? a.counter < b.counter : a.threshold > b.threshold;
  });
  waits.erase(std::unique(waits.begin(), waits.end(),
                          [](const ms_abi::Wait& a, const ms_abi::Wait& b) {
                            return a.counter == b.counter;
                          }),
              waits.end());
}

/// pipeline.tagged_inputs (abi/abi.h, Tagged words): a streamed GEMV with the norm or SiLU x up
/// prologue reads tagged words when every activation element it reads is written by a streamed
/// GEMV with the plain or residual epilogue, and the words fit its shared memory (abi/ring.h
/// stream_stage_bytes); those writers write tagged words. What one such
/// task reads that another kind of task writes (the embedding's x, a KV row) keeps the whole task
/// untagged: its reads would not be tagged, and the validator's race rule refuses that.
void tag_joins(Program& p) {
  const uint32_t n = static_cast<uint32_t>(p.tasks.size());
  constexpr uint16_t kNotOut = ms_abi::kFlagPartial | ms_abi::kFlagRopeKv | ms_abi::kFlagRopePairs |
                               ms_abi::kFlagArgmaxPartial;
  std::vector<bool> can_out(n, false);
  struct Write {
    uint32_t buffer;
    uint64_t begin, end;
    uint32_t task;
  };
  std::vector<Write> writes;
  std::vector<std::vector<Access>> prints(n);
  for (uint32_t t = 0; t < n; ++t) {
    const Instr& in = p.tasks[t];
    std::string error;
    if (!task_footprint(p, t, &prints[t], &error)) prints[t].clear();
    const bool streamed = in.opcode == ms_abi::kGemv && stream_takes(p, in);
    can_out[t] = streamed && (in.flags & kNotOut) == 0;
    for (const Access& a : prints[t])
      if (a.write) writes.push_back({a.buffer, a.begin, a.end, t});
  }
  std::sort(writes.begin(), writes.end(), [](const Write& x, const Write& y) {
    return x.buffer != y.buffer ? x.buffer < y.buffer : x.begin < y.begin;
  });
  // SSA activations: writes of one buffer do not overlap (else coverage refuses the program), so
  // the writers of a range are the run of sorted writes from the last one that begins at or
  // before it.
  auto writers_ok = [&](const Access& a, std::vector<uint32_t>* out) {
    auto it =
        std::upper_bound(writes.begin(), writes.end(), a, [](const Access& x, const Write& w) {
          return x.buffer != w.buffer ? x.buffer < w.buffer : x.begin < w.begin;
        });
    if (it != writes.begin() && std::prev(it)->buffer == a.buffer && std::prev(it)->end > a.begin)
      --it;
    for (; it != writes.end() && it->buffer == a.buffer && it->begin < a.end; ++it) {
      if (it->end <= a.begin) continue;
      if (!can_out[it->task]) return false;
      out->push_back(it->task);
    }
    return true;
  };
  constexpr uint16_t kStages = ms_abi::kFlagNormPrologue | ms_abi::kFlagSiluMulPrologue;
  std::vector<bool> tag_out(n, false);
  for (uint32_t t = 0; t < n; ++t) {
    const Instr& in = p.tasks[t];
    Instr tagged = in;  // the streamed GEMV must also fit the tagged words in shared memory
    tagged.flags |= ms_abi::kFlagTagIn;
    if (in.opcode != ms_abi::kGemv || (in.flags & kStages) == 0 ||
        (in.flags & ms_abi::kFlagPartial) != 0 || prints[t].empty() || !stream_takes(p, tagged))
      continue;
    std::vector<uint32_t> writers;
    bool ok = true;
    for (const Access& a : prints[t])
      if (!a.write && a.buffer != ms_abi::kBufWeights) ok = ok && writers_ok(a, &writers);
    if (!ok || writers.empty()) continue;
    p.tasks[t].flags |= ms_abi::kFlagTagIn;
    for (uint32_t w : writers) tag_out[w] = true;
  }
  for (uint32_t t = 0; t < n; ++t)
    if (tag_out[t]) p.tasks[t].flags |= ms_abi::kFlagTagOut;
}

/// A per_slice producer with many tiles would make every reader of its whole output wait on each
/// tile's counter: tasks x tiles waits (179 million for llama-8b at the smallest tiles). So the
/// slice counters of one op are merged, consecutive ones together, into at most
/// kMaxSliceCountersPerOp groups. A wait on a merged counter waits for the whole group (the group's
/// total increments, or for a partial wait the other members' totals plus its own threshold), so
/// every wait still implies at least the producers it stood for, and a whole-output reader waits at
/// most kMaxSliceCountersPerOp times per producer op.
constexpr size_t kMaxSliceCountersPerOp = 16;

void coarsen_slice_counters(Program& p) {
  const uint32_t n = p.num_counters();
  std::vector<std::vector<uint32_t>> op_counters(p.ops.size());
  std::vector<bool> seen(n, false);
  // A chained task's wait must stay on its chainers' own counter (abi.h, Last arrivers): the ops
  // that chain keep their slice counters.
  for (const Instr& t : p.tasks)
    if (t.chain != 0 && t.signal_increment > 0) seen[t.signal_counter] = true;
  for (const Instr& t : p.tasks) {
    if (t.signal_increment == 0 || seen[t.signal_counter]) continue;
    seen[t.signal_counter] = true;
    op_counters[t.op_id].push_back(t.signal_counter);
  }
  std::vector<uint32_t> rep(n);
  std::iota(rep.begin(), rep.end(), 0u);
  std::vector<uint32_t> members(n, 1);
  bool changed = false;
  for (const auto& cs : op_counters) {
    if (cs.size() <= kMaxSliceCountersPerOp) continue;
    changed = true;
    size_t first = 0;
    for (size_t i = 0; i < cs.size(); ++i) {
      if (i == 0 ||
          i * kMaxSliceCountersPerOp / cs.size() != (i - 1) * kMaxSliceCountersPerOp / cs.size())
        first = i;
      rep[cs[i]] = cs[first];
      if (i != first) ++members[cs[first]];
    }
  }
  if (!changed) return;
  std::vector<uint32_t> new_id(n, UINT32_MAX);
  std::vector<uint32_t> totals;
  std::vector<std::string> names;
  for (uint32_t c = 0; c < n; ++c) {
    if (rep[c] != c) continue;
    new_id[c] = static_cast<uint32_t>(totals.size());
    totals.push_back(0);
    names.push_back(members[c] > 1 ? p.counter_names[c] + "+" + std::to_string(members[c] - 1)
                                   : p.counter_names[c]);
  }
  for (uint32_t c = 0; c < n; ++c) totals[new_id[rep[c]]] += p.counter_totals[c];
  std::vector<ms_abi::Wait> waits;
  waits.reserve(p.waits.size());
  std::vector<ms_abi::Wait> mine;
  for (Instr& t : p.tasks) {
    mine.clear();
    for (uint32_t w = 0; w < t.wait_count; ++w) {
      const ms_abi::Wait old = p.waits[t.wait_begin + w];
      const uint32_t c = new_id[rep[old.counter]];
      const uint32_t others = totals[c] - p.counter_totals[old.counter];
      mine.push_back({c, old.threshold + others});
    }
    merge_waits(mine);
    t.wait_begin = static_cast<uint32_t>(waits.size());
    t.wait_count = static_cast<uint32_t>(mine.size());
    waits.insert(waits.end(), mine.begin(), mine.end());
    if (t.signal_increment > 0) t.signal_counter = new_id[rep[t.signal_counter]];
  }
  p.waits = std::move(waits);
  p.counter_totals = std::move(totals);
  p.counter_names = std::move(names);
}

}  // namespace megasched::schedule
