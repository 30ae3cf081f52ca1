// Tile plans (private to lower(), schedule/lower.h): which rows (or RoPE pairs), columns, heads and
// KV partitions each task of one op covers, which row ranges of the op's inputs it reads, and the
// bytes it moves, computed from the model's dimensions, the tiling knobs and the operand offsets
// alone. The lowering (schedule/lower.cpp) turns a plan into tasks: it names the producer ops of
// each input (so the task's waits), gives the op its counters, the tasks their signals, their
// chains and their queues.
//
// A plan is a list of slices in ascending row order: a slice is a row range of the op's logical
// row space (schedule/lower.cpp) and the tasks that signal it. A read names an input by its index
// in the list of sources the lowering passes with the plan; each plan function says what its
// inputs are.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "abi/abi.h"
#include "schedule/config.h"
#include "schedule/program.h"

namespace megasched::schedule {

/// The producer ops that together cover one logical row space.
using Source = std::vector<uint32_t>;

/// How a GEMV loads its input vector (which rows of the input producer a task reads).
enum class InputLoad : uint8_t {
  kPlain,      // columns [col_begin, col_end) of the input
  kNorm,       // the whole input (RMSNorm statistic), gamma at weight2
  kSiluMul,    // columns of gate and of up (up rows start at `in2_rows`)
  kCombine,    // the flash-decoding combine of `combine_parts` partial records per head at `in`
  kAttention,  // the attention of every head: queries at `in`, the layer's whole KV cache
};

/// The model's dimensions as the lowering uses them (elements, heads), and what else every plan
/// depends on.
struct Dims {
  uint32_t hidden = 0, heads = 0, kv_heads = 0, hd = 0, q_dim = 0, kv_dim = 0, qkv_rows = 0;
  uint32_t ffn = 0, vocab = 0, rows_per_task = 0, group = 0, q_chunk = 0, partitions = 0;
  uint32_t grid = 0;     // blocks of the persistent grid (per-block tiling)
  uint32_t k_split = 1;  // tiling.gemv_k_split
  uint32_t wbytes = 4;   // bytes of a weight or KV element
  int max_seq = 0;       // positions of the KV cache
};

struct GemvSpec {
  std::string name;
  OpKind kind = OpKind::kQkv;
  int layer = 0;
  uint32_t row_begin = 0;  // the op's rows in its logical row space
  uint32_t row_end = 0;
  uint32_t tile_rows = 0;
  uint32_t cols = 0;    // K: columns of the full weight matrix (= ld)
  uint64_t weight = 0;  // element offset of logical row 0, column 0
  uint64_t gamma = 0;   // RMSNorm gamma for InputLoad::kNorm
  InputLoad load = InputLoad::kPlain;
  uint32_t in = 0;
  uint32_t in2 = 0;
  uint32_t in2_rows = 0;       // kSiluMul: logical row of up's column 0 in the input source
  uint32_t combine_parts = 0;  // kCombine: the attention's KV partitions (param2)
  Source in_src;
  uint16_t epilogue = 0;  // 0, kFlagResidual or kFlagRopeKv
  bool pairs = false;     // kFlagRopeKv in tiles of RoPE pairs (tiling.qkv_rope_pairs)
  uint32_t out = 0;       // act offset of logical row 0
  uint32_t aux = 0;       // kFlagResidual: act offset of logical row 0 of the residual
  Source aux_src;
  Granularity granularity = Granularity::kPerOp;
  bool argmax_records = false;  // fusion.argmax_into_lm_head: each tile writes its argmax record
  uint32_t records = 0;         // ... {value, index} at act[records + 2 * tile]
};

/// Rows [row_begin, row_end) of input `input` that a task reads.
struct PlanRead {
  uint32_t input = 0;
  uint32_t row_begin = 0;
  uint32_t row_end = 0;
};

/// One task: its Instr (op, waits, signal and chain are the lowering's), its reads, its estimated
/// bytes moved (for load balancing only).
struct PlanTask {
  ms_abi::Instr instr{};
  double cost = 0;
  std::array<PlanRead, 3> reads{};
  uint32_t read_count = 0;
};

/// The tasks that signal rows [row_begin, row_end) of the op's logical row space.
struct PlanSlice {
  uint32_t row_begin = 0;
  uint32_t row_end = 0;
  std::vector<PlanTask> tasks;
};

using OpPlan = std::vector<PlanSlice>;

inline uint32_t round_up(uint32_t value, uint32_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/// Rows per tile: `configured`, or with 0 (per block) the fewest rows, a multiple of `align`, that
/// cut `rows` into at most one tile per block of the grid.
uint32_t tile_rows(uint32_t configured, uint32_t rows, uint32_t align, uint32_t grid);

/// The tile of a GEMV op, in its units (rows, or RoPE pairs with spec.pairs).
uint32_t gemv_tile(const Dims& d, const GemvSpec& spec);

/// A GEMV without a k-split: one task per tile. Inputs: 0 spec.in_src, 1 spec.aux_src.
OpPlan plan_gemv(const Dims& d, const GemvSpec& spec);
/// The partial tasks of a split-K GEMV, `d.k_split` per tile, writing logical row r of split s at
/// part_base + s * rows + r. Inputs: 0 spec.in_src.
OpPlan plan_gemv_partials(const Dims& d, const GemvSpec& spec, uint32_t part_base);
/// The reduce tasks of a split-K GEMV, one per tile. Inputs: 0 the partial op, 1 spec.aux_src.
OpPlan plan_gemv_reduce(const Dims& d, const GemvSpec& spec, uint32_t part_base);

/// The embedding of the step's token into `out`. No inputs.
OpPlan plan_embed(const Dims& d, uint64_t weight, uint32_t out);
/// An unfused RMSNorm: one task. Inputs: 0 the stream at `in`.
OpPlan plan_norm(const Dims& d, int layer, uint32_t in, uint64_t gamma, uint32_t out);
/// A residual add in tiles of rows_per_task rows. Inputs: 0 the rows at `in`, 1 those at `in2`.
OpPlan plan_add(const Dims& d, int layer, uint32_t in, uint32_t in2, uint32_t out);
/// SiLU(gate) * up in tiles of rows_per_task rows. Inputs: 0 gate/up (gate rows then up rows).
OpPlan plan_silu_mul(const Dims& d, int layer, uint32_t gate_up, uint32_t out);
/// Unfused RoPE + KV append: one task per head of QKV rows. Inputs: 0 the raw QKV rows.
OpPlan plan_rope(const Dims& d, int layer, uint32_t qkv_raw, uint32_t q);
/// Attention: per KV group, per chunk of q_chunk query heads (a slice), one task per KV partition.
/// Inputs: 0 the QKV rows.
OpPlan plan_attention(const Dims& d, int layer, uint32_t q, uint32_t attn_out, uint32_t records);
/// The flash-decoding combine: one task per chunk of query heads. Inputs: 0 the attention op.
OpPlan plan_combine(const Dims& d, int layer, uint32_t attn_out, uint32_t records);
/// The argmax over the logits at `in` (`records`: over the `tiles` argmax records the LM-head
/// tiles write there instead). Inputs: 0 the LM head.
OpPlan plan_argmax(const Dims& d, int layer, uint32_t in, bool records, uint32_t tiles);

}  // namespace megasched::schedule
