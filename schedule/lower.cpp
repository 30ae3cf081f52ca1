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
//
// Each op's tasks come from its tile plan (schedule/tile_plan.h: the rows, columns, heads and
// partitions of each task, the input rows it reads, its cost); the OpEmitter turns a plan into
// tasks with their counters and waits, and the Lowerer decides the ops of the decode step, their
// order and their regions of the activation arena.
#include "schedule/lower.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include "schedule/build_fit.h"
#include "schedule/footprint.h"
#include "schedule/lower_passes.h"
#include "schedule/search.h"
#include "schedule/tile_plan.h"

namespace megasched::schedule {
namespace {

using ms_abi::Instr;

constexpr uint64_t kArenaAlign = 16;  // activation regions start at multiples of 16 floats (64 B)

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

/// The residual stream as a reader sees it: where it lives and which ops produced it.
struct Stream {
  uint32_t at = 0;  // act offset
  Source src;
};

/// False, with *error (one line naming the knob), when the config cannot be lowered for the shape
/// on the target.
bool check_lowerable(const ModelShape& shape, const GpuTarget& target, const ScheduleConfig& config,
                     std::string* error) {
  const auto fail = [&](const std::string& message) {
    if (error != nullptr) *error = message;
    return false;
  };
  const TilingConfig& t = config.tiling;
  if (target.num_sms <= 0) return fail("target " + target.name + " has no SMs");
  if (shape.kv_heads <= 0 || shape.heads % shape.kv_heads != 0 || shape.head_dim <= 0 ||
      shape.head_dim % 2 != 0 || shape.head_dim > 1024)
    return fail("model " + shape.name +
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
  for (const auto& [what, k] : {std::pair<const char*, int>{"hidden", shape.hidden},
                                {"q_dim", shape.q_dim()},
                                {"ffn", shape.ffn}}) {
    if (k % (8 * t.gemv_k_split) != 0)
      return fail("tiling.gemv_k_split = " + std::to_string(t.gemv_k_split) + " cuts the " + what +
                  " = " + std::to_string(k) +
                  " reduction columns into pieces that are not a multiple of 8; allowed: a split S "
                  "with " +
                  what + " % (8 * S) == 0");
  }
  const int group = shape.heads / shape.kv_heads;
  if (t.attn_q_heads_per_task < 0 ||
      (t.attn_q_heads_per_task > 0 && group % t.attn_q_heads_per_task != 0))
    return fail("tiling.attn_q_heads_per_task = " + std::to_string(t.attn_q_heads_per_task) +
                " does not divide the " + std::to_string(group) + " query heads per KV head of " +
                shape.name + "; allowed: 0 (whole group) or a divisor of " + std::to_string(group));
  if (std::string conflict = knob_conflict(config); !conflict.empty()) return fail(conflict);
  if (std::string misfit = silu_copies_misfit(config, shape); !misfit.empty()) return fail(misfit);
  if (!knob_value_fits("fusion.argmax_into_lm_head", config.fusion.argmax_into_lm_head, shape))
    return fail(
        "fusion.argmax_into_lm_head needs a vocabulary of at most 2^24 rows (its records "
        "hold the index as a float), not " +
        std::to_string(shape.vocab) + "; hint: set it to false");
  if (t.attn_kv_partitions < 1)
    return fail("tiling.attn_kv_partitions must be at least 1 (got " +
                std::to_string(t.attn_kv_partitions) + ")");
  if (config.pipeline.prefetch_depth < 0)
    return fail("pipeline.prefetch_depth must be >= 0 (got " +
                std::to_string(config.pipeline.prefetch_depth) + ")");
  if (config.smem.pages < 0 || config.smem.page_bytes <= 0)
    return fail("smem.pages must be >= 0 and smem.page_bytes positive (got " +
                std::to_string(config.smem.pages) + " x " + std::to_string(config.smem.page_bytes) +
                ")");
  if (config.launch.threads_per_block <= 0 || config.launch.blocks_per_sm <= 0)
    return fail("launch.threads_per_block and launch.blocks_per_sm must be positive (got " +
                std::to_string(config.launch.threads_per_block) + ", " +
                std::to_string(config.launch.blocks_per_sm) + ")");
  return true;
}

/// The model's dimensions and what every tile plan depends on.
Dims dims_for(const ModelShape& shape, const GpuTarget& target, const ScheduleConfig& config) {
  const TilingConfig& tiling = config.tiling;
  Dims d;
  d.hidden = static_cast<uint32_t>(shape.hidden);
  d.heads = static_cast<uint32_t>(shape.heads);
  d.kv_heads = static_cast<uint32_t>(shape.kv_heads);
  d.hd = static_cast<uint32_t>(shape.head_dim);
  d.q_dim = d.heads * d.hd;
  d.kv_dim = d.kv_heads * d.hd;
  d.qkv_rows = d.q_dim + 2 * d.kv_dim;
  d.ffn = static_cast<uint32_t>(shape.ffn);
  d.vocab = static_cast<uint32_t>(shape.vocab);
  d.rows_per_task = static_cast<uint32_t>(tiling.gemv_rows_per_task);
  d.group = d.heads / d.kv_heads;
  d.q_chunk = tiling.attn_q_heads_per_task > 0 ? static_cast<uint32_t>(tiling.attn_q_heads_per_task)
                                               : d.group;
  d.partitions = static_cast<uint32_t>(tiling.attn_kv_partitions);
  d.grid = static_cast<uint32_t>(target.num_sms * config.launch.blocks_per_sm);
  d.k_split = static_cast<uint32_t>(tiling.gemv_k_split);
  d.wbytes = static_cast<uint32_t>(dtype_bytes(shape.dtype));
  d.max_seq = shape.max_seq;
  return d;
}

/// The model constants of the program (the rope table's offset is set when it is allocated).
ms_abi::ModelParams model_params(const ModelShape& shape, const Dims& d) {
  const ms_abi::DTypeCode dcode =
      shape.dtype == DType::kBF16 ? ms_abi::kDTypeBF16 : ms_abi::kDTypeF32;
  ms_abi::ModelParams m{};
  m.hidden = d.hidden;
  m.layers = static_cast<uint32_t>(shape.layers);
  m.heads = d.heads;
  m.kv_heads = d.kv_heads;
  m.head_dim = d.hd;
  m.ffn = d.ffn;
  m.vocab = d.vocab;
  m.max_seq = static_cast<uint32_t>(shape.max_seq);
  m.weight_dtype = dcode;
  m.kv_dtype = dcode;
  m.rms_eps = shape.rms_eps;
  m.rope_theta = shape.rope_theta;
  m.attn_scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  return m;
}

/// The launch shape and the kernel build from the launch, smem, pipeline and kernel knobs.
void fill_launch(Program& p, const ModelShape& shape, const GpuTarget& target,
                 const ScheduleConfig& cfg) {
  LaunchShape& launch = p.launch;
  launch.threads_per_block = cfg.launch.threads_per_block;
  launch.blocks_per_sm = cfg.launch.blocks_per_sm;
  launch.grid_blocks = target.num_sms * cfg.launch.blocks_per_sm;
  launch.smem_pages = cfg.smem.pages;
  launch.smem_page_bytes = cfg.smem.page_bytes;
  launch.smem_bytes = dynamic_smem_bytes(cfg, shape);
  launch.prefetch_depth = cfg.pipeline.prefetch_depth;
  launch.dynamic_queue = cfg.assignment.policy == AssignPolicy::kDynamic;

  p.build.knobs = kernel_knob_defines(cfg);
  if (cfg.kernel.weight_stream == WeightStream::kSmemRing) p.build.x_floats = ring_x_floats(shape);
}

/// Block queues by the assignment policy, from each task's cost and its ordinal within its op.
void assign_queues(Program& p, AssignPolicy policy, const std::vector<double>& cost,
                   const std::vector<uint32_t>& tile) {
  const uint32_t grid = static_cast<uint32_t>(p.launch.grid_blocks);
  // Chained tasks run on their last arriver's block, in no queue: the others, in task order.
  std::vector<bool> chained(p.tasks.size(), false);
  for (const Instr& t : p.tasks)
    if (t.chain != 0) chained[t.chain - 1] = true;
  std::vector<uint32_t> queued;
  for (uint32_t i = 0; i < p.tasks.size(); ++i)
    if (!chained[i]) queued.push_back(i);
  const uint32_t n = static_cast<uint32_t>(queued.size());
  p.queues.clear();
  switch (policy) {
    case AssignPolicy::kRoundRobin:
      p.queues.assign(grid, {});
      for (uint32_t k = 0; k < n; ++k) p.queues[k % grid].push_back(queued[k]);
      break;
    case AssignPolicy::kLoadBalance: {
      p.queues.assign(grid, {});
      // (work so far, block): ties go to the lower block index.
      using Entry = std::pair<double, uint32_t>;
      std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
      for (uint32_t b = 0; b < grid; ++b) heap.push({0.0, b});
      for (uint32_t i : queued) {
        auto [work, block] = heap.top();
        heap.pop();
        p.queues[block].push_back(i);
        heap.push({work + cost[i], block});
      }
      break;
    }
    case AssignPolicy::kLayerAffine:
      p.queues.assign(grid, {});
      for (uint32_t i : queued) p.queues[tile[i] % grid].push_back(i);
      break;
    case AssignPolicy::kDynamic:
      p.queues.assign(1, queued);
      break;
  }
}
/// The program under construction: the activation arena, the ops with their counters, and their
/// tasks, each with the waits for the producer slices whose rows it reads and its signal.
class OpEmitter {
 public:
  Program& program() { return program_; }
  uint64_t arena() const { return arena_; }
  const std::vector<double>& costs() const { return cost_; }    // per task: estimated bytes moved
  const std::vector<uint32_t>& tiles() const { return tile_; }  // per task: ordinal within its op

  /// A region of `elements` activations at or after `min_begin`; returns its offset.
  uint32_t alloc(const std::string& name, uint64_t elements, uint64_t min_begin = 0);
  /// Emits an op and the tasks of `plan`, slice by slice; a read of input i waits for the
  /// producers `inputs[i]` of its rows. The tasks signal the op's counter(s) unless `signals` is
  /// false (the argmax). Returns the op.
  uint32_t emit_op(const std::string& name, OpKind kind, int layer, Granularity granularity,
                   const OpPlan& plan, const std::vector<Source>& inputs, bool signals = true);
  /// The op's slices are RoPE pairs of heads of 2 * half rows: readers of rows wait for the pairs
  /// of every head they touch.
  void set_pair_half(uint32_t op, uint32_t half) { counters_[op].pair_half = half; }

 private:
  uint32_t begin_op(const std::string& name, OpKind kind, int layer, Granularity granularity,
                    bool signals);
  void begin_slice(uint32_t row_begin, uint32_t row_end);
  void read(const Source& source, uint32_t row_begin, uint32_t row_end);
  void emit(Instr instr, double cost);

  Program program_;
  uint64_t arena_ = 0;
  std::vector<OpCounters> counters_;   // per op
  std::vector<ms_abi::Wait> pending_;  // waits of the task being emitted
  std::vector<double> cost_;           // per task: estimated bytes moved
  std::vector<uint32_t> tile_;         // per task: ordinal within its op
  uint32_t current_op_ = 0;
  uint32_t op_tasks_ = 0;
};

uint32_t OpEmitter::alloc(const std::string& name, uint64_t elements, uint64_t min_begin) {
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

uint32_t OpEmitter::begin_op(const std::string& name, OpKind kind, int layer,
                             Granularity granularity, bool signals) {
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

void OpEmitter::begin_slice(uint32_t row_begin, uint32_t row_end) {
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

void OpEmitter::read(const Source& source, uint32_t row_begin, uint32_t row_end) {
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

void OpEmitter::emit(Instr instr, double cost) {
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
uint32_t OpEmitter::emit_op(const std::string& name, OpKind kind, int layer,
                            Granularity granularity, const OpPlan& plan,
                            const std::vector<Source>& inputs, bool signals) {
  const uint32_t op = begin_op(name, kind, layer, granularity, signals);
  for (const PlanSlice& slice : plan) {
    begin_slice(slice.row_begin, slice.row_end);
    for (const PlanTask& task : slice.tasks) {
      for (uint32_t r = 0; r < task.read_count; ++r)
        read(inputs[task.reads[r].input], task.reads[r].row_begin, task.reads[r].row_end);
      emit(task.instr, task.cost);
    }
  }
  return op;
}

/// The decode step: which ops, in which order, over which regions of the activation arena.
class Lowerer {
 public:
  Lowerer(const ModelShape& shape, const GpuTarget& target, const ScheduleConfig& config)
      : shape_(shape), target_(target), config_(config) {}

  std::optional<Program> run(std::string* error);

 private:
  uint32_t emit_gemv(const GemvSpec& spec);
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
  Source emit_attention(int layer, const Source& qkv_src, uint32_t q, uint32_t attn_out,
                        uint32_t* records);
  /// fusion.combine_into_o with KV partitions: no combine op; the O projection's input load
  /// combines the partitions' records.
  bool combine_folded() const { return config_.fusion.combine_into_o && d_.partitions > 1; }
  Stream emit_mlp_block(int layer, const Stream& x);
  void emit_head(const Stream& x);
  bool finish(std::string* error);

  const ModelShape& shape_;
  const GpuTarget& target_;
  const ScheduleConfig& config_;
  OpEmitter ops_;
  WeightLayout layout_;
  Dims d_;
};

uint32_t Lowerer::emit_gemv(const GemvSpec& spec) {
  if (d_.k_split == 1) {
    const uint32_t op = ops_.emit_op(spec.name, spec.kind, spec.layer, spec.granularity,
                                     plan_gemv(d_, spec), {spec.in_src, spec.aux_src});
    if (spec.pairs) ops_.set_pair_half(op, d_.hd / 2);
    return op;
  }
  // (tiling.qkv_rope_pairs needs gemv_k_split 1: knob_conflict.)

  // Split-K: partial tasks into a [splits][rows] buffer, then one reduce per tile. The partial
  // buffer's effective base makes logical row r of split s land at base + s * rows + r.
  const uint32_t rows = spec.row_end - spec.row_begin;
  const uint32_t region =
      ops_.alloc(spec.name + ".partial", static_cast<uint64_t>(d_.k_split) * rows, spec.row_begin);
  const uint32_t part_base = region - spec.row_begin;
  const uint32_t partial_op = ops_.emit_op(spec.name, spec.kind, spec.layer, Granularity::kPerSlice,
                                           plan_gemv_partials(d_, spec, part_base), {spec.in_src});
  return ops_.emit_op(spec.name + ".reduce", OpKind::kReduce, spec.layer, spec.granularity,
                      plan_gemv_reduce(d_, spec, part_base), {{partial_op}, spec.aux_src});
}

void Lowerer::norm_input(GemvSpec& spec, const Stream& x, uint64_t gamma, const std::string& normed,
                         const std::string& norm_op) {
  if (config_.fusion.norm_into_gemv) {
    spec.load = InputLoad::kNorm;
    spec.gamma = gamma;
    spec.in = x.at;
    spec.in_src = x.src;
  } else {
    const uint32_t xn = ops_.alloc(normed, d_.hidden);
    spec.in = xn;
    spec.in_src = {ops_.emit_op(norm_op, OpKind::kNorm, spec.layer, config_.dependencies.residual,
                                plan_norm(d_, spec.layer, x.at, gamma, xn), {x.src})};
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
  spec.out = ops_.alloc(out, d_.hidden);
  const uint32_t op = emit_gemv(spec);
  const uint32_t add =
      ops_.emit_op(add_op, OpKind::kAdd, spec.layer, config_.dependencies.residual,
                   plan_add(d_, spec.layer, spec.out, x.at, x_next), {{op}, x.src});
  return {x_next, {add}};
}

std::optional<Program> Lowerer::run(std::string* error) {
  if (!check_lowerable(shape_, target_, config_, error)) return std::nullopt;
  layout_ = layout_for(shape_);
  d_ = dims_for(shape_, target_, config_);
  plan_inputs();
  Stream x = emit_embed();
  for (int layer = 0; layer < shape_.layers; ++layer) {
    x = emit_attention_block(layer, x);
    x = emit_mlp_block(layer, x);
  }
  emit_head(x);
  if (!finish(error)) return std::nullopt;
  Program& p = ops_.program();
  coarsen_slice_counters(p);
  if (config_.pipeline.tagged_inputs) tag_joins(p);
  assign_queues(p, config_.assignment.policy, ops_.costs(), ops_.tiles());
  return std::move(p);
}

/// The model constants and the input regions: weights, the step cell, the KV cache and the rope
/// table.
void Lowerer::plan_inputs() {
  Program& p = ops_.program();
  p.model_name = shape_.name;
  p.model = model_params(shape_, d_);
  const ms_abi::ModelParams& m = p.model;
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
  const uint32_t rope_table = ops_.alloc("rope_table", d_.hd / 2);
  p.model.rope_table = rope_table;
  p.regions.back().input = true;
}

Stream Lowerer::emit_embed() {
  const uint32_t x0 = ops_.alloc("embed.x", d_.hidden);
  const uint32_t embed_op =
      ops_.emit_op("embed", OpKind::kEmbed, -1, config_.dependencies.residual,
                   plan_embed(d_, static_cast<uint64_t>(layout_.embed), x0), {});
  return {x0, {embed_op}};
}

/// Norm, QKV, RoPE + KV append, attention (and its combine), O and the residual add.
Stream Lowerer::emit_attention_block(int layer, const Stream& x) {
  const std::string L = "L" + std::to_string(layer) + ".";
  uint32_t q = 0, qkv_raw = 0;
  Source qkv_src = emit_qkv(layer, x, &q, &qkv_raw);
  if (!config_.fusion.rope_kv_into_qkv)  // unfused RoPE + KV append: one task per head
    qkv_src = {ops_.emit_op(L + "rope", OpKind::kRope, layer, config_.dependencies.qkv_to_attention,
                            plan_rope(d_, layer, qkv_raw, q), {qkv_src})};
  // fusion.attention_into_o: no attention tasks; the O projection's input load attends itself.
  const bool attend = config_.fusion.attention_into_o;
  const bool fold = combine_folded();
  const uint32_t attn_out = fold || attend ? 0 : ops_.alloc(L + "attn_out", d_.q_dim);
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
  const uint32_t x_mid = ops_.alloc(L + "x_mid", d_.hidden);
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
  *q = ops_.alloc(L + "q", d_.q_dim);
  if (config_.fusion.rope_kv_into_qkv) {
    qkv.epilogue = ms_abi::kFlagRopeKv;
    qkv.out = *q;
    qkv.pairs = config_.tiling.qkv_rope_pairs;
    qkv.tile_rows = qkv.pairs ? d_.rows_per_task : round_up(d_.rows_per_task, d_.hd);
  } else {
    *qkv_raw = ops_.alloc(L + "qkv_raw", d_.qkv_rows);
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

/// Attention per (KV group, chunk of query heads, KV partition), then with partitions the
/// flash-decoding combine, unless fusion.combine_into_o leaves it to the O projection. Returns the
/// producers of attn_out (folded: of the partial records, whose offset goes to *records).
Source Lowerer::emit_attention(int layer, const Source& qkv_src, uint32_t q, uint32_t attn_out,
                               uint32_t* records_out) {
  const std::string L = "L" + std::to_string(layer) + ".";
  const uint32_t partitions = d_.partitions;
  const uint32_t records = partitions > 1
                               ? ops_.alloc(L + "attn_partial", static_cast<uint64_t>(partitions) *
                                                                    d_.heads * (d_.hd + 2))
                               : 0;
  const bool fold = combine_folded();
  *records_out = records;
  std::vector<Instr>& tasks = ops_.program().tasks;
  const uint32_t first_partial = static_cast<uint32_t>(tasks.size());
  const uint32_t attn_op = ops_.emit_op(
      L + "attn", OpKind::kAttention, layer,
      partitions > 1 && !fold ? Granularity::kPerSlice : config_.dependencies.attention_to_o,
      plan_attention(d_, layer, q, attn_out, records), {qkv_src});
  if (partitions == 1 || fold) return {attn_op};
  const uint32_t first_combine = static_cast<uint32_t>(tasks.size());
  const uint32_t op = ops_.emit_op(L + "attn_combine", OpKind::kAttnCombine, layer,
                                   config_.dependencies.attention_to_o,
                                   plan_combine(d_, layer, attn_out, records), {{attn_op}});
  // Last arriver: the partitions of a chunk of query heads (the producers of its one slice
  // counter, never merged by coarsen_slice_counters) chain its combine task, which leaves the
  // queues (assign_queues). Both ops list the chunks in the same order.
  if (config_.fusion.reduce_by_last_arriver) {
    for (uint32_t id = first_combine; id < tasks.size(); ++id)
      for (uint32_t part = 0; part < partitions; ++part)
        tasks[first_partial + (id - first_combine) * partitions + part].chain = id + 1;
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
  const uint32_t gate_up = ops_.alloc(L + "gate_up", 2ull * ffn);
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
    const uint32_t act = ops_.alloc(L + "act", ffn);
    const uint32_t op =
        ops_.emit_op(L + "silu_mul", OpKind::kSiluMul, layer, config_.dependencies.gate_up_to_down,
                     plan_silu_mul(d_, layer, gate_up, act), {gu_src});
    down.in = act;
    down.in_src = {op};
  }
  const uint32_t x_out = ops_.alloc(L + "x_out", d_.hidden);
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
  const uint32_t logits = ops_.alloc("logits", d_.vocab);
  head.out = logits;
  const uint32_t tiles = (d_.vocab + gemv_tile(d_, head) - 1) / gemv_tile(d_, head);
  if (config_.fusion.argmax_into_lm_head) {
    head.argmax_records = true;
    head.records = ops_.alloc("lm_head.argmax", 2ull * tiles);
  }
  const Source head_src = {emit_gemv(head)};
  std::vector<Instr>& tasks = ops_.program().tasks;
  const uint32_t id = static_cast<uint32_t>(tasks.size());
  ops_.emit_op("argmax", OpKind::kArgmax, -1, Granularity::kPerOp,
               plan_argmax(d_, shape_.layers, head.argmax_records ? head.records : logits,
                           head.argmax_records, tiles),
               {head_src}, /*signals=*/false);
  // Last arriver: every task the argmax waits for (its one all-join) chains it.
  if (config_.fusion.reduce_by_last_arriver) {
    const uint32_t c = ops_.program().waits[tasks[id].wait_begin].counter;
    for (Instr& p : tasks)
      if (p.signal_increment > 0 && p.signal_counter == c) p.chain = id + 1;
  }
}

/// The buffer extents, the launch shape and the kernel build. False when the activations need
/// more than 32-bit operand offsets address.
bool Lowerer::finish(std::string* error) {
  const uint64_t arena = ops_.arena();
  if (arena >= (uint64_t{1} << 32)) {
    if (error != nullptr)
      *error = "model " + shape_.name + " needs " + std::to_string(arena) +
               " activation elements, more than 32-bit operand offsets address";
    return false;
  }
  Program& p = ops_.program();
  const uint64_t kv_head_elements = static_cast<uint64_t>(p.model.max_seq) * d_.hd;
  p.buffer_elements[ms_abi::kBufWeights] = static_cast<uint64_t>(layout_.total_elements);
  p.buffer_elements[ms_abi::kBufActivations] = arena;
  p.buffer_elements[ms_abi::kBufKv] = 2ull * p.model.layers * d_.kv_heads * kv_head_elements;
  p.buffer_elements[ms_abi::kBufStep] = 4;
  fill_launch(p, shape_, target_, config_);
  return true;
}

}  // namespace

std::optional<Program> lower(const ModelShape& shape, const GpuTarget& target,
                             const ScheduleConfig& config, std::string* error) {
  Lowerer lowerer(shape, target, config);
  return lowerer.run(error);
}

}  // namespace megasched::schedule
