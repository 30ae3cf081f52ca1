// A Program is what lower() makes of (model, target, config) and what both VMs run: fixed-width
// tasks (abi/abi.h Instr), their waits, the counters they signal, one ordered queue per block (or
// one global queue claimed dynamically), named regions of the buffers, the launch shape and the
// kernel build knobs. It is plain data: to_json / from_json round-trip it exactly, and validate()
// (schedule/validate.h) decides whether it is safe to run.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abi/abi.h"
#include "abi/kernel_args.h"
#include "schedule/model.h"
#include "schedule/target.h"

namespace megasched::schedule {

/// What a logical op computes (its tasks are its tiles).
enum class OpKind : uint8_t {
  kEmbed,
  kNorm,         // RMSNorm (attention / MLP / final)
  kQkv,          // Q, K, V projections (one op or three)
  kRope,         // RoPE + KV append (unfused)
  kAttention,    // attention (partials when split)
  kAttnCombine,  // flash-decoding combine
  kO,            // output projection
  kGateUp,       // gate / up projections (one op or two)
  kSiluMul,      // SiLU(gate) * up (unfused)
  kDown,         // down projection
  kAdd,          // residual add (unfused)
  kReduce,       // split-K reduction of some GEMV
  kLmHead,       // LM head GEMV
  kArgmax,
  kCount,
};
/// "qkv", "attention", ...; "?" if out of range.
const char* op_kind_name(OpKind kind);

/// One logical op of the decode step; tasks point at it through Instr::op_id.
struct OpInfo {
  std::string name;  // "L3.qkv", "L3.attn", "lm_head" ...
  OpKind kind = OpKind::kEmbed;
  int layer = -1;  // -1 for ops outside the layers
};

/// A named element range of one buffer ("L3.q", "kv.L3.k.h2"), for diagnostics and profiles.
struct Region {
  std::string name;
  uint32_t buffer = 0;  // ms_abi::BufferId
  uint64_t begin = 0;   // element offsets [begin, end)
  uint64_t end = 0;
  bool input = false;  // written before the step starts (weights, the rope table, the step cell,
                       // the KV history of earlier positions). A label only: the validator and
                       // its ground truth take the inputs from the model, never from this flag
};

/// Launch shape and the per-block resources the kernel uses.
struct LaunchShape {
  int threads_per_block = 256;
  int blocks_per_sm = 1;
  int grid_blocks = 0;         // num_sms * blocks_per_sm: the persistent grid
  int smem_pages = 0;          // shared-memory pages per block
  int smem_page_bytes = 0;     // bytes per page
  int smem_bytes = 0;          // dynamic shared memory per block (pages * page_bytes)
  int prefetch_depth = 0;      // upcoming tasks whose weights a block prefetches while waiting
  bool dynamic_queue = false;  // true: queues[0] is one global queue claimed with an atomic ticket
};

/// The kernel's compile-time constants that come from the config: every kernel build knob
/// (schedule::kernel_knob_defines, by the macro the device code reads) and the weight ring's
/// staging size. vm::kernel_defines turns them, with the launch shape and the model, into the whole
/// NVRTC option list; the ring's pages and threads per block are read from the launch shape.
struct KernelBuild {
  std::map<std::string, int> knobs;  // "MS_UNROLL" -> 2, ...: one entry per kernel build knob
  int x_floats = 0;  // weight-ring builds: floats of the GEMV input staging area (else 0)

  /// The value of a kernel knob's macro (0 when the program does not set it).
  int knob(const std::string& define) const;
  /// True when the kernel streams weights through the smem ring (kernel.weight_stream).
  bool weight_ring() const { return knob("MS_WEIGHT_RING") != 0; }
};

struct Program {
  std::string model_name;
  ms_abi::ModelParams model{};                                // constants the opcodes read
  std::array<uint64_t, ms_abi::kBufCount> buffer_elements{};  // extent of each buffer, elements
  std::vector<ms_abi::Instr> tasks;                           // task id = index
  std::vector<ms_abi::Wait> waits;            // Instr::wait_begin/wait_count index this table
  std::vector<uint32_t> counter_totals;       // per counter: increments it receives per step
  std::vector<std::string> counter_names;     // per counter, for diagnostics
  std::vector<std::vector<uint32_t>> queues;  // per block: task ids in execution order
  std::vector<OpInfo> ops;                    // Instr::op_id indexes this table
  std::vector<Region> regions;                // named buffer regions
  LaunchShape launch;
  KernelBuild build;

  uint32_t num_counters() const { return static_cast<uint32_t>(counter_totals.size()); }
  /// "task 812 (L3.down tile 5)".
  std::string task_label(uint32_t task) const;
  /// "act[2048:4096] (L3.attn_out[0:2048])": the range and the region that holds its start.
  std::string range_label(uint32_t buffer, uint64_t begin, uint64_t end) const;
  /// Finds a region by name.
  const Region* find_region(const std::string& name) const;
};

/// The kernel's wait-head table (abi/kernel_args.h WaitHead): for task t, entries
/// [t * kWaitHeads, (t + 1) * kWaitHeads) are its first waits with their counters' per-step totals;
/// unused entries (and any whose wait or counter index is out of range) are zero. At least one
/// task's worth of entries, so an empty program still uploads a table.
std::vector<ms_abi::WaitHead> wait_heads(const Program& program);

const char* opcode_name(uint16_t opcode);  // "gemv", "attn_partial", ...; "?" if out of range
const char* buffer_name(uint32_t buffer);  // "weights", "act", "kv", "step"

/// Exact round trip (every field of every struct; an Instr's `chain` is written only when it is
/// not 0, and read as 0 when absent).
nlohmann::json to_json(const Program& program);
/// Strict: a missing field or wrong type is an error in *error, never an exception.
std::optional<Program> program_from_json(const nlohmann::json& j, std::string* error);

/// Whether a program read from JSON (program_from_json) belongs to this model and target, before
/// anything sizes a buffer from it. validate() judges a program against its own declared buffers
/// and constants; this checks those declarations against the model that will run it:
///   - model_name names this model, and every model constant (dimensions, dtypes, RMSNorm epsilon,
///     RoPE theta, attention scale) is the model's;
///   - the weights, KV and step buffers have exactly the model's extents, the activation arena at
///     most what any lowering of the shape allocates (max_activation_elements), and the RoPE table
///     lies inside it;
///   - every kernel build knob is set, to a value of the knob table; the launch and shared-memory
///     fields are knob-table values, the dynamic shared memory, the ring's staging floats and the
///     grid are what they make on this shape and target.
/// False with *error naming the first field that differs and both values.
bool check_program_fits_model(const Program& program, const ModelShape& shape,
                              const GpuTarget& target, std::string* error);

/// The most activation elements any lowering of `shape` allocates (every fusion off, the largest
/// split-K and KV partition counts of the knob table, alignment padding included, and room for
/// the LM head's argmax records).
uint64_t max_activation_elements(const ModelShape& shape);

/// Size figures of a program; weight_bytes feeds the cost model.
struct ProgramStats {
  uint64_t tasks = 0;
  uint64_t waits = 0;
  uint64_t counters = 0;
  uint64_t queues = 0;
  uint64_t weight_bytes =
      0;  // weight bytes the tasks stream (each element once per task reading it)
};
ProgramStats stats(const Program& program);

}  // namespace megasched::schedule
