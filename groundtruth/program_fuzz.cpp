#include "groundtruth/program_fuzz.h"

#include <algorithm>

#include "groundtruth/fuzz_mutations.h"
#include "schedule/config.h"

namespace megasched::groundtruth {

using schedule::GpuTarget;
using schedule::OpInfo;
using schedule::OpKind;
using schedule::Program;
using schedule::Region;

namespace {

std::vector<uint64_t> sums_of_increments(const Program& p) {
  std::vector<uint64_t> sum(p.counter_totals.size(), 0);
  for (const auto& in : p.tasks)
    if (in.signal_increment > 0 && in.signal_counter < sum.size())
      sum[in.signal_counter] += in.signal_increment;
  return sum;
}

// Rewrites task t's waits as `waits` (appended to the wait table; the old entries stay unused).
void set_waits(Program* p, uint32_t t, const std::vector<ms_abi::Wait>& waits) {
  p->tasks[t].wait_begin = static_cast<uint32_t>(p->waits.size());
  p->tasks[t].wait_count = static_cast<uint32_t>(waits.size());
  p->waits.insert(p->waits.end(), waits.begin(), waits.end());
}

std::vector<ms_abi::Wait> waits_of(const Program& p, uint32_t t) {
  const auto& in = p.tasks[t];
  return {p.waits.begin() + in.wait_begin, p.waits.begin() + in.wait_begin + in.wait_count};
}

// Every (task, wait index) pair whose wait satisfies `ok`.
template <typename F>
std::vector<std::pair<uint32_t, uint32_t>> wait_sites(const Program& p, F ok) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    for (uint32_t w = 0; w < p.tasks[t].wait_count; ++w)
      if (ok(t, p.waits[p.tasks[t].wait_begin + w])) out.push_back({t, w});
  return out;
}

// Tasks whose only write is act[out + r] for r in their row range.
bool plain_output(const ms_abi::Instr& in) {
  switch (in.opcode) {
    case ms_abi::kEmbed:
    case ms_abi::kRmsNorm:
    case ms_abi::kSiluMul:
    case ms_abi::kAdd:
      return true;
    case ms_abi::kGemv:
    case ms_abi::kGemvReduce:
      return (in.flags & ms_abi::kFlagRopeKv) == 0;
    default:
      return false;
  }
}

int queue_of(const Program& p, uint32_t t, size_t* index) {
  for (size_t q = 0; q < p.queues.size(); ++q)
    for (size_t i = 0; i < p.queues[q].size(); ++i)
      if (p.queues[q][i] == t) {
        *index = i;
        return static_cast<int>(q);
      }
  return -1;
}

}  // namespace

GpuTarget fuzz_target(int num_sms) {
  GpuTarget t;
  t.name = "fuzz-" + std::to_string(num_sms) + "sm";
  t.sm_arch = 90;
  t.num_sms = num_sms;
  t.smem_per_sm = 233472;
  t.smem_per_block_optin = 232448;
  t.regs_per_sm = 65536;
  t.max_threads_per_sm = 2048;
  t.max_blocks_per_sm = 32;
  t.l2_bytes = 50 << 20;
  t.hbm_bytes = int64_t{80} << 30;
  t.datasheet_bw_gbs = 3350.0;
  t.source = "registry";
  return t;
}

ProgramBuilder::ProgramBuilder(const GpuTarget& target, uint32_t act_elements,
                               uint32_t input_elements) {
  Program& p = program_;
  // The inputs are the rope table, the one activation range the loader writes before a step (the
  // validator and the ground truth take inputs from the model, never from region flags): head_dim
  // floats of it are head_dim / 2 inputs. The kernel builds head dimensions up to 256.
  if (input_elements < 1 || input_elements > 128) input_elements = 128;
  p.model_name = "fuzz";
  p.model.hidden = 64;
  p.model.layers = 1;
  p.model.heads = 2;
  p.model.kv_heads = 1;
  p.model.head_dim = 2 * input_elements;
  p.model.ffn = 128;
  p.model.vocab = 64;
  p.model.max_seq = 8;
  p.model.weight_dtype = ms_abi::kDTypeF32;
  p.model.kv_dtype = ms_abi::kDTypeF32;
  p.model.rms_eps = 1e-5f;
  p.model.rope_theta = 10000.0f;
  p.model.attn_scale = 0.0625f;
  p.model.rope_table = 0;
  p.buffer_elements = {64, act_elements, 2ull * 8 * p.model.head_dim, 4};
  p.regions.push_back(Region{"rope_table", ms_abi::kBufActivations, 0, input_elements, true});
  p.launch.threads_per_block = 256;
  p.launch.blocks_per_sm = 1;
  p.launch.grid_blocks = target.num_sms;
  p.launch.smem_pages = 2;
  p.launch.smem_page_bytes = 16384;
  p.launch.smem_bytes = 32768;
  p.launch.prefetch_depth = 0;
  p.build.knobs = schedule::kernel_knob_defines(schedule::ScheduleConfig{});
}

uint32_t ProgramBuilder::counter(const std::string& name, std::optional<uint32_t> declared_total) {
  program_.counter_names.push_back(name);
  program_.counter_totals.push_back(0);
  declared_.push_back(declared_total);
  return static_cast<uint32_t>(declared_.size() - 1);
}

uint32_t ProgramBuilder::op(const std::string& name) {
  program_.ops.push_back(OpInfo{name, OpKind::kAdd, 0});
  return static_cast<uint32_t>(program_.ops.size() - 1);
}

uint32_t ProgramBuilder::add(int queue, uint32_t op, uint32_t in, uint32_t in2, uint32_t out,
                             uint32_t rows, std::vector<ms_abi::Wait> waits,
                             uint32_t signal_counter, uint32_t increment) {
  Program& p = program_;
  ms_abi::Instr instr{};
  instr.opcode = ms_abi::kAdd;
  instr.row_begin = 0;
  instr.row_end = rows;
  instr.in = in;
  instr.in2 = in2;
  instr.out = out;
  instr.op_id = op;
  instr.signal_counter = signal_counter;
  instr.signal_increment = increment;
  instr.wait_begin = static_cast<uint32_t>(p.waits.size());
  instr.wait_count = static_cast<uint32_t>(waits.size());
  p.waits.insert(p.waits.end(), waits.begin(), waits.end());
  p.tasks.push_back(instr);
  const uint32_t id = static_cast<uint32_t>(p.tasks.size() - 1);
  const size_t q = p.launch.dynamic_queue ? 0 : static_cast<size_t>(std::max(queue, 0));
  if (p.queues.size() <= q) p.queues.resize(q + 1);
  p.queues[q].push_back(id);
  return id;
}

Program ProgramBuilder::finish() const {
  Program p = program_;
  const std::vector<uint64_t> sums = sums_of_increments(p);
  for (size_t c = 0; c < declared_.size(); ++c)
    p.counter_totals[c] = declared_[c] ? *declared_[c] : static_cast<uint32_t>(sums[c]);
  return p;
}

const char* mutation_class_name(MutationClass c) {
  switch (c) {
    case MutationClass::kDropWait:
      return "drop_wait";
    case MutationClass::kLowerThreshold:
      return "lower_threshold";
    case MutationClass::kRaiseThreshold:
      return "raise_threshold";
    case MutationClass::kSwapInQueue:
      return "swap_in_queue";
    case MutationClass::kMoveToQueue:
      return "move_to_queue";
    case MutationClass::kOverlapOutputs:
      return "overlap_outputs";
    case MutationClass::kRemoveSignal:
      return "remove_signal";
    case MutationClass::kCrossQueueCycle:
      return "cross_queue_cycle";
    case MutationClass::kPartialMultiProducer:
      return "partial_multi_producer";
    case MutationClass::kTooManyThreads:
      return "too_many_threads";
    case MutationClass::kSmemOverCap:
      return "smem_over_cap";
    case MutationClass::kGridNotCoResident:
      return "grid_not_co_resident";
    case MutationClass::kCounterTotalWrap:
      return "counter_total_wrap";
    case MutationClass::kRingStagingOverflow:
      return "ring_staging_overflow";
    case MutationClass::kRingPageBelowPiece:
      return "ring_page_below_piece";
    case MutationClass::kNormGammaBeyondTile:
      return "norm_gamma_beyond_tile";
    case MutationClass::kKvNeverAppended:
      return "kv_never_appended";
    case MutationClass::kProgramMarkedInput:
      return "program_marked_input";
    case MutationClass::kSmemAllocationUnit:
      return "smem_allocation_unit";
    case MutationClass::kSharedCounterAcrossOps:
      return "shared_counter_across_ops";
    case MutationClass::kCount:
      return "?";
  }
  return "?";
}

namespace {

/// kMoveToQueue: a task moves to another static queue.
std::optional<Program> move_to_queue(Program p, std::mt19937_64& rng) {
  if (p.launch.dynamic_queue || p.tasks.empty()) return std::nullopt;
  const size_t slots =
      std::max<size_t>(p.queues.size(), static_cast<size_t>(std::max(0, p.launch.grid_blocks)));
  if (slots < 2) return std::nullopt;
  const uint32_t t = static_cast<uint32_t>(pick(rng, p.tasks.size()));
  size_t index = 0;
  const int from = queue_of(p, t, &index);
  if (from < 0) return std::nullopt;
  size_t to = pick(rng, slots - 1);
  if (to >= static_cast<size_t>(from)) ++to;
  if (p.queues.size() <= to) p.queues.resize(to + 1);
  p.queues[from].erase(p.queues[from].begin() + static_cast<int64_t>(index));
  auto& dst = p.queues[to];
  dst.insert(dst.begin() + static_cast<int64_t>(pick(rng, dst.size() + 1)), t);
  while (!p.queues.empty() && p.queues.back().empty()) p.queues.pop_back();
  return p;
}

/// kOverlapOutputs: one tile's output range is shifted onto part of another's.
std::optional<Program> overlap_outputs(Program p, std::mt19937_64& rng) {
  std::vector<uint32_t> cands;
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    if (plain_output(p.tasks[t])) cands.push_back(t);
  if (cands.size() < 2) return std::nullopt;
  const uint32_t a = cands[pick(rng, cands.size())];
  uint32_t b = cands[pick(rng, cands.size() - 1)];
  if (b == a) b = cands.back();
  ms_abi::Instr& ia = p.tasks[a];
  const ms_abi::Instr& ib = p.tasks[b];
  const int64_t b_begin = static_cast<int64_t>(ib.out) + ib.row_begin,
                b_len = ib.row_end - ib.row_begin;
  const int64_t a_len = ia.row_end - ia.row_begin;
  // a's new range starts anywhere from a_len - 1 before b's start to b's last element.
  const int64_t start = b_begin - (a_len - 1) +
                        static_cast<int64_t>(pick(rng, static_cast<uint64_t>(a_len - 1 + b_len)));
  const int64_t out = start - ia.row_begin;
  if (out < 0 ||
      out + ia.row_end > static_cast<int64_t>(p.buffer_elements[ms_abi::kBufActivations]))
    return std::nullopt;
  ia.out = static_cast<uint32_t>(out);
  return p;
}

/// kCrossQueueCycle: a consumer x (which signals) waits on counter c; one of c's producers, in
/// another queue, is made to wait for x's counter in full.
std::optional<Program> cross_queue_cycle(Program p, const std::vector<uint64_t>& sums,
                                         std::mt19937_64& rng) {
  std::vector<std::vector<uint32_t>> producers(p.counter_totals.size());
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    if (p.tasks[t].signal_increment > 0 && p.tasks[t].signal_counter < producers.size())
      producers[p.tasks[t].signal_counter].push_back(t);
  std::vector<std::pair<uint32_t, uint32_t>> edges;  // (producer, consumer)
  for (uint32_t x = 0; x < p.tasks.size(); ++x) {
    if (p.tasks[x].signal_increment == 0) continue;
    size_t ix = 0;
    const int qx = queue_of(p, x, &ix);
    for (const ms_abi::Wait& w : waits_of(p, x)) {
      if (w.counter >= producers.size() || w.threshold < sums[w.counter])
        continue;  // full waits only
      for (uint32_t prod : producers[w.counter]) {
        size_t ip = 0;
        if (prod != x && (p.launch.dynamic_queue || queue_of(p, prod, &ip) != qx))
          edges.push_back({prod, x});
      }
    }
  }
  if (edges.empty()) return std::nullopt;
  const auto [prod, x] = edges[pick(rng, edges.size())];
  std::vector<ms_abi::Wait> waits = waits_of(p, prod);
  const uint32_t d = p.tasks[x].signal_counter;
  waits.push_back(ms_abi::Wait{d, static_cast<uint32_t>(sums[d])});
  set_waits(&p, prod, waits);
  return p;
}

/// kTooManyThreads: a block beyond 1024 threads, not whole warps, or too many threads per SM.
Program too_many_threads(Program p, const GpuTarget& target, std::mt19937_64& rng) {
  switch (pick(rng, 3)) {
    case 0:  // beyond the 1024 per-block limit
      p.launch.threads_per_block = 1024 + 32 * static_cast<int>(1 + pick(rng, 8));
      break;
    case 1:  // not a whole number of warps
      p.launch.threads_per_block =
          32 * static_cast<int>(1 + pick(rng, 8)) + 1 + static_cast<int>(pick(rng, 31));
      break;
    default:  // blocks x threads beyond the SM's thread limit
      p.launch.threads_per_block = 1024;
      p.launch.blocks_per_sm = 3 + static_cast<int>(pick(rng, 2));
      p.launch.grid_blocks = target.num_sms * p.launch.blocks_per_sm;
      break;
  }
  return p;
}

}  // namespace

namespace {

// The classes of groundtruth/fuzz_mutations.h.
std::optional<Program> mutate_beyond_graph(Program p, const GpuTarget& target, MutationClass c,
                                           std::mt19937_64& rng) {
  switch (c) {
    case MutationClass::kCounterTotalWrap:
      return mutate_counter_total_wrap(std::move(p), rng);
    case MutationClass::kRingStagingOverflow:
      return mutate_ring_staging_overflow(std::move(p), target, rng);
    case MutationClass::kRingPageBelowPiece:
      return mutate_ring_page_below_piece(std::move(p), target, rng);
    case MutationClass::kNormGammaBeyondTile:
      return mutate_norm_gamma_beyond_tile(std::move(p), target, rng);
    case MutationClass::kKvNeverAppended:
      return mutate_kv_never_appended(std::move(p), rng);
    case MutationClass::kProgramMarkedInput:
      return mutate_program_marked_input(std::move(p), rng);
    case MutationClass::kSmemAllocationUnit:
      return mutate_smem_allocation_unit(std::move(p), target, rng);
    case MutationClass::kSharedCounterAcrossOps:
      return mutate_shared_counter_across_ops(std::move(p), rng);
    default:
      return std::nullopt;
  }
}

}  // namespace

std::optional<Program> mutate(const Program& base, const GpuTarget& target, MutationClass c,
                              std::mt19937_64& rng) {
  Program p = base;
  const std::vector<uint64_t> sums = sums_of_increments(p);
  switch (c) {
    case MutationClass::kDropWait: {
      auto sites = wait_sites(p, [](uint32_t, const ms_abi::Wait& w) { return w.threshold > 0; });
      if (sites.empty()) return std::nullopt;
      const auto [t, w] = sites[pick(rng, sites.size())];
      std::vector<ms_abi::Wait> waits = waits_of(p, t);
      waits.erase(waits.begin() + w);
      set_waits(&p, t, waits);
      return p;
    }
    case MutationClass::kLowerThreshold: {
      auto sites = wait_sites(p, [](uint32_t, const ms_abi::Wait& w) { return w.threshold >= 2; });
      if (sites.empty()) return std::nullopt;
      const auto [t, w] = sites[pick(rng, sites.size())];
      ms_abi::Wait& wt = p.waits[p.tasks[t].wait_begin + w];
      wt.threshold = 1 + static_cast<uint32_t>(pick(rng, wt.threshold - 1));
      return p;
    }
    case MutationClass::kRaiseThreshold: {
      auto sites =
          wait_sites(p, [&](uint32_t, const ms_abi::Wait& w) { return w.counter < sums.size(); });
      if (sites.empty()) return std::nullopt;
      const auto [t, w] = sites[pick(rng, sites.size())];
      ms_abi::Wait& wt = p.waits[p.tasks[t].wait_begin + w];
      wt.threshold = static_cast<uint32_t>(sums[wt.counter] + 1 + pick(rng, 3));
      return p;
    }
    case MutationClass::kSwapInQueue: {
      std::vector<size_t> qs;
      for (size_t q = 0; q < p.queues.size(); ++q)
        if (p.queues[q].size() >= 2) qs.push_back(q);
      if (qs.empty()) return std::nullopt;
      auto& q = p.queues[qs[pick(rng, qs.size())]];
      const size_t a = pick(rng, q.size() - 1);
      const size_t b = chance(rng, 0.5) ? a + 1 : a + 1 + pick(rng, q.size() - a - 1);
      std::swap(q[a], q[b]);
      return p;
    }
    case MutationClass::kMoveToQueue:
      return move_to_queue(std::move(p), rng);
    case MutationClass::kOverlapOutputs:
      return overlap_outputs(std::move(p), rng);
    case MutationClass::kRemoveSignal: {
      std::vector<uint32_t> cands;
      for (uint32_t t = 0; t < p.tasks.size(); ++t)
        if (p.tasks[t].signal_increment > 0) cands.push_back(t);
      if (cands.empty()) return std::nullopt;
      p.tasks[cands[pick(rng, cands.size())]].signal_increment = 0;
      return p;
    }
    case MutationClass::kCrossQueueCycle:
      return cross_queue_cycle(std::move(p), sums, rng);
    case MutationClass::kPartialMultiProducer: {
      std::vector<uint32_t> count(p.counter_totals.size(), 0);
      for (const auto& in : p.tasks)
        if (in.signal_increment > 0 && in.signal_counter < count.size()) ++count[in.signal_counter];
      auto sites = wait_sites(p, [&](uint32_t, const ms_abi::Wait& w) {
        return w.counter < count.size() && count[w.counter] >= 2 &&
               w.threshold == sums[w.counter] && w.threshold >= 2;
      });
      if (sites.empty()) return std::nullopt;
      const auto [t, w] = sites[pick(rng, sites.size())];
      ms_abi::Wait& wt = p.waits[p.tasks[t].wait_begin + w];
      wt.threshold = 1 + static_cast<uint32_t>(pick(rng, wt.threshold - 1));
      return p;
    }
    case MutationClass::kTooManyThreads:
      return too_many_threads(std::move(p), target, rng);
    case MutationClass::kSmemOverCap: {
      p.launch.smem_bytes =
          target.smem_per_block_optin + 1024 * static_cast<int>(1 + pick(rng, 16));
      return p;
    }
    case MutationClass::kGridNotCoResident: {
      p.launch.grid_blocks = target.num_sms * target.max_blocks_per_sm + 1 +
                             static_cast<int>(pick(rng, target.num_sms));
      return p;
    }
    default:
      return mutate_beyond_graph(std::move(p), target, c, rng);
  }
  return std::nullopt;
}

namespace {

// A safe random DAG: ops of 1-3 tasks share a counter (all-join), inputs come from the input
// region or from tiles of earlier ops, every queue is a subsequence of task-id order.
struct DagPlan {
  Program program;
  std::vector<uint32_t> op_of;  // task -> op
};

DagPlan build_safe_dag(const GpuTarget& target, std::mt19937_64& rng, bool dynamic) {
  constexpr uint32_t kInputs = 64;
  ProgramBuilder b(target, 1024, kInputs);
  b.set_dynamic(dynamic);
  const uint32_t n = 4 + static_cast<uint32_t>(pick(rng, 14));
  const int queues =
      1 + static_cast<int>(pick(rng, static_cast<uint64_t>(std::min(4, target.num_sms))));
  struct Tile {
    uint32_t out, rows, op;
  };
  std::vector<Tile> tiles;
  std::vector<uint32_t> op_counter, op_total, op_first;
  uint32_t next_out = kInputs;
  DagPlan plan;
  uint32_t made = 0;
  while (made < n) {
    const uint32_t op = b.op("op" + std::to_string(op_counter.size()));
    const uint32_t c = b.counter("op" + std::to_string(op) + ".done");
    op_counter.push_back(c);
    op_first.push_back(static_cast<uint32_t>(tiles.size()));
    const uint32_t width = std::min<uint32_t>(n - made, 1 + static_cast<uint32_t>(pick(rng, 3)));
    uint32_t total = 0;
    std::vector<uint32_t> incs(width);
    for (uint32_t i = 0; i < width; ++i) total += incs[i] = 1 + static_cast<uint32_t>(pick(rng, 2));
    op_total.push_back(total);
    for (uint32_t i = 0; i < width; ++i) {
      // Each input is the input region or one tile of an earlier op; the task covers at most as
      // many rows as its smallest source tile, so a read never strays into a neighbour.
      int source[2] = {-1, -1};
      uint32_t rows_ok = 1 + static_cast<uint32_t>(pick(rng, 8));
      for (uint32_t k = 0; k < 2; ++k) {
        if (op == 0 || chance(rng, 0.25)) continue;
        const uint32_t src_op = static_cast<uint32_t>(pick(rng, op));
        const uint32_t end = src_op + 1 < op_first.size() ? op_first[src_op + 1]
                                                          : static_cast<uint32_t>(tiles.size());
        source[k] = static_cast<int>(op_first[src_op] + pick(rng, end - op_first[src_op]));
        rows_ok = std::min(rows_ok, tiles[static_cast<size_t>(source[k])].rows);
      }
      std::vector<ms_abi::Wait> waits;
      uint32_t in[2];
      for (uint32_t k = 0; k < 2; ++k) {
        if (source[k] < 0) {
          in[k] = static_cast<uint32_t>(pick(rng, kInputs - rows_ok + 1));
          continue;
        }
        const Tile& src = tiles[static_cast<size_t>(source[k])];
        in[k] = src.out + static_cast<uint32_t>(pick(rng, src.rows - rows_ok + 1));
        const ms_abi::Wait w{op_counter[src.op], op_total[src.op]};
        if (std::none_of(waits.begin(), waits.end(),
                         [&](const ms_abi::Wait& x) { return x.counter == w.counter; }))
          waits.push_back(w);
      }
      const int queue = static_cast<int>(pick(rng, static_cast<uint64_t>(queues)));
      b.add(queue, op, in[0], in[1], next_out, rows_ok, waits, c, incs[i]);
      tiles.push_back(Tile{next_out, rows_ok, op});
      plan.op_of.push_back(op);
      next_out += rows_ok;
      ++made;
    }
  }
  plan.program = b.finish();
  return plan;
}

}  // namespace

Program random_safe_dag_program(const GpuTarget& target, std::mt19937_64& rng) {
  return build_safe_dag(target, rng, chance(rng, 0.2)).program;
}

Program random_dag_program(const GpuTarget& target, std::mt19937_64& rng, std::string* label) {
  const bool dynamic = chance(rng, 0.2);
  DagPlan plan = build_safe_dag(target, rng, dynamic);
  Program& p = plan.program;
  const uint64_t recipe = pick(rng, 5);
  const std::string kind = dynamic ? "dag_dynamic/" : "dag/";
  if (recipe == 0) {
    *label = kind + "safe";
    return p;
  }
  if (recipe == 1) {  // every queue shuffled
    *label = kind + "shuffled_queues";
    for (auto& q : p.queues) std::shuffle(q.begin(), q.end(), rng);
    return p;
  }
  if (recipe == 2) {  // every threshold redrawn in [0, total + 1]
    *label = kind + "random_thresholds";
    const std::vector<uint64_t> sums = sums_of_increments(p);
    for (auto& w : p.waits) w.threshold = static_cast<uint32_t>(pick(rng, sums[w.counter] + 2));
    return p;
  }
  if (recipe == 3) {  // each wait dropped with probability 1/3
    *label = kind + "dropped_waits";
    for (uint32_t t = 0; t < p.tasks.size(); ++t) {
      std::vector<ms_abi::Wait> waits = waits_of(p, t), kept;
      for (const auto& w : waits)
        if (!chance(rng, 1.0 / 3)) kept.push_back(w);
      set_waits(&p, t, kept);
    }
    return p;
  }
  // Extra waits on random counters at random thresholds (cycles, over-waits, partial joins).
  *label = kind + "random_extra_waits";
  const std::vector<uint64_t> sums = sums_of_increments(p);
  const uint32_t extra = 1 + static_cast<uint32_t>(pick(rng, 3));
  for (uint32_t i = 0; i < extra && !p.counter_totals.empty(); ++i) {
    const uint32_t t = static_cast<uint32_t>(pick(rng, p.tasks.size()));
    const uint32_t c = static_cast<uint32_t>(pick(rng, p.counter_totals.size()));
    std::vector<ms_abi::Wait> waits = waits_of(p, t);
    waits.push_back(ms_abi::Wait{c, static_cast<uint32_t>(1 + pick(rng, sums[c]))});
    set_waits(&p, t, waits);
  }
  return p;
}

}  // namespace megasched::groundtruth
