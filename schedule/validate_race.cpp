// The validator's race rule (schedule/validate_rules.h): the guaranteed happens-before relation,
// every read against its overlapping writers, and tagged reads (kFlagTagIn) against untagged
// writers.
#include <algorithm>
#include <string>

#include "schedule/validate_rules.h"

namespace megasched::schedule::validate_rules {
namespace {

// Partial waits on counters with more producers keep the simple rule.
constexpr size_t kMaxRefinedProducers = 64;

// A kFlagTagIn task reads before it acquires its waits (abi/abi.h, Tagged words): each element
// it reads that the step writes must come as a tagged word, so every writer of it must write
// one (kFlagTagOut). Each element has one writer per step (check_double_writes), and the race
// check of the reads (check_accesses) proves that writer ordered before the reader by its waits, so
// the word with this step's tag is the value the waits promise.
void check_tagged(Context& cx, const std::vector<std::vector<WriteRange>>& writes,
                  const std::vector<std::vector<uint64_t>>& max_end) {
  for (uint32_t x = 0; x < cx.n; ++x) {
    if ((cx.p.tasks[x].flags & ms_abi::kFlagTagIn) == 0) continue;
    bool reported = false;
    for (const Access& a : cx.footprint(x)) {
      if (a.write || a.buffer == ms_abi::kBufWeights || reported) continue;
      const auto& w = writes[a.buffer];
      const auto& me = max_end[a.buffer];
      size_t i = static_cast<size_t>(std::upper_bound(me.begin(), me.end(), a.begin) - me.begin());
      for (; i < w.size() && w[i].begin < a.end; ++i) {
        const WriteRange& wr = w[i];
        if (wr.end <= a.begin || (cx.p.tasks[wr.task].flags & ms_abi::kFlagTagOut) != 0) continue;
        const uint64_t lo = std::max(a.begin, wr.begin), hi = std::min(a.end, wr.end);
        cx.add("race",
               cx.label.task(x) + " reads " + cx.label.range(a.buffer, lo, hi) +
                   " as tagged words, before it acquires its waits, but " + cx.label.task(wr.task) +
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
std::string shared_counter_hint(const Context& cx, uint32_t reader, uint32_t writer) {
  const uint32_t c = cx.signal_of(writer);
  const ms_abi::Instr& in = cx.p.tasks[reader];
  if (c == UINT32_MAX || !cx.waits_ok(in)) return "";
  uint32_t threshold = 0;
  for (uint32_t w = 0; w < in.wait_count; ++w)
    if (cx.p.waits[in.wait_begin + w].counter == c)
      threshold = std::max(threshold, cx.p.waits[in.wait_begin + w].threshold);
  if (threshold == 0 || threshold >= cx.actual_total[c]) return "";
  std::vector<uint32_t> ops;
  for (uint32_t prod : cx.producers[c])
    if (std::find(ops.begin(), ops.end(), cx.p.tasks[prod].op_id) == ops.end())
      ops.push_back(cx.p.tasks[prod].op_id);
  if (ops.size() < 2) return "";
  std::string names;
  for (size_t i = 0; i < ops.size() && i < 3; ++i)
    names += (i == 0 ? "" : ", ") +
             (ops[i] < cx.p.ops.size() ? cx.p.ops[ops[i]].name : "op " + std::to_string(ops[i]));
  if (ops.size() > 3) names += " and " + std::to_string(ops.size() - 3) + " more";
  return ": its wait for " + cx.label.counter(c) + " >= " + std::to_string(threshold) + " of " +
         std::to_string(cx.actual_total[c]) + " does not prove that writer ran, because ops " +
         names +
         " share that counter and the validator proves a partial wait only from orderings that "
         "hold without it (it does not assume the wait's own ordering to show that another op's "
         "producers signal later); hint: give each op its own counter, as lowering does";
}

}  // namespace

// Producers of c that wait (c, t) guarantees by the simple rule: increment > total - t.
std::vector<uint32_t> HappensBefore::guaranteed_simple(uint32_t c, uint64_t threshold) const {
  const std::vector<uint32_t>& prods = cx_.producers[c];
  const uint64_t total = cx_.actual_total[c];
  if (threshold > total) return prods;  // unreachable: the waiter never runs, every edge is vacuous
  std::vector<uint32_t> out;
  for (uint32_t prod : prods) {
    if (total - cx_.p.tasks[prod].signal_increment >= threshold) break;  // sorted by increment
    out.push_back(prod);
  }
  return out;
}

void HappensBefore::build() {
  const bool dynamic = cx_.p.launch.dynamic_queue;
  queue_of_.assign(cx_.n, -1);
  pos_.assign(cx_.n, 0);
  queue_pred_.assign(cx_.n, UINT32_MAX);
  if (!dynamic) {
    for (size_t q = 0; q < cx_.p.queues.size(); ++q)
      for (size_t i = 0; i < cx_.p.queues[q].size(); ++i) {
        const uint32_t t = cx_.p.queues[q][i];
        if (t < cx_.n && queue_of_[t] < 0) {
          queue_of_[t] = static_cast<int32_t>(q);
          pos_[t] = static_cast<uint32_t>(i);
          if (i > 0 && cx_.p.queues[q][i - 1] < cx_.n) queue_pred_[t] = cx_.p.queues[q][i - 1];
        }
      }
  }
  wait_join_.assign(cx_.p.waits.size(), -1);
  // Per counter, the joins made so far as (threshold, join); nearly always one entry.
  std::vector<std::vector<std::pair<uint32_t, int32_t>>> join_of(cx_.p.counter_totals.size());
  for (uint32_t t = 0; t < cx_.n; ++t) {
    const ms_abi::Instr& in = cx_.p.tasks[t];
    if (!cx_.waits_ok(in)) continue;
    for (uint32_t w = 0; w < in.wait_count; ++w) {
      const uint32_t wi = in.wait_begin + w;
      const ms_abi::Wait& wt = cx_.p.waits[wi];
      if (!cx_.counter_ok(wt.counter) || wt.threshold == 0) continue;
      auto& known = join_of[wt.counter];
      auto it = std::find_if(known.begin(), known.end(),
                             [&](const auto& e) { return e.first == wt.threshold; });
      if (it == known.end()) {
        Join j;
        j.counter = wt.counter;
        j.threshold = wt.threshold;
        j.producers = guaranteed_simple(wt.counter, wt.threshold);
        j.full = j.producers.size() == cx_.producers[wt.counter].size();
        std::sort(j.producers.begin(), j.producers.end());
        int32_t id = -1;
        if (!j.producers.empty()) {
          id = static_cast<int32_t>(joins_.size());
          joins_.push_back(std::move(j));
        } else if (!cx_.producers[wt.counter].empty()) {
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
void HappensBefore::refine_partial_joins() {
  std::vector<std::pair<size_t, std::vector<uint32_t>>> grown;
  // Partial waits with no guaranteed producer have no join yet: give them one if refinement finds
  // any.
  std::unordered_map<uint64_t, std::vector<uint32_t>> empty_waits;  // key -> wait indices
  for (uint32_t t = 0; t < cx_.n && has_empty_partial_; ++t) {
    const ms_abi::Instr& in = cx_.p.tasks[t];
    if (!cx_.waits_ok(in)) continue;
    for (uint32_t w = 0; w < in.wait_count; ++w) {
      const uint32_t wi = in.wait_begin + w;
      const ms_abi::Wait& wt = cx_.p.waits[wi];
      if (wait_join_[wi] >= 0 || !cx_.counter_ok(wt.counter) || wt.threshold == 0) continue;
      empty_waits[(static_cast<uint64_t>(wt.counter) << 32) | wt.threshold].push_back(wi);
    }
  }
  auto refine = [&](uint32_t c, uint64_t threshold, const std::vector<uint32_t>& have) {
    std::vector<uint32_t> out = have;
    const std::vector<uint32_t>& prods = cx_.producers[c];
    if (prods.size() > kMaxRefinedProducers) return out;
    for (uint32_t prod : prods) {
      if (std::binary_search(have.begin(), have.end(), prod)) continue;
      uint64_t others = 0;
      for (uint32_t q : prods) {
        if (q == prod || happens_before(prod, q)) continue;
        others += cx_.p.tasks[q].signal_increment;
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
  std::vector<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>> fresh;  // (producers, waits)
  for (const auto& [key, waits] : empty_waits) {
    std::vector<uint32_t> r = refine(static_cast<uint32_t>(key >> 32), key & 0xffffffffu, {});
    if (!r.empty()) fresh.push_back({std::move(r), waits});
  }
  for (auto& [j, r] : grown) {
    joins_[j].full = r.size() == cx_.producers[joins_[j].counter].size();
    joins_[j].producers = std::move(r);
  }
  for (auto& [r, waits] : fresh) {
    Join jn;
    jn.counter = cx_.p.waits[waits[0]].counter;
    jn.threshold = cx_.p.waits[waits[0]].threshold;
    jn.full = r.size() == cx_.producers[jn.counter].size();
    jn.producers = std::move(r);
    for (uint32_t wi : waits) wait_join_[wi] = static_cast<int32_t>(joins_.size());
    joins_.push_back(std::move(jn));
  }
  anc_for_ = UINT32_MAX;  // the cached ancestor set used the simple joins
}

bool HappensBefore::in_join(const Join& j, uint32_t a) const {
  if (j.full)
    return cx_.p.tasks[a].signal_increment > 0 && cx_.p.tasks[a].signal_counter == j.counter;
  return std::binary_search(j.producers.begin(), j.producers.end(), a);
}

// a happens-before b: same queue and earlier, a guaranteed producer of one of b's waits, or
// (failing those) an ancestor of b, found by one backward search per b (cached for the last b).
bool HappensBefore::happens_before(uint32_t a, uint32_t b) {
  if (a == b) return false;
  if (queue_of_[a] >= 0 && queue_of_[a] == queue_of_[b] && pos_[a] < pos_[b]) return true;
  const ms_abi::Instr& in = cx_.p.tasks[b];
  if (cx_.waits_ok(in))
    for (uint32_t w = 0; w < in.wait_count; ++w) {
      const int32_t j = wait_join_[in.wait_begin + w];
      if (j >= 0 && in_join(joins_[static_cast<size_t>(j)], a)) return true;
    }
  if (anc_for_ != b) collect_ancestors(b);
  return anc_stamp_[a] == anc_epoch_;
}

void HappensBefore::collect_ancestors(uint32_t b) {
  if (anc_stamp_.size() != cx_.n) {
    anc_stamp_.assign(cx_.n, 0);
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
    const ms_abi::Instr& in = cx_.p.tasks[v];
    if (!cx_.waits_ok(in)) continue;
    for (uint32_t w = 0; w < in.wait_count; ++w) {
      const int32_t j = wait_join_[in.wait_begin + w];
      if (j < 0 || join_stamp_[static_cast<size_t>(j)] == anc_epoch_) continue;
      join_stamp_[static_cast<size_t>(j)] = anc_epoch_;
      for (uint32_t prod : joins_[static_cast<size_t>(j)].producers) visit(prod);
    }
  }
}

void check_accesses(Context& cx, HappensBefore& hb) {
  // Writes per buffer, sorted by begin, with a running maximum of `end` for overlap queries and
  // the end of each run of writers that signal the same counter (skipped at once when the reader
  // waits for that counter in full).
  std::vector<std::vector<WriteRange>> writes(ms_abi::kBufCount);
  for (uint32_t t = 0; t < cx.n; ++t)
    for (const Access& a : cx.footprint(t))
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
      const bool same = i + 1 < w.size() && cx.signal_of(w[i].task) != UINT32_MAX &&
                        cx.signal_of(w[i].task) == cx.signal_of(w[i + 1].task);
      run_end[b][i] = same ? run_end[b][i + 1] : static_cast<uint32_t>(i + 1);
    }
    check_double_writes(cx, hb, b, w);
  }
  // Elements a read may find without a writer in this step: whatever some task writes, and the
  // inputs, which come from the model and the loader, never from the program's own region flags
  // (model_inputs). The KV history has no exemption: earlier steps wrote it with this program's
  // own appends, which the footprints widen to whole heads alike, so a KV read is covered
  // exactly when some task appends to that head.
  const std::vector<Ranges> written = covered_writes(writes);
  const std::vector<Ranges> covered = covered_reads(cx, written);

  std::vector<uint32_t> full_mark(cx.p.counter_totals.size(),
                                  UINT32_MAX);  // counter -> reader waiting on it in full
  for (uint32_t x = 0; x < cx.n; ++x) {
    if (cx.footprint(x).empty()) continue;
    const ms_abi::Instr& in = cx.p.tasks[x];
    if (cx.waits_ok(in))
      for (uint32_t w = 0; w < in.wait_count; ++w) {
        const HappensBefore::Join* j = hb.join_of_wait(in.wait_begin + w);
        if (j != nullptr && j->full) full_mark[j->counter] = x;
      }
    size_t reported = 0;
    for (const Access& a : cx.footprint(x)) {
      if (a.write || a.buffer == ms_abi::kBufWeights) continue;
      check_covered(cx, x, a, covered[a.buffer]);
      if (!cx.ran[x]) continue;  // never runs (deadlock, reported): it cannot race
      const auto& w = writes[a.buffer];
      const auto& me = max_end[a.buffer];
      size_t i = static_cast<size_t>(std::upper_bound(me.begin(), me.end(), a.begin) - me.begin());
      while (i < w.size() && w[i].begin < a.end) {
        const WriteRange& wr = w[i];
        if (wr.end <= a.begin) {
          ++i;
          continue;
        }
        if (wr.task == x) {
          const uint64_t lo = std::max(a.begin, wr.begin), hi = std::min(a.end, wr.end);
          cx.add("race",
                 cx.label.task(x) + " reads " + cx.label.range(a.buffer, lo, hi) +
                     ", which it also writes: threads of one task would race",
                 {x}, {}, {fmt_range(a.buffer, lo, hi)});
          ++i;
          continue;
        }
        const uint32_t c = cx.signal_of(wr.task);
        if (c != UINT32_MAX && full_mark[c] == x) {
          i = run_end[a.buffer][i];
          continue;
        }
        ++i;
        if (!cx.ran[wr.task] || hb.happens_before(wr.task, x)) continue;
        if (reported++ > 0) continue;  // one diagnostic per reader
        const uint64_t lo = std::max(a.begin, wr.begin), hi = std::min(a.end, wr.end);
        const std::string how = hb.happens_before(x, wr.task) ? ", but it runs before that writer"
                                                              : " with no ordering between them";
        cx.add("race",
               cx.label.task(x) + " reads " + cx.label.range(a.buffer, lo, hi) + " written by " +
                   cx.label.task(wr.task) + how + shared_counter_hint(cx, x, wr.task),
               {x, wr.task}, {}, {fmt_range(a.buffer, lo, hi)});
      }
    }
  }
  check_tagged(cx, writes, max_end);
  check_logits(cx, written);
}

}  // namespace megasched::schedule::validate_rules
