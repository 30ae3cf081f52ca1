// ScheduleConfig: the one JSON object an agent, a search strategy or a person edits. lower() turns
// it (with a model and a GPU target) into a Program; every knob changes the lowered program or the
// kernel build identity (tests/schedule/lower_test.cpp proves it knob by knob).
//
// JSON form (every key optional; a missing key takes its default; an unknown key, a wrong type or
// a value outside the allowed set is an error that names the key and what is allowed):
//   {
//     "tiling":       {"gemv_rows_per_task": 64, "gemv_k_split": 1, "lm_head_rows_per_task": 512,
//                      "attn_q_heads_per_task": 0, "attn_kv_partitions": 1},
//     "fusion":       {"norm_into_gemv": true, "residual_into_gemv": true,
//                      "silu_mul_into_down": true, "rope_kv_into_qkv": true,
//                      "qkv_single_gemv": true, "gate_up_single_gemv": true},
//     "dependencies": {"qkv_to_attention": "per_op", "attention_to_o": "per_op",
//                      "gate_up_to_down": "per_op", "residual": "per_op"},
//     "assignment":   {"policy": "round_robin"},
//     "pipeline":     {"prefetch_depth": 2},
//     "smem":         {"pages": 2, "page_bytes": 16384},
//     "launch":       {"threads_per_block": 256, "blocks_per_sm": 1},
//     "kernel":       {"vector_bytes": 16, "rows_per_warp": 2, "unroll": 2, "weight_load": "ldg",
//                       "weight_stream": "registers"}
//   }
// The allowed values of each knob are in knob_specs() (and schemas/schedule_config.schema.json).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/model.h"

namespace megasched::schedule {

/// How a producer op signals its consumers along one dependency edge.
enum class Granularity : uint8_t {
  kPerOp,     // one counter for the whole op: consumers wait for every tile (all-join)
  kPerSlice,  // one counter per producer tile: a consumer waits only for the tiles it reads
};

/// Which block's queue each task goes to.
enum class AssignPolicy : uint8_t {
  kRoundRobin,   // tasks in topological order, task i to block i mod grid
  kLoadBalance,  // each task (topological order) to the block with the least estimated work so far
  kLayerAffine,  // tile t of every op to block (t mod grid): a block keeps the same slice each
                 // layer
  kDynamic,      // one global queue in topological order, claimed with an atomic ticket
};

/// Who moves GEMV weights into the SMs (a kernel build knob).
enum class WeightStream : uint8_t {
  kRegisters,  // every compute warp loads its rows into registers (double-buffered batches)
  kSmemRing,   // a loader warp streams weight tiles into the smem page ring with bulk async copies
               // completing on mbarriers, running ahead across tasks (it never waits on
               // dependencies); the other warps compute from the ring (static queues only)
};

/// How the GEMV kernel loads weights (a kernel build knob).
enum class WeightLoad : uint8_t {
  kLdg,        // plain global loads (ld.global)
  kLdgStream,  // read-only, L1 no-allocate streaming loads (ld.global.nc.L1::no_allocate)
};

struct TilingConfig {
  int gemv_rows_per_task =
      64;  // output rows per GEMV task (QKV tiles round up to head_dim when RoPE is fused); 0:
           // per block (each op cut into at most one tile per block of the grid)
  int gemv_k_split = 1;  // reduction split: >1 adds partial buffers and a reduce task per tile
  int lm_head_rows_per_task = 512;  // output rows per LM-head task; 0: per block
  int attn_q_heads_per_task = 0;    // query heads per attention task; 0 = the whole KV group
  int attn_kv_partitions =
      1;  // flash-decoding partitions of the KV history (>1 adds combine tasks)

  bool operator==(const TilingConfig&) const = default;
};

struct FusionConfig {
  bool norm_into_gemv = true;       // RMSNorm in the next GEMV's input load (no norm task)
  bool residual_into_gemv = true;   // residual add in the O / down GEMV epilogue (no add task)
  bool silu_mul_into_down = true;   // SiLU(gate) * up in the down GEMV's input load
  bool rope_kv_into_qkv = true;     // RoPE + KV append in the QKV epilogue (no rope task)
  bool qkv_single_gemv = true;      // Q, K, V as one GEMV over the concatenated rows
  bool gate_up_single_gemv = true;  // gate and up as one GEMV

  bool operator==(const FusionConfig&) const = default;
};

struct DependencyConfig {
  Granularity qkv_to_attention = Granularity::kPerOp;
  Granularity attention_to_o = Granularity::kPerOp;
  Granularity gate_up_to_down = Granularity::kPerOp;
  Granularity residual =
      Granularity::kPerOp;  // residual-stream producers (O, down, adds) to their readers

  bool operator==(const DependencyConfig&) const = default;
};

struct AssignmentConfig {
  AssignPolicy policy = AssignPolicy::kRoundRobin;

  bool operator==(const AssignmentConfig&) const = default;
};

struct PipelineConfig {
  int prefetch_depth = 2;  // upcoming tasks whose weights a block prefetches while it waits

  bool operator==(const PipelineConfig&) const = default;
};

struct SmemConfig {
  int pages = 2;           // shared-memory pages per block
  int page_bytes = 16384;  // bytes per page (the GEMV stages its input vector through them)

  bool operator==(const SmemConfig&) const = default;
};

struct LaunchConfig {
  int threads_per_block = 256;
  int blocks_per_sm = 1;

  bool operator==(const LaunchConfig&) const = default;
};

struct KernelConfig {
  int vector_bytes = 16;  // bytes per weight load per thread (4, 8, 16)
  int rows_per_warp = 2;  // GEMV rows a warp computes at once (reusing each input load)
  int unroll = 2;         // independent load batches in flight per warp
  WeightLoad weight_load = WeightLoad::kLdg;
  WeightStream weight_stream = WeightStream::kRegisters;

  bool operator==(const KernelConfig&) const = default;
};

struct ScheduleConfig {
  TilingConfig tiling;
  FusionConfig fusion;
  DependencyConfig dependencies;
  AssignmentConfig assignment;
  PipelineConfig pipeline;
  SmemConfig smem;
  LaunchConfig launch;
  KernelConfig kernel;

  bool operator==(const ScheduleConfig&) const = default;
};

/// One knob: its dotted path ("tiling.gemv_rows_per_task"), its JSON choices, its default, and a
/// one-line description. The knob table drives parsing, the schema, the search space and the
/// mutation strategy, so they cannot drift apart.
struct KnobSpec {
  std::string path;
  std::vector<nlohmann::json> choices;
  nlohmann::json default_value;
  std::string description;
};

const std::vector<KnobSpec>& knob_specs();

/// Strict parse. On error returns nullopt and sets *error to one line naming the key and the
/// allowed values (and, for an unknown key, the nearest valid key).
std::optional<ScheduleConfig> parse_config(const nlohmann::json& j, std::string* error);
/// Parses JSON text (bad JSON is an error with the parser's position, never an exception).
std::optional<ScheduleConfig> parse_config_text(const std::string& text, std::string* error);

/// Canonical JSON: every knob present, keys sorted (nlohmann's default object order).
nlohmann::json to_json(const ScheduleConfig& config);
/// to_json(config).dump(): the byte string schedule ids hash.
std::string canonical_string(const ScheduleConfig& config);

/// Read / write one knob by its dotted path (used by search moves). get returns null for an
/// unknown path; set returns false (and *error) when the path or value is not allowed.
nlohmann::json get_knob(const ScheduleConfig& config, const std::string& path);
bool set_knob(ScheduleConfig* config, const std::string& path, const nlohmann::json& value,
              std::string* error);

/// The knob paths whose values differ between a and b, in knob_specs() order.
std::vector<std::string> changed_knobs(const ScheduleConfig& a, const ScheduleConfig& b);

/// Number of knobs that differ from the default (near-ties go to the simpler config).
int complexity(const ScheduleConfig& config);

/// The search space for a model and target: knob_specs() with each knob's choices filtered to the
/// values that lower for this shape (e.g. attn_q_heads_per_task must divide heads / kv_heads).
/// JSON form documented in schemas/search_space.schema.json.
nlohmann::json search_space_json(const ModelShape& shape);

/// Whether a knob value can be lowered for this shape (e.g. attn_q_heads_per_task must divide the
/// KV group; gemv_k_split must keep every GEMV's column chunks multiples of 8 elements).
bool knob_value_fits(const std::string& path, const nlohmann::json& value, const ModelShape& shape);

/// 64-bit FNV-1a of a string, hex-formatted (16 digits). Used for schedule ids and cache keys.
std::string hash_hex(const std::string& bytes);

/// Edit distance (for "did you mean" hints).
int edit_distance(const std::string& a, const std::string& b);
/// The candidate closest to `name` (empty if none is reasonably close).
std::string nearest(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace megasched::schedule
