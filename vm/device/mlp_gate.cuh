// The MLP gate (bench/mlp_bench.cpp; not included by the megakernel): does a llama-1b MLP block
// run faster when down is folded into gate/up's task than as today's two dependent ops? One
// persistent kernel, kTasks blocks of kThreads, runs `layers` MLP blocks back to back, each with
// its own weights:  x[l + 1] = x[l] + W_down (SiLU(W_gate n) * (W_up n)),  n = RMSNorm(x[l])
// (no gamma). Two designs, one kernel each, sharing every piece of code they can:
//
//  - split (ms_mlp_split; today's megakernel): block b streams the 64 gate rows and the 64 up
//    rows of pair tile b and writes them (fp32), signals; then streams the 16 down rows of tile b:
//    it waits for every gate/up tile, stages h = SiLU(gate) * up (8192 floats, 64 KiB read from
//    L2), multiplies, writes x[l + 1]'s 16 rows with the residual, and signals.
//  - fused (ms_mlp_fused): block b streams the same gate and up rows, keeps its 64 h values in
//    shared memory and multiplies them by its column slice of W_down (all 2048 rows x 64 columns,
//    128 bytes a row, 16 KiB apart): a split-K partial of the whole of x[l + 1], which it adds
//    into x[l + 1] with red.global.add.v4.f32 (with the residual of its own 16 rows), then
//    signals. One dependency a layer instead of two, no h staging, and the down weights follow
//    the gate/up weights in the same task with no wait between them. x[l + 1] must be zero
//    before the layer starts (the bench clears it before each launch); the sum's order differs
//    from run to run (float atomics).
//
// Both designs stream their weights as the megakernel's registers stream does (vm/device/
// stream.cuh): a warp's row groups of kRows rows, kUnroll 16-byte vectors a lane and row per chunk,
// kDepth chunks in registers, the first kDepth issued before the task's dependency wait. A wait
// is one lane polling an acquire load, bounded: past spin_bound_ns it sets kErrTimeout in *error
// and every later wait gives up, so a broken build ends with an error instead of a hang.
//
// The top half (constants, MlpArgs) is plain C++ that the host includes too.
#pragma once

namespace ms_mlp {

using u32 = unsigned;
using u64 = unsigned long long;

constexpr u32 kHidden = 2048;                // llama-1b
constexpr u32 kFfn = 8192;                   // llama-1b
constexpr u32 kTasks = 128;                  // blocks, and tiles of every op
constexpr u32 kPairs = kFfn / kTasks;        // gate (and up) rows of a gate/up tile: 64
constexpr u32 kDownRows = kHidden / kTasks;  // rows of a split down tile: 16
constexpr u32 kWarps = 8;
constexpr u32 kThreads = kWarps * 32;
constexpr float kRmsEps = 1e-5f;

constexpr u32 kErrTimeout = 1;  // a wait passed spin_bound_ns

/// The kernel's one argument (by value). Addresses are device pointers as integers.
struct MlpArgs {
  u64 w_gu;           // layers x (2 kFfn x kHidden) bf16: the gate rows, then the up rows
  u64 w_down;         // layers x (kHidden x kFfn) bf16
  u64 x;              // (layers + 1) x kHidden fp32; x[0] the input
  u64 gu;             // split: layers x 2 kFfn fp32 (gate, then up)
  u64 counters;       // 2 x layers u32, zero at launch: [l] gate/up tiles done, [layers + l] down
  u64 error;          // u32 error bits
  u64 spin_bound_ns;  // a wait longer than this is an error
  u32 layers;
};

}  // namespace ms_mlp

#if defined(__CUDACC__)

namespace ms_mlp {

constexpr u32 kUnroll = 4;      // 16-byte vectors a lane and row per chunk
constexpr u32 kDepth = 2;       // chunks in registers
constexpr u32 kDownBatch = 16;  // fused: 16-byte loads a lane keeps in flight on W_down's slice

struct Bf16x8 {
  u32 w[4];
};

__device__ __forceinline__ Bf16x8 ld_stream(const void* p) {
  Bf16x8 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p));
  return v;
}

__device__ __forceinline__ float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Thread 0 waits until *c reaches `target` (acquire), then the block syncs. False (the launch
/// is aborting) past the bound or when another block raised an error.
__device__ __forceinline__ bool wait_count(const MlpArgs& a, const u32* c, u32 target,
                                           u32* shared_ok) {
  if (threadIdx.x == 0) {
    u32 ok = 1;
    u64 start = 0;
    for (u32 spins = 0;; ++spins) {
      u32 v;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c) : "memory");
      if (v >= target) break;
      if ((spins & 255u) == 0) {
        const u64 t = now_ns();
        if (start == 0) start = t;
        if (*reinterpret_cast<volatile u32*>(a.error) != 0 || t - start > a.spin_bound_ns) {
          atomicOr(reinterpret_cast<u32*>(a.error), kErrTimeout);
          ok = 0;
          break;
        }
      }
      if (spins > 16) __nanosleep(32);
    }
    *shared_ok = ok;
  }
  __syncthreads();
  return *shared_ok != 0;
}

/// Publishes the block's writes (and reductions): barrier, then a release add by thread 0.
__device__ __forceinline__ void signal(u32* c) {
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c) : "memory");
}

/// One warp's share of a task of `rows` rows of `ld` bf16 weights: row group g (kRows rows) is
/// the warp's (g - warp) / kWarps-th; item i is chunk i % chunks of the warp's group i / chunks.
/// `row_of` maps a task-local row to its row in W.
template <u32 kRows>
struct Stream {
  struct Chunk {
    Bf16x8 w[kUnroll][kRows];
  };
  const unsigned short* W;
  u32 ld, rows, chunks, items, warp, lane, pair_rows;  // pair_rows: local rows [0, p) gate, then up

  __device__ u32 row_of(u32 j) const {
    return pair_rows == 0 ? j : (j < pair_rows ? j : kFfn - pair_rows + j);
  }
  __device__ u32 group_row(u32 i) const { return (warp + i / chunks * kWarps) * kRows; }
  __device__ void load(Chunk& c, u32 i) const {
    const u32 r0 = group_row(i), v0 = i % chunks * 32 * kUnroll + lane;
#pragma unroll
    for (u32 j = 0; j < kRows; ++j) {
      const unsigned short* row = W + u64(row_of(min(r0 + j, rows - 1))) * ld;
#pragma unroll
      for (u32 u = 0; u < kUnroll; ++u) c.w[u][j] = ld_stream(row + u64(v0 + 32 * u) * 8);
    }
  }
  __device__ void fma(const Chunk& c, u32 i, const float* x, float* acc) const {
    const u32 v0 = i % chunks * 32 * kUnroll + lane;
#pragma unroll
    for (u32 u = 0; u < kUnroll; ++u) {
      const float4* xv = reinterpret_cast<const float4*>(x + (v0 + 32 * u) * 8);
      const float4 x0 = xv[0], x1 = xv[1];
      const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (u32 j = 0; j < kRows; ++j) {
#pragma unroll
        for (u32 q = 0; q < 4; ++q) {
          acc[j] += bf16_lo(c.w[u][j].w[q]) * xs[2 * q];
          acc[j] += bf16_hi(c.w[u][j].w[q]) * xs[2 * q + 1];
        }
      }
    }
  }
};

template <u32 kRows>
__device__ __forceinline__ Stream<kRows> make_stream(const unsigned short* W, u32 ld, u32 rows,
                                                     u32 pair_rows) {
  Stream<kRows> s;
  s.W = W;
  s.ld = ld;
  s.rows = rows;
  s.pair_rows = pair_rows;
  s.warp = threadIdx.x >> 5;
  s.lane = threadIdx.x & 31;
  s.chunks = ld / 8 / (32 * kUnroll);
  const u32 groups = (rows + kRows - 1) / kRows;
  s.items = s.warp < groups ? (groups - s.warp + kWarps - 1) / kWarps * s.chunks : 0;
  return s;
}

/// Streams the warp's items after the first kDepth (in c, loaded before the wait); group sums
/// times `scale` go to out[local row].
template <u32 kRows>
__device__ __forceinline__ void stream_run(const Stream<kRows>& s,
                                           typename Stream<kRows>::Chunk (&c)[kDepth],
                                           const float* x, float scale, float* out) {
  float acc[kRows];
#pragma unroll
  for (u32 j = 0; j < kRows; ++j) acc[j] = 0.0f;
  for (u32 i = 0; i < s.items; i += kDepth) {
#pragma unroll
    for (u32 d = 0; d < kDepth; ++d) {
      const u32 it = i + d;
      if (it >= s.items) break;
      s.fma(c[d], it, x, acc);
      if (it + kDepth < s.items) s.load(c[d], it + kDepth);
      if (it % s.chunks == s.chunks - 1) {
        const u32 r0 = s.group_row(it);
#pragma unroll
        for (u32 j = 0; j < kRows; ++j) {
          const float y = warp_sum(acc[j]);
          if (s.lane == 0 && r0 + j < s.rows) out[r0 + j] = y * scale;
          acc[j] = 0.0f;
        }
      }
    }
  }
}

template <u32 kRows>
__device__ __forceinline__ void stream_preload(const Stream<kRows>& s,
                                               typename Stream<kRows>::Chunk (&c)[kDepth]) {
#pragma unroll
  for (u32 d = 0; d < kDepth; ++d)
    if (d < s.items) s.load(c[d], d);
}

struct Smem {
  float x[kFfn];           // the staged input: n (kHidden floats) or h (kFfn floats, split's down)
  float rows[2 * kPairs];  // a gate/up tile's results; then (fused) h in [0, kPairs)
  float part[kHidden];     // fused: the block's partial of x[l + 1]
  float red[kWarps];
  u32 ok;
};

/// x (kHidden floats) normalised into s.x; returns nothing, ends synced. The norm's scale is
/// applied to the staged input (the megakernel applies it to the dot products: the same sums).
__device__ __forceinline__ void stage_norm(const float* x, Smem& s) {
  float ss = 0.0f;
  for (u32 i = threadIdx.x * 4; i < kHidden; i += kThreads * 4) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(x + i));
    *reinterpret_cast<float4*>(s.x + i) = v;
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) s.red[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (u32 w = 0; w < kWarps; ++w) total += s.red[w];
  const float inv = rsqrtf(total / float(kHidden) + kRmsEps);
  for (u32 i = threadIdx.x; i < kHidden; i += kThreads) s.x[i] *= inv;
  __syncthreads();
}

__device__ __forceinline__ float silu(float v) { return __fdividef(v, 1.0f + __expf(-v)); }

/// The gate/up half of layer l's tile b, shared by both designs: preloads, waits for x[l]
/// (`wait` the counter and target; none at layer 0), stages the norm, streams. Results in s.rows
/// (gate rows then up rows), synced. False when the wait gave up.
__device__ __forceinline__ bool gate_up_tile(const MlpArgs& a, u32 l, const u32* wait, u32 target,
                                             Smem& s) {
  const u32 b = blockIdx.x;
  const unsigned short* W = reinterpret_cast<const unsigned short*>(a.w_gu) +
                            u64(l) * 2 * kFfn * kHidden + u64(b) * kPairs * kHidden;
  const Stream<4> st = make_stream<4>(W, kHidden, 2 * kPairs, kPairs);
  Stream<4>::Chunk c[kDepth];
  stream_preload(st, c);
  if (wait != nullptr && !wait_count(a, wait, target, &s.ok)) return false;
  stage_norm(reinterpret_cast<const float*>(a.x) + u64(l) * kHidden, s);
  stream_run(st, c, s.x, 1.0f, s.rows);
  __syncthreads();
  return true;
}

}  // namespace ms_mlp

/// Today's shape: gate/up tile b, signal; down tile b after every gate/up tile, signal.
extern "C" __global__ void __launch_bounds__(ms_mlp::kThreads, 1)
    ms_mlp_split(const ms_mlp::MlpArgs a) {
  using namespace ms_mlp;
  __shared__ __align__(16) Smem s;
  u32* cnt = reinterpret_cast<u32*>(a.counters);
  const u32 b = blockIdx.x;
  for (u32 l = 0; l < a.layers; ++l) {
    if (!gate_up_tile(a, l, l > 0 ? cnt + a.layers + l - 1 : nullptr, kTasks, s)) return;
    float* gu = reinterpret_cast<float*>(a.gu) + u64(l) * 2 * kFfn;
    for (u32 j = threadIdx.x; j < 2 * kPairs; j += kThreads)
      gu[(j < kPairs ? 0 : kFfn - kPairs) + b * kPairs + j] = s.rows[j];
    signal(cnt + l);
    // Down tile b: rows [16 b, 16 b + 16) of W_down, two rows a warp.
    const unsigned short* Wd = reinterpret_cast<const unsigned short*>(a.w_down) +
                               u64(l) * kHidden * kFfn + u64(b) * kDownRows * kFfn;
    const Stream<2> sd = make_stream<2>(Wd, kFfn, kDownRows, 0);
    Stream<2>::Chunk c[kDepth];
    stream_preload(sd, c);
    if (!wait_count(a, cnt + l, kTasks, &s.ok)) return;
    for (u32 i = threadIdx.x * 4; i < kFfn; i += kThreads * 4) {
      const float4 g = __ldcg(reinterpret_cast<const float4*>(gu + i));
      const float4 u = __ldcg(reinterpret_cast<const float4*>(gu + kFfn + i));
      *reinterpret_cast<float4*>(s.x + i) =
          make_float4(silu(g.x) * u.x, silu(g.y) * u.y, silu(g.z) * u.z, silu(g.w) * u.w);
    }
    __syncthreads();
    stream_run(sd, c, s.x, 1.0f, s.rows);
    __syncthreads();
    const float* x = reinterpret_cast<const float*>(a.x) + u64(l) * kHidden;
    float* y = reinterpret_cast<float*>(a.x) + u64(l + 1) * kHidden;
    if (threadIdx.x < kDownRows) {
      const u32 r = b * kDownRows + threadIdx.x;
      y[r] = __ldcg(x + r) + s.rows[threadIdx.x];
    }
    signal(cnt + a.layers + l);
  }
}

namespace ms_mlp {

/// Down folded into gate/up: tile b's h times W_down's column slice b, added into x[l + 1], with
/// kBatch 16-byte loads a lane in flight on the slice.
template <u32 kBatch>
__device__ __forceinline__ void fused_main(const MlpArgs& a, Smem& s) {
  u32* cnt = reinterpret_cast<u32*>(a.counters);
  const u32 b = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // The down slice: lane L reads the 16-byte vector L % 8 of rows r + L / 8, four rows a load;
  // warp w takes rows [w kHidden / kWarps, (w + 1) kHidden / kWarps).
  constexpr u32 kRowsPerWarp = kHidden / kWarps;  // 256
  constexpr u32 kLoads = kRowsPerWarp / 4;        // 64 loads a lane
  static_assert(kLoads % kBatch == 0, "whole batches");
  const u32 vec = lane & 7u, sub = lane >> 3;
  for (u32 l = 0; l < a.layers; ++l) {
    if (!gate_up_tile(a, l, l > 0 ? cnt + l - 1 : nullptr, kTasks, s)) return;
    const unsigned short* Wd = reinterpret_cast<const unsigned short*>(a.w_down) +
                               u64(l) * kHidden * kFfn + u64(b) * kPairs + vec * 8;
    const u32 row0 = warp * kRowsPerWarp + sub;
    Bf16x8 w[kBatch];
#pragma unroll
    for (u32 k = 0; k < kBatch; ++k) w[k] = ld_stream(Wd + u64(row0 + 4 * k) * kFfn);
    // h = SiLU(gate) * up, in place over the gate rows.
    if (threadIdx.x < kPairs)
      s.rows[threadIdx.x] = silu(s.rows[threadIdx.x]) * s.rows[kPairs + threadIdx.x];
    __syncthreads();
    float h[8];
#pragma unroll
    for (u32 e = 0; e < 8; ++e) h[e] = s.rows[vec * 8 + e];
    for (u32 k0 = 0; k0 < kLoads; k0 += kBatch) {
#pragma unroll
      for (u32 k = 0; k < kBatch; ++k) {
        float p = 0.0f;
#pragma unroll
        for (u32 q = 0; q < 4; ++q) {
          p += bf16_lo(w[k].w[q]) * h[2 * q];
          p += bf16_hi(w[k].w[q]) * h[2 * q + 1];
        }
        const u32 next = k0 + k + kBatch;
        if (next < kLoads) w[k] = ld_stream(Wd + u64(row0 + 4 * next) * kFfn);
        p += __shfl_xor_sync(0xffffffffu, p, 1);
        p += __shfl_xor_sync(0xffffffffu, p, 2);
        p += __shfl_xor_sync(0xffffffffu, p, 4);
        if (vec == 0) s.part[row0 + 4 * (k0 + k)] = p;
      }
    }
    __syncthreads();
    // The block's partial of x[l + 1], with the residual of its own rows, in 16-byte reductions.
    const float* x = reinterpret_cast<const float*>(a.x) + u64(l) * kHidden;
    float* y = reinterpret_cast<float*>(a.x) + u64(l + 1) * kHidden;
    for (u32 i = threadIdx.x * 4; i < kHidden; i += kThreads * 4) {
      float4 v = *reinterpret_cast<const float4*>(s.part + i);
      if (i / kDownRows == b) {
        const float4 r = __ldcg(reinterpret_cast<const float4*>(x + i));
        v = make_float4(v.x + r.x, v.y + r.y, v.z + r.z, v.w + r.w);
      }
      asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(y + i),
                   "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                   : "memory");
    }
    signal(cnt + l);
  }
}

}  // namespace ms_mlp

extern "C" __global__ void __launch_bounds__(ms_mlp::kThreads, 1)
    ms_mlp_fused(const ms_mlp::MlpArgs a) {
  __shared__ __align__(16) ms_mlp::Smem s;
  ms_mlp::fused_main<ms_mlp::kDownBatch>(a, s);
}

/// The same with 8 loads a lane in flight on the down slice (32 KiB an SM; 32 loads spill).
extern "C" __global__ void __launch_bounds__(ms_mlp::kThreads, 1)
    ms_mlp_fused_b8(const ms_mlp::MlpArgs a) {
  __shared__ __align__(16) ms_mlp::Smem s;
  ms_mlp::fused_main<8>(a, s);
}

#endif  // __CUDACC__
