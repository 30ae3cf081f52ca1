// The weight ring's geometry, one formula for the host and the device: the layout of its dynamic
// shared memory (the launch-fit check in schedule/search.cpp and the validator size the launch
// with it; vm/device/ring.cuh carves the same bytes) and the segment width of the whole-row path
// (vm/nvrtc_build.cpp passes it to the kernel as MS_SEG_VECS). Compiled by the host compiler and
// by NVRTC alike, so it includes nothing but the ABI header.
//
// Dynamic shared memory of a ring build, in this order:
//   [x staging: x_floats fp32 | pages x page_bytes | pages `full` mbarriers | pages `empty` ones]
//
// Row pieces: any other ring tile stages its input columns in blocks of x_block floats
// (ring_x_slot) and fills each page with up to one row piece per compute warp (ring_pieces).
// The validator checks every ring task of a program against these formulas (schedule/build_fit.h):
// the staging must fit its x_floats and a page must hold a row piece, or the loader never ends.
//
// Segments: a GEMV tile that spans whole rows of its weight matrix (col_begin = 0, col_end = ld)
// is one contiguous run of weights, so the loader fills each ring page with one bulk copy. The
// compute warps read a page as segments of seg_elems consecutive weights (one segment lies inside
// one row): lane L of a warp takes the 16-byte vectors L, L + 32, ... of a segment.
#pragma once

#include "abi/abi.h"

namespace ms_abi {

/// Byte offset of the ring pages in the dynamic shared memory (after the staged input).
MS_ABI_FN constexpr uint64_t ring_pages_offset(uint64_t x_floats) { return x_floats * 4; }

/// Byte offset of the `full` mbarriers (one per page; the `empty` ones follow them).
MS_ABI_FN constexpr uint64_t ring_full_offset(uint64_t x_floats, uint64_t pages,
                                              uint64_t page_bytes) {
  return ring_pages_offset(x_floats) + pages * page_bytes;
}

/// Bytes of dynamic shared memory a ring build needs.
MS_ABI_FN constexpr uint64_t ring_smem_bytes(uint64_t x_floats, uint64_t pages,
                                             uint64_t page_bytes) {
  return ring_full_offset(x_floats, pages, page_bytes) + pages * 16;
}

/// Weights per segment: 32 lanes x seg_vecs 16-byte vectors.
MS_ABI_FN constexpr uint32_t ring_seg_elems(uint32_t seg_vecs, uint32_t weight_bytes) {
  return 32u * (16u / weight_bytes) * seg_vecs;
}

/// The segment width (16-byte vectors per lane) of a model: the largest of 8, 4, 2, 1 whose
/// segment divides the row length of every GEMV (hidden for QKV, gate/up and the LM head, q_dim
/// for O, ffn for down). 0: the model's rows are too short or odd, and every ring GEMV takes the
/// row-piece path.
MS_ABI_FN constexpr uint32_t ring_seg_vecs(const ModelParams& m) {
  const uint32_t wbytes = m.weight_dtype == kDTypeBF16 ? 2u : 4u;
  const uint32_t q_dim = m.heads * m.head_dim;
  if (m.hidden == 0 || q_dim == 0 || m.ffn == 0) return 0;
  for (uint32_t v = 8; v >= 1; v /= 2) {
    const uint32_t seg = ring_seg_elems(v, wbytes);
    if (m.hidden % seg == 0 && q_dim % seg == 0 && m.ffn % seg == 0) return v;
  }
  return 0;
}

/// Whether a GEMV tile of `in` takes the whole-row segment path: the tile spans whole rows (one
/// contiguous run), its rows are whole segments, and a page holds whole segments.
MS_ABI_FN constexpr bool ring_seg_tile(const Instr& in, uint32_t seg_vecs, uint32_t weight_bytes,
                                       uint32_t page_bytes) {
  if (seg_vecs == 0 || in.col_begin != 0 || in.col_end != in.ld || in.ld == 0) return false;
  const uint32_t seg = ring_seg_elems(seg_vecs, weight_bytes);
  return in.ld % seg == 0 && page_bytes % (seg * weight_bytes) == 0;
}

/// GEMV rows per epilogue pass (vm/device/ops.cuh kEpilogueRows): the most whole heads in 1024.
MS_ABI_FN constexpr uint32_t ring_epilogue_rows(uint32_t head_dim) {
  return head_dim == 0 ? 0u : (1024u / head_dim) * head_dim;
}

/// Whether a kGemv task of a ring build (static queues) streams its weights through the ring
/// (vm/device/ring.cuh ring_streams): its columns fit the x_floats staging floats and its row
/// pieces are 16-byte aligned runs of whole 16-byte units, and its rows are one run (not RoPE
/// pairs, kFlagRopePairs). Any other GEMV loads into registers.
MS_ABI_FN constexpr bool ring_streams(const Instr& in, uint32_t x_floats, uint32_t weight_bytes) {
  if (in.opcode != kGemv || (in.flags & kFlagRopePairs) != 0) return false;
  const uint64_t cols = in.col_end - in.col_begin;
  return cols > 0 && cols <= x_floats && ((in.weight + in.col_begin) * weight_bytes) % 16 == 0 &&
         (uint64_t(in.ld) * weight_bytes) % 16 == 0 && (cols * weight_bytes) % 16 == 0;
}

/// Whether a ring task takes the whole-row segment path (vm/device/ring.cuh seg_streams):
/// ring_seg_tile, and the column blocks' partial sums of one row chunk fit the epilogue rows (with
/// RoPE, a chunk of whole heads).
MS_ABI_FN constexpr bool ring_seg_streams(const Instr& in, uint32_t seg_vecs, uint32_t weight_bytes,
                                          uint32_t page_bytes, uint32_t head_dim) {
  if (!ring_seg_tile(in, seg_vecs, weight_bytes, page_bytes)) return false;
  const uint32_t blocks = in.ld / ring_seg_elems(seg_vecs, weight_bytes);
  const uint32_t rows = ring_epilogue_rows(head_dim);
  if (blocks > rows) return false;
  return (in.flags & kFlagRopeKv) == 0 || rows / blocks >= head_dim;
}

/// Why the streamed GEMV of a registers build (vm/device/stream.cuh stream_fits) would not take a
/// task; kStreamFits when it takes it. The validator's rule "launch" names the reason for a task of
/// RoPE pairs or with the combine or attention prologue, which no other path runs
/// (schedule/build_fit.cpp).
enum StreamMisfit : uint32_t {
  kStreamFits = 0,
  kStreamNotWholeRows,  // not a kGemv over columns [0, ld)
  kStreamRows,          // no rows, or more than the epilogue rows (task_rows)
  kStreamAlignment,     // weights not in whole vec_elems vectors, an input not in float4s, or
                        // (combine prologue) partition blocks not in whole 16-byte pieces
  kStreamSmem,          // the staged input does not fit the dynamic shared memory (combine
                        // prologue: with its weights and one partition's records)
  kStreamCombine,       // combine prologue: ld not heads x head_dim (an odd or zero head_dim),
                        // or a partition count (param2) outside [1, kStreamCombineParts]
  kStreamAttention,     // attention prologue: ld not heads x head_dim (a zero head_dim)
};

/// The most attention partitions the streamed GEMV's combine prologue merges: one lane of a warp
/// per partition (vm/device/stream.cuh stream_stage_combine).
constexpr uint32_t kStreamCombineParts = 32;

/// The combine prologue's layout of the dynamic shared memory, in floats: the ld input floats,
/// then per head its P weights exp(m_p - M) and their sum L, then (from the returned offset, a
/// whole number of 16-byte pieces) the rounds of copied partition records.
MS_ABI_FN uint64_t stream_combine_stage(uint32_t ld, uint32_t heads, uint32_t parts) {
  return (uint64_t(ld) + uint64_t(heads) * (uint64_t(parts) + 1) + 3) / 4 * 4;
}

/// Whole partitions (heads x (head_dim + 2) floats each: their records of every head) one round
/// of the combine prologue copies into the shared memory after stream_combine_stage; 0 when not
/// even one fits.
MS_ABI_FN uint32_t stream_combine_round(uint32_t ld, uint32_t heads, uint32_t head_dim,
                                        uint32_t parts, uint64_t smem_bytes) {
  const uint64_t stage = stream_combine_stage(ld, heads, parts) * 4;
  const uint64_t part_bytes = uint64_t(heads) * (head_dim + 2) * 4;
  if (part_bytes == 0 || smem_bytes <= stage) return 0;
  const uint64_t n = (smem_bytes - stage) / part_bytes;
  return n < parts ? uint32_t(n) : parts;
}

/// The least dynamic shared memory the combine prologue runs in (stream_combine_round >= 1): the
/// staging of stream_combine_stage and one partition's records.
MS_ABI_FN uint64_t stream_combine_min_bytes(uint32_t ld, uint32_t heads, uint32_t head_dim,
                                            uint32_t parts) {
  return (stream_combine_stage(ld, heads, parts) + uint64_t(heads) * (head_dim + 2)) * 4;
}

/// Dynamic shared memory the streamed GEMV stages a task's input in (not the combine prologue's):
/// the ld input floats; with kFlagTagIn (abi.h, Tagged words) after them the tagged words of the
/// input (both inputs of SiLU x up), copied in by cp.async so that no register holds them.
MS_ABI_FN uint64_t stream_stage_bytes(const Instr& in) {
  const uint64_t words = (in.flags & kFlagTagIn) == 0             ? 0
                         : (in.flags & kFlagSiluMulPrologue) != 0 ? 2 * uint64_t(in.ld)
                                                                  : uint64_t(in.ld);
  return uint64_t(in.ld) * 4 + words * 8;
}

/// Whether the streamed GEMV stages task `in`'s SiLU x up input by copies (vm/device/stream.cuh
/// stream_stage_silu_copied): a plain (untagged) kFlagSiluMulPrologue task whose two inputs, 2 x ld
/// floats, fit the dynamic shared memory, so that every piece of both is in flight at once, in no
/// register, instead of a register batch a round trip.
MS_ABI_FN bool stream_silu_copies(const Instr& in, uint64_t smem_bytes) {
  return (in.flags & kFlagSiluMulPrologue) != 0 && (in.flags & kFlagTagIn) == 0 &&
         uint64_t(in.ld) * 8 <= smem_bytes;
}

/// The streamed GEMV's rule for task `in`, with the build's elements per weight vector, rows per
/// epilogue pass (ring_epilogue_rows), dynamic shared memory bytes, and the model's head_dim and
/// query heads (the combine prologue's record layout).
MS_ABI_FN uint32_t stream_misfit(const Instr& in, uint32_t vec_elems, uint32_t epilogue_rows,
                                 uint64_t smem_bytes, uint32_t head_dim, uint32_t heads) {
  if (in.opcode != kGemv || in.col_begin != 0 || in.col_end != in.ld) return kStreamNotWholeRows;
  if (in.row_end <= in.row_begin || task_rows(in) > epilogue_rows) return kStreamRows;
  const bool combine = (in.flags & kFlagCombinePrologue) != 0;
  if (combine && (head_dim == 0 || head_dim % 2 != 0 || uint64_t(heads) * head_dim != in.ld ||
                  in.param2 == 0 || in.param2 > kStreamCombineParts))
    return kStreamCombine;
  if ((in.flags & kFlagAttentionPrologue) != 0 &&
      (head_dim == 0 || uint64_t(heads) * head_dim != in.ld))
    return kStreamAttention;
  if (vec_elems == 0 || in.ld % vec_elems != 0 || in.weight % vec_elems != 0 || in.ld % 4 != 0 ||
      in.in % 4 != 0 || ((in.flags & kFlagSiluMulPrologue) != 0 && in.in2 % 4 != 0) ||
      (combine && uint64_t(heads) * (head_dim + 2) % 4 != 0))
    return kStreamAlignment;
  if (combine)
    return stream_combine_round(in.ld, heads, head_dim, in.param2, smem_bytes) > 0
               ? uint32_t(kStreamFits)
               : uint32_t(kStreamSmem);
  return stream_stage_bytes(in) <= smem_bytes ? uint32_t(kStreamFits) : uint32_t(kStreamSmem);
}

/// Floats of one input staging block of the row-piece path (vm/device/ops.cuh kXBlock): one
/// warp-wide vector step, 32 lanes x vector_bytes / weight_bytes.
MS_ABI_FN constexpr uint32_t ring_x_block(uint32_t vector_bytes, uint32_t weight_bytes) {
  return 32u * (vector_bytes / weight_bytes);
}

/// Where input column `rel` of a row-piece tile is staged (vm/device/ops.cuh x_slot): columns in
/// blocks of 32 x vec_elems; inside a block, element e of lane L's vector sits at e * 32 + L.
MS_ABI_FN constexpr uint32_t ring_x_slot(uint32_t rel, uint32_t vec_elems) {
  const uint32_t block = 32u * vec_elems;
  return (rel / block) * block + (rel % vec_elems) * 32u + (rel % block) / vec_elems;
}

/// Floats [0, n) that staging `cols` columns in ring_x_slot order writes: the largest slot + 1.
/// A whole block is a permutation of itself; a partial last block of r columns reaches element
/// min(r, vec_elems) - 1 of lane max(r / vec_elems, 1) - 1, i.e. past `cols` whenever
/// vec_elems > 1 and r > 1. So a staging area that is not a whole number of blocks overflows
/// (into ring page 0) for a tile whose columns fill it.
MS_ABI_FN constexpr uint64_t ring_x_extent(uint32_t cols, uint32_t vec_elems) {
  const uint32_t block = 32u * vec_elems;
  if (block == 0) return 0;
  const uint32_t r = cols % block;
  const uint64_t whole = uint64_t(cols - r);
  if (r == 0) return whole;
  const uint32_t lanes = r / vec_elems > 1u ? r / vec_elems : 1u;
  return whole + 32u * ((r < vec_elems ? r : vec_elems) - 1u) + lanes;
}

/// The page geometry of a row-piece tile of `cols` columns (vm/device/ring.cuh ring_geom): row
/// pieces of pc columns (whole x blocks unless one piece is the whole row), pr pieces per page,
/// chunks pieces per row. pr == 0 (a page smaller than one piece) makes the loader's row step
/// zero: it never ends.
struct RingPieces {
  uint32_t pc, pr, chunks;
};
MS_ABI_FN constexpr RingPieces ring_pieces(uint32_t cols, uint32_t page_elems,
                                           uint32_t compute_warps, uint32_t x_block) {
  uint32_t per_warp =
      compute_warps == 0 || x_block == 0 ? 0u : page_elems / compute_warps / x_block * x_block;
  if (per_warp < x_block) per_warp = x_block;
  RingPieces g{0, 0, 0};
  g.pc = cols < per_warp ? cols : per_warp;
  if (g.pc == 0) return g;
  g.pr = page_elems / g.pc < compute_warps ? page_elems / g.pc : compute_warps;
  g.chunks = (cols + g.pc - 1) / g.pc;
  return g;
}

}  // namespace ms_abi
