// Program helpers: name tables, labels for diagnostics, the exact JSON round trip and summary
// statistics.
#include "schedule/program.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <limits>
#include <type_traits>

#include "schedule/config.h"
#include "schedule/format.h"
#include "schedule/lower.h"
#include "schedule/search.h"

namespace megasched::schedule {
namespace {

constexpr const char* kOpcodeNames[] = {
    "embed",        "rms_norm",     "gemv",     "gemv_reduce", "rope_kv",
    "attn_partial", "attn_combine", "silu_mul", "add",         "argmax",
};
static_assert(std::size(kOpcodeNames) == ms_abi::kOpcodeCount,
              "kOpcodeNames is out of date with ms_abi::Opcode");

constexpr const char* kBufferNames[] = {"weights", "act", "kv", "step"};
static_assert(std::size(kBufferNames) == ms_abi::kBufCount,
              "kBufferNames is out of date with ms_abi::BufferId");

constexpr const char* kOpKindNames[] = {
    "embed",   "norm",     "qkv",  "rope", "attention", "attn_combine", "o",
    "gate_up", "silu_mul", "down", "add",  "reduce",    "lm_head",      "argmax",
};
static_assert(std::size(kOpKindNames) == static_cast<size_t>(OpKind::kCount),
              "kOpKindNames is out of date with OpKind");

// Strict JSON reading: every accessor records the first error (with its path) and returns a
// default, so from_json reads straight through and reports once at the end.
class Reader {
 public:
  explicit Reader(std::string* error) : error_(error) {}

  bool ok() const { return failed_.empty(); }
  const std::string& failure() const { return failed_; }

  const nlohmann::json* field(const nlohmann::json& obj, const char* key, const std::string& path) {
    if (!ok()) return nullptr;
    if (!obj.is_object()) {
      fail(path + ": expected an object");
      return nullptr;
    }
    auto it = obj.find(key);
    if (it == obj.end()) {
      fail(path + "." + key + ": missing");
      return nullptr;
    }
    return &*it;
  }

  template <typename T>
  T get(const nlohmann::json& obj, const char* key, const std::string& path) {
    const nlohmann::json* v = field(obj, key, path);
    if (v == nullptr) return T{};
    return as<T>(*v, path + "." + key);
  }

  template <typename T>
  T as(const nlohmann::json& v, const std::string& path) {
    if (!ok()) return T{};
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) return fail_type<T>(path, "a boolean");
      return v.get<bool>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) return fail_type<T>(path, "a string");
      return v.get<std::string>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) return fail_type<T>(path, "a number");
      return static_cast<T>(v.get<double>());
    } else if constexpr (std::is_unsigned_v<T>) {
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
        return fail_type<T>(path, "a non-negative integer");
      const uint64_t x = v.get<uint64_t>();
      if (x > std::numeric_limits<T>::max()) return fail_type<T>(path, "a smaller integer");
      return static_cast<T>(x);
    } else {
      static_assert(std::is_signed_v<T>);
      if (!v.is_number_integer()) return fail_type<T>(path, "an integer");
      const int64_t x = v.get<int64_t>();
      if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
        return fail_type<T>(path, "a smaller integer");
      return static_cast<T>(x);
    }
  }

  const nlohmann::json* array(const nlohmann::json& obj, const char* key, const std::string& path) {
    const nlohmann::json* v = field(obj, key, path);
    if (v != nullptr && !v->is_array()) {
      fail(path + "." + key + ": expected an array");
      return nullptr;
    }
    return v;
  }

  void fail(const std::string& message) {
    if (ok()) {
      failed_ = message;
      if (error_ != nullptr) *error_ = message;
    }
  }

 private:
  template <typename Ret = int>
  Ret fail_type(const std::string& path, const char* expected) {
    fail(path + ": expected " + expected);
    return Ret{};
  }

  std::string* error_;
  std::string failed_;
};

nlohmann::json instr_json(const ms_abi::Instr& t) {
  nlohmann::json j = {{"opcode", t.opcode},
                      {"flags", t.flags},
                      {"layer", t.layer},
                      {"wait_begin", t.wait_begin},
                      {"wait_count", t.wait_count},
                      {"signal_counter", t.signal_counter},
                      {"signal_increment", t.signal_increment},
                      {"row_begin", t.row_begin},
                      {"row_end", t.row_end},
                      {"col_begin", t.col_begin},
                      {"col_end", t.col_end},
                      {"ld", t.ld},
                      {"param0", t.param0},
                      {"param1", t.param1},
                      {"param2", t.param2},
                      {"weight", t.weight},
                      {"weight2", t.weight2},
                      {"in", t.in},
                      {"in2", t.in2},
                      {"out", t.out},
                      {"aux", t.aux},
                      {"op_id", t.op_id}};
  if (t.chain != 0) j["chain"] = t.chain;  // absent: 0 (no chained task)
  return j;
}

ms_abi::Instr instr_from(Reader& r, const nlohmann::json& j, const std::string& p) {
  ms_abi::Instr t{};
  t.opcode = r.get<uint16_t>(j, "opcode", p);
  t.flags = r.get<uint16_t>(j, "flags", p);
  t.layer = r.get<uint32_t>(j, "layer", p);
  t.wait_begin = r.get<uint32_t>(j, "wait_begin", p);
  t.wait_count = r.get<uint32_t>(j, "wait_count", p);
  t.signal_counter = r.get<uint32_t>(j, "signal_counter", p);
  t.signal_increment = r.get<uint32_t>(j, "signal_increment", p);
  t.row_begin = r.get<uint32_t>(j, "row_begin", p);
  t.row_end = r.get<uint32_t>(j, "row_end", p);
  t.col_begin = r.get<uint32_t>(j, "col_begin", p);
  t.col_end = r.get<uint32_t>(j, "col_end", p);
  t.ld = r.get<uint32_t>(j, "ld", p);
  t.param0 = r.get<uint32_t>(j, "param0", p);
  t.param1 = r.get<uint32_t>(j, "param1", p);
  t.param2 = r.get<uint32_t>(j, "param2", p);
  t.weight = r.get<uint64_t>(j, "weight", p);
  t.weight2 = r.get<uint64_t>(j, "weight2", p);
  t.in = r.get<uint32_t>(j, "in", p);
  t.in2 = r.get<uint32_t>(j, "in2", p);
  t.out = r.get<uint32_t>(j, "out", p);
  t.aux = r.get<uint32_t>(j, "aux", p);
  t.op_id = r.get<uint32_t>(j, "op_id", p);
  if (j.is_object() && j.contains("chain")) t.chain = r.get<uint32_t>(j, "chain", p);
  return t;
}

nlohmann::json model_json(const ms_abi::ModelParams& m) {
  return {
      {"hidden", m.hidden},         {"layers", m.layers},        {"heads", m.heads},
      {"kv_heads", m.kv_heads},     {"head_dim", m.head_dim},    {"ffn", m.ffn},
      {"vocab", m.vocab},           {"max_seq", m.max_seq},      {"weight_dtype", m.weight_dtype},
      {"kv_dtype", m.kv_dtype},     {"rms_eps", m.rms_eps},      {"rope_theta", m.rope_theta},
      {"attn_scale", m.attn_scale}, {"rope_table", m.rope_table}};
}

ms_abi::ModelParams model_from(Reader& r, const nlohmann::json& j, const std::string& p) {
  ms_abi::ModelParams m{};
  m.hidden = r.get<uint32_t>(j, "hidden", p);
  m.layers = r.get<uint32_t>(j, "layers", p);
  m.heads = r.get<uint32_t>(j, "heads", p);
  m.kv_heads = r.get<uint32_t>(j, "kv_heads", p);
  m.head_dim = r.get<uint32_t>(j, "head_dim", p);
  m.ffn = r.get<uint32_t>(j, "ffn", p);
  m.vocab = r.get<uint32_t>(j, "vocab", p);
  m.max_seq = r.get<uint32_t>(j, "max_seq", p);
  m.weight_dtype = r.get<uint32_t>(j, "weight_dtype", p);
  m.kv_dtype = r.get<uint32_t>(j, "kv_dtype", p);
  m.rms_eps = r.get<float>(j, "rms_eps", p);
  m.rope_theta = r.get<float>(j, "rope_theta", p);
  m.attn_scale = r.get<float>(j, "attn_scale", p);
  m.rope_table = r.get<uint32_t>(j, "rope_table", p);
  return m;
}

// The first key of `in` that the program format does not have, as "path: unknown key 'k' (...)",
// or "" when there is none. `known` is the program read back to JSON (program_from_json's result
// through to_json), so the two documents have the same shape; a task's "chain" is optional.
std::string unknown_key(const nlohmann::json& in, const nlohmann::json& known,
                        const std::string& path) {
  if (in.is_object() && known.is_object()) {
    for (const auto& [key, value] : in.items()) {
      auto it = known.find(key);
      if (it != known.end()) {
        std::string inner = unknown_key(value, *it, path + "." + key);
        if (!inner.empty()) return inner;
        continue;
      }
      if (key == "chain" && known.contains("opcode")) continue;
      std::string allowed;
      for (const auto& [name, unused] : known.items())
        allowed += (allowed.empty() ? "" : ", ") + name;
      return path + ": unknown key '" + key.substr(0, 64) +
             "' (schemas/program.schema.json allows " + allowed +
             "; a program is what `evaluate --save-program` writes)";
    }
  } else if (in.is_array() && known.is_array()) {
    for (size_t i = 0; i < in.size() && i < known.size(); ++i) {
      std::string inner = unknown_key(in[i], known[i], path + "[" + std::to_string(i) + "]");
      if (!inner.empty()) return inner;
    }
  }
  return "";
}

}  // namespace

std::vector<ms_abi::WaitHead> wait_heads(const Program& program) {
  std::vector<ms_abi::WaitHead> heads(
      std::max<size_t>(program.tasks.size(), 1) * ms_abi::kWaitHeads, ms_abi::WaitHead{});
  for (size_t t = 0; t < program.tasks.size(); ++t) {
    const ms_abi::Instr& in = program.tasks[t];
    for (uint32_t j = 0; j < std::min(in.wait_count, ms_abi::kWaitHeads); ++j) {
      if (uint64_t{in.wait_begin} + j >= program.waits.size()) break;
      const ms_abi::Wait& w = program.waits[in.wait_begin + j];
      if (w.counter >= program.counter_totals.size()) break;
      heads[t * ms_abi::kWaitHeads + j] = {w.counter, w.threshold,
                                           program.counter_totals[w.counter], 0};
    }
  }
  return heads;
}

const char* opcode_name(uint16_t opcode) {
  return opcode < ms_abi::kOpcodeCount ? kOpcodeNames[opcode] : "?";
}

const char* buffer_name(uint32_t buffer) {
  return buffer < ms_abi::kBufCount ? kBufferNames[buffer] : "?";
}

const char* op_kind_name(OpKind kind) {
  const auto i = static_cast<size_t>(kind);
  return i < std::size(kOpKindNames) ? kOpKindNames[i] : "?";
}

std::string Program::task_label(uint32_t task) const {
  std::string label = "task " + std::to_string(task);
  if (task >= tasks.size()) return label + " (out of range)";
  const uint32_t op = tasks[task].op_id;
  if (op >= ops.size()) return label + " (" + opcode_name(tasks[task].opcode) + ")";
  uint32_t tile = 0;  // ordinal of this task among its op's tasks
  for (uint32_t i = 0; i < task; ++i) tile += tasks[i].op_id == op ? 1 : 0;
  return label + " (" + ops[op].name + " tile " + std::to_string(tile) + ")";
}

std::string Program::range_label(uint32_t buffer, uint64_t begin, uint64_t end) const {
  std::string label = std::string(buffer_name(buffer)) + "[" + std::to_string(begin) + ":" +
                      std::to_string(end) + "]";
  for (const Region& region : regions) {
    if (region.buffer == buffer && region.begin <= begin && begin < region.end) {
      const uint64_t rel_end = std::min(end, region.end) - region.begin;
      return label + " (" + region.name + "[" + std::to_string(begin - region.begin) + ":" +
             std::to_string(rel_end) + "])";
    }
  }
  return label;
}

const Region* Program::find_region(const std::string& name) const {
  for (const Region& region : regions)
    if (region.name == name) return &region;
  return nullptr;
}

int KernelBuild::knob(const std::string& define) const {
  const auto it = knobs.find(define);
  return it == knobs.end() ? 0 : it->second;
}

nlohmann::json to_json(const Program& p) {
  nlohmann::json j;
  j["model_name"] = p.model_name;
  j["model"] = model_json(p.model);
  j["buffer_elements"] = p.buffer_elements;
  nlohmann::json tasks = nlohmann::json::array();
  for (const ms_abi::Instr& t : p.tasks) tasks.push_back(instr_json(t));
  j["tasks"] = std::move(tasks);
  nlohmann::json waits = nlohmann::json::array();
  for (const ms_abi::Wait& w : p.waits) waits.push_back({w.counter, w.threshold});
  j["waits"] = std::move(waits);
  j["counter_totals"] = p.counter_totals;
  j["counter_names"] = p.counter_names;
  j["queues"] = p.queues;
  nlohmann::json ops = nlohmann::json::array();
  for (const OpInfo& op : p.ops)
    ops.push_back({{"name", op.name}, {"kind", op_kind_name(op.kind)}, {"layer", op.layer}});
  j["ops"] = std::move(ops);
  nlohmann::json regions = nlohmann::json::array();
  for (const Region& r : p.regions)
    regions.push_back({{"name", r.name},
                       {"buffer", r.buffer},
                       {"begin", r.begin},
                       {"end", r.end},
                       {"input", r.input}});
  j["regions"] = std::move(regions);
  const LaunchShape& l = p.launch;
  j["launch"] = {{"threads_per_block", l.threads_per_block},
                 {"blocks_per_sm", l.blocks_per_sm},
                 {"grid_blocks", l.grid_blocks},
                 {"smem_pages", l.smem_pages},
                 {"smem_page_bytes", l.smem_page_bytes},
                 {"smem_bytes", l.smem_bytes},
                 {"prefetch_depth", l.prefetch_depth},
                 {"dynamic_queue", l.dynamic_queue}};
  j["build"] = {{"knobs", p.build.knobs}, {"x_floats", p.build.x_floats}};
  return j;
}

std::optional<Program> program_from_json(const nlohmann::json& j, std::string* error) {
  Reader r(error);
  Program p;
  const std::string root = "program";
  if (!j.is_object()) {
    r.fail("program: expected an object");
    return std::nullopt;
  }
  p.model_name = r.get<std::string>(j, "model_name", root);
  if (const nlohmann::json* m = r.field(j, "model", root))
    p.model = model_from(r, *m, root + ".model");

  if (const nlohmann::json* a = r.array(j, "buffer_elements", root)) {
    if (a->size() != p.buffer_elements.size())
      r.fail("program.buffer_elements: expected " + std::to_string(p.buffer_elements.size()) +
             " entries");
    for (size_t i = 0; r.ok() && i < p.buffer_elements.size(); ++i)
      p.buffer_elements[i] =
          r.as<uint64_t>((*a)[i], "program.buffer_elements[" + std::to_string(i) + "]");
  }
  if (const nlohmann::json* a = r.array(j, "tasks", root)) {
    p.tasks.reserve(a->size());
    for (size_t i = 0; r.ok() && i < a->size(); ++i)
      p.tasks.push_back(instr_from(r, (*a)[i], "program.tasks[" + std::to_string(i) + "]"));
  }
  if (const nlohmann::json* a = r.array(j, "waits", root)) {
    p.waits.reserve(a->size());
    for (size_t i = 0; r.ok() && i < a->size(); ++i) {
      const std::string path = "program.waits[" + std::to_string(i) + "]";
      const nlohmann::json& w = (*a)[i];
      if (!w.is_array() || w.size() != 2) {
        r.fail(path + ": expected [counter, threshold]");
        break;
      }
      p.waits.push_back({r.as<uint32_t>(w[0], path + "[0]"), r.as<uint32_t>(w[1], path + "[1]")});
    }
  }
  if (const nlohmann::json* a = r.array(j, "counter_totals", root))
    for (size_t i = 0; r.ok() && i < a->size(); ++i)
      p.counter_totals.push_back(
          r.as<uint32_t>((*a)[i], "program.counter_totals[" + std::to_string(i) + "]"));
  if (const nlohmann::json* a = r.array(j, "counter_names", root))
    for (size_t i = 0; r.ok() && i < a->size(); ++i)
      p.counter_names.push_back(
          r.as<std::string>((*a)[i], "program.counter_names[" + std::to_string(i) + "]"));
  if (const nlohmann::json* a = r.array(j, "queues", root)) {
    for (size_t q = 0; r.ok() && q < a->size(); ++q) {
      const std::string path = "program.queues[" + std::to_string(q) + "]";
      const nlohmann::json& queue = (*a)[q];
      if (!queue.is_array()) {
        r.fail(path + ": expected an array");
        break;
      }
      std::vector<uint32_t> ids;
      ids.reserve(queue.size());
      for (size_t i = 0; r.ok() && i < queue.size(); ++i)
        ids.push_back(r.as<uint32_t>(queue[i], path + "[" + std::to_string(i) + "]"));
      p.queues.push_back(std::move(ids));
    }
  }
  if (const nlohmann::json* a = r.array(j, "ops", root)) {
    for (size_t i = 0; r.ok() && i < a->size(); ++i) {
      const std::string path = "program.ops[" + std::to_string(i) + "]";
      OpInfo op;
      op.name = r.get<std::string>((*a)[i], "name", path);
      const std::string kind = r.get<std::string>((*a)[i], "kind", path);
      op.layer = r.get<int>((*a)[i], "layer", path);
      if (!r.ok()) break;
      bool found = false;
      for (size_t k = 0; k < std::size(kOpKindNames); ++k) {
        if (kind == kOpKindNames[k]) {
          op.kind = static_cast<OpKind>(k);
          found = true;
        }
      }
      if (!found) r.fail(path + ".kind: unknown op kind \"" + kind + "\"");
      p.ops.push_back(std::move(op));
    }
  }
  if (const nlohmann::json* a = r.array(j, "regions", root)) {
    for (size_t i = 0; r.ok() && i < a->size(); ++i) {
      const std::string path = "program.regions[" + std::to_string(i) + "]";
      const nlohmann::json& e = (*a)[i];
      Region region;
      region.name = r.get<std::string>(e, "name", path);
      region.buffer = r.get<uint32_t>(e, "buffer", path);
      region.begin = r.get<uint64_t>(e, "begin", path);
      region.end = r.get<uint64_t>(e, "end", path);
      region.input = r.get<bool>(e, "input", path);
      p.regions.push_back(std::move(region));
    }
  }
  if (const nlohmann::json* l = r.field(j, "launch", root)) {
    const std::string path = "program.launch";
    p.launch.threads_per_block = r.get<int>(*l, "threads_per_block", path);
    p.launch.blocks_per_sm = r.get<int>(*l, "blocks_per_sm", path);
    p.launch.grid_blocks = r.get<int>(*l, "grid_blocks", path);
    p.launch.smem_pages = r.get<int>(*l, "smem_pages", path);
    p.launch.smem_page_bytes = r.get<int>(*l, "smem_page_bytes", path);
    p.launch.smem_bytes = r.get<int>(*l, "smem_bytes", path);
    p.launch.prefetch_depth = r.get<int>(*l, "prefetch_depth", path);
    p.launch.dynamic_queue = r.get<bool>(*l, "dynamic_queue", path);
  }
  if (const nlohmann::json* b = r.field(j, "build", root)) {
    const std::string path = "program.build";
    if (const nlohmann::json* knobs = r.field(*b, "knobs", path)) {
      if (!knobs->is_object()) {
        r.fail(path + ".knobs: expected an object");
      } else {
        for (const auto& [name, value] : knobs->items())
          if (r.ok()) p.build.knobs[name] = r.as<int>(value, path + ".knobs." + name);
      }
    }
    p.build.x_floats = r.get<int>(*b, "x_floats", path);
  }
  if (!r.ok()) return std::nullopt;
  if (const std::string unknown = unknown_key(j, to_json(p), root); !unknown.empty()) {
    if (error != nullptr) *error = unknown;
    return std::nullopt;
  }
  return p;
}

namespace {

/// A lowering of `shape` every check below compares with; nullopt + *error when none lowers.
std::optional<Program> lower_for_check(const ModelShape& shape, const GpuTarget& target,
                                       const ScheduleConfig& config, std::string* error) {
  std::string why;
  std::optional<Program> p = lower(shape, target, config, &why);
  if (!p && error) *error = "model " + shape.name + " does not lower (" + why + ")";
  return p;
}

bool same_model_name(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::error_code ec;  // two spellings of one checkpoint directory
  return std::filesystem::is_directory(a, ec) && std::filesystem::equivalent(a, b, ec);
}

/// The model constants: the program's against those lowering gives the model.
bool check_model_constants(const Program& p, const Program& expected, std::string* error) {
  const ms_abi::ModelParams& m = p.model;
  const ms_abi::ModelParams& e = expected.model;
  auto differs = [&](const char* field, double got, double want) {
    if (error)
      *error = "program.model." + std::string(field) + " is " + fmt("%.9g", got) + ", but model " +
               expected.model_name + " has " + fmt("%.9g", want);
    return false;
  };
  const std::pair<const char*, std::pair<double, double>> fields[] = {
      {"hidden", {m.hidden, e.hidden}},
      {"layers", {m.layers, e.layers}},
      {"heads", {m.heads, e.heads}},
      {"kv_heads", {m.kv_heads, e.kv_heads}},
      {"head_dim", {m.head_dim, e.head_dim}},
      {"ffn", {m.ffn, e.ffn}},
      {"vocab", {m.vocab, e.vocab}},
      {"max_seq", {m.max_seq, e.max_seq}},
      {"weight_dtype", {m.weight_dtype, e.weight_dtype}},
      {"kv_dtype", {m.kv_dtype, e.kv_dtype}},
      {"rms_eps", {m.rms_eps, e.rms_eps}},
      {"rope_theta", {m.rope_theta, e.rope_theta}},
      {"attn_scale", {m.attn_scale, e.attn_scale}},
      {"rope_table", {m.rope_table, e.rope_table}}};
  for (const auto& [field, values] : fields)
    if (!(values.first == values.second)) return differs(field, values.first, values.second);
  return true;
}

/// The buffer extents: the model's, and an activation arena no lowering exceeds.
bool check_buffers(const Program& p, const Program& expected, uint64_t max_act,
                   std::string* error) {
  for (uint32_t b = 0; b < ms_abi::kBufCount; ++b) {
    const uint64_t got = p.buffer_elements[b];
    const uint64_t want = expected.buffer_elements[b];
    const bool ok = b == ms_abi::kBufActivations ? got <= max_act : got == want;
    if (!ok) {
      if (error)
        *error = "program.buffer_elements[" + std::to_string(b) + "] (" + buffer_name(b) + ") is " +
                 std::to_string(got) + ", but model " + expected.model_name +
                 (b == ms_abi::kBufActivations ? " needs at most " + std::to_string(max_act)
                                               : " has " + std::to_string(want));
      return false;
    }
  }
  const uint64_t weights = p.buffer_elements[ms_abi::kBufWeights];
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    const ms_abi::Instr& in = p.tasks[t];
    if (in.weight >= weights || in.weight2 >= weights) {
      if (error)
        *error = "program.tasks[" + std::to_string(t) + "] reads weights at element " +
                 std::to_string(std::max(in.weight, in.weight2)) + ", beyond the model's " +
                 std::to_string(weights);
      return false;
    }
  }
  return true;
}

/// The build and launch fields as the config they came from; false when one is no knob value.
bool config_of_build(const Program& p, ScheduleConfig* config, std::string* error) {
  auto set = [&](const std::string& path, const nlohmann::json& value, const std::string& field) {
    if (set_knob(config, path, value, nullptr)) return true;
    if (error) {
      std::string allowed;
      for (const KnobSpec& spec : knob_specs())
        if (spec.path == path)
          for (const nlohmann::json& c : spec.choices)
            allowed += (allowed.empty() ? "" : ", ") + c.dump();
      *error = field + " (" + path + ") is " + json_excerpt(value) + "; allowed values: " + allowed;
    }
    return false;
  };
  std::map<std::string, int> unset = p.build.knobs;
  for (const KnobSpec& spec : knob_specs()) {
    if (spec.define.empty()) continue;
    const std::string field = "program.build.knobs." + spec.define;
    const auto it = p.build.knobs.find(spec.define);
    if (it == p.build.knobs.end()) {
      if (error) *error = field + " is missing (the kernel knob " + spec.path + ")";
      return false;
    }
    unset.erase(spec.define);
    const bool named = spec.choices.front().is_string();
    if (named && (it->second < 0 || it->second >= static_cast<int>(spec.choices.size()))) {
      if (error)
        *error = field + " is " + std::to_string(it->second) + ", but " + spec.path + " has " +
                 std::to_string(spec.choices.size()) + " choices (0 .. " +
                 std::to_string(spec.choices.size() - 1) + ")";
      return false;
    }
    if (!set(spec.path,
             named ? spec.choices[static_cast<size_t>(it->second)] : nlohmann::json(it->second),
             field))
      return false;
  }
  if (!unset.empty()) {
    if (error) *error = "program.build.knobs." + unset.begin()->first + " is no kernel knob";
    return false;
  }
  const LaunchShape& l = p.launch;
  return set("launch.threads_per_block", l.threads_per_block, "program.launch.threads_per_block") &&
         set("launch.blocks_per_sm", l.blocks_per_sm, "program.launch.blocks_per_sm") &&
         set("smem.pages", l.smem_pages, "program.launch.smem_pages") &&
         set("smem.page_bytes", l.smem_page_bytes, "program.launch.smem_page_bytes") &&
         set("pipeline.prefetch_depth", l.prefetch_depth, "program.launch.prefetch_depth");
}

/// The fields the knob values determine: shared memory, the ring's staging floats, the grid.
bool check_derived_launch(const Program& p, const ScheduleConfig& config, const ModelShape& shape,
                          const GpuTarget& target, std::string* error) {
  const bool ring = config.kernel.weight_stream == WeightStream::kSmemRing;
  const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
      {"program.launch.smem_bytes", {p.launch.smem_bytes, dynamic_smem_bytes(config, shape)}},
      {"program.build.x_floats", {p.build.x_floats, ring ? ring_x_floats(shape) : 0}},
      {"program.launch.grid_blocks",
       {p.launch.grid_blocks, int64_t{target.num_sms} * config.launch.blocks_per_sm}}};
  for (const auto& [field, values] : fields) {
    if (values.first != values.second) {
      if (error)
        *error = std::string(field) + " is " + std::to_string(values.first) +
                 ", but the knobs give " + std::to_string(values.second) + " on " + shape.name +
                 " / " + target.name;
      return false;
    }
  }
  return true;
}

}  // namespace

uint64_t max_activation_elements(const ModelShape& shape) {
  ScheduleConfig widest;
  widest.fusion = {false, false, false, false, false, false, false, false, false, false};
  for (const KnobSpec& spec : knob_specs()) {
    if (spec.path != "tiling.gemv_k_split" && spec.path != "tiling.attn_kv_partitions") continue;
    for (const nlohmann::json& choice : spec.choices)
      if (knob_value_fits(spec.path, choice, shape) &&
          choice.get<int>() > get_knob(widest, spec.path).get<int>())
        set_knob(&widest, spec.path, choice, nullptr);
  }
  // Any registry target: the arena does not depend on it.
  const std::optional<Program> p = lower(shape, target_registry().front(), widest, nullptr);
  // Alignment padding of a differently fused lowering: at most one alignment block per region;
  // fusion.argmax_into_lm_head adds one region of two elements per LM-head tile (tiles of at
  // least 8 rows, whatever the target's grid).
  const uint64_t records = 2 * ((static_cast<uint64_t>(shape.vocab) + 7) / 8) + 16;
  return p ? p->buffer_elements[ms_abi::kBufActivations] + 16 * (p->regions.size() + 2) + records
           : 0;
}

bool check_program_fits_model(const Program& program, const ModelShape& shape,
                              const GpuTarget& target, std::string* error) {
  if (!same_model_name(program.model_name, shape.name)) {
    if (error)
      *error = "the program was lowered for model '" + text_excerpt(program.model_name) +
               "', not '" + shape.name + "' (pass --model " + text_excerpt(program.model_name) +
               ", or save a program for " + shape.name + ")";
    return false;
  }
  const std::optional<Program> expected = lower_for_check(shape, target, ScheduleConfig{}, error);
  if (!expected) return false;
  if (!check_model_constants(program, *expected, error) ||
      !check_buffers(program, *expected, max_activation_elements(shape), error))
    return false;
  ScheduleConfig config;
  return config_of_build(program, &config, error) &&
         check_derived_launch(program, config, shape, target, error);
}

ProgramStats stats(const Program& program) {
  ProgramStats s;
  s.tasks = program.tasks.size();
  s.waits = program.waits.size();
  s.counters = program.counter_totals.size();
  s.queues = program.queues.size();
  const uint64_t elem_bytes = program.model.weight_dtype == ms_abi::kDTypeBF16 ? 2 : 4;
  for (const ms_abi::Instr& t : program.tasks) {
    const uint64_t rows = t.row_end - t.row_begin;
    uint64_t elements = 0;
    switch (static_cast<ms_abi::Opcode>(t.opcode)) {
      case ms_abi::kEmbed:
        elements = rows;
        break;
      case ms_abi::kRmsNorm:
        elements = rows;  // gamma
        break;
      case ms_abi::kGemv:
        elements = uint64_t{ms_abi::task_rows(t)} * (t.col_end - t.col_begin);
        if (t.flags & ms_abi::kFlagNormPrologue) elements += t.col_end - t.col_begin;
        break;
      case ms_abi::kGemvReduce:
      case ms_abi::kRopeKv:
      case ms_abi::kAttnPartial:
      case ms_abi::kAttnCombine:
      case ms_abi::kSiluMul:
      case ms_abi::kAdd:
      case ms_abi::kArgmax:
        break;
      case ms_abi::kOpcodeCount:
        break;
    }
    s.weight_bytes += elements * elem_bytes;
  }
  return s;
}

}  // namespace megasched::schedule
