// The weight ring's geometry, one formula for the host and the device: the layout of its dynamic
// shared memory (the launch-fit check in schedule/search.cpp and the validator size the launch
// with it; vm/device/ring.cuh carves the same bytes) and the segment width of the whole-row path
// (vm/nvrtc_build.cpp passes it to the kernel as MS_SEG_VECS). Compiled by the host compiler and
// by NVRTC alike, so it includes nothing but the ABI header.
//
// Dynamic shared memory of a ring build, in this order:
//   [x staging: x_floats fp32 | pages x page_bytes | pages `full` mbarriers | pages `empty` ones]
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

}  // namespace ms_abi
