// lower(): ModelShape x GpuTarget x ScheduleConfig -> Program (see schedule/lower.h for the steps).
//
// Dependencies are computed in each op's *logical row space*: the QKV ops (and the unfused RoPE op)
// share the rows of the concatenated [Wq; Wk; Wv] matrix, attention and combine use the element
// rows of attn_out (head h covers [h * head_dim, (h + 1) * head_dim)), gate/up (and SiLU) use
// [0, 2 * ffn) with gate rows first, and everything on the residual stream uses [0, hidden).
// A producer op is cut into slices (row ranges, each signalled by a known number of tasks); a
// consumer names the producer ops and the rows it reads, and gets one wait per intersecting slice
// (per_slice) or one all-join wait on the op's counter (per_op).
//
// The internal edges of a split op (split-K partials to their reduce, attention partitions to their
// combine) are always per slice: a reduce reads only its own tile's partials, so no knob is needed.
// The LM head signals one counter for the whole op (its only reader, argmax, reads every row).
#include "schedule/lower.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

#include "schedule/build_fit.h"
#include "schedule/footprint.h"
#include "schedule/search.h"

namespace megasched::schedule {
namespace {

using ms_abi::Instr;

void coarsen_slice_counters(Program& p);  // defined after the Lowerer
void tag_joins(Program& p);               // defined after the Lowerer

/// Sorts waits by counter and keeps one per counter, with the largest threshold.
void merge_waits(std::vector<ms_abi::Wait>& waits) {
  std::sort(waits.begin(), waits.end(), [](const ms_abi::Wait& a, const ms_abi::Wait& b) {
    return a.counter != b.counter ? a.counter < b.counter : a.threshold > b.threshold;
  });
  waits.erase(std::unique(waits.begin(), waits.end(),
                          [](const ms_abi::Wait& a, const ms_abi::Wait& b) {
                            return a.counter == b.counter;
                          }),
              waits.end());
}

constexpr uint64_t kArenaAlign = 16;  // activation regions start at multiples of 16 floats (64 B)

uint32_t round_up(uint32_t value, uint32_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/// A row range of a producer op, signalled by `tasks` tasks on `counter`.
struct Slice {
  uint32_t row_begin = 0;
  uint32_t row_end = 0;
  uint32_t tasks = 0;
  uint32_t counter = 0;
};

/// The counters of one emitted op.
struct OpCounters {
  Granularity granularity = Granularity::kPerOp;
  std::vector<Slice> slices;  // ascending, disjoint
  uint32_t op_counter = 0;    // per_op: the one counter
  uint32_t tasks = 0;         // per_op: its threshold
  bool signals = true;        // false only for the argmax, which nothing waits on
  uint32_t pair_half = 0;     // > 0: slices are RoPE pairs of heads of 2 * pair_half rows
};

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

/// The residual stream as a reader sees it: where it lives and which ops produced it.
struct Stream {
  uint32_t at = 0;  // act offset
  Source src;
};

/// The model's dimensions as the lowering uses them (elements, heads).
struct Dims {
  uint32_t hidden = 0, heads = 0, kv_heads = 0, hd = 0, q_dim = 0, kv_dim = 0, qkv_rows = 0;
  uint32_t ffn = 0, vocab = 0, rows_per_task = 0, group = 0, q_chunk = 0, partitions = 0;
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

class Lowerer {
 public:
  Lowerer(const ModelShape& shape, const GpuTarget& target, const ScheduleConfig& config)
      : shape_(shape), target_(target), config_(config) {}

  std::optional<Program> run(std::string* error);

 private:
  bool check(std::string* error) const;
  uint32_t alloc(const std::string& name, uint64_t elements, uint64_t min_begin = 0);

  /// Starts an op; its tasks signal its counter(s) unless `signals` is false (the argmax).
  uint32_t begin_op(const std::string& name, OpKind kind, int layer, Granularity granularity,
                    bool signals = true);
  void begin_slice(uint32_t row_begin, uint32_t row_end);
  void read(const Source& source, uint32_t row_begin, uint32_t row_end);
  void emit(Instr instr, double cost);

  uint32_t emit_gemv(const GemvSpec& spec);
  /// Rows per tile: `configured`, or with 0 (per block) the fewest rows, a multiple of `align`,
  /// that cut `rows` into at most one tile per block of the grid.
  uint32_t tile_rows(uint32_t configured, uint32_t rows, uint32_t align) const;
  /// The tile of a GEMV op, in its units (rows, or RoPE pairs with spec.pairs).
  uint32_t gemv_tile(const GemvSpec& spec) const;
  void emit_input_waits(const GemvSpec& spec, uint32_t col_begin, uint32_t col_end);
  uint32_t emit_norm(const std::string& name, int layer, uint32_t in, const Source& src,
                     uint64_t gamma, uint32_t out);
  uint32_t emit_add(const std::string& name, int layer, uint32_t in, const Source& in_src,
                    uint32_t in2, const Source& in2_src, uint32_t out);
  /// The GEMV's input is the RMSNorm of `x`: in its prologue (fusion.norm_into_gemv), or from a
  /// norm task `norm_op` writing region `normed`.
  void norm_input(GemvSpec& spec, const Stream& x, uint64_t gamma, const std::string& normed,
                  const std::string& norm_op);
  /// The GEMV adds the residual `x` and writes `x_next`: in its epilogue
  /// (fusion.residual_into_gemv), or into region `out` followed by an add task `add_op`.
  Stream residual_output(GemvSpec& spec, const Stream& x, uint32_t x_next, const std::string& out,
                         const std::string& add_op);

  // The decode step, in order.
  void plan_inputs();
  Stream emit_embed();
  Stream emit_attention_block(int layer, const Stream& x);
  Source emit_qkv(int layer, const Stream& x, uint32_t* q, uint32_t* qkv_raw);
  Source emit_rope(int layer, const Source& qkv_src, uint32_t qkv_raw, uint32_t q);
  Source emit_attention(int layer, const Source& qkv_src, uint32_t q, uint32_t attn_out,
                        uint32_t* records);
  /// fusion.combine_into_o with KV partitions: no combine op; the O projection's input load
  /// combines the partitions' records.
  bool combine_folded() const { return config_.fusion.combine_into_o && d_.partitions > 1; }
  Stream emit_mlp_block(int layer, const Stream& x);
  void emit_head(const Stream& x);
  bool finish(std::string* error);
  void assign_queues();

  const ModelShape& shape_;
  const GpuTarget& target_;
  const ScheduleConfig& config_;
  Program program_;
  WeightLayout layout_;
  Dims d_;
  uint64_t arena_ = 0;
  uint32_t wbytes_ = 4;

  std::vector<OpCounters> counters_;   // per op
  std::vector<ms_abi::Wait> pending_;  // waits of the task being emitted
  std::vector<double> cost_;           // per task: estimated bytes moved
  std::vector<uint32_t> tile_;         // per task: ordinal within its op
  uint32_t current_op_ = 0;
  uint32_t op_tasks_ = 0;
};

bool Lowerer::check(std::string* error) const {
  const auto fail = [&](const std::string& message) {
    if (error != nullptr) *error = message;
    return false;
  };
  const TilingConfig& t = config_.tiling;
  if (target_.num_sms <= 0) return fail("target " + target_.name + " has no SMs");
  if (shape_.kv_heads <= 0 || shape_.heads % shape_.kv_heads != 0 || shape_.head_dim <= 0 ||
      shape_.head_dim % 2 != 0 || shape_.head_dim > 1024)
    return fail("model " + shape_.name +
                ": heads must be a multiple of kv_heads and head_dim even and at most 1024");
  if (t.gemv_rows_per_task < 0)
    return fail("tiling.gemv_rows_per_task must be positive, or 0 for one tile per block (got " +
                std::to_string(t.gemv_rows_per_task) + ")");
  if (t.lm_head_rows_per_task < 0)
    return fail("tiling.lm_head_rows_per_task must be positive, or 0 for one tile per block (got " +
                std::to_string(t.lm_head_rows_per_task) + ")");
  if (t.gemv_k_split <= 0)
    return fail("tiling.gemv_k_split must be at least 1 (got " + std::to_string(t.gemv_k_split) +
                ")");
  for (const auto& [what, k] : {std::pair<const char*, int>{"hidden", shape_.hidden},
                                {"q_dim", shape_.q_dim()},
                                {"ffn", shape_.ffn}}) {
    if (k % (8 * t.gemv_k_split) != 0)
      return fail("tiling.gemv_k_split = " + std::to_string(t.gemv_k_split) + " cuts the " + what +
                  " = " + std::to_string(k) +
                  " reduction columns into pieces that are not a multiple of 8; allowed: a split S "
                  "with " +
                  what + " % (8 * S) == 0");
  }
  const int group = shape_.heads / shape_.kv_heads;
  if (t.attn_q_heads_per_task < 0 ||
      (t.attn_q_heads_per_task > 0 && group % t.attn_q_heads_per_task != 0))
    return fail("tiling.attn_q_heads_per_task = " + std::to_string(t.attn_q_heads_per_task) +
                " does not divide the " + std::to_string(group) + " query heads per KV head of " +
                shape_.name + "; allowed: 0 (whole group) or a divisor of " +
                std::to_string(group));
  if (std::string conflict = knob_conflict(config_); !conflict.empty()) return fail(conflict);
  if (!knob_value_fits("fusion.argmax_into_lm_head", config_.fusion.argmax_into_lm_head, shape_))
    return fail(
        "fusion.argmax_into_lm_head needs a vocabulary of at most 2^24 rows (its records "
        "hold the index as a float), not " +
        std::to_string(shape_.vocab) + "; hint: set it to false");
  if (t.attn_kv_partitions < 1)
    return fail("tiling.attn_kv_partitions must be at least 1 (got " +
                std::to_string(t.attn_kv_partitions) + ")");
  if (config_.pipeline.prefetch_depth < 0)
    return fail("pipeline.prefetch_depth must be >= 0 (got " +
                std::to_string(config_.pipeline.prefetch_depth) + ")");
  if (config_.smem.pages < 0 || config_.smem.page_bytes <= 0)
    return fail("smem.pages must be >= 0 and smem.page_bytes positive (got " +
                std::to_string(config_.smem.pages) + " x " +
                std::to_string(config_.smem.page_bytes) + ")");
  if (config_.launch.threads_per_block <= 0 || config_.launch.blocks_per_sm <= 0)
    return fail("launch.threads_per_block and launch.blocks_per_sm must be positive (got " +
                std::to_string(config_.launch.threads_per_block) + ", " +
                std::to_string(config_.launch.blocks_per_sm) + ")");
  return true;
}

uint32_t Lowerer::alloc(const std::string& name, uint64_t elements, uint64_t min_begin) {
  arena_ = std::max(arena_, min_begin);
  arena_ = (arena_ + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  Region region;
  region.name = name;
  region.buffer = ms_abi::kBufActivations;
  region.begin = arena_;
  region.end = arena_ + elements;
  program_.regions.push_back(region);
  arena_ = region.end;
  return static_cast<uint32_t>(region.begin);  // the arena size is checked against 2^32 at the end
}

uint32_t Lowerer::begin_op(const std::string& name, OpKind kind, int layer, Granularity granularity,
                           bool signals) {
  current_op_ = static_cast<uint32_t>(program_.ops.size());
  program_.ops.push_back({name, kind, layer});
  OpCounters c;
  c.granularity = granularity;
  c.signals = signals;
  if (signals && granularity == Granularity::kPerOp) {
    c.op_counter = program_.num_counters();
    program_.counter_totals.push_back(0);
    program_.counter_names.push_back(name);
  }
  counters_.push_back(std::move(c));
  op_tasks_ = 0;
  return current_op_;
}

void Lowerer::begin_slice(uint32_t row_begin, uint32_t row_end) {
  OpCounters& c = counters_[current_op_];
  Slice slice;
  slice.row_begin = row_begin;
  slice.row_end = row_end;
  if (c.signals && c.granularity == Granularity::kPerSlice) {
    slice.counter = program_.num_counters();
    program_.counter_totals.push_back(0);
    program_.counter_names.push_back(program_.ops[current_op_].name + "[" +
                                     std::to_string(c.slices.size()) + "]");
  } else {
    slice.counter = c.op_counter;
  }
  c.slices.push_back(slice);
}

void Lowerer::read(const Source& source, uint32_t row_begin, uint32_t row_end) {
  for (uint32_t op : source) {
    const OpCounters& c = counters_[op];
    uint32_t lo = row_begin, hi = row_end;
    if (c.pair_half > 0) {  // rows -> the pairs of every head they touch (exact for whole heads)
      const uint32_t hd = 2 * c.pair_half;
      lo = row_begin / hd * c.pair_half;
      hi = (row_end + hd - 1) / hd * c.pair_half;
    }
    auto it = std::upper_bound(c.slices.begin(), c.slices.end(), lo,
                               [](uint32_t row, const Slice& s) { return row < s.row_end; });
    for (; it != c.slices.end() && it->row_begin < hi; ++it) {
      if (c.granularity == Granularity::kPerOp) {
        pending_.push_back({c.op_counter, c.tasks});
        break;
      }
      pending_.push_back({it->counter, it->tasks});
    }
  }
}

void Lowerer::emit(Instr instr, double cost) {
  // Two reads of one per_op producer give one wait.
  merge_waits(pending_);
  instr.wait_begin = static_cast<uint32_t>(program_.waits.size());
  instr.wait_count = static_cast<uint32_t>(pending_.size());
  program_.waits.insert(program_.waits.end(), pending_.begin(), pending_.end());
  pending_.clear();

  instr.op_id = current_op_;
  OpCounters& c = counters_[current_op_];
  if (c.signals) {
    Slice& slice = c.slices.back();
    instr.signal_counter = slice.counter;
    instr.signal_increment = 1;
    program_.counter_totals[slice.counter] += 1;
    slice.tasks += 1;
    c.tasks += 1;
  }
  program_.tasks.push_back(instr);
  cost_.push_back(cost);
  tile_.push_back(op_tasks_++);
}

void Lowerer::emit_input_waits(const GemvSpec& spec, uint32_t col_begin, uint32_t col_end) {
  switch (spec.load) {
    case InputLoad::kPlain:
      read(spec.in_src, col_begin, col_end);
      break;
    case InputLoad::kNorm:
    case InputLoad::kCombine:  // every head's records (the attention's slices are head ranges)
      read(spec.in_src, 0, spec.cols);
      break;
    case InputLoad::kSiluMul:
      read(spec.in_src, col_begin, col_end);
      read(spec.in_src, spec.in2_rows + col_begin, spec.in2_rows + col_end);
      break;
    case InputLoad::kAttention:  // every query row and every KV head's appended key and value
      read(spec.in_src, 0, d_.qkv_rows);
      break;
  }
}

uint32_t Lowerer::tile_rows(uint32_t configured, uint32_t rows, uint32_t align) const {
  if (configured > 0) return configured;
  const uint32_t grid = static_cast<uint32_t>(target_.num_sms * config_.launch.blocks_per_sm);
  return std::max(align, round_up((rows + grid - 1) / grid, align));
}

uint32_t Lowerer::gemv_tile(const GemvSpec& spec) const {
  // RoPE pairs rows within a head, so a tile with the QKV epilogue holds whole heads, or with
  // spec.pairs a range of RoPE pairs (kFlagRopePairs): then the op's units, tiles and slices are
  // pairs, pair p being QKV rows pair_row(p, 0 / 1) (abi/abi.h) of the op's whole heads.
  if (spec.pairs) {
    const uint32_t pairs = (spec.row_end - spec.row_begin) / d_.hd * (d_.hd / 2);
    return spec.tile_rows > 0 ? std::max(1u, spec.tile_rows / 2) : tile_rows(0, pairs, 1);
  }
  return tile_rows(
      spec.tile_rows, spec.row_end - spec.row_begin,
      spec.epilogue == ms_abi::kFlagRopeKv ? static_cast<uint32_t>(shape_.head_dim) : 8u);
}

uint32_t Lowerer::emit_gemv(const GemvSpec& spec) {
  const uint32_t half = d_.hd / 2;
  const uint32_t unit_begin = spec.pairs ? spec.row_begin / d_.hd * half : spec.row_begin;
  const uint32_t unit_end = spec.pairs ? spec.row_end / d_.hd * half : spec.row_end;
  const uint32_t tile = gemv_tile(spec);
  const uint32_t splits = static_cast<uint32_t>(config_.tiling.gemv_k_split);
  const uint32_t split_cols = spec.cols / splits;
  const uint32_t rows = spec.row_end - spec.row_begin;
  uint16_t prologue = 0;
  if (spec.load == InputLoad::kNorm) prologue = ms_abi::kFlagNormPrologue;
  if (spec.load == InputLoad::kSiluMul) prologue = ms_abi::kFlagSiluMulPrologue;
  if (spec.load == InputLoad::kCombine) prologue = ms_abi::kFlagCombinePrologue;
  if (spec.load == InputLoad::kAttention) prologue = ms_abi::kFlagAttentionPrologue;

  Instr base{};
  base.opcode = ms_abi::kGemv;
  base.layer = static_cast<uint32_t>(spec.layer);
  base.ld = spec.cols;
  base.weight = spec.weight;
  base.weight2 = spec.load == InputLoad::kNorm ? spec.gamma : 0;
  base.in = spec.in;
  base.in2 = spec.load == InputLoad::kSiluMul ? spec.in2 : 0;
  base.param2 = spec.load == InputLoad::kCombine ? spec.combine_parts : 0;

  const double weight_bytes_per_row = static_cast<double>(split_cols) * wbytes_;
  // The attention prologue reads every query and, at a mid-cache position, half of every KV
  // head's history (for load balancing only).
  const double input_bytes =
      spec.load == InputLoad::kCombine
          ? static_cast<double>(spec.combine_parts) * d_.heads * (d_.hd + 2) * 4.0
      : spec.load == InputLoad::kAttention
          ? spec.cols * 4.0 + 2.0 * d_.kv_dim * wbytes_ * std::max(1, shape_.max_seq / 2)
          : (spec.load == InputLoad::kNorm ? spec.cols : split_cols) * 4.0 *
                (spec.load == InputLoad::kSiluMul ? 2 : 1);

  if (splits == 1) {
    const uint32_t op = begin_op(spec.name, spec.kind, spec.layer, spec.granularity);
    if (spec.pairs) counters_[op].pair_half = half;
    for (uint32_t r0 = unit_begin; r0 < unit_end; r0 += tile) {
      const uint32_t r1 = std::min(unit_end, r0 + tile);
      begin_slice(r0, r1);
      Instr t = base;
      t.flags = prologue | spec.epilogue | (spec.pairs ? ms_abi::kFlagRopePairs : 0);
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
      emit_input_waits(spec, 0, spec.cols);
      if (spec.epilogue == ms_abi::kFlagResidual) read(spec.aux_src, r0, r1);
      const uint32_t out_rows = ms_abi::task_rows(t);
      emit(t, out_rows * weight_bytes_per_row + input_bytes + out_rows * 4.0);
    }
    return op;
  }
  // (tiling.qkv_rope_pairs needs gemv_k_split 1: knob_conflict.)

  // Split-K: partial tasks into a [splits][rows] buffer, then one reduce per tile. The partial
  // buffer's effective base makes logical row r of split s land at base + s * rows + r.
  const uint32_t region =
      alloc(spec.name + ".partial", static_cast<uint64_t>(splits) * rows, spec.row_begin);
  const uint32_t part_base = region - spec.row_begin;
  const uint32_t partial_op = begin_op(spec.name, spec.kind, spec.layer, Granularity::kPerSlice);
  for (uint32_t r0 = spec.row_begin; r0 < spec.row_end; r0 += tile) {
    const uint32_t r1 = std::min(spec.row_end, r0 + tile);
    begin_slice(r0, r1);
    for (uint32_t s = 0; s < splits; ++s) {
      Instr t = base;
      t.flags = prologue | ms_abi::kFlagPartial;
      t.row_begin = r0;
      t.row_end = r1;
      t.col_begin = s * split_cols;
      t.col_end = (s + 1) * split_cols;
      t.out = part_base + s * rows;
      emit_input_waits(spec, t.col_begin, t.col_end);
      emit(t, (r1 - r0) * weight_bytes_per_row + input_bytes + (r1 - r0) * 4.0);
    }
  }
  const uint32_t reduce_op =
      begin_op(spec.name + ".reduce", OpKind::kReduce, spec.layer, spec.granularity);
  for (uint32_t r0 = spec.row_begin; r0 < spec.row_end; r0 += tile) {
    const uint32_t r1 = std::min(spec.row_end, r0 + tile);
    begin_slice(r0, r1);
    Instr t{};
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
    read({partial_op}, r0, r1);
    if (spec.epilogue == ms_abi::kFlagResidual) read(spec.aux_src, r0, r1);
    emit(t, (r1 - r0) * 4.0 * (splits + 2));
  }
  return reduce_op;
}

uint32_t Lowerer::emit_norm(const std::string& name, int layer, uint32_t in, const Source& src,
                            uint64_t gamma, uint32_t out) {
  const uint32_t hidden = static_cast<uint32_t>(shape_.hidden);
  const uint32_t op = begin_op(name, OpKind::kNorm, layer, config_.dependencies.residual);
  begin_slice(0, hidden);
  Instr t{};
  t.opcode = ms_abi::kRmsNorm;
  t.layer = static_cast<uint32_t>(layer);
  t.row_begin = 0;
  t.row_end = hidden;
  t.col_begin = 0;
  t.col_end = hidden;
  t.weight2 = gamma;
  t.in = in;
  t.out = out;
  read(src, 0, hidden);
  emit(t, hidden * (8.0 + wbytes_));
  return op;
}

uint32_t Lowerer::emit_add(const std::string& name, int layer, uint32_t in, const Source& in_src,
                           uint32_t in2, const Source& in2_src, uint32_t out) {
  const uint32_t hidden = static_cast<uint32_t>(shape_.hidden);
  const uint32_t tile =
      tile_rows(static_cast<uint32_t>(config_.tiling.gemv_rows_per_task), hidden, 8);
  const uint32_t op = begin_op(name, OpKind::kAdd, layer, config_.dependencies.residual);
  for (uint32_t r0 = 0; r0 < hidden; r0 += tile) {
    const uint32_t r1 = std::min(hidden, r0 + tile);
    begin_slice(r0, r1);
    Instr t{};
    t.opcode = ms_abi::kAdd;
    t.layer = static_cast<uint32_t>(layer);
    t.row_begin = r0;
    t.row_end = r1;
    t.in = in;
    t.in2 = in2;
    t.out = out;
    read(in_src, r0, r1);
    read(in2_src, r0, r1);
    emit(t, (r1 - r0) * 12.0);
  }
  return op;
}

void Lowerer::assign_queues() {
  const uint32_t grid = static_cast<uint32_t>(program_.launch.grid_blocks);
  // Chained tasks run on their last arriver's block, in no queue: the others, in task order.
  std::vector<bool> chained(program_.tasks.size(), false);
  for (const Instr& t : program_.tasks)
    if (t.chain != 0) chained[t.chain - 1] = true;
  std::vector<uint32_t> queued;
  for (uint32_t i = 0; i < program_.tasks.size(); ++i)
    if (!chained[i]) queued.push_back(i);
  const uint32_t n = static_cast<uint32_t>(queued.size());
  program_.queues.clear();
  switch (config_.assignment.policy) {
    case AssignPolicy::kRoundRobin:
      program_.queues.assign(grid, {});
      for (uint32_t k = 0; k < n; ++k) program_.queues[k % grid].push_back(queued[k]);
      break;
    case AssignPolicy::kLoadBalance: {
      program_.queues.assign(grid, {});
      // (work so far, block): ties go to the lower block index.
      using Entry = std::pair<double, uint32_t>;
      std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
      for (uint32_t b = 0; b < grid; ++b) heap.push({0.0, b});
      for (uint32_t i : queued) {
        auto [work, block] = heap.top();
        heap.pop();
        program_.queues[block].push_back(i);
        heap.push({work + cost_[i], block});
      }
      break;
    }
    case AssignPolicy::kLayerAffine:
      program_.queues.assign(grid, {});
      for (uint32_t i : queued) program_.queues[tile_[i] % grid].push_back(i);
      break;
    case AssignPolicy::kDynamic:
      program_.queues.assign(1, queued);
      break;
  }
}

void Lowerer::norm_input(GemvSpec& spec, const Stream& x, uint64_t gamma, const std::string& normed,
                         const std::string& norm_op) {
  if (config_.fusion.norm_into_gemv) {
    spec.load = InputLoad::kNorm;
    spec.gamma = gamma;
    spec.in = x.at;
    spec.in_src = x.src;
  } else {
    const uint32_t xn = alloc(normed, d_.hidden);
    spec.in = xn;
    spec.in_src = {emit_norm(norm_op, spec.layer, x.at, x.src, gamma, xn)};
  }
}

Stream Lowerer::residual_output(GemvSpec& spec, const Stream& x, uint32_t x_next,
                                const std::string& out, const std::string& add_op) {
  if (config_.fusion.residual_into_gemv) {
    spec.epilogue = ms_abi::kFlagResidual;
    spec.out = x_next;
    spec.aux = x.at;
    spec.aux_src = x.src;
    return {x_next, {emit_gemv(spec)}};
  }
  spec.out = alloc(out, d_.hidden);
  const uint32_t op = emit_gemv(spec);
  return {x_next, {emit_add(add_op, spec.layer, spec.out, {op}, x.at, x.src, x_next)}};
}

std::optional<Program> Lowerer::run(std::string* error) {
  if (!check(error)) return std::nullopt;
  layout_ = layout_for(shape_);
  wbytes_ = static_cast<uint32_t>(dtype_bytes(shape_.dtype));
  plan_inputs();
  Stream x = emit_embed();
  for (int layer = 0; layer < shape_.layers; ++layer) {
    x = emit_attention_block(layer, x);
    x = emit_mlp_block(layer, x);
  }
  emit_head(x);
  if (!finish(error)) return std::nullopt;
  coarsen_slice_counters(program_);
  if (config_.pipeline.tagged_inputs) tag_joins(program_);
  assign_queues();
  return std::move(program_);
}

/// The dimensions, the model constants, and the input regions: weights, the step cell, the KV
/// cache and the rope table.
void Lowerer::plan_inputs() {
  const TilingConfig& tiling = config_.tiling;
  d_.hidden = static_cast<uint32_t>(shape_.hidden);
  d_.heads = static_cast<uint32_t>(shape_.heads);
  d_.kv_heads = static_cast<uint32_t>(shape_.kv_heads);
  d_.hd = static_cast<uint32_t>(shape_.head_dim);
  d_.q_dim = d_.heads * d_.hd;
  d_.kv_dim = d_.kv_heads * d_.hd;
  d_.qkv_rows = d_.q_dim + 2 * d_.kv_dim;
  d_.ffn = static_cast<uint32_t>(shape_.ffn);
  d_.vocab = static_cast<uint32_t>(shape_.vocab);
  d_.rows_per_task = static_cast<uint32_t>(tiling.gemv_rows_per_task);
  d_.group = d_.heads / d_.kv_heads;
  d_.q_chunk = tiling.attn_q_heads_per_task > 0
                   ? static_cast<uint32_t>(tiling.attn_q_heads_per_task)
                   : d_.group;
  d_.partitions = static_cast<uint32_t>(tiling.attn_kv_partitions);
  const ms_abi::DTypeCode dcode =
      shape_.dtype == DType::kBF16 ? ms_abi::kDTypeBF16 : ms_abi::kDTypeF32;

  Program& p = program_;
  p.model_name = shape_.name;
  ms_abi::ModelParams& m = p.model;
  m.hidden = d_.hidden;
  m.layers = static_cast<uint32_t>(shape_.layers);
  m.heads = d_.heads;
  m.kv_heads = d_.kv_heads;
  m.head_dim = d_.hd;
  m.ffn = d_.ffn;
  m.vocab = d_.vocab;
  m.max_seq = static_cast<uint32_t>(shape_.max_seq);
  m.weight_dtype = dcode;
  m.kv_dtype = dcode;
  m.rms_eps = shape_.rms_eps;
  m.rope_theta = shape_.rope_theta;
  m.attn_scale = 1.0f / std::sqrt(static_cast<float>(d_.hd));

  for (const TensorInfo& tensor : layout_.tensors)
    p.regions.push_back({"w." + tensor.name, ms_abi::kBufWeights,
                         static_cast<uint64_t>(tensor.offset),
                         static_cast<uint64_t>(tensor.offset + tensor.rows * tensor.cols), true});
  p.regions.push_back({"step", ms_abi::kBufStep, 0, 4, true});
  const uint64_t kv_head_elements = static_cast<uint64_t>(m.max_seq) * d_.hd;
  for (uint32_t l = 0; l < m.layers; ++l)
    for (uint32_t kv = 0; kv < 2; ++kv)
      for (uint32_t g = 0; g < d_.kv_heads; ++g) {
        const uint64_t begin = ms_abi::kv_offset(m, l, kv, g);
        p.regions.push_back(
            {"kv.L" + std::to_string(l) + (kv == 0 ? ".k.h" : ".v.h") + std::to_string(g),
             ms_abi::kBufKv, begin, begin + kv_head_elements, true});
      }
  m.rope_table = alloc("rope_table", d_.hd / 2);
  p.regions.back().input = true;
}

Stream Lowerer::emit_embed() {
  const uint32_t x0 = alloc("embed.x", d_.hidden);
  const uint32_t embed_op = begin_op("embed", OpKind::kEmbed, -1, config_.dependencies.residual);
  begin_slice(0, d_.hidden);
  Instr t{};
  t.opcode = ms_abi::kEmbed;
  t.layer = 0;
  t.row_begin = 0;
  t.row_end = d_.hidden;
  t.ld = d_.hidden;
  t.weight = static_cast<uint64_t>(layout_.embed);
  t.out = x0;
  emit(t, d_.hidden * (4.0 + wbytes_));
  return {x0, {embed_op}};
}

/// Norm, QKV, RoPE + KV append, attention (and its combine), O and the residual add.
Stream Lowerer::emit_attention_block(int layer, const Stream& x) {
  const std::string L = "L" + std::to_string(layer) + ".";
  uint32_t q = 0, qkv_raw = 0;
  Source qkv_src = emit_qkv(layer, x, &q, &qkv_raw);
  if (!config_.fusion.rope_kv_into_qkv) qkv_src = emit_rope(layer, qkv_src, qkv_raw, q);
  // fusion.attention_into_o: no attention tasks; the O projection's input load attends itself.
  const bool attend = config_.fusion.attention_into_o;
  const bool fold = combine_folded();
  const uint32_t attn_out = fold || attend ? 0 : alloc(L + "attn_out", d_.q_dim);
  uint32_t records = 0;
  const Source attn_src = attend ? qkv_src : emit_attention(layer, qkv_src, q, attn_out, &records);

  GemvSpec o;
  o.name = L + "o";
  o.kind = OpKind::kO;
  o.layer = layer;
  o.row_begin = 0;
  o.row_end = d_.hidden;
  o.tile_rows = d_.rows_per_task;
  o.cols = d_.q_dim;
  o.weight = static_cast<uint64_t>(layout_.layer[static_cast<size_t>(layer)].wo);
  o.in = attend ? q : fold ? records : attn_out;
  o.in_src = attn_src;
  if (fold) {
    o.load = InputLoad::kCombine;
    o.combine_parts = d_.partitions;
  }
  if (attend) o.load = InputLoad::kAttention;
  o.granularity = config_.dependencies.residual;
  const uint32_t x_mid = alloc(L + "x_mid", d_.hidden);
  return residual_output(o, x, x_mid, L + "o_out", L + "attn_add");
}

/// The QKV GEMV (one op, or Q, K and V), with RoPE and the KV append in its epilogue when fused.
/// Allocates the roped queries `q` and, unfused, the raw QKV rows `qkv_raw`.
Source Lowerer::emit_qkv(int layer, const Stream& x, uint32_t* q, uint32_t* qkv_raw) {
  const std::string L = "L" + std::to_string(layer) + ".";
  const WeightLayout::Layer& w = layout_.layer[static_cast<size_t>(layer)];
  GemvSpec qkv;
  qkv.kind = OpKind::kQkv;
  qkv.layer = layer;
  qkv.cols = d_.hidden;
  qkv.weight = static_cast<uint64_t>(w.wq);
  qkv.granularity = config_.dependencies.qkv_to_attention;
  norm_input(qkv, x, static_cast<uint64_t>(w.attn_norm), L + "xn", L + "attn_norm");
  *q = alloc(L + "q", d_.q_dim);
  if (config_.fusion.rope_kv_into_qkv) {
    qkv.epilogue = ms_abi::kFlagRopeKv;
    qkv.out = *q;
    qkv.pairs = config_.tiling.qkv_rope_pairs;
    qkv.tile_rows = qkv.pairs ? d_.rows_per_task : round_up(d_.rows_per_task, d_.hd);
  } else {
    *qkv_raw = alloc(L + "qkv_raw", d_.qkv_rows);
    qkv.out = *qkv_raw;
    qkv.tile_rows = d_.rows_per_task;
  }
  Source qkv_src;
  if (config_.fusion.qkv_single_gemv) {
    qkv.name = L + "qkv";
    qkv.row_begin = 0;
    qkv.row_end = d_.qkv_rows;
    qkv_src.push_back(emit_gemv(qkv));
    return qkv_src;
  }
  const uint32_t bounds[4] = {0, d_.q_dim, d_.q_dim + d_.kv_dim, d_.qkv_rows};
  const char* names[3] = {"q_proj", "k_proj", "v_proj"};
  for (int i = 0; i < 3; ++i) {
    qkv.name = L + names[i];
    qkv.row_begin = bounds[i];
    qkv.row_end = bounds[i + 1];
    qkv_src.push_back(emit_gemv(qkv));
  }
  return qkv_src;
}

/// Unfused RoPE + KV append: one task per head of QKV rows.
Source Lowerer::emit_rope(int layer, const Source& qkv_src, uint32_t qkv_raw, uint32_t q) {
  const uint32_t op = begin_op("L" + std::to_string(layer) + ".rope", OpKind::kRope, layer,
                               config_.dependencies.qkv_to_attention);
  for (uint32_t r0 = 0; r0 < d_.qkv_rows; r0 += d_.hd) {
    begin_slice(r0, r0 + d_.hd);
    Instr t{};
    t.opcode = ms_abi::kRopeKv;
    t.layer = static_cast<uint32_t>(layer);
    t.row_begin = r0;
    t.row_end = r0 + d_.hd;
    t.in = qkv_raw;
    t.out = q;
    read(qkv_src, r0, r0 + d_.hd);
    emit(t, d_.hd * (r0 < d_.q_dim ? 8.0 : 4.0 + wbytes_));
  }
  return {op};
}

/// Attention per (KV group, chunk of query heads, KV partition), then with partitions the
/// flash-decoding combine, unless fusion.combine_into_o leaves it to the O projection. Returns the
/// producers of attn_out (folded: of the partial records, whose offset goes to *records).
Source Lowerer::emit_attention(int layer, const Source& qkv_src, uint32_t q, uint32_t attn_out,
                               uint32_t* records_out) {
  const std::string L = "L" + std::to_string(layer) + ".";
  const uint32_t lu = static_cast<uint32_t>(layer);
  const uint32_t hd = d_.hd, partitions = d_.partitions;
  const uint32_t records =
      partitions > 1
          ? alloc(L + "attn_partial", static_cast<uint64_t>(partitions) * d_.heads * (hd + 2))
          : 0;
  const bool fold = combine_folded();
  *records_out = records;
  const uint32_t attn_op = begin_op(
      L + "attn", OpKind::kAttention, layer,
      partitions > 1 && !fold ? Granularity::kPerSlice : config_.dependencies.attention_to_o);
  // The partition tasks of each head chunk, in slice order (fusion.reduce_by_last_arriver).
  std::vector<uint32_t> chainers;
  // KV bytes an attention task streams at a mid-cache position (for load balancing only).
  const double kv_task_bytes = 2.0 * hd * wbytes_ * std::max(1, shape_.max_seq / 2) / partitions;
  for (uint32_t g = 0; g < d_.kv_heads; ++g) {
    for (uint32_t h0 = g * d_.group; h0 < (g + 1) * d_.group; h0 += d_.q_chunk) {
      const uint32_t h1 = h0 + d_.q_chunk;
      begin_slice(h0 * hd, h1 * hd);
      for (uint32_t part = 0; part < partitions; ++part) {
        chainers.push_back(static_cast<uint32_t>(program_.tasks.size()));
        Instr t{};
        t.opcode = ms_abi::kAttnPartial;
        t.layer = lu;
        t.row_begin = h0;
        t.row_end = h1;
        t.param0 = g;
        t.param1 = part;
        t.param2 = partitions;
        t.in = q;
        t.out = partitions == 1 ? attn_out : 0;
        t.aux = partitions > 1 ? records : 0;
        read(qkv_src, h0 * hd, h1 * hd);
        read(qkv_src, d_.q_dim + g * hd, d_.q_dim + (g + 1) * hd);
        read(qkv_src, d_.q_dim + d_.kv_dim + g * hd, d_.q_dim + d_.kv_dim + (g + 1) * hd);
        emit(t, kv_task_bytes + (h1 - h0) * hd * 8.0);
      }
    }
  }
  if (partitions == 1 || fold) return {attn_op};
  const uint32_t op = begin_op(L + "attn_combine", OpKind::kAttnCombine, layer,
                               config_.dependencies.attention_to_o);
  for (uint32_t g = 0; g < d_.kv_heads; ++g) {
    for (uint32_t h0 = g * d_.group; h0 < (g + 1) * d_.group; h0 += d_.q_chunk) {
      const uint32_t h1 = h0 + d_.q_chunk;
      begin_slice(h0 * hd, h1 * hd);
      Instr t{};
      t.opcode = ms_abi::kAttnCombine;
      t.layer = lu;
      t.row_begin = h0;
      t.row_end = h1;
      t.param0 = g;
      t.param2 = partitions;
      t.out = attn_out;
      t.aux = records;
      read({attn_op}, h0 * hd, h1 * hd);
      const uint32_t id = static_cast<uint32_t>(program_.tasks.size());
      emit(t, (h1 - h0) * (partitions * (hd + 2) + hd) * 4.0);
      // Last arriver: the chunk's partitions (the producers of its one slice counter, never merged
      // by coarsen_slice_counters) chain this task, and it leaves the queues (assign_queues).
      if (config_.fusion.reduce_by_last_arriver) {
        const size_t chunk = (h0 / d_.q_chunk) * partitions;
        for (uint32_t part = 0; part < partitions; ++part)
          program_.tasks[chainers[chunk + part]].chain = id + 1;
      }
    }
  }
  return {op};
}

/// Norm, gate/up (one op or two), SiLU * up (in the down projection's input load when fused),
/// down and the residual add.
Stream Lowerer::emit_mlp_block(int layer, const Stream& x) {
  const std::string L = "L" + std::to_string(layer) + ".";
  const WeightLayout::Layer& w = layout_.layer[static_cast<size_t>(layer)];
  const uint32_t ffn = d_.ffn;
  GemvSpec gu;
  gu.kind = OpKind::kGateUp;
  gu.layer = layer;
  gu.tile_rows = d_.rows_per_task;
  gu.cols = d_.hidden;
  gu.weight = static_cast<uint64_t>(w.w_gate);
  gu.granularity = config_.dependencies.gate_up_to_down;
  norm_input(gu, x, static_cast<uint64_t>(w.mlp_norm), L + "xn2", L + "mlp_norm");
  const uint32_t gate_up = alloc(L + "gate_up", 2ull * ffn);
  gu.out = gate_up;
  Source gu_src;
  if (config_.fusion.gate_up_single_gemv) {
    gu.name = L + "gate_up";
    gu.row_begin = 0;
    gu.row_end = 2 * ffn;
    gu_src.push_back(emit_gemv(gu));
  } else {
    gu.name = L + "gate";
    gu.row_begin = 0;
    gu.row_end = ffn;
    gu_src.push_back(emit_gemv(gu));
    gu.name = L + "up";
    gu.row_begin = ffn;
    gu.row_end = 2 * ffn;
    gu_src.push_back(emit_gemv(gu));
  }

  GemvSpec down;
  down.name = L + "down";
  down.kind = OpKind::kDown;
  down.layer = layer;
  down.row_begin = 0;
  down.row_end = d_.hidden;
  down.tile_rows = d_.rows_per_task;
  down.cols = ffn;
  down.weight = static_cast<uint64_t>(w.w_down);
  down.granularity = config_.dependencies.residual;
  if (config_.fusion.silu_mul_into_down) {
    down.load = InputLoad::kSiluMul;
    down.in = gate_up;
    down.in2 = gate_up + ffn;
    down.in2_rows = ffn;
    down.in_src = gu_src;
  } else {
    const uint32_t act = alloc(L + "act", ffn);
    const uint32_t op =
        begin_op(L + "silu_mul", OpKind::kSiluMul, layer, config_.dependencies.gate_up_to_down);
    const uint32_t silu_tile = tile_rows(d_.rows_per_task, ffn, 8);
    for (uint32_t r0 = 0; r0 < ffn; r0 += silu_tile) {
      const uint32_t r1 = std::min(ffn, r0 + silu_tile);
      begin_slice(r0, r1);
      Instr t{};
      t.opcode = ms_abi::kSiluMul;
      t.layer = static_cast<uint32_t>(layer);
      t.row_begin = r0;
      t.row_end = r1;
      t.in = gate_up;
      t.in2 = gate_up + ffn;
      t.out = act;
      read(gu_src, r0, r1);
      read(gu_src, ffn + r0, ffn + r1);
      emit(t, (r1 - r0) * 12.0);
    }
    down.in = act;
    down.in_src = {op};
  }
  const uint32_t x_out = alloc(L + "x_out", d_.hidden);
  return residual_output(down, x, x_out, L + "down_out", L + "mlp_add");
}

/// The final norm, the LM head and the argmax: of the logits, or with fusion.argmax_into_lm_head of
/// the argmax records the LM-head tiles write beside their logits (one per tile).
void Lowerer::emit_head(const Stream& x) {
  GemvSpec head;
  head.name = "lm_head";
  head.kind = OpKind::kLmHead;
  head.layer = shape_.layers;
  head.row_begin = 0;
  head.row_end = d_.vocab;
  head.tile_rows = static_cast<uint32_t>(config_.tiling.lm_head_rows_per_task);
  head.cols = d_.hidden;
  head.weight = static_cast<uint64_t>(layout_.lm_head);
  head.granularity = Granularity::kPerOp;
  norm_input(head, x, static_cast<uint64_t>(layout_.final_norm), "final.xn", "final_norm");
  const uint32_t logits = alloc("logits", d_.vocab);
  head.out = logits;
  const uint32_t tiles = (d_.vocab + gemv_tile(head) - 1) / gemv_tile(head);
  if (config_.fusion.argmax_into_lm_head) {
    head.argmax_records = true;
    head.records = alloc("lm_head.argmax", 2ull * tiles);
  }
  const Source head_src = {emit_gemv(head)};
  begin_op("argmax", OpKind::kArgmax, -1, Granularity::kPerOp, /*signals=*/false);
  begin_slice(0, 1);
  Instr t{};
  t.opcode = ms_abi::kArgmax;
  t.layer = static_cast<uint32_t>(shape_.layers);
  t.row_begin = 0;
  t.row_end = 1;
  t.col_begin = 0;
  t.col_end = head.argmax_records ? tiles : d_.vocab;
  t.in = head.argmax_records ? head.records : logits;
  if (head.argmax_records) t.flags = ms_abi::kFlagArgmaxPartial;
  read(head_src, 0, d_.vocab);
  const uint32_t id = static_cast<uint32_t>(program_.tasks.size());
  emit(t, (head.argmax_records ? 2.0 * tiles : d_.vocab) * 4.0);
  // Last arriver: every task the argmax waits for (its one all-join) chains it.
  if (config_.fusion.reduce_by_last_arriver) {
    const uint32_t c = program_.waits[program_.tasks[id].wait_begin].counter;
    for (Instr& p : program_.tasks)
      if (p.signal_increment > 0 && p.signal_counter == c) p.chain = id + 1;
  }
}

/// The buffer extents, the launch shape and the kernel build. False when the activations need
/// more than 32-bit operand offsets address.
bool Lowerer::finish(std::string* error) {
  if (arena_ >= (uint64_t{1} << 32)) {
    if (error != nullptr)
      *error = "model " + shape_.name + " needs " + std::to_string(arena_) +
               " activation elements, more than 32-bit operand offsets address";
    return false;
  }
  const ScheduleConfig& cfg = config_;
  Program& p = program_;
  const uint64_t kv_head_elements = static_cast<uint64_t>(p.model.max_seq) * d_.hd;
  p.buffer_elements[ms_abi::kBufWeights] = static_cast<uint64_t>(layout_.total_elements);
  p.buffer_elements[ms_abi::kBufActivations] = arena_;
  p.buffer_elements[ms_abi::kBufKv] = 2ull * p.model.layers * d_.kv_heads * kv_head_elements;
  p.buffer_elements[ms_abi::kBufStep] = 4;

  LaunchShape& launch = p.launch;
  launch.threads_per_block = cfg.launch.threads_per_block;
  launch.blocks_per_sm = cfg.launch.blocks_per_sm;
  launch.grid_blocks = target_.num_sms * cfg.launch.blocks_per_sm;
  launch.smem_pages = cfg.smem.pages;
  launch.smem_page_bytes = cfg.smem.page_bytes;
  launch.smem_bytes = dynamic_smem_bytes(cfg, shape_);
  launch.prefetch_depth = cfg.pipeline.prefetch_depth;
  launch.dynamic_queue = cfg.assignment.policy == AssignPolicy::kDynamic;

  p.build.knobs = kernel_knob_defines(cfg);
  if (cfg.kernel.weight_stream == WeightStream::kSmemRing) p.build.x_floats = ring_x_floats(shape_);
  return true;
}

/// pipeline.tagged_inputs (abi/abi.h, Tagged words): a streamed GEMV with the norm or SiLU x up
/// prologue reads tagged words when every activation element it reads is written by a streamed
/// GEMV with the plain or residual epilogue, and the words fit its shared memory (abi/ring.h
/// stream_stage_bytes); those writers write tagged words. What one such
/// task reads that another kind of task writes (the embedding's x, a KV row) keeps the whole task
/// untagged: its reads would not be tagged, and the validator's race rule refuses that.
void tag_joins(Program& p) {
  const uint32_t n = static_cast<uint32_t>(p.tasks.size());
  constexpr uint16_t kNotOut = ms_abi::kFlagPartial | ms_abi::kFlagRopeKv | ms_abi::kFlagRopePairs |
                               ms_abi::kFlagArgmaxPartial;
  std::vector<bool> can_out(n, false);
  struct Write {
    uint32_t buffer;
    uint64_t begin, end;
    uint32_t task;
  };
  std::vector<Write> writes;
  std::vector<std::vector<Access>> prints(n);
  for (uint32_t t = 0; t < n; ++t) {
    const Instr& in = p.tasks[t];
    std::string error;
    if (!task_footprint(p, t, &prints[t], &error)) prints[t].clear();
    const bool streamed = in.opcode == ms_abi::kGemv && stream_takes(p, in);
    can_out[t] = streamed && (in.flags & kNotOut) == 0;
    for (const Access& a : prints[t])
      if (a.write) writes.push_back({a.buffer, a.begin, a.end, t});
  }
  std::sort(writes.begin(), writes.end(), [](const Write& x, const Write& y) {
    return x.buffer != y.buffer ? x.buffer < y.buffer : x.begin < y.begin;
  });
  // SSA activations: writes of one buffer do not overlap (else coverage refuses the program), so
  // the writers of a range are the run of sorted writes from the last one that begins at or
  // before it.
  auto writers_ok = [&](const Access& a, std::vector<uint32_t>* out) {
    auto it =
        std::upper_bound(writes.begin(), writes.end(), a, [](const Access& x, const Write& w) {
          return x.buffer != w.buffer ? x.buffer < w.buffer : x.begin < w.begin;
        });
    if (it != writes.begin() && std::prev(it)->buffer == a.buffer && std::prev(it)->end > a.begin)
      --it;
    for (; it != writes.end() && it->buffer == a.buffer && it->begin < a.end; ++it) {
      if (it->end <= a.begin) continue;
      if (!can_out[it->task]) return false;
      out->push_back(it->task);
    }
    return true;
  };
  constexpr uint16_t kStages = ms_abi::kFlagNormPrologue | ms_abi::kFlagSiluMulPrologue;
  std::vector<bool> tag_out(n, false);
  for (uint32_t t = 0; t < n; ++t) {
    const Instr& in = p.tasks[t];
    Instr tagged = in;  // the streamed GEMV must also fit the tagged words in shared memory
    tagged.flags |= ms_abi::kFlagTagIn;
    if (in.opcode != ms_abi::kGemv || (in.flags & kStages) == 0 ||
        (in.flags & ms_abi::kFlagPartial) != 0 || prints[t].empty() || !stream_takes(p, tagged))
      continue;
    std::vector<uint32_t> writers;
    bool ok = true;
    for (const Access& a : prints[t])
      if (!a.write && a.buffer != ms_abi::kBufWeights) ok = ok && writers_ok(a, &writers);
    if (!ok || writers.empty()) continue;
    p.tasks[t].flags |= ms_abi::kFlagTagIn;
    for (uint32_t w : writers) tag_out[w] = true;
  }
  for (uint32_t t = 0; t < n; ++t)
    if (tag_out[t]) p.tasks[t].flags |= ms_abi::kFlagTagOut;
}

/// A per_slice producer with many tiles would make every reader of its whole output wait on each
/// tile's counter: tasks x tiles waits (179 million for llama-8b at the smallest tiles). So the
/// slice counters of one op are merged, consecutive ones together, into at most
/// kMaxSliceCountersPerOp groups. A wait on a merged counter waits for the whole group (the group's
/// total increments, or for a partial wait the other members' totals plus its own threshold), so
/// every wait still implies at least the producers it stood for, and a whole-output reader waits at
/// most kMaxSliceCountersPerOp times per producer op.
constexpr size_t kMaxSliceCountersPerOp = 16;

void coarsen_slice_counters(Program& p) {
  const uint32_t n = p.num_counters();
  std::vector<std::vector<uint32_t>> op_counters(p.ops.size());
  std::vector<bool> seen(n, false);
  // A chained task's wait must stay on its chainers' own counter (abi.h, Last arrivers): the ops
  // that chain keep their slice counters.
  for (const Instr& t : p.tasks)
    if (t.chain != 0 && t.signal_increment > 0) seen[t.signal_counter] = true;
  for (const Instr& t : p.tasks) {
    if (t.signal_increment == 0 || seen[t.signal_counter]) continue;
    seen[t.signal_counter] = true;
    op_counters[t.op_id].push_back(t.signal_counter);
  }
  std::vector<uint32_t> rep(n);
  std::iota(rep.begin(), rep.end(), 0u);
  std::vector<uint32_t> members(n, 1);
  bool changed = false;
  for (const auto& cs : op_counters) {
    if (cs.size() <= kMaxSliceCountersPerOp) continue;
    changed = true;
    size_t first = 0;
    for (size_t i = 0; i < cs.size(); ++i) {
      if (i == 0 ||
          i * kMaxSliceCountersPerOp / cs.size() != (i - 1) * kMaxSliceCountersPerOp / cs.size())
        first = i;
      rep[cs[i]] = cs[first];
      if (i != first) ++members[cs[first]];
    }
  }
  if (!changed) return;
  std::vector<uint32_t> new_id(n, UINT32_MAX);
  std::vector<uint32_t> totals;
  std::vector<std::string> names;
  for (uint32_t c = 0; c < n; ++c) {
    if (rep[c] != c) continue;
    new_id[c] = static_cast<uint32_t>(totals.size());
    totals.push_back(0);
    names.push_back(members[c] > 1 ? p.counter_names[c] + "+" + std::to_string(members[c] - 1)
                                   : p.counter_names[c]);
  }
  for (uint32_t c = 0; c < n; ++c) totals[new_id[rep[c]]] += p.counter_totals[c];
  std::vector<ms_abi::Wait> waits;
  waits.reserve(p.waits.size());
  std::vector<ms_abi::Wait> mine;
  for (Instr& t : p.tasks) {
    mine.clear();
    for (uint32_t w = 0; w < t.wait_count; ++w) {
      const ms_abi::Wait old = p.waits[t.wait_begin + w];
      const uint32_t c = new_id[rep[old.counter]];
      const uint32_t others = totals[c] - p.counter_totals[old.counter];
      mine.push_back({c, old.threshold + others});
    }
    merge_waits(mine);
    t.wait_begin = static_cast<uint32_t>(waits.size());
    t.wait_count = static_cast<uint32_t>(mine.size());
    waits.insert(waits.end(), mine.begin(), mine.end());
    if (t.signal_increment > 0) t.signal_counter = new_id[rep[t.signal_counter]];
  }
  p.waits = std::move(waits);
  p.counter_totals = std::move(totals);
  p.counter_names = std::move(names);
}

}  // namespace

std::optional<Program> lower(const ModelShape& shape, const GpuTarget& target,
                             const ScheduleConfig& config, std::string* error) {
  Lowerer lowerer(shape, target, config);
  return lowerer.run(error);
}

}  // namespace megasched::schedule
