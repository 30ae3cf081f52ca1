#include "groundtruth/fuzz_mutations.h"

#include <algorithm>

#include "abi/ring.h"
#include "groundtruth/device_model.h"
#include "schedule/launch_fit.h"

namespace megasched::groundtruth {

using schedule::GpuTarget;
using schedule::Program;

namespace {

uint32_t weight_bytes(const Program& p) {
  return p.model.weight_dtype == ms_abi::kDTypeBF16 ? 2u : 4u;
}

std::vector<uint64_t> increments_per_counter(const Program& p) {
  std::vector<uint64_t> sum(p.counter_totals.size(), 0);
  for (const auto& in : p.tasks)
    if (in.signal_increment > 0 && in.signal_counter < sum.size())
      sum[in.signal_counter] += in.signal_increment;
  return sum;
}

// The widest GEMV input of the model, in whole 256-float blocks (schedule::ring_x_floats).
int whole_staging_floats(const Program& p) {
  const uint64_t widest =
      std::max<uint64_t>({p.model.hidden, uint64_t{p.model.heads} * p.model.head_dim, p.model.ffn});
  return static_cast<int>((widest + 255) / 256 * 256);
}

// Turns `p` into a weight-ring build with this staging and these pages, the dynamic shared memory
// sized by abi/ring.h's layout. False when the ring cannot serve its launch at all (a dynamic
// queue, no compute warp beside the loader, or shared memory beyond the target).
bool make_ring_build(Program* p, const GpuTarget& target, int x_floats, int pages, int page_bytes) {
  if (p->launch.dynamic_queue || p->launch.threads_per_block < 64) return false;
  p->build.knobs["MS_WEIGHT_RING"] = 1;
  p->build.x_floats = x_floats;
  p->launch.smem_pages = pages;
  p->launch.smem_page_bytes = page_bytes;
  p->launch.smem_bytes = static_cast<int>(schedule::ring_smem_bytes(pages, page_bytes, x_floats));
  const schedule::LaunchRequest request{p->launch.threads_per_block,
                                        p->launch.blocks_per_sm,
                                        p->launch.smem_bytes,
                                        static_cast<int>(p->model.head_dim),
                                        true,
                                        false};
  return schedule::launch_misfits(request, target).empty();
}

// The base's ring pages when they are usable, else two of 16 KiB.
std::pair<int, int> base_pages(const Program& p) {
  if (p.launch.smem_pages >= 1 && p.launch.smem_page_bytes >= 16 &&
      p.launch.smem_page_bytes % 16 == 0)
    return {p.launch.smem_pages, p.launch.smem_page_bytes};
  return {2, 16384};
}

// GEMV tasks whose operands the ring can stream (alignment and 16-byte units, abi/ring.h).
std::vector<uint32_t> ring_candidates(const Program& p, uint32_t x_floats) {
  std::vector<uint32_t> out;
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    if (ms_abi::ring_streams(p.tasks[t], x_floats, weight_bytes(p))) out.push_back(t);
  return out;
}

}  // namespace

std::optional<Program> mutate_counter_total_wrap(Program p, std::mt19937_64& rng) {
  const std::vector<uint64_t> sums = increments_per_counter(p);
  std::vector<uint32_t> cands;
  for (uint32_t c = 0; c < sums.size(); ++c)
    if (sums[c] > 0 && sums[c] == p.counter_totals[c]) cands.push_back(c);
  if (cands.empty()) return std::nullopt;
  const uint32_t c = cands[pick(rng, cands.size())];
  // A target total in [2^31 + T + 1, 2^32 - 1], reached by scaling every increment and threshold.
  const uint64_t total = sums[c];
  const uint64_t lo = (uint64_t{1} << 31) + total + 1, hi = 0xffffffffull;
  if (lo > hi) return std::nullopt;
  const uint64_t scale = (lo + pick(rng, hi - lo + 1)) / total;
  if (scale * total > hi || scale * total <= (uint64_t{1} << 31)) return std::nullopt;
  for (auto& in : p.tasks)
    if (in.signal_increment > 0 && in.signal_counter == c)
      in.signal_increment = static_cast<uint32_t>(in.signal_increment * scale);
  for (auto& w : p.waits)
    if (w.counter == c) w.threshold = static_cast<uint32_t>(w.threshold * scale);
  p.counter_totals[c] = static_cast<uint32_t>(total * scale);
  return p;
}

std::optional<Program> mutate_ring_staging_overflow(Program p, const GpuTarget& target,
                                                    std::mt19937_64& rng) {
  const std::vector<uint32_t> all = ring_candidates(p, 1u << 30);
  if (all.empty()) return std::nullopt;
  // Prefer a tile whose columns are not whole staging blocks: its staging overflows.
  const uint32_t block = ms_abi::ring_x_block(
      static_cast<uint32_t>(std::max(p.build.knob("MS_VECTOR_BYTES"), 4)), weight_bytes(p));
  std::vector<uint32_t> partial;
  for (uint32_t t : all)
    if ((p.tasks[t].col_end - p.tasks[t].col_begin) % block != 0) partial.push_back(t);
  const std::vector<uint32_t>& from = partial.empty() ? all : partial;
  const ms_abi::Instr& in = p.tasks[from[pick(rng, from.size())]];
  const auto [pages, page_bytes] = base_pages(p);
  if (!make_ring_build(&p, target, static_cast<int>(in.col_end - in.col_begin), pages, page_bytes))
    return std::nullopt;
  return p;
}

std::optional<Program> mutate_ring_page_below_piece(Program p, const GpuTarget& target,
                                                    std::mt19937_64& rng) {
  const int x_floats = whole_staging_floats(p);
  if (ring_candidates(p, static_cast<uint32_t>(x_floats)).empty()) return std::nullopt;
  const int page_bytes = 16 * static_cast<int>(1 + pick(rng, 4));  // 16 .. 64 bytes
  if (!make_ring_build(&p, target, x_floats, base_pages(p).first, page_bytes)) return std::nullopt;
  return p;
}

std::optional<Program> mutate_norm_gamma_beyond_tile(Program p, const GpuTarget& target,
                                                     std::mt19937_64& rng) {
  const int x_floats = whole_staging_floats(p);
  const uint32_t unit = 16 / weight_bytes(p);  // columns of one 16-byte unit
  std::vector<uint32_t> cands;
  for (uint32_t t : ring_candidates(p, static_cast<uint32_t>(x_floats))) {
    const ms_abi::Instr& in = p.tasks[t];
    if ((in.flags & ms_abi::kFlagNormPrologue) && in.col_end >= in.col_begin + 2 * unit &&
        p.buffer_elements[ms_abi::kBufWeights] >= in.ld)
      cands.push_back(t);
  }
  if (cands.empty()) return std::nullopt;
  const auto [pages, page_bytes] = base_pages(p);
  if (!make_ring_build(&p, target, x_floats, pages, page_bytes)) return std::nullopt;
  ms_abi::Instr& in = p.tasks[cands[pick(rng, cands.size())]];
  // Fewer columns (still whole 16-byte units), and the gamma moved so that the task's columns of
  // it end exactly at the end of the weights.
  const uint32_t units = (in.col_end - in.col_begin) / unit;
  in.col_end = in.col_begin + unit * static_cast<uint32_t>(1 + pick(rng, units - 1));
  in.weight2 = p.buffer_elements[ms_abi::kBufWeights] - in.col_end;
  return p;
}

std::optional<Program> mutate_kv_never_appended(Program p, std::mt19937_64& rng) {
  const ms_abi::ModelParams& m = p.model;
  const uint32_t hd = m.head_dim, k_lo = m.heads * m.head_dim;
  if (hd == 0) return std::nullopt;
  std::vector<uint32_t> cands;  // appends of at least two heads whose first or last is K or V
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const ms_abi::Instr& in = p.tasks[t];
    const bool appends = in.opcode == ms_abi::kRopeKv ||
                         ((in.opcode == ms_abi::kGemv || in.opcode == ms_abi::kGemvReduce) &&
                          (in.flags & ms_abi::kFlagRopeKv) && !(in.flags & ms_abi::kFlagRopePairs));
    if (appends && in.row_end >= in.row_begin + 2 * hd && in.row_end > k_lo) cands.push_back(t);
  }
  if (cands.empty()) return std::nullopt;
  ms_abi::Instr& in = p.tasks[cands[pick(rng, cands.size())]];
  if (in.row_begin >= k_lo && pick(rng, 2) == 0)
    in.row_begin += hd;  // its first K / V head is never appended
  else
    in.row_end -= hd;  // its last one
  return p;
}

std::optional<Program> mutate_program_marked_input(Program p, std::mt19937_64& rng) {
  std::vector<uint32_t> cands;  // tasks that read act[in + ...]
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    if (p.tasks[t].opcode != ms_abi::kEmbed && p.tasks[t].opcode < ms_abi::kOpcodeCount)
      cands.push_back(t);
  const uint64_t old = p.buffer_elements[ms_abi::kBufActivations];
  if (cands.empty() || old == 0 || 2 * old >= (uint64_t{1} << 32)) return std::nullopt;
  ms_abi::Instr& in = p.tasks[cands[pick(rng, cands.size())]];
  in.in += static_cast<uint32_t>(old);  // every read through `in` moves into [old, 2 old)
  p.buffer_elements[ms_abi::kBufActivations] = 2 * old;
  p.regions.push_back(
      schedule::Region{"fuzz.marked_input", ms_abi::kBufActivations, old, 2 * old, true});
  return p;
}

std::optional<Program> mutate_smem_allocation_unit(Program p, const GpuTarget& target,
                                                   std::mt19937_64& rng) {
  // The ring sizes its own shared memory; a dynamic queue of 5-7 workers per SM would take the
  // ground truth's exploration past its state limit (the defect is the same with static queues).
  if (p.build.weight_ring() || p.launch.dynamic_queue) return std::nullopt;
  const int bps = pick(rng, 2) == 0 ? 5 : 7;  // smem_per_sm / bps is not a whole 128-byte unit
  p.launch.threads_per_block = 128;
  p.launch.blocks_per_sm = bps;
  p.launch.grid_blocks = target.num_sms * bps;
  const int64_t unit = schedule::smem_allocation_unit(target.sm_arch);
  const int64_t fair = target.smem_per_sm / bps, whole = fair / unit * unit;
  const int64_t static_smem = device_static_smem_bytes(device_build(p));
  // Dynamic bytes around the edge: a block of whole + 1 .. fair bytes fits without the unit and
  // not with it; a few below fit either way.
  const int64_t lo = whole + 1 - static_smem - schedule::kReservedSmemPerBlock - 64;
  const int64_t hi = fair - static_smem - schedule::kReservedSmemPerBlock;
  if (lo < 16 || hi < lo) return std::nullopt;
  const int64_t smem = lo + static_cast<int64_t>(pick(rng, static_cast<uint64_t>(hi - lo + 1)));
  p.launch.smem_bytes = static_cast<int>(smem);
  int page_bytes = p.launch.smem_page_bytes > 0 ? p.launch.smem_page_bytes : 16384;
  int pages = static_cast<int>(smem / page_bytes);
  if (pages < 1) {
    pages = 1;
    page_bytes = static_cast<int>(smem / 16 * 16);
  }
  p.launch.smem_pages = pages;
  p.launch.smem_page_bytes = page_bytes;
  return p;
}

std::optional<Program> mutate_shared_counter_across_ops(Program p, std::mt19937_64& rng) {
  const std::vector<uint64_t> sums = increments_per_counter(p);
  std::vector<int64_t> op_of(sums.size(), -1);  // the one op that signals a counter, or -2
  for (const auto& in : p.tasks) {
    if (in.signal_increment == 0 || in.signal_counter >= sums.size()) continue;
    int64_t& o = op_of[in.signal_counter];
    o = o == -1 || o == in.op_id ? static_cast<int64_t>(in.op_id) : -2;
  }
  // Pairs of one-op counters of different ops; pairs of the same kind (two layers' attention)
  // first, as the documented case.
  std::vector<std::pair<uint32_t, uint32_t>> same_kind, any;
  for (uint32_t a = 0; a < sums.size(); ++a)
    for (uint32_t b = 0; b < sums.size(); ++b) {
      if (a == b || op_of[a] < 0 || op_of[b] < 0 || op_of[a] == op_of[b]) continue;
      if (sums[a] != p.counter_totals[a] || sums[b] != p.counter_totals[b]) continue;
      if (sums[a] + sums[b] > ms_abi::kMaxCounterTotal) continue;
      const size_t oa = static_cast<size_t>(op_of[a]), ob = static_cast<size_t>(op_of[b]);
      const bool kinds = oa < p.ops.size() && ob < p.ops.size() && p.ops[oa].kind == p.ops[ob].kind;
      (kinds ? same_kind : any).push_back({a, b});
    }
  const auto& from = !same_kind.empty() && pick(rng, 2) == 0 ? same_kind : any;
  if (from.empty()) return std::nullopt;
  const auto [a, b] = from[pick(rng, from.size())];
  // b's producers signal a; a wait (b, t) becomes (a, total(a) + t).
  for (auto& in : p.tasks)
    if (in.signal_increment > 0 && in.signal_counter == b) in.signal_counter = a;
  for (auto& w : p.waits)
    if (w.counter == b)
      w = ms_abi::Wait{a, w.threshold == 0 ? 0u : static_cast<uint32_t>(sums[a] + w.threshold)};
  p.counter_totals[a] = static_cast<uint32_t>(sums[a] + sums[b]);
  p.counter_totals[b] = 0;
  return p;
}

}  // namespace megasched::groundtruth
