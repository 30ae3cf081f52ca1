#include "schedule/config.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include "abi/abi.h"

namespace megasched::schedule {
namespace {

using nlohmann::json;

/// Accessors of one knob: read its value as JSON, write it from JSON (already checked against the
/// knob's choices).
struct KnobAccess {
  std::function<json(const ScheduleConfig&)> get;
  std::function<void(ScheduleConfig*, const json&)> set;
};

struct KnobEntry {
  KnobSpec spec;
  KnobAccess access;
};

template <typename Group, typename Field>
KnobAccess field_access(Group ScheduleConfig::*group, Field Group::*field) {
  return {[=](const ScheduleConfig& c) { return json(c.*group.*field); },
          [=](ScheduleConfig* c, const json& v) { (c->*group).*field = v.get<Field>(); }};
}

template <typename Group, typename Enum>
KnobAccess enum_access(Group ScheduleConfig::*group, Enum Group::*field,
                       std::vector<std::pair<Enum, std::string>> names) {
  return {[=](const ScheduleConfig& c) {
            for (const auto& [e, n] : names)
              if (e == c.*group.*field) return json(n);
            return json(nullptr);
          },
          [=](ScheduleConfig* c, const json& v) {
            for (const auto& [e, n] : names)
              if (n == v.get<std::string>()) (c->*group).*field = e;
          }};
}

std::vector<json> ints(std::initializer_list<int> values) {
  std::vector<json> out;
  for (int v : values) out.emplace_back(v);
  return out;
}

// The kernel knobs of the knob table (knob_table's `add`): each a define of the megakernel build.
template <typename Add>
void add_kernel_knobs(Add& add) {
  add("kernel.vector_bytes", ints({4, 8, 16}), 16, "bytes per weight load per thread",
      field_access(&ScheduleConfig::kernel, &KernelConfig::vector_bytes), "MS_VECTOR_BYTES");
  add("kernel.rows_per_warp", ints({1, 2, 3, 4}), 2, "GEMV rows a warp computes at once",
      field_access(&ScheduleConfig::kernel, &KernelConfig::rows_per_warp), "MS_ROWS_PER_WARP");
  add("kernel.unroll", ints({1, 2, 4, 8}), 2, "independent weight-load batches in flight per warp",
      field_access(&ScheduleConfig::kernel, &KernelConfig::unroll), "MS_UNROLL");
  add("kernel.stream_depth", ints({2, 3, 4}), 2,
      "streamed GEMV (registers weight stream): weight chunks (kernel.unroll vectors x "
      "kernel.rows_per_warp rows per lane) each warp keeps in flight in registers, the first "
      "ones issued before the task's dependency wait; 3 and 4 hold 1.5x and 2x depth 2's "
      "bytes in flight per SM. Needs kernel.weight_stream registers",
      field_access(&ScheduleConfig::kernel, &KernelConfig::stream_depth), "MS_STREAM_DEPTH");
  add("kernel.stream_held", ints({0, 1, 2, 3, 4}), 0,
      "streamed GEMV (registers weight stream): of the kernel.stream_depth chunks a warp keeps "
      "in flight, the ones it issues only once the task's dependency wait holds instead of "
      "before the wait: a block's poll queues behind fewer of its own weight bytes (a hop "
      "behind 128 KiB a block took 2 us on an H200, behind 64 KiB 1.4), and fewer bytes "
      "arrive while it waits; 0: every chunk before the wait. Needs "
      "kernel.weight_stream registers and at most kernel.stream_depth",
      field_access(&ScheduleConfig::kernel, &KernelConfig::stream_held), "MS_STREAM_HELD");
  add("kernel.stream_held_every", ints({1, 2, 4}), 2,
      "the blocks that hold back kernel.stream_held chunks: N every Nth (block b when "
      "b % N == N - 1), so that some blocks poll behind fewer bytes while the others keep every "
      "chunk in flight during their waits; 1 every block. The default, 2, acts once "
      "kernel.stream_held > 0 (one move of kernel.stream_held from the default reaches the "
      "fastest setting measured); another value needs kernel.stream_held > 0",
      field_access(&ScheduleConfig::kernel, &KernelConfig::stream_held_every),
      "MS_STREAM_HELD_EVERY");
  add("kernel.weight_load", {"ldg", "ldg_stream"}, "ldg",
      "weight load instruction: ld.global, or ld.global.nc.L1::no_allocate (streaming)",
      enum_access(&ScheduleConfig::kernel, &KernelConfig::weight_load,
                  std::vector<std::pair<WeightLoad, std::string>>{
                      {WeightLoad::kLdg, "ldg"}, {WeightLoad::kLdgStream, "ldg_stream"}}),
      "MS_WEIGHT_LOAD");
  add("kernel.weight_stream", {"registers", "smem_ring"}, "registers",
      "GEMV weights: loaded by every warp into registers, or streamed by a loader warp into the "
      "smem page ring (smem.pages x smem.page_bytes) ahead of the dependency waits",
      enum_access(
          &ScheduleConfig::kernel, &KernelConfig::weight_stream,
          std::vector<std::pair<WeightStream, std::string>>{
              {WeightStream::kRegisters, "registers"}, {WeightStream::kSmemRing, "smem_ring"}}),
      "MS_WEIGHT_RING");
  add("kernel.attention", {"registers", "staged"}, "registers",
      "long attention partitions: key and value rows loaded into registers in dependent "
      "batches, or staged into shared memory by bulk copies (a round holds (smem.pages x "
      "smem.page_bytes - 1 KiB per compute warp) / (4 x head_dim) bf16 keys; registers weight "
      "stream only)",
      enum_access(
          &ScheduleConfig::kernel, &KernelConfig::attention,
          std::vector<std::pair<AttentionPath, std::string>>{
              {AttentionPath::kRegisters, "registers"}, {AttentionPath::kStaged, "staged"}}),
      "MS_ATTN_STAGED");
  add("kernel.silu_stage", {"registers", "copies"}, "registers",
      "the down projection's SiLU x up input (fusion.silu_mul_into_down): gate and up loaded in "
      "register batches beside the weight chunks in flight, a round trip a batch, or copied "
      "into the dynamic shared memory by cp.async, every copy in flight at once and in no "
      "register, then combined there (needs kernel.weight_stream registers, "
      "fusion.silu_mul_into_down, tiling.gemv_k_split 1, pipeline.tagged_inputs false and "
      "smem.pages x smem.page_bytes >= 8 x ffn bytes)",
      enum_access(&ScheduleConfig::kernel, &KernelConfig::silu_stage,
                  std::vector<std::pair<SiluStage, std::string>>{
                      {SiluStage::kRegisters, "registers"}, {SiluStage::kCopies, "copies"}}),
      "MS_SILU_COPIES");
}

// The fusion knobs of the knob table (knob_table's `add`).
template <typename Add>
void add_fusion_knobs(Add& add, const std::vector<json>& bools) {
  add("fusion.norm_into_gemv", bools, true, "RMSNorm in the next GEMV's input load (no norm task)",
      field_access(&ScheduleConfig::fusion, &FusionConfig::norm_into_gemv));
  add("fusion.residual_into_gemv", bools, true, "residual add in the O / down GEMV epilogue",
      field_access(&ScheduleConfig::fusion, &FusionConfig::residual_into_gemv));
  add("fusion.silu_mul_into_down", bools, true,
      "SiLU(gate) * up in the down projection's input load",
      field_access(&ScheduleConfig::fusion, &FusionConfig::silu_mul_into_down));
  add("fusion.rope_kv_into_qkv", bools, true, "RoPE and the KV-cache append in the QKV epilogue",
      field_access(&ScheduleConfig::fusion, &FusionConfig::rope_kv_into_qkv));
  add("fusion.qkv_single_gemv", bools, true, "Q, K and V as one GEMV over the concatenated rows",
      field_access(&ScheduleConfig::fusion, &FusionConfig::qkv_single_gemv));
  add("fusion.gate_up_single_gemv", bools, true, "gate and up projections as one GEMV",
      field_access(&ScheduleConfig::fusion, &FusionConfig::gate_up_single_gemv));
  add("fusion.argmax_into_lm_head", bools, false,
      "each LM-head tile also writes the argmax of its logits, so the argmax task reduces one "
      "record per tile instead of scanning the vocabulary",
      field_access(&ScheduleConfig::fusion, &FusionConfig::argmax_into_lm_head));
  add("fusion.reduce_by_last_arriver", bools, false,
      "the step's final reductions run on the block whose input arrives last, not as queued "
      "tasks that poll for all of them: the argmax after the LM head's tiles, and with "
      "tiling.attn_kv_partitions > 1 the flash-decoding combine of each head chunk (unless "
      "fusion.combine_into_o folds it into the O projection)",
      field_access(&ScheduleConfig::fusion, &FusionConfig::reduce_by_last_arriver));
  add("fusion.combine_into_o", bools, false,
      "the O projection's input load merges the attention partitions' records itself (each O "
      "tile combines every head): no combine tasks and no combine hop; needs "
      "tiling.attn_kv_partitions > 1, kernel.weight_stream registers, tiling.gemv_k_split 1 and "
      "shared memory for the input, the weights and one partition's records of every head",
      field_access(&ScheduleConfig::fusion, &FusionConfig::combine_into_o));
  add("fusion.attention_into_o", bools, false,
      "no attention tasks: the O projection's input load computes the attention of every head "
      "itself (each O tile reads every query and the whole KV history, so it pays at short "
      "contexts only); no attention hop; needs kernel.weight_stream registers, "
      "tiling.gemv_k_split 1 and 4 x q_dim bytes of smem pages, and the attention tasks' knobs "
      "at their defaults (tiling.attn_kv_partitions 1, tiling.attn_q_heads_per_task 0, "
      "kernel.attention registers, dependencies.attention_to_o per_op)",
      field_access(&ScheduleConfig::fusion, &FusionConfig::attention_into_o));
}

// The knob table: the one home of every knob's path, allowed values, default, meaning and (for a
// kernel build knob) its macro. Named choices are listed in the order of their enum, so a kernel
// knob's -D value (the choice's index) is the enum's value.
const std::vector<KnobEntry>& knob_table() {
  static const std::vector<KnobEntry> table = [] {
    const std::vector<std::pair<Granularity, std::string>> gran = {
        {Granularity::kPerOp, "per_op"}, {Granularity::kPerSlice, "per_slice"}};
    const std::vector<json> gran_choices = {"per_op", "per_slice"};
    const std::vector<json> bools = {true, false};
    std::vector<KnobEntry> t;
    auto add = [&](std::string path, std::vector<json> choices, json default_value,
                   std::string description, KnobAccess access, std::string define = "") {
      t.push_back({{std::move(path), std::move(choices), std::move(default_value),
                    std::move(description), std::move(define)},
                   std::move(access)});
    };
    add("tiling.gemv_rows_per_task", ints({0, 8, 16, 32, 64, 128, 256}), 64,
        "output rows per GEMV task (QKV tiles round up to whole heads when RoPE is fused); 0: "
        "per block, the fewest rows (a multiple of 8) that give each op at most one tile per block",
        field_access(&ScheduleConfig::tiling, &TilingConfig::gemv_rows_per_task));
    add("tiling.gemv_k_split", ints({1, 2, 4, 8}), 1,
        "reduction split of each GEMV tile: >1 adds partial tasks and a deterministic reduce task",
        field_access(&ScheduleConfig::tiling, &TilingConfig::gemv_k_split));
    add("tiling.lm_head_rows_per_task", ints({0, 128, 256, 512, 1024, 2048}), 512,
        "output rows (vocabulary entries) per LM-head task; 0: per block (at most one tile per "
        "block)",
        field_access(&ScheduleConfig::tiling, &TilingConfig::lm_head_rows_per_task));
    add("tiling.attn_q_heads_per_task", ints({0, 1, 2, 4, 8}), 0,
        "query heads per attention task (0: the whole KV group); must divide heads/kv_heads",
        field_access(&ScheduleConfig::tiling, &TilingConfig::attn_q_heads_per_task));
    add("tiling.attn_kv_partitions", ints({1, 2, 4, 8, 16}), 1,
        "flash-decoding partitions of the KV history per head group (>1 adds combine tasks, or "
        "with fusion.combine_into_o a combine in the O projection's input load)",
        field_access(&ScheduleConfig::tiling, &TilingConfig::attn_kv_partitions));
    add("tiling.qkv_rope_pairs", bools, false,
        "fused QKV tiles of RoPE pairs (dims d and d + head_dim/2 of a head) instead of whole "
        "heads, so QKV spreads over every block; needs fusion.rope_kv_into_qkv, "
        "tiling.gemv_k_split 1, kernel.weight_stream registers and 4 x hidden bytes of smem pages",
        field_access(&ScheduleConfig::tiling, &TilingConfig::qkv_rope_pairs));
    add_fusion_knobs(add, bools);
    add("dependencies.qkv_to_attention", gran_choices, "per_op",
        "QKV -> attention edge: one counter per op (all-join) or per producer tile",
        enum_access(&ScheduleConfig::dependencies, &DependencyConfig::qkv_to_attention, gran));
    add("dependencies.attention_to_o", gran_choices, "per_op",
        "attention (or combine) -> O projection edge",
        enum_access(&ScheduleConfig::dependencies, &DependencyConfig::attention_to_o, gran));
    add("dependencies.gate_up_to_down", gran_choices, "per_op",
        "gate/up (or SiLU*mul) -> down projection edge",
        enum_access(&ScheduleConfig::dependencies, &DependencyConfig::gate_up_to_down, gran));
    add("dependencies.residual", gran_choices, "per_op",
        "residual-stream producers (embed, O, down, adds) -> their readers",
        enum_access(&ScheduleConfig::dependencies, &DependencyConfig::residual, gran));
    add("assignment.policy", {"round_robin", "load_balance", "layer_affine", "dynamic"},
        "round_robin",
        "task-to-block assignment: static queues, or one global queue claimed with an atomic",
        enum_access(&ScheduleConfig::assignment, &AssignmentConfig::policy,
                    std::vector<std::pair<AssignPolicy, std::string>>{
                        {AssignPolicy::kRoundRobin, "round_robin"},
                        {AssignPolicy::kLoadBalance, "load_balance"},
                        {AssignPolicy::kLayerAffine, "layer_affine"},
                        {AssignPolicy::kDynamic, "dynamic"}}));
    add("pipeline.prefetch_depth", ints({0, 1, 2, 3, 4}), 2,
        "upcoming tasks whose weights a block prefetches into L2 while it waits",
        field_access(&ScheduleConfig::pipeline, &PipelineConfig::prefetch_depth));
    add("pipeline.tagged_inputs", bools, false,
        "a GEMV that stages a whole input (the norm or SiLU x up prologue) reads it as tagged "
        "words that its producers (streamed GEMVs with the plain or residual epilogue) write "
        "beside the activations: it polls its waits only to 7/8 of their producers, reads each "
        "word once it carries this step's tag, and acquires the waits in full before its first "
        "write, so the last producers' signal hop leaves the critical path; needs "
        "kernel.weight_stream registers and tiling.gemv_k_split 1",
        field_access(&ScheduleConfig::pipeline, &PipelineConfig::tagged_inputs));
    add("smem.pages", ints({1, 2, 4, 5, 6, 8}), 2,
        "shared-memory pages per block: the GEMV input staging and staged attention's KV rows, "
        "or the weight ring",
        field_access(&ScheduleConfig::smem, &SmemConfig::pages));
    add("smem.page_bytes", ints({4096, 8192, 16384, 32768, 65536}), 16384,
        "bytes per shared-memory page",
        field_access(&ScheduleConfig::smem, &SmemConfig::page_bytes));
    add("smem.inflight_pages", ints({0, 1, 2, 3, 4}), 0,
        "weight ring: the loader requests page k only once page k - this many has landed, so at "
        "most this many pages of weights are in flight per block whatever the ring holds (a hop "
        "behind a large ring waits for the bytes ahead of it); 0: as many as the ring has free. "
        "Needs kernel.weight_stream smem_ring and fewer than smem.pages",
        field_access(&ScheduleConfig::smem, &SmemConfig::inflight_pages), "MS_RING_INFLIGHT");
    add("launch.threads_per_block", ints({128, 160, 256, 288, 384, 512, 544, 1024}), 256,
        "threads per block (160, 288, 544: 4, 8, 16 compute warps beside the weight ring's loader)",
        field_access(&ScheduleConfig::launch, &LaunchConfig::threads_per_block));
    add("launch.blocks_per_sm", ints({1, 2, 3, 4}), 1,
        "persistent blocks per SM (grid = SMs x this)",
        field_access(&ScheduleConfig::launch, &LaunchConfig::blocks_per_sm));
    add_kernel_knobs(add);
    return t;
  }();
  return table;
}

const KnobEntry* find_knob(const std::string& path) {
  for (const auto& k : knob_table())
    if (k.spec.path == path) return &k;
  return nullptr;
}

std::string choices_text(const KnobSpec& spec) {
  std::string s;
  for (const auto& c : spec.choices) s += (s.empty() ? "" : ", ") + c.dump();
  return s;
}

const char* json_type(const json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "null";
}

bool value_allowed(const KnobSpec& spec, const json& value) {
  for (const auto& c : spec.choices) {
    if (c.is_boolean() != value.is_boolean()) continue;
    if (c.is_number_integer() && !value.is_number_integer()) continue;
    if (c.is_string() && !value.is_string()) continue;
    if (c == value) return true;
  }
  return false;
}

std::vector<std::string> group_names() {
  std::vector<std::string> groups;
  for (const auto& k : knob_table()) {
    std::string g = k.spec.path.substr(0, k.spec.path.find('.'));
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  return groups;
}

std::vector<std::string> keys_of_group(const std::string& group) {
  std::vector<std::string> keys;
  for (const auto& k : knob_table())
    if (k.spec.path.rfind(group + ".", 0) == 0)
      keys.push_back(k.spec.path.substr(group.size() + 1));
  return keys;
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  std::string near = name.size() > 64 ? std::string() : nearest(name, candidates);
  std::string all;
  for (const auto& c : candidates) all += (all.empty() ? "" : ", ") + c;
  return (near.empty() ? std::string() : " (did you mean '" + near + "'?)") +
         "; valid keys: " + all;
}

}  // namespace

ScheduleConfig::ScheduleConfig() {
  for (const auto& k : knob_table()) k.access.set(this, k.spec.default_value);
}

const std::vector<KnobSpec>& knob_specs() {
  static const std::vector<KnobSpec> specs = [] {
    std::vector<KnobSpec> s;
    for (const auto& k : knob_table()) s.push_back(k.spec);
    return s;
  }();
  return specs;
}

std::map<std::string, int> kernel_knob_defines(const ScheduleConfig& config) {
  std::map<std::string, int> out;
  for (const auto& k : knob_table()) {
    if (k.spec.define.empty()) continue;
    const json value = k.access.get(config);
    if (value.is_number_integer()) {
      out[k.spec.define] = value.get<int>();
    } else {
      const auto it = std::find(k.spec.choices.begin(), k.spec.choices.end(), value);
      out[k.spec.define] = static_cast<int>(it - k.spec.choices.begin());
    }
  }
  return out;
}

json config_schema_json() {
  json groups = json::object();
  for (const auto& k : knob_table()) {
    const auto dot = k.spec.path.find('.');
    json& group = groups[k.spec.path.substr(0, dot)];
    group["type"] = "object";
    group["additionalProperties"] = false;
    group["properties"][k.spec.path.substr(dot + 1)] = {{"default", k.spec.default_value},
                                                        {"description", k.spec.description},
                                                        {"enum", k.spec.choices},
                                                        {"type", json_type(k.spec.default_value)}};
  }
  return {{"$id", "https://megasched.dev/schemas/schedule_config.schema.json"},
          {"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"title", "ScheduleConfig"},
          {"description",
           "The edit surface of megasched. Every key is optional (missing keys take their "
           "default); unknown keys are errors. Generated from the knob table in "
           "schedule/config.cpp (tests/schemas_test.cpp checks the file is what it generates)."},
          {"type", "object"},
          {"additionalProperties", false},
          {"properties", groups}};
}

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = 1 << 30;
  for (const auto& c : candidates) {
    int d = edit_distance(name, c);
    if (d < best_d) best_d = d, best = c;
  }
  // Close enough to be a typo: at most a third of the longer name (and at least 2 edits allowed).
  int limit = std::max<int>(2, static_cast<int>(std::max(name.size(), best.size())) / 3);
  return best_d <= limit ? best : std::string();
}

std::optional<ScheduleConfig> parse_config(const json& j, std::string* error) {
  auto fail = [&](std::string msg) -> std::optional<ScheduleConfig> {
    if (error) *error = std::move(msg);
    return std::nullopt;
  };
  if (!j.is_object())
    return fail(std::string("config must be a JSON object, got ") + json_type(j) +
                "; start from `megasched propose` output");
  ScheduleConfig config;
  const auto groups = group_names();
  for (const auto& [group, body] : j.items()) {
    if (std::find(groups.begin(), groups.end(), group) == groups.end())
      return fail("unknown config key '" + text_excerpt(group) + "'" + did_you_mean(group, groups));
    if (!body.is_object())
      return fail("config key '" + group + "' must be an object, got " + json_type(body));
    const auto keys = keys_of_group(group);
    for (const auto& [key, value] : body.items()) {
      const std::string path = group + "." + key;
      const KnobEntry* knob = find_knob(path);
      if (!knob) {
        std::string near = key.size() > 64 ? std::string() : nearest(key, keys);
        std::string all;
        for (const auto& k : keys) all += (all.empty() ? "" : ", ") + k;
        return fail("unknown config key '" + group + "." + text_excerpt(key) + "'" +
                    (near.empty() ? "" : " (did you mean '" + group + "." + near + "'?)") +
                    "; valid keys in '" + group + "': " + all);
      }
      if (!value_allowed(knob->spec, value))
        return fail("config key '" + path + "' has value " + json_excerpt(value) + " (" +
                    json_type(value) + "); allowed values: " + choices_text(knob->spec));
      knob->access.set(&config, value);
    }
  }
  return config;
}

std::optional<ScheduleConfig> parse_config_text(const std::string& text, std::string* error) {
  std::string why;
  const std::optional<json> j = parse_json_text(text, &why);
  if (!j) {
    if (error) *error = "config is not valid JSON: " + why;
    return std::nullopt;
  }
  return parse_config(*j, error);
}

std::optional<json> parse_json_text(const std::string& text, std::string* error) {
  // The keys seen in each open object, innermost last, and where the first repeat was.
  std::vector<std::set<std::string>> open_objects;
  std::vector<std::string> path;  // the key of each open object in its parent ("" at the top)
  std::string current_key, repeated;
  const json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        path.push_back(open_objects.empty() ? "" : current_key);
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        path.pop_back();
        break;
      case json::parse_event_t::key:
        current_key = parsed.get<std::string>();
        if (!open_objects.back().insert(current_key).second && repeated.empty()) {
          for (const std::string& p : path)
            if (!p.empty()) repeated += text_excerpt(p) + ".";
          repeated += text_excerpt(current_key);
        }
        break;
      default:
        break;
    }
    return true;
  };
  json j = json::parse(text, callback, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    if (error) {
      // Parse again with exceptions for the message with the position (at most the depth the
      // first parse reached, so it cannot fail differently).
      *error = "not valid JSON";
      try {
        const json unused = json::parse(text);
        (void)unused;
      } catch (const json::exception& e) {
        *error = text_excerpt(e.what(), 200);
      }
    }
    return std::nullopt;
  }
  if (!repeated.empty()) {
    if (error)
      *error = "key '" + repeated +
               "' appears twice in one object (JSON keys must be unique; merge the two)";
    return std::nullopt;
  }
  return j;
}

namespace {

// JSON text of a string that may end in a cut UTF-8 sequence (replaced, never thrown on).
std::string quoted(const std::string& text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Appends the JSON text of `value` to *out until it holds `budget` characters; false when cut.
bool append_excerpt(const json& value, size_t budget, int depth, std::string* out) {
  auto room = [&] { return out->size() < budget; };
  if (!room()) return false;
  if (depth > 8 && (value.is_array() || value.is_object()) && !value.empty()) {
    *out += value.is_array() ? "[" : "{";
    return false;
  }
  if (value.is_array()) {
    *out += "[";
    bool first = true;
    for (const json& element : value) {
      if (!first) *out += ",";
      first = false;
      if (!append_excerpt(element, budget, depth + 1, out)) return false;
    }
    *out += "]";
  } else if (value.is_object()) {
    *out += "{";
    bool first = true;
    for (const auto& [key, element] : value.items()) {
      if (!first) *out += ",";
      first = false;
      *out += quoted(key) + ":";
      if (!room()) return false;
      if (!append_excerpt(element, budget, depth + 1, out)) return false;
    }
    *out += "}";
  } else if (value.is_string() && value.get_ref<const std::string&>().size() > budget) {
    *out += quoted(value.get_ref<const std::string&>().substr(0, budget));
  } else {
    *out += value.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return true;
}

}  // namespace

std::string json_excerpt(const json& value, size_t max_chars) {
  std::string out;
  const bool whole = append_excerpt(value, max_chars, 0, &out);
  if (whole && out.size() <= max_chars) return out;
  return out.substr(0, max_chars) + "...";
}

std::string text_excerpt(const std::string& text, size_t max_chars) {
  return text.size() <= max_chars ? text : text.substr(0, max_chars) + "...";
}

json to_json(const ScheduleConfig& config) {
  json j = json::object();
  for (const auto& k : knob_table()) {
    const auto dot = k.spec.path.find('.');
    j[k.spec.path.substr(0, dot)][k.spec.path.substr(dot + 1)] = k.access.get(config);
  }
  return j;
}

std::string canonical_string(const ScheduleConfig& config) { return to_json(config).dump(); }

json get_knob(const ScheduleConfig& config, const std::string& path) {
  const KnobEntry* knob = find_knob(path);
  return knob ? knob->access.get(config) : json(nullptr);
}

bool set_knob(ScheduleConfig* config, const std::string& path, const json& value,
              std::string* error) {
  const KnobEntry* knob = find_knob(path);
  if (!knob) {
    std::vector<std::string> paths;
    for (const auto& k : knob_table()) paths.push_back(k.spec.path);
    if (error) *error = "unknown knob '" + text_excerpt(path) + "'" + did_you_mean(path, paths);
    return false;
  }
  if (!value_allowed(knob->spec, value)) {
    if (error)
      *error = "knob '" + path + "' has value " + json_excerpt(value) +
               "; allowed values: " + choices_text(knob->spec);
    return false;
  }
  knob->access.set(config, value);
  return true;
}

std::vector<std::string> changed_knobs(const ScheduleConfig& a, const ScheduleConfig& b) {
  std::vector<std::string> out;
  for (const auto& k : knob_table())
    if (k.access.get(a) != k.access.get(b)) out.push_back(k.spec.path);
  return out;
}

int complexity(const ScheduleConfig& config) {
  return static_cast<int>(changed_knobs(config, ScheduleConfig{}).size());
}

bool knob_value_fits(const std::string& path, const json& value, const ModelShape& shape) {
  if (path == "tiling.attn_q_heads_per_task") {
    const int group = shape.kv_heads > 0 ? shape.heads / shape.kv_heads : 0;
    const int v = value.get<int>();
    return v == 0 || (group > 0 && v <= group && group % v == 0);
  }
  if (path == "tiling.gemv_k_split") {
    // Every GEMV's columns must split into chunks that stay multiples of 8 elements.
    const int v = value.get<int>();
    for (int cols : {shape.hidden, shape.q_dim(), shape.ffn})
      if (cols % (8 * v) != 0) return false;
    return true;
  }
  if (path == "fusion.combine_into_o") {
    // The streamed GEMV copies whole partitions of records (heads x (head_dim + 2) floats) in
    // 16-byte pieces (abi/ring.h stream_misfit).
    const int64_t span = int64_t{shape.heads} * (shape.head_dim + 2);
    return !value.get<bool>() || (shape.head_dim % 2 == 0 && span % 4 == 0);
  }
  if (path == "fusion.argmax_into_lm_head") {
    return !value.get<bool>() || shape.vocab <= int64_t{ms_abi::kArgmaxRecordRows};
  }
  return true;
}

std::string knob_conflict(const ScheduleConfig& config) {
  if (config.smem.inflight_pages > 0 && config.kernel.weight_stream != WeightStream::kSmemRing)
    return "smem.inflight_pages = " + std::to_string(config.smem.inflight_pages) +
           " needs kernel.weight_stream = smem_ring (it caps the ring loader's copies in flight; "
           "the registers stream has no loader); hint: set smem.inflight_pages back to 0";
  if (config.smem.inflight_pages > 0 && config.smem.inflight_pages >= config.smem.pages)
    return "smem.inflight_pages = " + std::to_string(config.smem.inflight_pages) +
           " must be below smem.pages = " + std::to_string(config.smem.pages) +
           " (a cap at or above the ring's pages caps nothing); hint: 0, or fewer pages in flight";
  if (config.kernel.stream_depth != 2 && config.kernel.weight_stream != WeightStream::kRegisters)
    return "kernel.stream_depth = " + std::to_string(config.kernel.stream_depth) +
           " needs kernel.weight_stream = registers (it sets the chunks the streamed GEMV keeps in "
           "flight in registers; the weight ring's GEMVs do not stream into registers); hint: set "
           "kernel.stream_depth back to 2";
  if (config.kernel.stream_held != 0 && config.kernel.weight_stream != WeightStream::kRegisters)
    return "kernel.stream_held = " + std::to_string(config.kernel.stream_held) +
           " needs kernel.weight_stream = registers (it holds back chunks of the streamed GEMV's "
           "registers stream; the weight ring's loader has its own cap, smem.inflight_pages); "
           "hint: set kernel.stream_held back to 0";
  if (config.kernel.stream_held > config.kernel.stream_depth)
    return "kernel.stream_held = " + std::to_string(config.kernel.stream_held) +
           " is more than kernel.stream_depth = " + std::to_string(config.kernel.stream_depth) +
           " (a warp holds back some of the chunks it keeps in flight, at most all of them); "
           "hint: kernel.stream_held at most " +
           std::to_string(config.kernel.stream_depth) + ", or a deeper kernel.stream_depth";
  if (config.kernel.stream_held_every != 2 && config.kernel.stream_held == 0)
    return "kernel.stream_held_every = " + std::to_string(config.kernel.stream_held_every) +
           " needs kernel.stream_held > 0 (it picks the blocks that hold chunks back, and none "
           "are held); hint: set kernel.stream_held_every back to 2, or kernel.stream_held to 1";
  if (config.tiling.qkv_rope_pairs && !config.fusion.rope_kv_into_qkv)
    return "tiling.qkv_rope_pairs = true needs fusion.rope_kv_into_qkv = true (the pairs are "
           "RoPE's; unfused, the QKV rows have no pairing); hint: set one of them back";
  if (config.tiling.qkv_rope_pairs && config.kernel.weight_stream != WeightStream::kRegisters)
    return "tiling.qkv_rope_pairs = true needs kernel.weight_stream = registers (only its streamed "
           "GEMV maps the rows of RoPE pairs); hint: set one of them back";
  if (config.kernel.attention == AttentionPath::kStaged &&
      config.kernel.weight_stream != WeightStream::kRegisters)
    return "kernel.attention = staged needs kernel.weight_stream = registers (the weight ring "
           "owns the shared memory the KV rows would be staged in); hint: set one of them back";
  if (config.kernel.silu_stage == SiluStage::kCopies) {
    if (config.kernel.weight_stream != WeightStream::kRegisters)
      return "kernel.silu_stage = copies needs kernel.weight_stream = registers (only its "
             "streamed GEMV stages the SiLU x up input); hint: set one of them back";
    if (!config.fusion.silu_mul_into_down)
      return "kernel.silu_stage = copies needs fusion.silu_mul_into_down = true (unfused, no GEMV "
             "stages a SiLU x up input, so it would change nothing); hint: set one of them back";
    if (config.tiling.gemv_k_split != 1)
      return "kernel.silu_stage = copies needs tiling.gemv_k_split = 1 (the streamed GEMV that "
             "stages the input takes whole rows); hint: set one of them back";
    if (config.pipeline.tagged_inputs)
      return "kernel.silu_stage = copies needs pipeline.tagged_inputs = false (a tagged input "
             "is copied from the tagged mirror already); hint: set one of them back";
  }
  if (config.fusion.combine_into_o && config.tiling.attn_kv_partitions <= 1)
    return "fusion.combine_into_o = true needs tiling.attn_kv_partitions > 1 (with one partition "
           "there is no combine to fold, so it would change nothing); hint: set one of them back";
  if (config.fusion.combine_into_o && config.kernel.weight_stream != WeightStream::kRegisters)
    return "fusion.combine_into_o = true needs kernel.weight_stream = registers (only its streamed "
           "GEMV combines the partitions in its input load); hint: set one of them back";
  if (config.fusion.combine_into_o && config.tiling.gemv_k_split != 1)
    return "fusion.combine_into_o = true needs tiling.gemv_k_split = 1 (the streamed GEMV that "
           "combines the partitions takes whole rows); hint: set one of them back";
  if (config.tiling.qkv_rope_pairs && config.tiling.gemv_k_split != 1)
    return "tiling.qkv_rope_pairs = true needs tiling.gemv_k_split = 1 (a split-K reduce applies "
           "RoPE to whole heads); hint: set one of them back";
  if (config.pipeline.tagged_inputs) {
    if (config.kernel.weight_stream != WeightStream::kRegisters)
      return "pipeline.tagged_inputs = true needs kernel.weight_stream = registers (only its "
             "streamed GEMV reads and writes tagged words); hint: set one of them back";
    if (config.tiling.gemv_k_split != 1)
      return "pipeline.tagged_inputs = true needs tiling.gemv_k_split = 1 (the streamed GEMV "
             "that reads tagged words takes whole rows); hint: set one of them back";
    if (!config.fusion.silu_mul_into_down &&
        !(config.fusion.norm_into_gemv && config.fusion.residual_into_gemv))
      return "pipeline.tagged_inputs = true needs a GEMV -> GEMV edge to tag: "
             "fusion.silu_mul_into_down (gate/up -> down), or fusion.norm_into_gemv with "
             "fusion.residual_into_gemv (O and down -> the next norm's GEMV); hint: set them back "
             "to true or the knob to false";
  }
  if (config.fusion.attention_into_o) {
    if (config.kernel.weight_stream != WeightStream::kRegisters)
      return "fusion.attention_into_o = true needs kernel.weight_stream = registers (only its "
             "streamed GEMV computes the attention in its input load); hint: set one of them back";
    if (config.tiling.gemv_k_split != 1)
      return "fusion.attention_into_o = true needs tiling.gemv_k_split = 1 (the streamed GEMV "
             "that computes the attention takes whole rows); hint: set one of them back";
    // Knobs of the attention tasks, which the fusion removes: they would change nothing.
    if (config.tiling.attn_kv_partitions != 1)
      return "fusion.attention_into_o = true leaves no attention tasks to partition, so "
             "tiling.attn_kv_partitions > 1 would change nothing; hint: set one of them back";
    if (config.fusion.combine_into_o)
      return "fusion.attention_into_o = true leaves no attention partitions to combine, so "
             "fusion.combine_into_o would change nothing; hint: set one of them back";
    if (config.kernel.attention == AttentionPath::kStaged)
      return "fusion.attention_into_o = true leaves no attention tasks to stage, so "
             "kernel.attention = staged would change nothing; hint: set one of them back";
    if (config.tiling.attn_q_heads_per_task != 0)
      return "fusion.attention_into_o = true leaves no attention tasks to cut by query heads, so "
             "tiling.attn_q_heads_per_task would change nothing; hint: set it to 0 or the fusion "
             "back";
    if (config.dependencies.attention_to_o != Granularity::kPerOp)
      return "fusion.attention_into_o = true leaves no attention -> O edge, so "
             "dependencies.attention_to_o = per_slice would change nothing; hint: set it to per_op "
             "or the fusion back";
  }
  return "";
}

json search_space_json(const ModelShape& shape) {
  json knobs = json::array();
  for (const auto& spec : knob_specs()) {
    json choices = json::array();
    for (const auto& c : spec.choices)
      if (knob_value_fits(spec.path, c, shape)) choices.push_back(c);
    knobs.push_back({{"path", spec.path},
                     {"choices", choices},
                     {"default", spec.default_value},
                     {"description", spec.description}});
  }
  double size = 1;
  for (const auto& k : knobs) size *= static_cast<double>(k["choices"].size());
  return {{"model", shape.name}, {"knobs", knobs}, {"size", size}};
}

std::string hash_hex(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64-bit offset basis
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace megasched::schedule
