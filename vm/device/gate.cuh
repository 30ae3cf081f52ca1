// The gate before megakernel v3 (bench/gate_bench.cpp; not included by the megakernel): a
// persistent kernel, one block per SM, that streams a pre-packed bf16 weight matrix through a ring
// of kPages shared-memory pages of kPageBytes and computes y = W x with one of three consumers.
//
//  - The loader is lane 0 of the last warp. It issues one cp.async.bulk per page (evict-first in
//    L2), counted as transaction bytes on the page's `full` mbarrier, and before reusing a page it
//    waits on the page's `empty` mbarrier, on which every consumer warp arrives once it has read
//    the page. Both sides count pages with one sequence number s: slot s % kPages, phase
//    (s / kPages) & 1. The loader never waits for anything else, so it runs ahead across rows,
//    row groups and copies of the matrix.
//  - kCopy: the consumers only release each page (the ceiling of the ring).
//  - kCuda (C): CUDA cores. The matrix stays row-major (a page holds kPageBytes / (2 K) whole
//    rows); consumer warp w owns the column slice [w K / 8, (w + 1) K / 8) of every row and keeps
//    that slice of x in fp32 registers; lane L reads the 16-byte vectors L, L + 32, ... of its
//    warp's slice (conflict-free), multiplies into four independent accumulators per row, and the
//    page's row sums are folded across the lanes with one transposing shuffle reduction.
//  - kMma (M): tensor cores, mma.sync m16n8k16 bf16 -> fp32 with the weights as the A operand.
//    The matrix is packed in 16-row groups of 16 x 16 tiles of 512 bytes, each tile in the order
//    of the A fragment, so lane L reads its four registers with one 16-byte load (mma_packed_index
//    below is the one formula, host and device). Tile kt of a group belongs to warp kt % 8. B is
//    x split into bf16 hi (column 0) and lo (column 1), in registers; y = D[:, 0] + D[:, 1].
// Both compute designs write per-warp row partials into a double-buffered shared array and, every
// kChunkRows rows, the consumer warps meet at a named barrier and add the 8 partials of each row
// in warp order (deterministic), then store y.
//
// Rows are split over the streaming blocks row-granularly (kCuda, kCopy: block p takes rows
// [p R / B, (p + 1) R / B)); kMma splits 16-row groups alike. With `hop_links` > 0, blocks 0 and 1
// instead run a chain of dependent links (warp 0 of each): link i (block i % 2) waits with an
// acquire poll until the flag reaches i, loads the previous link's 128 bytes and checks them,
// stores its own 128 bytes and adds 1 to the flag with red.release.gpu; blocks from `first_block`
// on stream meanwhile. Every wait is bounded: past spin_bound_ns it sets kErrTimeout in *error
// and every later wait gives up at once, so a broken build ends with an error instead of a hang.
//
// The top half (constants, GateArgs, the layout formulas) is plain C++ that the host includes too.
#pragma once

#if defined(__CUDACC__)
#define MS_GATE_FN __host__ __device__ __forceinline__
#else
#define MS_GATE_FN inline
#endif

namespace ms_gate {

typedef unsigned int u32;
typedef unsigned long long u64;

/// The consumer designs (the kernel names carry them: ms_gate_copy_kK, ms_gate_c_kK, ms_gate_m_kK).
constexpr u32 kCopy = 0;
constexpr u32 kCuda = 1;
constexpr u32 kMma = 2;

constexpr u32 kConsumerWarps = 8;
constexpr u32 kThreads = (kConsumerWarps + 1) * 32;  // + the loader warp
constexpr u32 kChunkRows = 128;                      // rows between two consumer barriers
constexpr u32 kTileBytes = 512;                      // kMma: one 16 x 16 bf16 A tile
constexpr u32 kGroupRows = 16;                       // kMma: rows of one tile

/// The chains of ms_gate_c_k2048_relay (launched in clusters of two blocks; blocks 0 and 2 take
/// the links, blocks 1 and 3 are their cluster peers; see relay_main).
constexpr u32 kHopDirect = 1;     // each waiting block polls the global flag itself
constexpr u32 kHopRelayFlag = 2;  // its peer polls and tells it through its shared memory; it then
                                  // loads the previous link's bytes from global memory
constexpr u32 kHopRelayData = 3;  // its peer polls, loads those bytes and stores them into its
                                  // shared memory, then tells it
constexpr u32 kSelfWarpsMax = 7;  // warps 1-7 of a waiting block (warp 0 runs the links)
constexpr u32 kSelfLoads = 8;     // 16-byte loads a lane keeps in flight, twice over (8 KiB a warp)

/// Bits of *error.
constexpr u32 kErrTimeout = 1;  // a wait passed spin_bound_ns
constexpr u32 kErrHopData = 2;  // a hop link read bytes other than the previous link's

/// The kernel's one argument (by value). Addresses are device pointers as integers.
struct GateArgs {
  u64 w;               // copy 0 of the weights (the design's layout)
  u64 copy_stride;     // bytes between two copies of the weights
  u64 x;               // K fp32 inputs
  u64 y;               // R fp32 outputs
  u64 hop_flag;        // u32: links stored so far
  u64 hop_data;        // u32[(hop_links) * 32]: each link's 128 bytes
  u64 times;           // u64[2 + grid] or 0: chain start, chain end, each block's end (globaltimer)
  u64 error;           // u32: kErr* bits
  u64 spin_bound_ns;   // a wait longer than this is an error
  u32 copies;          // copies streamed one after the other (all blocks, same rows)
  u32 rows;            // R
  u32 first_block;     // blocks below this one run the hop chain (0 and 1) or nothing
  u32 hop_links;       // links of the chain; 0: no chain
  u32 inflight_pages;  // the loader's cap on pages requested and not yet landed; 0: the ring's
  u32 hop_mode;        // ms_gate_c_k2048_relay only (kHopDirect, kHopRelayFlag, kHopRelayData)
  u32 hop_self_warps;  // ms_gate_c_k2048_relay: warps 1.. of each waiting block keeping loads of
                       // their own in flight during the chain (0 to kSelfWarpsMax)
};

/// Dynamic shared memory: [pages | 2 x kChunkRows x kConsumerWarps fp32 partials | full bars |
/// empty bars].
MS_GATE_FN constexpr u64 smem_bytes(u32 pages, u32 page_bytes) {
  return u64(pages) * page_bytes + 2ull * kChunkRows * kConsumerWarps * 4 + 2ull * pages * 8;
}

/// First unit (row for kCuda and kCopy, 16-row group for kMma) of streaming block p of `blocks`.
MS_GATE_FN constexpr u64 part_begin(u64 units, u64 p, u64 blocks) { return p * units / blocks; }

/// kMma's packed layout: the element index of W[row][col] for a matrix of `cols` columns. Group
/// row / 16, tile col / 16 (in column order), lane (row % 8) * 4 + (col % 8) / 2, and within the
/// lane's 8 elements the A fragment's order: a0 (row, col) a1 (row + 8, col) a2 (row, col + 8)
/// a3 (row + 8, col + 8), two consecutive columns each.
MS_GATE_FN constexpr u64 mma_packed_index(u32 cols, u32 row, u32 col) {
  const u32 rr = row % 16, kk = col % 16;
  const u32 lane = (rr % 8) * 4 + (kk % 8) / 2;
  const u32 e = (kk % 2) + 2 * (rr / 8) + 4 * (kk / 8);
  return ((u64(row / 16) * (cols / 16) + col / 16) * 32 + lane) * 8 + e;
}

}  // namespace ms_gate

#if defined(__CUDACC__)

#ifndef MS_GATE_PAGE_BYTES
#define MS_GATE_PAGE_BYTES 16384
#endif
#ifndef MS_GATE_PAGES
#define MS_GATE_PAGES 4
#endif

namespace ms_gate {

constexpr u32 kPageBytes = MS_GATE_PAGE_BYTES;
constexpr u32 kPages = MS_GATE_PAGES;
constexpr u32 kConsumerThreads = kConsumerWarps * 32;
static_assert(kPageBytes % (kTileBytes * kConsumerWarps) == 0, "a page holds whole tile rounds");
static_assert(kPages >= 2 && kPageBytes % 16 == 0, "ring shape");

__device__ __forceinline__ u32 smem_u32(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ bool error_raised(const GateArgs& a) {
  return *reinterpret_cast<volatile u32*>(a.error) != 0;
}

/// The slow part of every bounded wait: false (and kErrTimeout raised) past the bound, false at
/// once when an error is already raised.
__device__ __forceinline__ bool keep_waiting(const GateArgs& a, u32 spins, u64* start) {
  if (spins != 1 && (spins & 1023u) != 0) return true;
  if (error_raised(a)) return false;
  const u64 t = now_ns();
  if (*start == 0) *start = t;
  if (t - *start > a.spin_bound_ns) {
    atomicOr(reinterpret_cast<u32*>(a.error), kErrTimeout);
    return false;
  }
  return true;
}

__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}

/// Waits for the phase of `bar` with `parity` to complete (bounded, see the top of the file).
__device__ __forceinline__ bool mbar_wait(const GateArgs& a, u32 bar, u32 parity) {
  if (mbar_try_wait(bar, parity)) return true;
  u64 start = 0;
  for (u32 spins = 1;; ++spins) {
    if (mbar_try_wait(bar, parity)) return true;
    if (!keep_waiting(a, spins, &start)) return false;
  }
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/// Lane 0 of a consumer warp releases a page once the whole warp has read it.
__device__ __forceinline__ void release_page(u32 empty_bar, u32 lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(empty_bar);
}

__device__ __forceinline__ void consumer_barrier() {
  asm volatile("bar.sync 1, %0;" ::"r"(kConsumerThreads) : "memory");
}

/// The ring's shared memory.
struct Ring {
  char* pages;
  float* part;  // 2 x kChunkRows x kConsumerWarps
  u32 full;     // shared address of full[0]; full[i] = full + 8 i
  u32 empty;
};

__device__ __forceinline__ Ring ring_layout(char* smem) {
  Ring r;
  r.pages = smem;
  r.part = reinterpret_cast<float*>(smem + u64(kPages) * kPageBytes);
  r.full = smem_u32(r.part + 2 * kChunkRows * kConsumerWarps);
  r.empty = r.full + 8 * kPages;
  return r;
}

/// The weight bytes one block streams per copy, and where they start in copy 0.
struct Region {
  u64 begin;  // byte offset in a copy
  u64 bytes;  // bytes per copy
  u32 first;  // first row (kCuda, kCopy) or group (kMma)
  u32 units;  // rows or groups
};

template <u32 Design, u32 K>
__device__ __forceinline__ Region block_region(const GateArgs& a, u32 p, u32 blocks) {
  const u64 unit_bytes = Design == kMma ? u64(kGroupRows) * K * 2 : u64(K) * 2;
  const u64 units = Design == kMma ? a.rows / kGroupRows : a.rows;
  Region r;
  r.first = static_cast<u32>(part_begin(units, p, blocks));
  r.units = static_cast<u32>(part_begin(units, p + 1, blocks)) - r.first;
  r.begin = u64(r.first) * unit_bytes;
  r.bytes = u64(r.units) * unit_bytes;
  return r;
}

/// Lane 0 of the loader warp: one bulk copy per page, every copy of the matrix in turn. With a cap
/// of c < kPages pages in flight, page s is requested only once page s - c has landed (its `full`
/// phase completed), so at most c pages of this SM are outstanding at HBM however many free pages
/// the ring has. Page s - c's slot is not reused before page s - c + kPages > s is requested, so
/// the phase waited for is that page's.
__device__ __forceinline__ void load_pages(const GateArgs& a, const Ring& ring, const Region& reg) {
  u64 policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  const u32 cap = a.inflight_pages > 0 && a.inflight_pages < kPages ? a.inflight_pages : kPages;
  u32 s = 0;
  for (u32 c = 0; c < a.copies; ++c) {
    const u64 src0 = a.w + u64(c) * a.copy_stride + reg.begin;
    for (u64 off = 0; off < reg.bytes; off += kPageBytes, ++s) {
      const u32 slot = s % kPages, round = s / kPages;
      if (round > 0 && !mbar_wait(a, ring.empty + 8 * slot, (round - 1) & 1)) return;
      if (cap < kPages && s >= cap) {
        const u32 landed = s - cap;
        if (!mbar_wait(a, ring.full + 8 * (landed % kPages), (landed / kPages) & 1)) return;
      }
      const u32 bytes =
          static_cast<u32>(reg.bytes - off < kPageBytes ? reg.bytes - off : kPageBytes);
      const u32 full = ring.full + 8 * slot;
      // The page's last reads were generic-proxy loads; the async-proxy copy comes after them.
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(full), "r"(bytes)
                   : "memory");
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
          " [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(ring.pages + u64(slot) * kPageBytes)),
          "l"(src0 + off), "r"(bytes), "r"(full), "l"(policy)
          : "memory");
    }
  }
}

/// kCopy: the consumers release every page unread.
__device__ __forceinline__ void consume_copy(const GateArgs& a, const Ring& ring, const Region& reg,
                                             u32 lane) {
  const u64 pages = (reg.bytes + kPageBytes - 1) / kPageBytes;
  u32 s = 0;
  for (u32 c = 0; c < a.copies; ++c) {
    for (u64 i = 0; i < pages; ++i, ++s) {
      const u32 slot = s % kPages;
      mbar_wait(a, ring.full + 8 * slot, (s / kPages) & 1);
      release_page(ring.empty + 8 * slot, lane);
    }
  }
}

/// Folds N per-lane values (N a power of two <= 32) over the warp: on return the lane holds the
/// warp's total of value *row, and lanes with (lane & (32 / N - 1)) == 0 hold distinct rows. Each
/// halving step trades half of the values with the lane `bit` apart, so N rows cost
/// N - 1 + log2(32 / N) shuffles instead of 5 N.
template <u32 N>
__device__ __forceinline__ float warp_transpose_sum(float (&v)[N], u32 lane, u32* row) {
  u32 r = 0, bit = 16;
#pragma unroll
  for (u32 n = N; n > 1; n /= 2, bit /= 2) {
    const bool upper = (lane & bit) != 0;
#pragma unroll
    for (u32 i = 0; i < n / 2; ++i) {
      const float send = upper ? v[i] : v[i + n / 2];
      const float keep = upper ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, bit);
    }
    r = 2 * r + (upper ? 1u : 0u);
  }
  float t = v[0];
#pragma unroll
  for (; bit >= 1; bit /= 2) t += __shfl_xor_sync(0xffffffffu, t, bit);
  *row = r;
  return t;
}

/// The consumer threads add the kConsumerWarps partials of each of the chunk's `rows` rows, in
/// warp order, into y[first_row ...].
__device__ __forceinline__ void store_chunk(const GateArgs& a, const float* part, u32 rows,
                                            u64 first_row) {
  const u32 t = threadIdx.x;
  if (t >= rows) return;
  const float4* p = reinterpret_cast<const float4*>(part + t * kConsumerWarps);
  float sum = 0.0f;
#pragma unroll
  for (u32 i = 0; i < kConsumerWarps / 4; ++i) {
    const float4 q = p[i];
    sum = (((sum + q.x) + q.y) + q.z) + q.w;
  }
  reinterpret_cast<float*>(a.y)[first_row + t] = sum;
}

/// acc[j % 4] += w[j] * x[j] for the 8 bf16 weights of one 16-byte vector.
__device__ __forceinline__ void fma8(float (&acc)[4], const uint4 w, const float* x) {
  const u32 q[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (u32 i = 0; i < 4; ++i) {
    acc[(2 * i) % 4] = fmaf(__uint_as_float(q[i] << 16), x[2 * i], acc[(2 * i) % 4]);
    acc[(2 * i + 1) % 4] =
        fmaf(__uint_as_float(q[i] & 0xffff0000u), x[2 * i + 1], acc[(2 * i + 1) % 4]);
  }
}

/// kCuda: see the top of the file.
template <u32 K>
__device__ __forceinline__ void consume_cuda(const GateArgs& a, const Ring& ring, const Region& reg,
                                             u32 warp, u32 lane) {
  constexpr u32 kVecs = K / (kConsumerWarps * 256);  // 16-byte vectors per lane per row
  constexpr u32 kRows = kPageBytes / (2 * K);        // rows per page
  static_assert(kVecs >= 1 && kRows >= 1 && kRows <= 32 && kChunkRows % kRows == 0, "shape");
  const u32 vec0 = warp * kVecs * 32 + lane;  // the lane's first vector in a row
  float xr[8 * kVecs];
  const float4* x4 = reinterpret_cast<const float4*>(a.x);
#pragma unroll
  for (u32 v = 0; v < kVecs; ++v) {
    const float4 lo = x4[2 * (vec0 + 32 * v)], hi = x4[2 * (vec0 + 32 * v) + 1];
    xr[8 * v + 0] = lo.x, xr[8 * v + 1] = lo.y, xr[8 * v + 2] = lo.z, xr[8 * v + 3] = lo.w;
    xr[8 * v + 4] = hi.x, xr[8 * v + 5] = hi.y, xr[8 * v + 6] = hi.z, xr[8 * v + 7] = hi.w;
  }
  u32 s = 0, buf = 0;
  for (u32 c = 0; c < a.copies; ++c) {
    for (u32 chunk = 0; chunk < reg.units; chunk += kChunkRows, buf ^= 1) {
      const u32 rows_chunk = min(kChunkRows, reg.units - chunk);
      float* part = ring.part + buf * kChunkRows * kConsumerWarps;
      for (u32 r0 = 0; r0 < rows_chunk; r0 += kRows, ++s) {
        const u32 slot = s % kPages;
        mbar_wait(a, ring.full + 8 * slot, (s / kPages) & 1);
        const uint4* page = reinterpret_cast<const uint4*>(ring.pages + u64(slot) * kPageBytes);
        const u32 rows_here = min(kRows, rows_chunk - r0);
        float acc[kRows][4];
#pragma unroll
        for (u32 r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
        if (rows_here == kRows) {
          // A full page: every load first (kRows x kVecs LDS.128 in flight), then the FMAs, with
          // no branch between rows (ncu on the per-row guarded loop: one LDS in flight per warp,
          // stalls on its scoreboard and on the branches, 0.48 instructions per scheduler cycle).
          uint4 w[kRows][kVecs];
#pragma unroll
          for (u32 r = 0; r < kRows; ++r)
#pragma unroll
            for (u32 v = 0; v < kVecs; ++v) w[r][v] = page[r * (K / 8) + vec0 + 32 * v];
#pragma unroll
          for (u32 r = 0; r < kRows; ++r)
#pragma unroll
            for (u32 v = 0; v < kVecs; ++v) fma8(acc[r], w[r][v], xr + 8 * v);
        } else {
#pragma unroll
          for (u32 r = 0; r < kRows; ++r) {
            if (r < rows_here) {
#pragma unroll
              for (u32 v = 0; v < kVecs; ++v)
                fma8(acc[r], page[r * (K / 8) + vec0 + 32 * v], xr + 8 * v);
            }
          }
        }
        release_page(ring.empty + 8 * slot, lane);
        float sums[kRows];
#pragma unroll
        for (u32 r = 0; r < kRows; ++r) sums[r] = (acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3]);
        u32 row = 0;
        const float total = warp_transpose_sum<kRows>(sums, lane, &row);
        if ((lane & (32 / kRows - 1)) == 0 && row < rows_here)
          part[(r0 + row) * kConsumerWarps + warp] = total;
      }
      consumer_barrier();
      store_chunk(a, part, rows_chunk, u64(reg.first) + chunk);
    }
  }
}

/// Rounds to bf16 (nearest, ties to even; inputs are finite).
__device__ __forceinline__ u32 bf16_bits(float f) {
  const u32 u = __float_as_uint(f);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/// kMma's B fragment register for columns (x[k], x[k + 1]): bf16 hi parts for lanes 0-3 (column
/// 0), lo parts (x - hi) for lanes 4-7 (column 1), zero for the other columns.
__device__ __forceinline__ u32 b_pair(const float* x, u32 k, u32 lane) {
  const u32 g = lane >> 2;
  if (g >= 2) return 0;
  u32 out = 0;
#pragma unroll
  for (u32 j = 0; j < 2; ++j) {
    const float v = x[k + j];
    const u32 hi = bf16_bits(v);
    const u32 bits = g == 0 ? hi : bf16_bits(v - __uint_as_float(hi << 16));
    out |= bits << (16 * j);
  }
  return out;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint4 a, u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

/// kMma: see the top of the file.
template <u32 K>
__device__ __forceinline__ void consume_mma(const GateArgs& a, const Ring& ring, const Region& reg,
                                            u32 warp, u32 lane) {
  constexpr u32 kTiles = K / 16;                              // tiles per group
  constexpr u32 kWarpTiles = kTiles / kConsumerWarps;         // a warp's tiles per group
  constexpr u32 kPageTiles = kPageBytes / kTileBytes;         // tiles per page
  constexpr u32 kTilesPerPage = kPageTiles / kConsumerWarps;  // a warp's tiles per page
  constexpr u32 kGroupPages = kTiles / kPageTiles;
  constexpr u32 kChunkGroups = kChunkRows / kGroupRows;
  static_assert(kTiles % kPageTiles == 0 && kGroupPages >= 1, "a page holds part of one group");
  u32 xb[kWarpTiles][2];
  const float* x = reinterpret_cast<const float*>(a.x);
  const u32 t2 = 2 * (lane & 3);
#pragma unroll
  for (u32 kk = 0; kk < kWarpTiles; ++kk) {
    const u32 k0 = (kk * kConsumerWarps + warp) * 16;
    xb[kk][0] = b_pair(x, k0 + t2, lane);
    xb[kk][1] = b_pair(x, k0 + t2 + 8, lane);
  }
  const uint4* lane_tile = nullptr;  // set per page
  u32 s = 0, buf = 0;
  for (u32 c = 0; c < a.copies; ++c) {
    for (u32 chunk = 0; chunk < reg.units; chunk += kChunkGroups, buf ^= 1) {
      const u32 groups = min(kChunkGroups, reg.units - chunk);
      float* part = ring.part + buf * kChunkRows * kConsumerWarps;
      for (u32 grp = 0; grp < groups; ++grp) {
        float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (u32 pg = 0; pg < kGroupPages; ++pg, ++s) {
          const u32 slot = s % kPages;
          mbar_wait(a, ring.full + 8 * slot, (s / kPages) & 1);
          lane_tile = reinterpret_cast<const uint4*>(ring.pages + u64(slot) * kPageBytes) +
                      warp * 32 + lane;
#pragma unroll
          for (u32 i = 0; i < kTilesPerPage; ++i) {
            const u32 kk = pg * kTilesPerPage + i;
            mma_bf16(acc[i % 2], lane_tile[i * kConsumerWarps * 32], xb[kk][0], xb[kk][1]);
          }
          release_page(ring.empty + 8 * slot, lane);
        }
        if ((lane & 3) == 0) {
          const u32 row = grp * kGroupRows + (lane >> 2);
          part[row * kConsumerWarps + warp] = (acc[0][0] + acc[0][1]) + (acc[1][0] + acc[1][1]);
          part[(row + 8) * kConsumerWarps + warp] =
              (acc[0][2] + acc[0][3]) + (acc[1][2] + acc[1][3]);
        }
      }
      consumer_barrier();
      store_chunk(a, part, groups * kGroupRows, (u64(reg.first) + chunk) * kGroupRows);
    }
  }
}

/// The hop chain on warp 0 of block `me` (0 or 1); see the top of the file.
__device__ __forceinline__ void hop_chain(const GateArgs& a, u32 me, u32 lane) {
  u32* flag = reinterpret_cast<u32*>(a.hop_flag);
  u32* data = reinterpret_cast<u32*>(a.hop_data);
  u64* times = reinterpret_cast<u64*>(a.times);
  for (u32 i = me; i <= a.hop_links; i += 2) {
    if (i > 0) {
      // The whole warp polls (one request per poll), so every lane's own acquire orders its load
      // of the payload after the store it waited for.
      u64 start = 0;
      for (u32 spins = 1;; ++spins) {
        u32 seen;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
        if (__all_sync(0xffffffffu, seen >= i)) break;
        if (__any_sync(0xffffffffu, !keep_waiting(a, spins, &start))) return;
      }
      u32 v;
      asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                   : "=r"(v)
                   : "l"(data + u64(i - 1) * 32 + lane)
                   : "memory");
      if (v != (i - 1) * 32 + lane + 1) atomicOr(reinterpret_cast<u32*>(a.error), kErrHopData);
    }
    if (i == a.hop_links) {
      if (lane == 0 && times) times[1] = now_ns();
      return;
    }
    if (i == 0 && lane == 0 && times) times[0] = now_ns();
    data[u64(i) * 32 + lane] = i * 32 + lane + 1;
    __syncwarp();
    if (lane == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(flag) : "memory");
  }
}

/// Shared memory of a block of the relay chains (static, beside the ring's dynamic pages).
struct RelaySlot {
  u32 ready;        // kHopRelay*: the last link whose wait the peer has seen hold
  u32 stop;         // the waiting block's own loads stop
  u32 payload[32];  // kHopRelayData: the previous link's 128 bytes, stored by the peer
};

__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

__device__ __forceinline__ u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

/// The address of `local` (a shared::cta address) in the shared memory of cluster block `rank`.
__device__ __forceinline__ u32 peer_address(u32 local, u32 rank) {
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local), "r"(rank));
  return r;
}

/// Warps 1.. of a waiting block: loads of their own in flight (two batches of kSelfLoads 16-byte
/// loads a lane, one issued while the other is summed) from `src` on, until `stop` is set.
__device__ __forceinline__ void self_stream(const GateArgs& a, const uint4* src, u64 vecs,
                                            volatile u32* stop, u32 lane) {
  uint4 v[2][kSelfLoads];
  u32 acc = 0;
  u64 at = lane;
  auto issue = [&](uint4(&b)[kSelfLoads]) {
#pragma unroll
    for (u32 j = 0; j < kSelfLoads; ++j) {
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(b[j].x), "=r"(b[j].y), "=r"(b[j].z), "=r"(b[j].w)
                   : "l"(src + at % vecs));
      at += 32;
    }
  };
  auto sum = [&](const uint4(&b)[kSelfLoads]) {
#pragma unroll
    for (u32 j = 0; j < kSelfLoads; ++j) acc += b[j].x ^ b[j].y ^ b[j].z ^ b[j].w;
  };
  issue(v[0]);
  while (*stop == 0) {
    issue(v[1]);
    sum(v[0]);
    issue(v[0]);
    sum(v[1]);
  }
  sum(v[0]);
  if (acc == 0x9e3779b9u) atomicOr(reinterpret_cast<u32*>(a.error), 0u);  // keeps the loads
}

/// Link i's bytes (lane L's word), as every chain writes and checks them.
__device__ __forceinline__ u32 link_word(u32 i, u32 lane) { return i * 32 + lane + 1; }

/// The relay chains on blocks 0-3 (two clusters of two): waiting block W (rank 0; blocks 0 and 2)
/// runs link i when i % 2 == W / 2 (warp 0): it waits for link i - 1, checks its 128 bytes, stores
/// its own and adds 1 to the global flag with red.release.gpu, as hop_chain does. How it learns
/// that link i - 1 is done is the mode: kHopDirect polls the flag (acquire, gpu scope);
/// kHopRelay* poll the block's own RelaySlot::ready (acquire, cluster scope), which its peer (rank
/// 1; warp 0) stores with a cluster-scope release once its own acquire poll of the flag has seen
/// the link; kHopRelayData's peer first stores the link's bytes into the waiting block's slot, so
/// the waiting block reads nothing from global memory before its link. Meanwhile warps 1 to
/// hop_self_warps of each waiting block keep loads of their own in flight (self_stream): the
/// bytes a megakernel block puts in flight before its wait. Each pair syncs as a cluster before and
/// after, so no block exits while its peer may still store into its shared memory.
__device__ __forceinline__ void relay_main(const GateArgs& a, RelaySlot* slot) {
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const u32 rank = cluster_rank(), pair = blockIdx.x / 2;
  if (threadIdx.x == 0) {
    slot->ready = 0;
    slot->stop = 0;
  }
  __syncthreads();
  cluster_sync_all();
  u32* flag = reinterpret_cast<u32*>(a.hop_flag);
  u32* data = reinterpret_cast<u32*>(a.hop_data);
  u64* times = reinterpret_cast<u64*>(a.times);
  const bool relay = a.hop_mode != kHopDirect;
  if (rank == 0 && warp == 0) {
    for (u32 i = pair; i <= a.hop_links; i += 2) {
      if (i > 0) {
        u64 start = 0;
        bool ok = true;
        for (u32 spins = 1; ok; ++spins) {
          u32 seen;
          if (relay) {
            asm volatile("ld.acquire.cluster.shared::cluster.u32 %0, [%1];"
                         : "=r"(seen)
                         : "r"(smem_u32(&slot->ready))
                         : "memory");
          } else {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
          }
          if (__all_sync(0xffffffffu, seen >= i)) break;
          ok = !__any_sync(0xffffffffu, !keep_waiting(a, spins, &start));
        }
        if (!ok) break;
        u32 v;
        if (a.hop_mode == kHopRelayData) {
          v = reinterpret_cast<volatile u32*>(slot->payload)[lane];
        } else {
          asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                       : "=r"(v)
                       : "l"(data + u64(i - 1) * 32 + lane)
                       : "memory");
        }
        if (v != link_word(i - 1, lane)) atomicOr(reinterpret_cast<u32*>(a.error), kErrHopData);
      }
      if (i == a.hop_links) {
        if (lane == 0 && times) times[1] = now_ns();
        break;
      }
      if (i == 0 && lane == 0 && times) times[0] = now_ns();
      data[u64(i) * 32 + lane] = link_word(i, lane);
      __syncwarp();
      if (lane == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(flag) : "memory");
    }
    if (lane == 0) *reinterpret_cast<volatile u32*>(&slot->stop) = 1;
  } else if (rank == 0 && warp >= 1 && warp <= a.hop_self_warps && warp <= kSelfWarpsMax) {
    // Each waiting block's warps read their own part of the last quarter of the weights' copies
    // (the streaming blocks start at the first), so their loads go to HBM.
    const u64 vecs = u64(a.copy_stride) * a.copies / 16;
    const u64 part = vecs / 4 / (2 * kSelfWarpsMax);
    const uint4* src = reinterpret_cast<const uint4*>(a.w) + vecs - vecs / 4 +
                       (pair * kSelfWarpsMax + warp - 1) * part;
    self_stream(a, src, part, &slot->stop, lane);
  } else if (rank == 1 && warp == 0 && relay) {
    const u32 waiter_ready = peer_address(smem_u32(&slot->ready), 0);
    const u32 waiter_payload = peer_address(smem_u32(&slot->payload[lane]), 0);
    for (u32 i = pair == 0 ? 2 : 1; i <= a.hop_links; i += 2) {
      u64 start = 0;
      bool ok = true;
      for (u32 spins = 1; ok; ++spins) {
        u32 seen;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
        if (__all_sync(0xffffffffu, seen >= i)) break;
        ok = !__any_sync(0xffffffffu, !keep_waiting(a, spins, &start));
      }
      if (!ok) break;
      if (a.hop_mode == kHopRelayData) {
        u32 v;
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                     : "=r"(v)
                     : "l"(data + u64(i - 1) * 32 + lane)
                     : "memory");
        asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(waiter_payload), "r"(v) : "memory");
      }
      __syncwarp();
      if (lane == 0)
        asm volatile("st.release.cluster.shared::cluster.u32 [%0], %1;" ::"r"(waiter_ready), "r"(i)
                     : "memory");
    }
  }
  __syncthreads();
  cluster_sync_all();
}

template <u32 Design, u32 K, bool Relay = false>
__device__ __forceinline__ void gate_main(const GateArgs& a) {
  extern __shared__ __align__(128) char smem[];
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (blockIdx.x < a.first_block) {
    if constexpr (Relay) {
      __shared__ RelaySlot slot;
      if (blockIdx.x < 4) relay_main(a, &slot);
    } else {
      if (warp == 0 && blockIdx.x < 2 && a.hop_links > 0) hop_chain(a, blockIdx.x, lane);
    }
    return;
  }
  const Ring ring = ring_layout(smem);
  if (threadIdx.x == 0) {
    for (u32 i = 0; i < kPages; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ring.full + 8 * i) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(ring.empty + 8 * i),
                   "r"(kConsumerWarps)
                   : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const Region reg =
      block_region<Design, K>(a, blockIdx.x - a.first_block, gridDim.x - a.first_block);
  if (warp == kConsumerWarps) {
    if (lane == 0) load_pages(a, ring, reg);
    return;
  }
  if (Design == kCopy) consume_copy(a, ring, reg, lane);
  if (Design == kCuda) consume_cuda<K>(a, ring, reg, warp, lane);
  if (Design == kMma) consume_mma<K>(a, ring, reg, warp, lane);
  if (threadIdx.x == 0 && a.times) reinterpret_cast<u64*>(a.times)[2 + blockIdx.x] = now_ns();
}

}  // namespace ms_gate

extern "C" __global__ void __launch_bounds__(ms_gate::kThreads, 1)
    ms_gate_copy_k2048(const ms_gate::GateArgs a) {
  ms_gate::gate_main<ms_gate::kCopy, 2048>(a);
}
extern "C" __global__ void __launch_bounds__(ms_gate::kThreads, 1)
    ms_gate_copy_k8192(const ms_gate::GateArgs a) {
  ms_gate::gate_main<ms_gate::kCopy, 8192>(a);
}
extern "C" __global__ void __launch_bounds__(ms_gate::kThreads, 1)
    ms_gate_c_k2048(const ms_gate::GateArgs a) {
  ms_gate::gate_main<ms_gate::kCuda, 2048>(a);
}
extern "C" __global__ void __launch_bounds__(ms_gate::kThreads, 1)
    ms_gate_c_k8192(const ms_gate::GateArgs a) {
  ms_gate::gate_main<ms_gate::kCuda, 8192>(a);
}
// The relay chains (relay_main) behind C on gate/up; launched in clusters of two blocks.
extern "C" __global__ void __launch_bounds__(ms_gate::kThreads, 1)
    ms_gate_c_k2048_relay(const ms_gate::GateArgs a) {
  ms_gate::gate_main<ms_gate::kCuda, 2048, true>(a);
}
extern "C" __global__ void __launch_bounds__(ms_gate::kThreads, 1)
    ms_gate_m_k2048(const ms_gate::GateArgs a) {
  ms_gate::gate_main<ms_gate::kMma, 2048>(a);
}
extern "C" __global__ void __launch_bounds__(ms_gate::kThreads, 1)
    ms_gate_m_k8192(const ms_gate::GateArgs a) {
  ms_gate::gate_main<ms_gate::kMma, 8192>(a);
}

#endif  // __CUDACC__
