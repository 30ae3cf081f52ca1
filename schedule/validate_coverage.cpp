// The validator's coverage rule (schedule/validate_rules.h): every element written once per step,
// every read covered by a write or an input of the model, the logits written.
#include <algorithm>
#include <iterator>
#include <string>

#include "schedule/validate_rules.h"

namespace megasched::schedule::validate_rules {
namespace {

// Merges touching or overlapping ranges of a list sorted by begin.
void merge_sorted(Ranges* v) {
  Ranges out;
  for (const auto& r : *v) {
    if (!out.empty() && r.first <= out.back().second)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  *v = std::move(out);
}

// First element range of [begin, end) not inside the merged, sorted `cover`; {end, end} if none.
std::pair<uint64_t, uint64_t> first_gap(uint64_t begin, uint64_t end, const Ranges& cover) {
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
std::vector<Ranges> model_inputs(const Context& cx) {
  std::vector<Ranges> inputs(ms_abi::kBufCount);
  inputs[ms_abi::kBufStep].push_back({0, 3});
  const uint64_t rope_begin = cx.p.model.rope_table;
  const uint64_t rope_end =
      std::min(rope_begin + cx.p.model.head_dim / 2, cx.p.buffer_elements[ms_abi::kBufActivations]);
  if (rope_begin < rope_end) inputs[ms_abi::kBufActivations].push_back({rope_begin, rope_end});
  return inputs;
}

}  // namespace

void check_double_writes(Context& cx, HappensBefore& hb, uint32_t buffer,
                         const std::vector<WriteRange>& w) {
  size_t holder = 0;  // the write with the largest end so far
  for (size_t i = 1; i < w.size(); ++i) {
    if (w[i].begin < w[holder].end && w[i].task != w[holder].task) {
      const uint32_t a = w[holder].task, b = w[i].task;
      const uint64_t lo = w[i].begin, hi = std::min(w[i].end, w[holder].end);
      const bool ordered =
          !cx.ran[a] || !cx.ran[b] || hb.happens_before(a, b) || hb.happens_before(b, a);
      if (ordered)
        cx.add("coverage",
               cx.label.range(buffer, lo, hi) + " is written by both " + cx.label.task(a) +
                   " and " + cx.label.task(b) +
                   ": each element must be written exactly once per step",
               {a, b}, {}, {fmt_range(buffer, lo, hi)});
      else
        cx.add("race",
               cx.label.task(a) + " and " + cx.label.task(b) + " both write " +
                   cx.label.range(buffer, lo, hi) + " with no ordering between them",
               {a, b}, {}, {fmt_range(buffer, lo, hi)});
    }
    if (w[i].end > w[holder].end) holder = i;
  }
}

std::vector<Ranges> covered_reads(const Context& cx, const std::vector<Ranges>& written) {
  std::vector<Ranges> inputs = model_inputs(cx), covered(ms_abi::kBufCount);
  for (uint32_t b = 0; b < ms_abi::kBufCount; ++b) {
    std::sort(inputs[b].begin(), inputs[b].end());
    std::merge(written[b].begin(), written[b].end(), inputs[b].begin(), inputs[b].end(),
               std::back_inserter(covered[b]));
    merge_sorted(&covered[b]);
  }
  return covered;
}

void check_covered(Context& cx, uint32_t x, const Access& a, const Ranges& cover) {
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
        fmt_range(ms_abi::kBufActivations, cx.p.model.rope_table,
                  uint64_t{cx.p.model.rope_table} + cx.p.model.head_dim / 2) +
        ", which the loader writes; a region the program marks input does not count)";
  else
    why = ", which no task writes and which is not an input";
  cx.add("coverage", cx.label.task(x) + " reads " + cx.label.range(a.buffer, lo, hi) + why, {x}, {},
         {fmt_range(a.buffer, lo, hi)});
}

std::vector<Ranges> covered_writes(const std::vector<std::vector<WriteRange>>& writes) {
  std::vector<Ranges> out(writes.size());
  for (size_t b = 0; b < writes.size(); ++b) {
    for (const WriteRange& w : writes[b])
      out[b].push_back({w.begin, w.end});  // sorted by begin already
    merge_sorted(&out[b]);
  }
  return out;
}

void check_logits(Context& cx, const std::vector<Ranges>& written) {
  for (const Region& r : cx.p.regions) {
    if (r.name != "logits" || r.buffer >= ms_abi::kBufCount || r.begin >= r.end) continue;
    const auto [lo, hi] = first_gap(r.begin, r.end, written[r.buffer]);
    if (lo < hi)
      cx.add("coverage", "the logits " + cx.label.range(r.buffer, lo, hi) + " are never written",
             {}, {}, {fmt_range(r.buffer, lo, hi)});
  }
}

}  // namespace megasched::schedule::validate_rules
