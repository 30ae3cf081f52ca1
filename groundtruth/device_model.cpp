#include "groundtruth/device_model.h"

#include <algorithm>
#include <map>

#include "vm/nvrtc_build.h"

namespace megasched::groundtruth {

using schedule::Program;

DeviceBuild device_build(const Program& program) {
  std::map<std::string, long long> value;
  DeviceBuild b;
  for (const std::string& option : vm::kernel_defines(program)) {
    const size_t eq = option.find('=');
    const std::string name = option.substr(0, eq);
    long long v = 0;
    try {
      v = std::stoll(option.substr(eq + 1));
    } catch (const std::exception&) {
      b.option_errors.push_back("-D" + option + " is not a number");
      continue;
    }
    auto [it, fresh] = value.emplace(name, v);
    if (!fresh && it->second != v)
      b.option_errors.push_back(name + " is given twice, as " + std::to_string(it->second) +
                                " and " + std::to_string(v));
  }
  auto take = [&](const char* name, int* field) {
    auto it = value.find(name);
    if (it != value.end()) *field = static_cast<int>(it->second);
  };
  int ring = 0, wbf16 = 1, kvbf16 = 1;
  take("MS_THREADS", &b.threads);
  take("MS_MIN_BLOCKS", &b.min_blocks);
  take("MS_VECTOR_BYTES", &b.vector_bytes);
  take("MS_ROWS_PER_WARP", &b.rows_per_warp);
  take("MS_UNROLL", &b.unroll);
  take("MS_STREAM_DEPTH", &b.stream_depth);
  take("MS_STREAM_HELD", &b.stream_held);
  take("MS_STREAM_HELD_EVERY", &b.stream_held_every);
  take("MS_WEIGHT_LOAD", &b.weight_load);
  take("MS_WEIGHT_RING", &ring);
  take("MS_RING_PAGES", &b.ring_pages);
  take("MS_RING_PAGE_BYTES", &b.ring_page_bytes);
  take("MS_RING_INFLIGHT", &b.ring_inflight);
  take("MS_X_FLOATS", &b.x_floats);
  take("MS_SEG_VECS", &b.seg_vecs);
  take("MS_HEAD_DIM", &b.head_dim);
  take("MS_WEIGHT_BF16", &wbf16);
  take("MS_KV_BF16", &kvbf16);
  take("MS_ATTN_STAGED", &b.attn_staged);
  take("MS_ATTN_HEAD_BATCH", &b.attn_head_batch);
  b.weight_ring = ring != 0;
  b.weight_bf16 = wbf16 != 0;
  b.kv_bf16 = kvbf16 != 0;
  return b;
}

std::vector<std::string> device_build_errors(const DeviceBuild& b) {
  std::vector<std::string> out = b.option_errors;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) out.push_back("static_assert fails: " + what);
  };
  check(b.threads % 32 == 0 && b.threads >= 32 && b.threads <= 1024, "MS_THREADS");
  check(b.vector_bytes == 4 || b.vector_bytes == 8 || b.vector_bytes == 16, "MS_VECTOR_BYTES");
  check(b.rows_per_warp >= 1 && b.rows_per_warp <= 8, "MS_ROWS_PER_WARP");
  check(b.unroll >= 1 && b.unroll <= 8, "MS_UNROLL");
  check(b.stream_depth >= 2 && b.stream_depth <= 4, "MS_STREAM_DEPTH");
  check(b.stream_held >= 0 && b.stream_held <= b.stream_depth,
        "MS_STREAM_HELD: chunks held back, at most MS_STREAM_DEPTH");
  check(b.stream_held_every == 1 || b.stream_held_every == 2 || b.stream_held_every == 4,
        "MS_STREAM_HELD_EVERY: 1, 2 or 4");
  check(!b.weight_ring || (b.threads >= 64 && b.ring_pages >= 1 && b.ring_page_bytes % 16 == 0 &&
                           b.x_floats % 4 == 0),
        "MS_WEIGHT_RING needs a compute warp, whole 16-byte pages and a staging area");
  check(b.ring_inflight >= 0 && (!b.weight_ring || b.ring_inflight < b.ring_pages),
        "MS_RING_INFLIGHT: pages in flight, below the ring's pages (0: no cap)");
  check(b.seg_vecs == 0 || b.seg_vecs == 1 || b.seg_vecs == 2 || b.seg_vecs == 4 || b.seg_vecs == 8,
        "MS_SEG_VECS");
  check(b.head_dim >= 2 && b.head_dim <= 256 && b.head_dim % 2 == 0, "MS_HEAD_DIM");
  check(b.attn_staged == 0 || b.attn_staged == 1, "MS_ATTN_STAGED");
  check(b.attn_head_batch == 4 || b.attn_head_batch == 8, "MS_ATTN_HEAD_BATCH: 4 or 8");
  return out;
}

int64_t device_static_smem_bytes(const DeviceBuild& b) {
  // vm/device/ops.cuh: kComputeWarps, kEpilogueRows, struct Shared; argmax's
  // `__shared__ int32_t idx[kComputeWarps]`.
  const int64_t warps = b.threads / 32 - (b.weight_ring ? 1 : 0);
  const int64_t hd = std::max(b.head_dim, 1);
  const int64_t epilogue_rows = (1024 / hd) * hd;
  const int64_t red = 4 * warps;
  const int64_t wait_outcome = 5 * 4;
  const int64_t claim_last_arrival_tag_acquired_ring_failed = 4 * 4;
  const int64_t ready_ns = 3 * 8;          // ready_ns, staged_ns, streamed_ns: 8-byte aligned
  const int64_t kv_bar_phase = 2 * 8 + 4;  // staged attention's two mbarriers and their parity
  // Ahead ahead[2]: 16-byte aligned (and so is the struct's size), an Instr and kWaitHeads heads.
  const int64_t ahead = 2 * (static_cast<int64_t>(sizeof(ms_abi::Instr)) +
                             static_cast<int64_t>(sizeof(ms_abi::WaitHead)) * ms_abi::kWaitHeads);
  const int64_t attn = 4 * (b.attn_head_batch * hd + warps * (hd + 2));
  const int64_t u = std::max<int64_t>(4 * epilogue_rows, attn);
  auto up = [](int64_t v, int64_t to) { return (v + to - 1) / to * to; };
  const int64_t shared =
      up(up(up(red + wait_outcome + claim_last_arrival_tag_acquired_ring_failed, 8) + ready_ns +
                kv_bar_phase,
            16) +
             ahead + u,
         16);
  // ptxas reports the static area rounded up to 16 bytes, where the 16-byte aligned dynamic area
  // (`extern __shared__ __align__(16) float pages[]`) begins.
  return up(shared + 4 * warps, 16);
}

bool device_wait_holds(uint32_t epoch, uint64_t done, uint64_t added_per_step,
                       uint32_t declared_total, uint32_t threshold) {
  // The counter is a uint32_t that every earlier step raised by what its producers add.
  const uint32_t value = static_cast<uint32_t>(epoch * added_per_step + done);
  const uint32_t target = epoch * declared_total + threshold;  // wait_all's `target`
  return static_cast<int32_t>(value - target) >= 0;            // counter_reached
}

std::vector<uint64_t> step_increments(const Program& p) {
  std::vector<uint64_t> added(p.counter_totals.size(), 0);
  for (const auto& in : p.tasks)
    if (in.signal_increment > 0) added[in.signal_counter] += in.signal_increment;
  return added;
}

bool device_waits_hold(const Program& p, uint32_t task, uint32_t epoch,
                       const std::vector<uint64_t>& done, const std::vector<uint64_t>& added) {
  const ms_abi::Instr& in = p.tasks[task];
  for (uint32_t i = 0; i < in.wait_count; ++i) {
    const ms_abi::Wait& w = p.waits[in.wait_begin + i];
    if (!device_wait_holds(epoch, done[w.counter], added[w.counter], p.counter_totals[w.counter],
                           w.threshold))
      return false;
  }
  return true;
}

namespace {

// vm/device/ops.cuh x_slot with kVecElems = e.
uint64_t x_slot(uint64_t rel, uint64_t e) {
  const uint64_t block = 32 * e;
  return (rel / block) * block + (rel % e) * 32 + (rel % block) / e;
}

// vm/device/ring.cuh SegSlot::at with kSegVecs = v, kSegVecElems = e.
uint64_t seg_slot(uint64_t rel, uint64_t v, uint64_t e) {
  const uint64_t seg = 32 * e * v, quads = e / 4;
  const uint64_t b = rel / seg, r = rel % seg;
  const uint64_t vec = r / e, el = r % e;
  return (((b * v + vec / 32) * quads + el / 4) * 32 + vec % 32) * 4 + el % 4;
}

void add_read(RingTaskModel* m, uint32_t buffer, uint64_t begin, uint64_t end) {
  if (begin < end) m->reads.push_back({buffer, begin, end});
}

}  // namespace

RingTaskModel ring_task_model(const DeviceBuild& b, const Program& p, const ms_abi::Instr& in) {
  RingTaskModel m;
  // megakernel.cuh: `ring = kRing && !dynamic`, then `ring && ring_streams(instr)`.
  if (!b.weight_ring || p.launch.dynamic_queue || in.opcode != ms_abi::kGemv) return m;
  const uint64_t wb = b.weight_bf16 ? 2 : 4;
  const uint64_t cols = static_cast<uint32_t>(in.col_end - in.col_begin);
  const bool streams = (in.flags & ms_abi::kFlagRopePairs) == 0 && cols > 0 &&
                       cols <= static_cast<uint64_t>(std::max(b.x_floats, 0)) &&
                       ((in.weight + in.col_begin) * wb) % 16 == 0 &&
                       (uint64_t{in.ld} * wb) % 16 == 0 && (cols * wb) % 16 == 0;
  if (!streams) return m;
  const uint64_t page_elems = static_cast<uint32_t>(b.ring_page_bytes) / wb;
  const uint64_t hd = static_cast<uint64_t>(std::max(b.head_dim, 1));
  const uint64_t epilogue_rows = (1024 / hd) * hd;
  const uint64_t rows = in.row_end > in.row_begin ? in.row_end - in.row_begin : 0;
  const bool norm = (in.flags & ms_abi::kFlagNormPrologue) != 0;
  const bool silu_mul = (in.flags & ms_abi::kFlagSiluMulPrologue) != 0;
  // seg_streams: ring_seg_tile, the column blocks fit the row buffer, RoPE chunks of whole heads.
  const uint64_t seg_vec_elems = 16 / wb;
  const uint64_t seg_elems = 32 * seg_vec_elems * static_cast<uint64_t>(std::max(b.seg_vecs, 1));
  bool seg =
      b.seg_vecs != 0 && in.col_begin == 0 && in.col_end == in.ld && in.ld != 0 &&
      in.ld % seg_elems == 0 &&
      static_cast<uint64_t>(static_cast<uint32_t>(b.ring_page_bytes)) % (seg_elems * wb) == 0;
  if (seg) {
    const uint64_t blocks = in.ld / seg_elems;
    seg = blocks <= epilogue_rows &&
          ((in.flags & ms_abi::kFlagRopeKv) == 0 || epilogue_rows / blocks >= hd);
  }
  if (seg) {
    m.path = RingTaskModel::Path::kSegments;
    // stage_seg: all ld columns of act (and in2, gamma) into SegSlot order.
    for (uint64_t rel = 0; rel < in.ld; ++rel)
      m.staged_floats = std::max(
          m.staged_floats,
          seg_slot(rel, static_cast<uint64_t>(std::max(b.seg_vecs, 1)), seg_vec_elems) + 1);
    add_read(&m, ms_abi::kBufActivations, in.in, uint64_t{in.in} + in.ld);
    if (silu_mul) add_read(&m, ms_abi::kBufActivations, in.in2, uint64_t{in.in2} + in.ld);
    if (norm) add_read(&m, ms_abi::kBufWeights, in.weight2, in.weight2 + in.ld);
    // ring_load_seg steps by kRingPageElems, gemv_ring_seg by kSegsPerPage.
    m.loader_ends = rows == 0 || (page_elems > 0 && page_elems / seg_elems > 0);
    m.page_bytes_used = page_elems * wb;
    return m;
  }
  m.path = RingTaskModel::Path::kPieces;
  // ring_geom.
  const uint64_t warps = static_cast<uint64_t>(std::max(b.threads / 32 - 1, 0));
  const uint64_t vec_elems = static_cast<uint64_t>(std::max(b.vector_bytes, 1)) / wb;
  const uint64_t x_block = 32 * vec_elems;
  uint64_t per_warp = warps == 0 || x_block == 0 ? 0 : page_elems / warps / x_block * x_block;
  if (per_warp < x_block) per_warp = x_block;
  const uint64_t pc = std::min(cols, per_warp);
  const uint64_t pr = pc == 0 ? 0 : std::min(warps, page_elems / pc);
  // ring_load_pieces: `gr += g.pr`.
  m.loader_ends = rows == 0 || pr > 0;
  m.page_bytes_used = std::min(pr, rows) * pc * wb;
  // gemv_ring's stage_input: writes x[x_slot(i - col_begin)] for i in [col_begin, col_end); reads
  // [0, ld) with the norm prologue (the RMS statistic in the same pass), else the task's columns.
  for (uint64_t rel = 0; rel < cols && vec_elems > 0; ++rel)
    m.staged_floats = std::max(m.staged_floats, x_slot(rel, vec_elems) + 1);
  const uint64_t lo = norm ? 0 : in.col_begin, hi = norm ? in.ld : in.col_end;
  add_read(&m, ms_abi::kBufActivations, uint64_t{in.in} + lo, uint64_t{in.in} + hi);
  if (silu_mul) add_read(&m, ms_abi::kBufActivations, uint64_t{in.in2} + lo, uint64_t{in.in2} + hi);
  if (norm) add_read(&m, ms_abi::kBufWeights, in.weight2 + lo, in.weight2 + hi);
  return m;
}

}  // namespace megasched::groundtruth
