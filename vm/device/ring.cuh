// The weight ring (kernel.weight_stream = smem_ring): a loader warp streams GEMV weight tiles into
// a ring of kRingPages shared-memory pages with bulk async copies (cp.async.bulk) that complete on
// each page's `full` mbarrier, and the compute warps consume the pages. The loader walks the
// block's queue and waits only for a free page (the page's `empty` mbarrier, on which every
// compute warp arrives once it is done with the page), never for a dependency, so it streams the
// next tasks' weights while the compute warps wait on counters. Both sides walk the same page
// sequence, counting pages with one sequence number: page k sits in slot k % kRingPages, phase
// (k / kRingPages) & 1. The byte layout of the ring is abi/ring.h's, shared with the host.
//
// A tile takes one of two paths; the loader and the compute warps decide alike, per task:
//  - whole rows (seg_streams): the tile is one contiguous run of weights, so each page is filled
//    by ONE bulk copy. The compute warps read a page as segments of kSegElems weights (a segment
//    lies inside one row); segments go to warps round robin, lane L of a warp reads the 16-byte
//    vectors L, L + 32, ... of its segment and the matching inputs, laid out (SegSlot) so that
//    both reads are conflict-free. Each segment's sum lands in its own slot; the slots of a row
//    are added in column order, so the sums are deterministic.
//  - row pieces (any other ring tile, e.g. split-K): a page holds up to kComputeWarps row pieces
//    of one row group, one bulk copy each; compute warp w owns row w of the group and accumulates
//    it over the group's column chunks in order.
#pragma once

#include "abi/ring.h"
#include "vm/device/ops.cuh"

namespace ms_dev {

constexpr uint32_t kRingPageElems = kRingPageBytes / kWeightBytes;

/// The dynamic shared memory of a ring build: [x staging | pages | full bars | empty bars].
struct Ring {
  float* x;
  char* pages;
  uint64_t* full;
  uint64_t* empty;
};

__device__ __forceinline__ Ring ring_layout(float* dyn) {
  char* base = reinterpret_cast<char*>(dyn);
  Ring r;
  r.x = dyn;
  r.pages = base + ring_pages_offset(kXFloats);
  r.full =
      reinterpret_cast<uint64_t*>(base + ring_full_offset(kXFloats, kRingPages, kRingPageBytes));
  r.empty = r.full + kRingPages;
  return r;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok = 0;
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
#else
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
#endif
  return ok != 0;
}

/// Waits for the phase of `bar` with `parity` to complete. Bounded: gives up (false) when the
/// abort flag is raised, or after spin_bound_ns when `bounded` (raising the flag itself).
__device__ __forceinline__ bool mbar_wait(const KernelArgs& a, uint64_t* bar, uint32_t parity,
                                          bool bounded) {
  if (mbar_try_wait(bar, parity)) return true;
  const uint64_t start = global_ns();
  for (uint32_t spins = 1;; ++spins) {
    if (mbar_try_wait(bar, parity)) return true;
    if ((spins & 31u) == 0) {
      if (abort_raised(a.abort_flag)) return false;
      if (bounded && global_ns() - start > a.spin_bound_ns) {
        atomicExch(a.abort_flag, 1);
        return false;
      }
    }
  }
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
#else
  (void)bytes;
  mbar_arrive(bar);
#endif
}

/// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory;
/// completion is counted on `bar`. Before sm_90 a plain copy by the calling lane.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
#else
  (void)bar;
  uint4* d = reinterpret_cast<uint4*>(dst);
  const uint4* s = reinterpret_cast<const uint4*>(src);
  for (uint32_t i = 0; i < bytes / 16; ++i) d[i] = s[i];
#endif
}

/// The loader warp opens page `slot` for `bytes` of copies. On sm_90 the page's `full` barrier
/// expects them as transaction bytes (its one arrival) before any copy is issued; before sm_90 the
/// copies are plain stores and ring_page_done arrives after them.
__device__ __forceinline__ void ring_page_begin(const Ring& r, uint32_t slot, uint32_t bytes,
                                                int lane) {
#if __CUDA_ARCH__ >= 900
  if (lane == 0) mbar_expect_tx(r.full + slot, bytes);
#else
  (void)r, (void)slot, (void)bytes, (void)lane;
#endif
  __syncwarp();
}

/// The loader warp has issued every copy of page `slot` (before sm_90: made every store).
__device__ __forceinline__ void ring_page_done(const Ring& r, uint32_t slot, int lane) {
  __syncwarp();
#if __CUDA_ARCH__ < 900
  if (lane == 0) mbar_arrive(r.full + slot);  // a release: the warp's stores above come first
#else
  (void)r, (void)slot, (void)lane;
#endif
}

/// One contiguous run of `bytes` into a page: one bulk copy by lane 0 on sm_90; before it, the
/// warp's lanes copy 16-byte words.
__device__ __forceinline__ void warp_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                          int lane) {
#if __CUDA_ARCH__ >= 900
  if (lane == 0) bulk_copy(dst, src, bytes, bar);
#else
  (void)bar;
  uint4* d = reinterpret_cast<uint4*>(dst);
  const uint4* s = reinterpret_cast<const uint4*>(src);
  for (uint32_t i = uint32_t(lane); i < bytes / 16; i += 32) d[i] = s[i];
#endif
}

/// Whether task `in` streams its weights through the ring; the loader and the compute warps
/// decide alike, per task, by abi/ring.h's rule (the validator's): the tile's row pieces are
/// 16-byte aligned, whole 16-byte multiples and its input fits the staging area; any other GEMV
/// takes the register path.
__device__ __forceinline__ bool ring_streams(const Instr& in) {
  return kRing && ms_abi::ring_streams(in, kXFloats, kWeightBytes);
}

/// The page geometry of a row-piece tile with `cols` columns (abi/ring.h ring_pieces): row pieces
/// of `pc` columns, `pr` pieces per page, `chunks` pieces per row.
__device__ __forceinline__ RingPieces ring_geom(uint32_t cols) {
  return ring_pieces(cols, kRingPageElems, kComputeWarps, kXBlock);
}

// ---- The whole-row (segment) path ----

constexpr uint32_t kSegVecs = MS_SEG_VECS;            // 16-byte vectors per lane per segment
constexpr uint32_t kSegVecElems = 16 / kWeightBytes;  // weights per 16-byte vector
constexpr uint32_t kSegElems = ring_seg_elems(kSegVecs > 0 ? kSegVecs : 1, kWeightBytes);
constexpr uint32_t kSegsPerPage = kRingPageElems / kSegElems;  // 0 when a page holds no segment

/// Whether a ring task (ring_streams) takes the whole-row path: abi/ring.h's rule (ring_seg_tile,
/// and its column blocks' partial sums for one row chunk fit the row buffer; with RoPE, a chunk of
/// whole heads).
__device__ __forceinline__ bool seg_streams(const Instr& in) {
  return ring_seg_streams(in, kSegVecs, kWeightBytes, kRingPageBytes, kHeadDim);
}

/// Rows per chunk of a whole-row tile: the chunk's partial sums (one per row and column block)
/// fill at most the kEpilogueRows row buffer; with RoPE the chunk is whole heads.
__device__ __forceinline__ uint32_t seg_chunk_rows(const Instr& in) {
  uint32_t rows = uint32_t(kEpilogueRows) / (in.ld / kSegElems);
  if (in.flags & kFlagRopeKv) rows = rows / kHeadDim * kHeadDim;
  return rows;
}

/// Where input column `rel` of a whole-row tile is staged: lane L's vector j of column block b
/// reads its kSegVecElems inputs as float4s at float4 index ((b * kSegVecs + j) * (E / 4) + h) *
/// 32 + L (E = kSegVecElems, h the half), so a warp's input loads are conflict-free.
struct SegSlot {
  static __device__ __forceinline__ uint32_t at(uint32_t rel) {
    constexpr uint32_t kQuads = kSegVecElems / 4;
    const uint32_t b = rel / kSegElems, r = rel % kSegElems;
    const uint32_t v = r / kSegVecElems, e = r % kSegVecElems;
    return (((b * kSegVecs + v / 32) * kQuads + e / 4) * 32 + v % 32) * 4 + e % 4;
  }
};

/// Four weights at element offset `i` (4-aligned), upcast.
__device__ __forceinline__ float4 weight4(const KernelArgs& a, uint64_t i) {
#if MS_WEIGHT_BF16
  const uint2 w = *reinterpret_cast<const uint2*>(reinterpret_cast<const uint16_t*>(a.weights) + i);
  return make_float4(bf16_pair_elem(w.x, 0), bf16_pair_elem(w.x, 1), bf16_pair_elem(w.y, 0),
                     bf16_pair_elem(w.y, 1));
#else
  return *reinterpret_cast<const float4*>(reinterpret_cast<const float*>(a.weights) + i);
#endif
}

/// Stages a whole-row tile's input (all `in.ld` columns, prologue applied with inv_rms = 1) in
/// SegSlot order and returns the sum of squares of act (for the norm). Four columns per thread
/// and kStageSegBatch of them in flight: the 2 x 8192 inputs of the down projection are a few L2
/// round trips per thread. Unaligned operands take the scalar staging.
/// Float4 loads in flight per thread while staging: at 256 threads 10 cover the down projection's
/// 2 x 2048 float4 inputs in one round trip (224 compute threads; spill-free at 255 registers, see
/// bench/nvrtc_bench); 8 x 2 float4 live at once spill under the 168 registers a block of more
/// than 256 threads gets (ptxas -v), so such blocks take 4.
constexpr int kStageSegBatch = kThreads > 256 ? 4 : 10;
__device__ __forceinline__ float stage_seg(const KernelArgs& a, const Instr& in, float* x) {
  const bool norm = (in.flags & kFlagNormPrologue) != 0;
  const bool silu_mul = (in.flags & kFlagSiluMulPrologue) != 0;
  const uint32_t n = in.ld;
  const bool vec = n % 4 == 0 && in.in % 4 == 0 && (!silu_mul || in.in2 % 4 == 0) &&
                   (!norm || in.weight2 % 4 == 0);
  if (!vec) return stage_input<SegSlot>(a, in, x, 0, n, 0, n, 1.0f);
  const float4* act = reinterpret_cast<const float4*>(a.act + in.in);
  const float4* act2 = reinterpret_cast<const float4*>(a.act + in.in2);
  float ss = 0.0f;
  for (uint32_t base = threadIdx.x; base < n / 4; base += kComputeThreads * kStageSegBatch) {
    float4 v[kStageSegBatch], w[kStageSegBatch];
#pragma unroll
    for (int u = 0; u < kStageSegBatch; ++u) {
      const uint32_t i = base + u * kComputeThreads;
      if (i < n / 4) {
        v[u] = __ldcg(act + i);
        if (silu_mul)
          w[u] = __ldcg(act2 + i);
        else if (norm)
          w[u] = weight4(a, in.weight2 + 4ull * i);
      }
    }
#pragma unroll
    for (int u = 0; u < kStageSegBatch; ++u) {
      const uint32_t i = base + u * kComputeThreads;
      if (i >= n / 4) continue;
      float4 xv = v[u];
      if (norm) {
        ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
        xv = make_float4(v[u].x * w[u].x, v[u].y * w[u].y, v[u].z * w[u].z, v[u].w * w[u].w);
      } else if (silu_mul) {
        xv = make_float4(silu(v[u].x) * w[u].x, silu(v[u].y) * w[u].y, silu(v[u].z) * w[u].z,
                         silu(v[u].w) * w[u].w);
      }
      *reinterpret_cast<float4*>(x + SegSlot::at(4 * i)) = xv;
    }
  }
  return ss;
}

/// Weight e (0 .. kSegVecElems-1) of a 16-byte vector, upcast.
__device__ __forceinline__ float seg_elem(const uint4& v, int e) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#if MS_WEIGHT_BF16
  return bf16_pair_elem(w[e >> 1], e);
#else
  return __uint_as_float(w[e]);
#endif
}

/// 16 bytes of shared memory at a shared-space address. The ring's pointers are generic, so a
/// plain dereference compiles to a generic load (LD.E: longer latency, tracked as a global load);
/// these are LDS.128. Volatile with a memory clobber: never hoisted above the page's wait.
__device__ __forceinline__ uint4 lds_u4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ float4 lds_f4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

constexpr uint32_t kSegQuads = kSegVecElems / 4;  // float4 inputs per weight vector
// Builds without whole-row tiles (kSegVecs 0) never run these; the arrays keep one vector there.
constexpr uint32_t kSegLaneVecs = kSegVecs > 0 ? kSegVecs : 1;  // 16-byte vectors per lane
constexpr uint32_t kSegXQuads = kSegLaneVecs * kSegQuads;  // float4 inputs per lane per segment
constexpr uint32_t kSegBytes = kSegElems * kWeightBytes;   // one segment in a page
/// Segments a compute warp takes from one page at most (segments go to warps round robin).
constexpr uint32_t kSegsPerWarpPage =
    kSegsPerPage == 0 ? 1 : (kSegsPerPage + kComputeWarps - 1) / kComputeWarps;

/// A lane's inputs of one column block, in registers: float4 q is the input of weight vector
/// q / kSegQuads, elements 4 (q % kSegQuads) ...
struct SegX {
  float4 q[kSegXQuads];
};

/// Lane `lane`'s inputs of column block b, read from the SegSlot staging at `x_addr`.
__device__ __forceinline__ void seg_load_x(uint32_t x_addr, uint32_t b, int lane, SegX* x) {
  const uint32_t base = x_addr + (b * kSegXQuads * 32 + uint32_t(lane)) * 16;
#pragma unroll
  for (uint32_t q = 0; q < kSegXQuads; ++q) x->q[q] = lds_f4(base + q * 32 * 16);
}

/// One lane's part of a segment's dot product (the warp sum of it is the segment's): its
/// kSegVecs weight vectors at shared address `seg`, all loaded before any is used, against the
/// inputs `x`. Four independent chains.
__device__ __forceinline__ float seg_partial(uint32_t seg, int lane, const SegX& x) {
  uint4 w[kSegLaneVecs];
#pragma unroll
  for (uint32_t j = 0; j < kSegLaneVecs; ++j) w[j] = lds_u4(seg + (j * 32 + uint32_t(lane)) * 16);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (uint32_t j = 0; j < kSegLaneVecs; ++j) {
#pragma unroll
    for (uint32_t h = 0; h < kSegQuads; ++h) {
      const float4 xv = x.q[j * kSegQuads + h];
      acc[0] += seg_elem(w[j], int(4 * h)) * xv.x;
      acc[1] += seg_elem(w[j], int(4 * h + 1)) * xv.y;
      acc[2] += seg_elem(w[j], int(4 * h + 2)) * xv.z;
      acc[3] += seg_elem(w[j], int(4 * h + 3)) * xv.w;
    }
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/// The column block and row of a warp's segments: segment g of a row chunk (chunk-relative) is
/// column block g % blocks of row g / blocks; a warp's next segment is W = kComputeWarps further,
/// so both advance by a fixed step with no division in the page loop.
struct SegCursor {
  uint32_t g, row, b;
  __device__ __forceinline__ void advance(uint32_t blocks, uint32_t step_rows, uint32_t step_b) {
    g += kComputeWarps;
    row += step_rows;
    b += step_b;
    if (b >= blocks) {
      b -= blocks;
      ++row;
    }
  }
};

/// One row chunk of a whole-row tile: every compute warp walks the chunk's pages in order and
/// takes the segments g = warp, warp + W, ... (W = kComputeWarps). Per page a warp computes its
/// lanes' partial sums, releases the page (its loads have landed: the sums used them), and only
/// then reduces each sum across the warp, so the shuffles are off the ring's critical path. (The
/// inputs are re-read from shared memory per segment: holding a row's 64 inputs per lane in
/// registers made ptxas spill in the kernel body at 255 registers.)
__device__ __forceinline__ bool seg_chunk(const KernelArgs& a, const Ring& r, Shared& s,
                                          uint32_t total, uint32_t blocks, uint32_t chunk,
                                          uint32_t* k, bool ok) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t pages = smem_addr(r.pages), x_addr = smem_addr(r.x);
  const uint32_t step_rows = kComputeWarps / blocks, step_b = kComputeWarps % blocks;
  SegCursor cur{uint32_t(warp), uint32_t(warp) / blocks, uint32_t(warp) % blocks};
  for (uint32_t first = 0; first < total; first += kSegsPerPage, ++*k) {
    const uint32_t slot = *k % kRingPages, phase = (*k / kRingPages) & 1u;
    // Every compute warp waits for the page, also one with no segment in it: a warp that arrived
    // on `empty` without waiting could lap the ring and arrive twice in one phase.
    if (ok) ok = mbar_wait(a, r.full + slot, phase, true);
    const uint32_t last = min(total, first + kSegsPerPage);
    float part[kSegsPerWarpPage];
    uint32_t dest[kSegsPerWarpPage];
    uint32_t n = 0;
#pragma unroll
    for (uint32_t u = 0; u < kSegsPerWarpPage; ++u) {
      if (ok && cur.g < last) {
        const uint32_t seg = pages + slot * kRingPageBytes + (cur.g - first) * kSegBytes;
        SegX x;
        seg_load_x(x_addr, cur.b, lane, &x);
        part[u] = seg_partial(seg, lane, x);
        dest[u] = cur.b * chunk + cur.row;
        n = u + 1;
        cur.advance(blocks, step_rows, step_b);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(r.empty + slot);
#pragma unroll
    for (uint32_t u = 0; u < kSegsPerWarpPage; ++u) {
      if (u < n) {
        const float sum = warp_sum(part[u]);
        if (lane == 0) s.u.rows[dest[u]] = sum;
      }
    }
  }
  return ok;
}

/// Residual rows per compute thread whose loads a whole-row task issues before its pages (the rest
/// are loaded in the epilogue).
constexpr uint32_t kSegResidualRows = 2;

/// The GEMV of a whole-row ring task (see the file comment). Returns false when a page never came
/// (the launch is aborting); every warp still reaches every barrier.
__device__ __noinline__ bool gemv_ring_seg(const KernelArgs& a, const Instr& in, Shared& s,
                                           const Ring& ring, uint32_t* seq) {
  const Ring r = ring;  // in registers: the reference would be re-read from local memory per page
  // The input is staged once, as act * gamma under the norm: a dot product is linear in x, so the
  // row sums are scaled by inv_rms at the end and the sum of squares is reduced in the same pass.
  const float ss = stage_seg(a, in, r.x);
  float scale = 1.0f;
  if (in.flags & kFlagNormPrologue) {
    scale = rsqrtf(block_sum(ss, s.red) / float(in.ld) + a.model.rms_eps);  // ends in a barrier
  } else {
    block_sync();
  }
  const uint32_t blocks = in.ld / kSegElems;
  const uint32_t chunk = seg_chunk_rows(in);
  // A residual epilogue (O, down) adds rows of act that the task's waits already cover: their
  // loads are issued before the pages are read, so the L2 round trip overlaps the GEMV, and the
  // row sums are written out directly (gemv_epilogue's residual case, one barrier fewer).
  const bool residual = (in.flags & kFlagResidual) && !(in.flags & kFlagPartial);
  bool ok = true;
  uint32_t k = *seq;
  for (uint32_t row0 = in.row_begin; row0 < in.row_end; row0 += chunk) {
    const uint32_t row1 = min(in.row_end, row0 + chunk);
    float res[kSegResidualRows];
#pragma unroll
    for (uint32_t u = 0; u < kSegResidualRows; ++u) {
      const uint32_t i = threadIdx.x + u * kComputeThreads;
      res[u] = residual && i < row1 - row0 ? act_load(a.act + in.aux + row0 + i) : 0.0f;
    }
    const uint32_t total = (row1 - row0) * blocks;  // segments of this chunk
    ok = seg_chunk(a, r, s, total, blocks, chunk, &k, ok);
    if (!ok) s.ring_failed = 1;
    block_sync();
    // Row sums: the column blocks' slots added in column order (thread i touches only row i's).
    const uint32_t n = row1 - row0;
    auto finish = [&](uint32_t i, float add) {
      float v = 0.0f;
      for (uint32_t b = 0; b < blocks; ++b) v += s.u.rows[b * chunk + i];
      if (residual)
        a.act[in.out + row0 + i] = v * scale + add;
      else
        s.u.rows[i] = v * scale;
    };
#pragma unroll
    for (uint32_t u = 0; u < kSegResidualRows; ++u) {
      const uint32_t i = threadIdx.x + u * kComputeThreads;
      if (i < n) finish(i, res[u]);
    }
    for (uint32_t i = threadIdx.x + kSegResidualRows * kComputeThreads; i < n; i += kComputeThreads)
      finish(i, residual ? act_load(a.act + in.aux + row0 + i) : 0.0f);
    block_sync();
    if (!residual) {
      gemv_epilogue(a, in, s, row0, row1);
      block_sync();
    }
  }
  *seq = k;
  if (in.flags & kFlagArgmaxPartial) argmax_record(a, in, s, nullptr);
  return s.ring_failed == 0;
}

// ---- The loader ----

/// The loader's wait before page `seq` of the block: for a free slot and, with a cap on the pages
/// in flight (smem.inflight_pages), for page seq - cap to have landed, so no more than `cap`
/// pages' copies are outstanding whatever the ring holds. Page seq - cap still owns its slot and
/// its full barrier's phase (the slot is refilled only at seq - cap + kRingPages > seq), and its
/// copies land without any other warp, so the wait cannot deadlock. False when the launch is
/// aborting.
__device__ __forceinline__ bool ring_claim(const KernelArgs& a, const Ring& r, uint32_t seq) {
  if (kRingInflight > 0 && seq >= kRingInflight) {
    const uint32_t landed = seq - kRingInflight;
    if (!mbar_wait(a, r.full + landed % kRingPages, (landed / kRingPages) & 1u, false))
      return false;
  }
  return mbar_wait(a, r.empty + seq % kRingPages, ((seq / kRingPages) & 1u) ^ 1u, false);
}

/// Streams a whole-row tile: each page is one bulk copy of the tile's next contiguous weights,
/// per row chunk (seg_chunk_rows), so the pages match gemv_ring_seg's.
__device__ __forceinline__ bool ring_load_seg(const KernelArgs& a, const Ring& r, const Instr& in,
                                              uint32_t* seq) {
  const int lane = threadIdx.x & 31;
  const char* W = reinterpret_cast<const char*>(a.weights);
  const uint32_t chunk = seg_chunk_rows(in);
  for (uint32_t row0 = in.row_begin; row0 < in.row_end; row0 += chunk) {
    const uint32_t row1 = min(in.row_end, row0 + chunk);
    const uint64_t e0 = in.weight + uint64_t(row0) * in.ld;
    const uint64_t n = uint64_t(row1 - row0) * in.ld;
    for (uint64_t off = 0; off < n; off += kRingPageElems) {
      if (!ring_claim(a, r, *seq)) return false;
      const uint32_t slot = *seq % kRingPages;
      const uint32_t bytes = uint32_t(min(uint64_t(kRingPageElems), n - off)) * kWeightBytes;
      ring_page_begin(r, slot, bytes, lane);
      warp_copy(r.pages + uint64_t(slot) * kRingPageBytes, W + (e0 + off) * kWeightBytes, bytes,
                r.full + slot, lane);
      ring_page_done(r, slot, lane);
      ++*seq;
    }
  }
  return true;
}

/// Streams a row-piece tile: a page per row group and column chunk (ring_geom), one bulk copy per
/// row piece.
__device__ __forceinline__ bool ring_load_pieces(const KernelArgs& a, const Ring& r,
                                                 const Instr& in, uint32_t* seq) {
  const int lane = threadIdx.x & 31;
  const char* W = reinterpret_cast<const char*>(a.weights);
  const uint32_t cols = in.col_end - in.col_begin;
  const RingPieces g = ring_geom(cols);
  for (uint32_t row0 = in.row_begin; row0 < in.row_end; row0 += kEpilogueRows) {
    const uint32_t row1 = min(in.row_end, row0 + kEpilogueRows);
    for (uint32_t gr = row0; gr < row1; gr += g.pr) {
      const uint32_t n = min(g.pr, row1 - gr);
      for (uint32_t ch = 0; ch < g.chunks; ++ch) {
        if (!ring_claim(a, r, *seq)) return false;
        const uint32_t slot = *seq % kRingPages;
        const uint32_t c0 = ch * g.pc;
        const uint32_t bytes = min(g.pc, cols - c0) * kWeightBytes;
        ring_page_begin(r, slot, n * bytes, lane);
        char* page = r.pages + uint64_t(slot) * kRingPageBytes;
        for (uint32_t i = lane; i < n; i += 32) {
          const uint64_t e = in.weight + uint64_t(gr + i) * in.ld + in.col_begin + c0;
          bulk_copy(page + uint64_t(i) * g.pc * kWeightBytes, W + e * kWeightBytes, bytes,
                    r.full + slot);
        }
        ring_page_done(r, slot, lane);
        ++*seq;
      }
    }
  }
  return true;
}

/// The loader warp: streams the weight tiles of every ring task of queue [qbegin, qend) in order.
/// On abort it stops issuing, then waits until its copies in flight have landed (a block must not
/// leave with bulk copies writing its shared memory).
__device__ void ring_load(const KernelArgs& a, const Ring& r, uint32_t qbegin, uint32_t qend) {
  uint32_t seq = 0;
  bool ok = true;
  for (uint32_t q = qbegin; q < qend && ok; ++q) {
    const Instr in = a.tasks[a.queue_tasks[q]];
    if (!ring_streams(in)) continue;
    ok = seg_streams(in) ? ring_load_seg(a, r, in, &seq) : ring_load_pieces(a, r, in, &seq);
  }
  if (!ok) {
    const uint32_t back = min(seq, uint32_t(kRingPages));
    for (uint32_t k = seq - back; k < seq; ++k) {
      while (!mbar_try_wait(r.full + k % kRingPages, (k / kRingPages) & 1u)) {
      }
    }
  }
}

/// A weight vector from shared memory, as one vector load.
__device__ __forceinline__ WeightVec smem_weight_vec(const WeightT* p) {
  WeightVec v;
#if MS_VECTOR_BYTES == 16
  const uint4 t = *reinterpret_cast<const uint4*>(p);
  v.w[0] = t.x;
  v.w[1] = t.y;
  v.w[2] = t.z;
  v.w[3] = t.w;
#elif MS_VECTOR_BYTES == 8
  const uint2 t = *reinterpret_cast<const uint2*>(p);
  v.w[0] = t.x;
  v.w[1] = t.y;
#else
  v.w[0] = *reinterpret_cast<const uint32_t*>(p);
#endif
  return v;
}

/// One warp's dot product of a row piece in the ring (`len` columns starting at tile column c0,
/// a multiple of kXBlock unless c0 is 0) with the staged input.
__device__ __forceinline__ float ring_dot(const WeightT* piece, const float* x, uint32_t c0,
                                          uint32_t len) {
  const int lane = threadIdx.x & 31;
  float acc0 = 0.0f, acc1 = 0.0f;
  const uint32_t whole = len / kXBlock * kXBlock;
  uint32_t b = 0;
  for (; b + 2 * kXBlock <= whole; b += 2 * kXBlock) {
    const WeightVec v0 = smem_weight_vec(piece + b + lane * kVecElems);
    const WeightVec v1 = smem_weight_vec(piece + b + kXBlock + lane * kVecElems);
    const float* x0 = x + c0 + b + lane;
#pragma unroll
    for (int e = 0; e < kVecElems; ++e) {
      acc0 += vec_elem(v0, e) * x0[e * 32];
      acc1 += vec_elem(v1, e) * x0[kXBlock + e * 32];
    }
  }
  for (; b < whole; b += kXBlock) {
    const WeightVec v0 = smem_weight_vec(piece + b + lane * kVecElems);
    const float* x0 = x + c0 + b + lane;
#pragma unroll
    for (int e = 0; e < kVecElems; ++e) acc0 += vec_elem(v0, e) * x0[e * 32];
  }
  for (uint32_t j = whole + lane; j < len; j += 32) acc1 += to_f32(piece[j]) * x[x_slot(c0 + j)];
  return acc0 + acc1;
}

/// The GEMV of a ring task: stage the whole input (prologue applied), then consume the tile's
/// pages in the loader's order; the epilogue runs per row chunk as in gemv(). `seq` is the
/// block's page sequence number (advanced by every compute warp alike). Returns false when a
/// page never came (the launch is aborting); every warp still reaches every barrier.
__device__ __forceinline__ bool gemv_ring(const KernelArgs& a, const Instr& in, Shared& s,
                                          const Ring& r, uint32_t* seq) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t cols = in.col_end - in.col_begin;
  // One pass over the input. With the norm prologue the staged value is act * gamma and the row
  // sums are scaled by inv_rms at the end (a dot product is linear in x), so the sum of squares
  // is reduced alongside the staging instead of in a pass of its own.
  float scale = 1.0f;
  if (in.flags & kFlagNormPrologue) {
    const float ss = stage_input(a, in, r.x, in.col_begin, in.col_end, 0, in.ld, 1.0f);
    scale = rsqrtf(block_sum(ss, s.red) / float(in.ld) + a.model.rms_eps);  // ends in a barrier
  } else {
    stage_input(a, in, r.x, in.col_begin, in.col_end, in.col_begin, in.col_end, 1.0f);
    block_sync();
  }
  const RingPieces g = ring_geom(cols);
  bool ok = true;
  uint32_t k = *seq;
  for (uint32_t row0 = in.row_begin; row0 < in.row_end; row0 += kEpilogueRows) {
    const uint32_t row1 = min(in.row_end, row0 + kEpilogueRows);
    for (uint32_t gr = row0; gr < row1; gr += g.pr) {
      const uint32_t n = min(g.pr, row1 - gr);
      float acc = 0.0f;
      for (uint32_t ch = 0; ch < g.chunks; ++ch, ++k) {
        const uint32_t slot = k % kRingPages, phase = (k / kRingPages) & 1u;
        // Every compute warp waits for the page, also one with no row in it: a warp that arrived
        // on `empty` without waiting could lap the ring and arrive twice in one phase.
        if (ok) ok = mbar_wait(a, r.full + slot, phase, true);
        if (uint32_t(warp) < n) {
          if (ok) {
            const uint32_t c0 = ch * g.pc;
            const WeightT* piece = reinterpret_cast<const WeightT*>(
                r.pages + uint64_t(slot) * kRingPageBytes + uint64_t(warp) * g.pc * kWeightBytes);
            acc += ring_dot(piece, r.x, c0, min(g.pc, cols - c0));
          }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(r.empty + slot);
      }
      if (uint32_t(warp) < n) {
        acc = warp_sum(acc);
        if (lane == 0) s.u.rows[gr + warp - row0] = acc * scale;
      }
    }
    if (!ok) s.ring_failed = 1;
    block_sync();
    gemv_epilogue(a, in, s, row0, row1);
    block_sync();
  }
  *seq = k;
  if (in.flags & kFlagArgmaxPartial) argmax_record(a, in, s, nullptr);
  return s.ring_failed == 0;
}

/// A ring task's GEMV, by its path.
__device__ __forceinline__ bool gemv_ring_any(const KernelArgs& a, const Instr& in, Shared& s,
                                              const Ring& r, uint32_t* seq) {
  return seg_streams(in) ? gemv_ring_seg(a, in, s, r, seq) : gemv_ring(a, in, s, r, seq);
}

}  // namespace ms_dev
