// Tile plans (schedule/tile_plan.h): the tasks of each op kind of the lowering, before counters and
// waits.
#include "schedule/tile_plan.h"

#include <algorithm>

namespace megasched::schedule {
namespace {

using ms_abi::Instr;

void add_read(PlanTask& task, uint32_t input, uint32_t row_begin, uint32_t row_end) {
  task.reads[task.read_count++] = {input, row_begin, row_end};
}

/// A slice of one task.
PlanSlice single(uint32_t row_begin, uint32_t row_end, const PlanTask& task) {
  return {row_begin, row_end, {task}};
}

uint16_t prologue_flag(InputLoad load) {
  switch (load) {
    case InputLoad::kPlain:
      return 0;
    case InputLoad::kNorm:
      return ms_abi::kFlagNormPrologue;
    case InputLoad::kSiluMul:
      return ms_abi::kFlagSiluMulPrologue;
    case InputLoad::kCombine:
      return ms_abi::kFlagCombinePrologue;
    case InputLoad::kAttention:
      return ms_abi::kFlagAttentionPrologue;
  }
  return 0;
}

/// The operands every task of a GEMV op shares.
Instr gemv_base(const GemvSpec& spec) {
  Instr base{};
  base.opcode = ms_abi::kGemv;
  base.layer = static_cast<uint32_t>(spec.layer);
  base.ld = spec.cols;
  base.weight = spec.weight;
  base.weight2 = spec.load == InputLoad::kNorm ? spec.gamma : 0;
  base.in = spec.in;
  base.in2 = spec.load == InputLoad::kSiluMul ? spec.in2 : 0;
  base.param2 = spec.load == InputLoad::kCombine ? spec.combine_parts : 0;
  return base;
}

/// Bytes of input a GEMV task loads. The attention prologue reads every query and, at a mid-cache
/// position, half of every KV head's history (for load balancing only).
double gemv_input_bytes(const Dims& d, const GemvSpec& spec) {
  const uint32_t split_cols = spec.cols / d.k_split;
  return spec.load == InputLoad::kCombine
             ? static_cast<double>(spec.combine_parts) * d.heads * (d.hd + 2) * 4.0
         : spec.load == InputLoad::kAttention
             ? spec.cols * 4.0 + 2.0 * d.kv_dim * d.wbytes * std::max(1, d.max_seq / 2)
             : (spec.load == InputLoad::kNorm ? spec.cols : split_cols) * 4.0 *
                   (spec.load == InputLoad::kSiluMul ? 2 : 1);
}

/// The reads of a GEMV task's input load of columns [col_begin, col_end) (input 0).
void add_input_reads(const Dims& d, const GemvSpec& spec, uint32_t col_begin, uint32_t col_end,
                     PlanTask& task) {
  switch (spec.load) {
    case InputLoad::kPlain:
      add_read(task, 0, col_begin, col_end);
      break;
    case InputLoad::kNorm:
    case InputLoad::kCombine:  // every head's records (the attention's slices are head ranges)
      add_read(task, 0, 0, spec.cols);
      break;
    case InputLoad::kSiluMul:
      add_read(task, 0, col_begin, col_end);
      add_read(task, 0, spec.in2_rows + col_begin, spec.in2_rows + col_end);
      break;
    case InputLoad::kAttention:  // every query row and every KV head's appended key and value
      add_read(task, 0, 0, d.qkv_rows);
      break;
  }
}

/// Tasks of `rows_per_tile` rows over [0, rows): `make(r0, r1)` fills each, one per slice.
template <typename Make>
OpPlan row_tiles(uint32_t rows, uint32_t rows_per_tile, Make make) {
  OpPlan plan;
  for (uint32_t r0 = 0; r0 < rows; r0 += rows_per_tile) {
    const uint32_t r1 = std::min(rows, r0 + rows_per_tile);
    plan.push_back(single(r0, r1, make(r0, r1)));
  }
  return plan;
}

}  // namespace

uint32_t tile_rows(uint32_t configured, uint32_t rows, uint32_t align, uint32_t grid) {
  if (configured > 0) return configured;
  return std::max(align, round_up((rows + grid - 1) / grid, align));
}

uint32_t gemv_tile(const Dims& d, const GemvSpec& spec) {
  // RoPE pairs rows within a head, so a tile with the QKV epilogue holds whole heads, or with
  // spec.pairs a range of RoPE pairs (kFlagRopePairs): then the op's units, tiles and slices are
  // pairs, pair p being QKV rows pair_row(p, 0 / 1) (abi/abi.h) of the op's whole heads.
  if (spec.pairs) {
    const uint32_t pairs = (spec.row_end - spec.row_begin) / d.hd * (d.hd / 2);
    return spec.tile_rows > 0 ? std::max(1u, spec.tile_rows / 2) : tile_rows(0, pairs, 1, d.grid);
  }
  return tile_rows(spec.tile_rows, spec.row_end - spec.row_begin,
                   spec.epilogue == ms_abi::kFlagRopeKv ? d.hd : 8u, d.grid);
}

OpPlan plan_gemv(const Dims& d, const GemvSpec& spec) {
  const uint32_t half = d.hd / 2;
  const uint32_t unit_begin = spec.pairs ? spec.row_begin / d.hd * half : spec.row_begin;
  const uint32_t unit_end = spec.pairs ? spec.row_end / d.hd * half : spec.row_end;
  const uint32_t tile = gemv_tile(d, spec);
  const double weight_bytes_per_row = static_cast<double>(spec.cols / d.k_split) * d.wbytes;
  const double input_bytes = gemv_input_bytes(d, spec);
  const Instr base = gemv_base(spec);
  OpPlan plan;
  for (uint32_t r0 = unit_begin; r0 < unit_end; r0 += tile) {
    const uint32_t r1 = std::min(unit_end, r0 + tile);
    PlanTask task;
    Instr& t = task.instr;
    t = base;
    t.flags = prologue_flag(spec.load) | spec.epilogue | (spec.pairs ? ms_abi::kFlagRopePairs : 0);
    t.row_begin = r0;
    t.row_end = r1;
    t.col_begin = 0;
    t.col_end = spec.cols;
    t.out = spec.out;
    t.aux = spec.epilogue == ms_abi::kFlagResidual ? spec.aux : 0;
    if (spec.argmax_records) {
      t.flags |= ms_abi::kFlagArgmaxPartial;
      t.aux = spec.records + 2 * ((r0 - unit_begin) / tile);
    }
    add_input_reads(d, spec, 0, spec.cols, task);
    if (spec.epilogue == ms_abi::kFlagResidual) add_read(task, 1, r0, r1);
    const uint32_t out_rows = ms_abi::task_rows(t);
    task.cost = out_rows * weight_bytes_per_row + input_bytes + out_rows * 4.0;
    plan.push_back(single(r0, r1, task));
  }
  return plan;
}

OpPlan plan_gemv_partials(const Dims& d, const GemvSpec& spec, uint32_t part_base) {
  const uint32_t tile = gemv_tile(d, spec);
  const uint32_t split_cols = spec.cols / d.k_split;
  const uint32_t rows = spec.row_end - spec.row_begin;
  const double weight_bytes_per_row = static_cast<double>(split_cols) * d.wbytes;
  const double input_bytes = gemv_input_bytes(d, spec);
  const Instr base = gemv_base(spec);
  OpPlan plan;
  for (uint32_t r0 = spec.row_begin; r0 < spec.row_end; r0 += tile) {
    const uint32_t r1 = std::min(spec.row_end, r0 + tile);
    PlanSlice& slice = plan.emplace_back(PlanSlice{r0, r1, {}});
    for (uint32_t s = 0; s < d.k_split; ++s) {
      PlanTask& task = slice.tasks.emplace_back();
      Instr& t = task.instr;
      t = base;
      t.flags = prologue_flag(spec.load) | ms_abi::kFlagPartial;
      t.row_begin = r0;
      t.row_end = r1;
      t.col_begin = s * split_cols;
      t.col_end = (s + 1) * split_cols;
      t.out = part_base + s * rows;
      add_input_reads(d, spec, t.col_begin, t.col_end, task);
      task.cost = (r1 - r0) * weight_bytes_per_row + input_bytes + (r1 - r0) * 4.0;
    }
  }
  return plan;
}

OpPlan plan_gemv_reduce(const Dims& d, const GemvSpec& spec, uint32_t part_base) {
  const uint32_t tile = gemv_tile(d, spec);
  const uint32_t splits = d.k_split;
  const uint32_t rows = spec.row_end - spec.row_begin;
  OpPlan plan;
  for (uint32_t r0 = spec.row_begin; r0 < spec.row_end; r0 += tile) {
    const uint32_t r1 = std::min(spec.row_end, r0 + tile);
    PlanTask task;
    Instr& t = task.instr;
    t.opcode = ms_abi::kGemvReduce;
    t.flags = spec.epilogue;
    t.layer = static_cast<uint32_t>(spec.layer);
    t.row_begin = r0;
    t.row_end = r1;
    t.param0 = splits;
    t.param1 = rows;
    t.in = part_base;
    t.out = spec.out;
    t.aux = spec.epilogue == ms_abi::kFlagResidual ? spec.aux : 0;
    if (spec.argmax_records) {
      t.flags |= ms_abi::kFlagArgmaxPartial;
      t.aux = spec.records + 2 * ((r0 - spec.row_begin) / tile);
    }
    add_read(task, 0, r0, r1);
    if (spec.epilogue == ms_abi::kFlagResidual) add_read(task, 1, r0, r1);
    task.cost = (r1 - r0) * 4.0 * (splits + 2);
    plan.push_back(single(r0, r1, task));
  }
  return plan;
}

OpPlan plan_embed(const Dims& d, uint64_t weight, uint32_t out) {
  PlanTask task;
  Instr& t = task.instr;
  t.opcode = ms_abi::kEmbed;
  t.layer = 0;
  t.row_begin = 0;
  t.row_end = d.hidden;
  t.ld = d.hidden;
  t.weight = weight;
  t.out = out;
  task.cost = d.hidden * (4.0 + d.wbytes);
  return {single(0, d.hidden, task)};
}

OpPlan plan_norm(const Dims& d, int layer, uint32_t in, uint64_t gamma, uint32_t out) {
  PlanTask task;
  Instr& t = task.instr;
  t.opcode = ms_abi::kRmsNorm;
  t.layer = static_cast<uint32_t>(layer);
  t.row_begin = 0;
  t.row_end = d.hidden;
  t.col_begin = 0;
  t.col_end = d.hidden;
  t.weight2 = gamma;
  t.in = in;
  t.out = out;
  add_read(task, 0, 0, d.hidden);
  task.cost = d.hidden * (8.0 + d.wbytes);
  return {single(0, d.hidden, task)};
}

OpPlan plan_add(const Dims& d, int layer, uint32_t in, uint32_t in2, uint32_t out) {
  const uint32_t tile = tile_rows(d.rows_per_task, d.hidden, 8, d.grid);
  return row_tiles(d.hidden, tile, [&](uint32_t r0, uint32_t r1) {
    PlanTask task;
    Instr& t = task.instr;
    t.opcode = ms_abi::kAdd;
    t.layer = static_cast<uint32_t>(layer);
    t.row_begin = r0;
    t.row_end = r1;
    t.in = in;
    t.in2 = in2;
    t.out = out;
    add_read(task, 0, r0, r1);
    add_read(task, 1, r0, r1);
    task.cost = (r1 - r0) * 12.0;
    return task;
  });
}

OpPlan plan_silu_mul(const Dims& d, int layer, uint32_t gate_up, uint32_t out) {
  const uint32_t ffn = d.ffn;
  const uint32_t tile = tile_rows(d.rows_per_task, ffn, 8, d.grid);
  return row_tiles(ffn, tile, [&](uint32_t r0, uint32_t r1) {
    PlanTask task;
    Instr& t = task.instr;
    t.opcode = ms_abi::kSiluMul;
    t.layer = static_cast<uint32_t>(layer);
    t.row_begin = r0;
    t.row_end = r1;
    t.in = gate_up;
    t.in2 = gate_up + ffn;
    t.out = out;
    add_read(task, 0, r0, r1);
    add_read(task, 0, ffn + r0, ffn + r1);
    task.cost = (r1 - r0) * 12.0;
    return task;
  });
}

OpPlan plan_rope(const Dims& d, int layer, uint32_t qkv_raw, uint32_t q) {
  return row_tiles(d.qkv_rows, d.hd, [&](uint32_t r0, uint32_t r1) {
    PlanTask task;
    Instr& t = task.instr;
    t.opcode = ms_abi::kRopeKv;
    t.layer = static_cast<uint32_t>(layer);
    t.row_begin = r0;
    t.row_end = r1;
    t.in = qkv_raw;
    t.out = q;
    add_read(task, 0, r0, r1);
    task.cost = d.hd * (r0 < d.q_dim ? 8.0 : 4.0 + d.wbytes);
    return task;
  });
}

OpPlan plan_attention(const Dims& d, int layer, uint32_t q, uint32_t attn_out, uint32_t records) {
  const uint32_t hd = d.hd, partitions = d.partitions;
  // KV bytes an attention task streams at a mid-cache position (for load balancing only).
  const double kv_task_bytes = 2.0 * hd * d.wbytes * std::max(1, d.max_seq / 2) / partitions;
  OpPlan plan;
  for (uint32_t g = 0; g < d.kv_heads; ++g) {
    for (uint32_t h0 = g * d.group; h0 < (g + 1) * d.group; h0 += d.q_chunk) {
      const uint32_t h1 = h0 + d.q_chunk;
      PlanSlice& slice = plan.emplace_back(PlanSlice{h0 * hd, h1 * hd, {}});
      for (uint32_t part = 0; part < partitions; ++part) {
        PlanTask& task = slice.tasks.emplace_back();
        Instr& t = task.instr;
        t.opcode = ms_abi::kAttnPartial;
        t.layer = static_cast<uint32_t>(layer);
        t.row_begin = h0;
        t.row_end = h1;
        t.param0 = g;
        t.param1 = part;
        t.param2 = partitions;
        t.in = q;
        t.out = partitions == 1 ? attn_out : 0;
        t.aux = partitions > 1 ? records : 0;
        add_read(task, 0, h0 * hd, h1 * hd);
        add_read(task, 0, d.q_dim + g * hd, d.q_dim + (g + 1) * hd);
        add_read(task, 0, d.q_dim + d.kv_dim + g * hd, d.q_dim + d.kv_dim + (g + 1) * hd);
        task.cost = kv_task_bytes + (h1 - h0) * hd * 8.0;
      }
    }
  }
  return plan;
}

OpPlan plan_combine(const Dims& d, int layer, uint32_t attn_out, uint32_t records) {
  const uint32_t hd = d.hd, partitions = d.partitions;
  OpPlan plan;
  for (uint32_t g = 0; g < d.kv_heads; ++g) {
    for (uint32_t h0 = g * d.group; h0 < (g + 1) * d.group; h0 += d.q_chunk) {
      const uint32_t h1 = h0 + d.q_chunk;
      PlanTask task;
      Instr& t = task.instr;
      t.opcode = ms_abi::kAttnCombine;
      t.layer = static_cast<uint32_t>(layer);
      t.row_begin = h0;
      t.row_end = h1;
      t.param0 = g;
      t.param2 = partitions;
      t.out = attn_out;
      t.aux = records;
      add_read(task, 0, h0 * hd, h1 * hd);
      task.cost = (h1 - h0) * (partitions * (hd + 2) + hd) * 4.0;
      plan.push_back(single(h0 * hd, h1 * hd, task));
    }
  }
  return plan;
}

OpPlan plan_argmax(const Dims& d, int layer, uint32_t in, bool records, uint32_t tiles) {
  PlanTask task;
  Instr& t = task.instr;
  t.opcode = ms_abi::kArgmax;
  t.layer = static_cast<uint32_t>(layer);
  t.row_begin = 0;
  t.row_end = 1;
  t.col_begin = 0;
  t.col_end = records ? tiles : d.vocab;
  t.in = in;
  if (records) t.flags = ms_abi::kFlagArgmaxPartial;
  add_read(task, 0, 0, d.vocab);
  task.cost = (records ? 2.0 * tiles : d.vocab) * 4.0;
  return {single(0, 1, task)};
}

}  // namespace megasched::schedule
