// ScheduleConfig: the one JSON object an agent, a search strategy or a person edits. lower() turns
// it (with a model and a GPU target) into a Program; every knob changes the lowered program or the
// kernel build (tests/schedule/lower_test.cpp proves it knob by knob).
//
// JSON form: {"<group>": {"<knob>": value}} over the groups tiling, fusion, dependencies,
// assignment, pipeline, smem, launch and kernel. Every key is optional (a missing key takes its
// default); an unknown key, a wrong type or a value outside the allowed set is an error that names
// the key and what is allowed.
//
// The knob table (knob_table() in schedule/config.cpp) is the one home of every knob: its path,
// allowed values, default, meaning, and for a kernel build knob the macro the device code reads.
// Parsing, the defaults of ScheduleConfig(), the search space, the mutation moves, the schema
// (schemas/schedule_config.schema.json, generated) and the kernel's -D options all come from it.
#pragma once

#include <cstdint>
#include <map>
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
  kRegisters,  // every compute warp loads its rows into registers (kernel.stream_depth chunks)
  kSmemRing,   // a loader warp streams weight tiles into the smem page ring with bulk async copies
               // completing on mbarriers, running ahead across tasks (it never waits on
               // dependencies); the other warps compute from the ring (static queues only)
};

/// How the streamed GEMV stages a SiLU x up input (the down projection's; vm/device/stream.cuh).
enum class SiluStage : uint8_t {
  kRegisters,  // both inputs loaded in register batches, a round trip each, beside the chunks
  kCopies,     // both inputs copied into the dynamic shared memory by cp.async, all in flight at
               // once (needs smem.pages x smem.page_bytes >= 8 x ffn)
};

/// How a long attention partition reads its KV history (vm/device/attention.cuh).
enum class AttentionPath : uint8_t {
  kRegisters,  // each warp loads its keys' rows into registers, in dependent batches
  kStaged,     // bulk copies of whole K and V row ranges into shared memory, then computed there
               // (registers weight stream only: the ring owns the shared memory)
};

/// How the GEMV kernel loads weights (a kernel build knob).
enum class WeightLoad : uint8_t {
  kLdg,        // plain global loads (ld.global)
  kLdgStream,  // read-only, L1 no-allocate streaming loads (ld.global.nc.L1::no_allocate)
};

// The knob values, one field per row of the knob table, grouped as in the JSON form. The table
// gives each its default (ScheduleConfig() sets them all), allowed values and meaning.
struct TilingConfig {
  int gemv_rows_per_task;
  int gemv_k_split;
  int lm_head_rows_per_task;
  int attn_q_heads_per_task;
  int attn_kv_partitions;
  bool qkv_rope_pairs;

  bool operator==(const TilingConfig&) const = default;
};

struct FusionConfig {
  bool norm_into_gemv;
  bool residual_into_gemv;
  bool silu_mul_into_down;
  bool rope_kv_into_qkv;
  bool qkv_single_gemv;
  bool gate_up_single_gemv;
  bool argmax_into_lm_head;
  bool reduce_by_last_arriver;
  bool combine_into_o;
  bool attention_into_o;

  bool operator==(const FusionConfig&) const = default;
};

struct DependencyConfig {
  Granularity qkv_to_attention;
  Granularity attention_to_o;
  Granularity gate_up_to_down;
  Granularity residual;

  bool operator==(const DependencyConfig&) const = default;
};

struct AssignmentConfig {
  AssignPolicy policy;

  bool operator==(const AssignmentConfig&) const = default;
};

struct PipelineConfig {
  int prefetch_depth;
  bool tagged_inputs;

  bool operator==(const PipelineConfig&) const = default;
};

struct SmemConfig {
  int pages;
  int page_bytes;
  int inflight_pages;  // weight ring: pages requested ahead of the oldest not yet landed (0: all)

  bool operator==(const SmemConfig&) const = default;
};

struct LaunchConfig {
  int threads_per_block;
  int blocks_per_sm;

  bool operator==(const LaunchConfig&) const = default;
};

struct KernelConfig {
  int vector_bytes;
  int rows_per_warp;
  int unroll;
  int stream_depth;  // registers weight stream: weight chunks each warp keeps in flight
  int stream_held;   // of those, the chunks a warp issues only after the task's dependency wait
  int stream_held_every;  // the blocks that hold them back: every Nth
  WeightLoad weight_load;
  WeightStream weight_stream;
  AttentionPath attention;
  SiluStage silu_stage;

  bool operator==(const KernelConfig&) const = default;
};

struct ScheduleConfig {
  /// Every knob at its default.
  ScheduleConfig();

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

/// One knob: its dotted path ("tiling.gemv_rows_per_task"), its JSON choices, its default, a
/// one-line description, and for a kernel build knob the macro the device code reads.
struct KnobSpec {
  std::string path;
  std::vector<nlohmann::json> choices;
  nlohmann::json default_value;
  std::string description;
  std::string define;  // kernel build knobs: "MS_UNROLL" (-D MS_UNROLL=<value>); else empty
};

/// Every knob, in table order.
const std::vector<KnobSpec>& knob_specs();

/// The kernel build knobs of a config as the device code sees them: each knob with a `define`,
/// by its macro, valued as the integer itself or, for a named choice, the choice's index.
std::map<std::string, int> kernel_knob_defines(const ScheduleConfig& config);

/// The JSON Schema of the config (schemas/schedule_config.schema.json is this, generated).
nlohmann::json config_schema_json();

/// Strict parse. On error returns nullopt and sets *error to one line naming the key and the
/// allowed values (and, for an unknown key, the nearest valid key).
std::optional<ScheduleConfig> parse_config(const nlohmann::json& j, std::string* error);
/// Parses JSON text (bad JSON is an error with the parser's position, never an exception).
std::optional<ScheduleConfig> parse_config_text(const std::string& text, std::string* error);

/// Parses JSON text strictly: nullopt and *error (with the parser's position) on bad JSON, and on
/// a key repeated within one object (nlohmann keeps the last one silently, so a repeated group
/// would drop every knob of the first). Never throws; nesting depth is not limited.
std::optional<nlohmann::json> parse_json_text(const std::string& text, std::string* error);

/// A value as it may appear in a one-line message: its JSON text, cut to about `max_chars` with
/// "..." (a 10 MB or 60000-deep value is shown by its head; the dump never recurses deeply).
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 60);
/// `text` cut to `max_chars` with "..." (names and messages echoed from input).
std::string text_excerpt(const std::string& text, size_t max_chars = 60);

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

/// Knob values that cannot be lowered together, whatever the shape: the first such pair as a
/// message with a hint (tiling.qkv_rope_pairs needs fusion.rope_kv_into_qkv, gemv_k_split 1 and
/// the registers build),
/// or empty. config_fits and lower() both apply it.
std::string knob_conflict(const ScheduleConfig& config);

/// 64-bit FNV-1a of a string, hex-formatted (16 digits). Used for schedule ids and cache keys.
std::string hash_hex(const std::string& bytes);

/// Edit distance (for "did you mean" hints).
int edit_distance(const std::string& a, const std::string& b);
/// The candidate closest to `name` (empty if none is reasonably close).
std::string nearest(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace megasched::schedule
