#include "schedule/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace megasched::schedule {
namespace {

constexpr double kAchievableFraction = 0.92;  // of the floor bandwidth, all SMs streaming
constexpr double kTaskOverheadUs = 0.4;       // decode, block barrier, signal
constexpr double kHopUs = 1.2;                // cross-SM counter hop through L2 when a wait blocks
constexpr double kLaunchUs = 4.0;             // one kernel launch

/// How well the kernel build and launch shape keep HBM busy (1 = as well as possible).
double stream_efficiency(const Program& p) {
  double e = 1.0;
  const KernelBuild& b = p.build;
  if (b.weight_ring()) {
    // The loader's bulk copies keep a whole ring in flight per block, whatever the register
    // knobs; a shallow ring (little in flight) streams less.
    const double ring_bytes = static_cast<double>(p.launch.smem_pages) * p.launch.smem_page_bytes;
    e *= std::min(1.0, 0.6 + ring_bytes / (128.0 * 1024));
  } else {
    const int vector_bytes = b.knob("MS_VECTOR_BYTES"), unroll = b.knob("MS_UNROLL");
    e *= vector_bytes >= 16 ? 1.0 : vector_bytes >= 8 ? 0.85 : 0.6;
    e *= unroll >= 4 ? 1.0 : unroll == 2 ? 0.92 : 0.75;
    e *= b.knob("MS_ROWS_PER_WARP") >= 2 ? 1.0 : 0.95;
    e *= b.knob("MS_WEIGHT_LOAD") == 1 ? 1.0 : 0.97;
  }
  const double threads_per_sm =
      static_cast<double>(p.launch.threads_per_block) * p.launch.blocks_per_sm;
  e *= std::min(1.0, 0.55 + threads_per_sm / 1024.0);
  // Input staging: fewer, larger pages mean fewer block barriers per task.
  const double page = std::max(1, p.launch.smem_page_bytes);
  e *= 1.0 - 0.04 * std::log2(16384.0 / std::min(16384.0, page));
  return std::max(0.1, e);
}

}  // namespace

double task_bytes(const Program& program, uint32_t task, int position) {
  const ms_abi::Instr& t = program.tasks[task];
  const ms_abi::ModelParams& m = program.model;
  const double wb = m.weight_dtype == ms_abi::kDTypeBF16 ? 2.0 : 4.0;
  const double kvb = m.kv_dtype == ms_abi::kDTypeBF16 ? 2.0 : 4.0;
  const double rows = static_cast<double>(t.row_end) - t.row_begin;
  const double cols = static_cast<double>(t.col_end) - t.col_begin;
  switch (static_cast<ms_abi::Opcode>(t.opcode)) {
    case ms_abi::kEmbed:
      return rows * wb + rows * 4;
    case ms_abi::kRmsNorm:
      return t.col_end * 4.0 + rows * (wb + 4);
    case ms_abi::kGemv: {
      const double out_rows = ms_abi::task_rows(t);  // RoPE pairs: two rows each
      // The combine prologue reads P records {m, l, o[hd]} per head of its columns; the
      // attention prologue every query and the keys and values [0, position] of every KV head.
      double input = cols * 4;
      if ((t.flags & ms_abi::kFlagCombinePrologue) && m.head_dim > 0)
        input = cols / m.head_dim * t.param2 * (m.head_dim + 2) * 4.0;
      if (t.flags & ms_abi::kFlagAttentionPrologue)
        input = cols * 4 + (position + 1.0) * m.kv_heads * m.head_dim * 2 * kvb;
      return out_rows * cols * wb + input + out_rows * 4;
    }
    case ms_abi::kGemvReduce:
      return rows * t.param0 * 4.0 + rows * 4;
    case ms_abi::kRopeKv:
      return rows * 8.0;
    case ms_abi::kAttnPartial: {
      const double keys = std::ceil((position + 1.0) / std::max(1u, t.param2));
      return keys * m.head_dim * 2 * kvb + rows * m.head_dim * 8.0;
    }
    case ms_abi::kAttnCombine:
      return rows * t.param2 * (m.head_dim + 2) * 4.0;
    case ms_abi::kSiluMul:
    case ms_abi::kAdd:
      return rows * 12.0;
    case ms_abi::kArgmax:
      return t.col_end * 4.0;
    case ms_abi::kOpcodeCount:
      break;
  }
  return 0.0;
}

CostEstimate predict(const Program& program, const ModelShape& shape, const GpuTarget& target,
                     int position, double floor_us) {
  (void)shape;
  CostEstimate est;
  const size_t n = program.tasks.size();
  const int grid = std::max(1, program.launch.grid_blocks);
  const double bw_bytes_per_us = target.floor_bw_gbs() * 1e3 * kAchievableFraction;
  const double per_block_bw = bw_bytes_per_us / grid * stream_efficiency(program);
  const double hop = kHopUs * (1.0 - 0.2 * std::min(program.launch.prefetch_depth, 4));

  // Per counter: (time, increment) of each signal, sorted by time.
  std::vector<std::vector<std::pair<double, uint32_t>>> incs(program.num_counters());
  std::vector<uint64_t> counter_value(program.num_counters(), 0);
  std::vector<double> depth(n, 0.0);  // dependency depth (stages) of each task
  std::vector<uint32_t> last_producer(program.num_counters(), UINT32_MAX);

  // The time a task's waits hold, or infinity while some counter is short. The simulation commits
  // tasks roughly in time order, so the first time a head becomes runnable its ready time is final
  // enough for a predictor; it is cached per queue head.
  auto ready_time = [&](uint32_t task) -> double {
    const ms_abi::Instr& t = program.tasks[task];
    double ready = 0.0;
    for (uint32_t w = 0; w < t.wait_count; ++w) {
      const ms_abi::Wait& wait = program.waits[t.wait_begin + w];
      if (wait.counter >= counter_value.size() || counter_value[wait.counter] < wait.threshold)
        return std::numeric_limits<double>::infinity();
      uint64_t running = 0;
      for (const auto& [time, inc] : incs[wait.counter])
        if ((running += inc) >= wait.threshold) {
          ready = std::max(ready, time);
          break;
        }
    }
    return ready;
  };

  std::vector<double> block_free(static_cast<size_t>(grid), 0.0);
  std::vector<size_t> head(program.queues.size(), 0);
  std::vector<double> head_ready(program.queues.size(), -1.0);  // <0: not known yet
  size_t done = 0;
  double makespan = 0.0;
  const bool dynamic = program.launch.dynamic_queue;
  while (done < n) {
    // Pick the runnable queue head (or, dynamic, the next global task) with the earliest start.
    double best_start = std::numeric_limits<double>::infinity();
    size_t best_q = SIZE_MAX;
    size_t best_block = 0;
    for (size_t q = 0; q < program.queues.size(); ++q) {
      if (head[q] >= program.queues[q].size()) continue;
      const uint32_t task = program.queues[q][head[q]];
      if (task >= n) return est;
      if (head_ready[q] < 0) {
        const double r = ready_time(task);
        if (!std::isinf(r)) head_ready[q] = r;
      }
      if (head_ready[q] < 0) {
        if (dynamic) break;  // the global queue is claimed in order
        continue;
      }
      const double ready = head_ready[q];
      const size_t block =
          dynamic ? static_cast<size_t>(std::min_element(block_free.begin(), block_free.end()) -
                                        block_free.begin())
                  : q % block_free.size();
      const double free_at = block_free[block];
      const double start = std::max(free_at, ready) + (ready > free_at ? hop : 0.0);
      if (start < best_start) best_start = start, best_q = q, best_block = block;
      if (dynamic) break;
    }
    if (best_q == SIZE_MAX) return est;  // nothing can run: the program deadlocks
    uint32_t task = program.queues[best_q][head[best_q]++];
    head_ready[best_q] = -1.0;
    double start = best_start;
    // The task, then the chained task its arrival completes (abi/abi.h, Last arrivers): on the
    // same block, at once; one level, as the kernel runs it.
    for (bool chained = false;; chained = true) {
      const ms_abi::Instr& t = program.tasks[task];
      const double bytes = task_bytes(program, task, position);
      est.streamed_bytes += bytes;
      const double end = start + kTaskOverheadUs + bytes / per_block_bw;
      block_free[best_block] = end;
      makespan = std::max(makespan, end);
      double d = 0.0;
      for (uint32_t w = 0; w < t.wait_count; ++w) {
        const uint32_t c = program.waits[t.wait_begin + w].counter;
        if (c < last_producer.size() && last_producer[c] != UINT32_MAX)
          d = std::max(d, depth[last_producer[c]]);
      }
      depth[task] = d + 1.0;
      est.critical_path_stages = std::max(est.critical_path_stages, depth[task]);
      ++done;
      if (t.signal_increment == 0 || t.signal_counter >= counter_value.size()) break;
      const uint64_t before = counter_value[t.signal_counter];
      counter_value[t.signal_counter] += t.signal_increment;
      auto& list = incs[t.signal_counter];
      const std::pair<double, uint32_t> entry{end, t.signal_increment};
      list.insert(std::upper_bound(list.begin(), list.end(), entry), entry);
      last_producer[t.signal_counter] = task;
      if (chained || t.chain == 0 || t.chain > n) break;
      const ms_abi::Instr& k = program.tasks[t.chain - 1];
      if (k.wait_count != 1 || k.wait_begin >= program.waits.size()) break;
      const ms_abi::Wait& w = program.waits[k.wait_begin];
      if (w.counter != t.signal_counter || before >= w.threshold ||
          counter_value[w.counter] < w.threshold)
        break;
      task = t.chain - 1;
      start = end;
    }
  }
  est.completed = true;
  est.makespan_us = makespan;
  est.latency_us = std::max(makespan, floor_us) + kLaunchUs;
  return est;
}

}  // namespace megasched::schedule
