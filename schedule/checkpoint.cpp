#include "schedule/checkpoint.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "schedule/config.h"
#include "schedule/safetensors.h"

namespace megasched::schedule {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// Sets *error (when non-null); returns nullopt so callers can `return fail(...)`.
std::nullopt_t fail(std::string* error, const std::string& message) {
  if (error != nullptr) *error = message;
  return std::nullopt;
}

/// As fail(), for functions that return bool.
bool failed(std::string* error, const std::string& message) {
  fail(error, message);
  return false;
}

std::optional<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Reads an integer field; `fallback` when absent (or null) and not required.
std::optional<int64_t> int_field(const json& config, const char* key,
                                 std::optional<int64_t> fallback, std::string* error) {
  if (!config.contains(key) || config[key].is_null()) {
    if (fallback) return fallback;
    return fail(error, std::string("config.json: missing field ") + key);
  }
  if (!config[key].is_number_integer()) {
    return fail(error, std::string("config.json: field ") + key + " must be an integer, got " +
                           json_excerpt(config[key]));
  }
  return config[key].get<int64_t>();
}

std::optional<double> number_field(const json& config, const char* key,
                                   std::optional<double> fallback, const std::string& where,
                                   std::string* error) {
  if (!config.contains(key) || config[key].is_null()) {
    if (fallback) return fallback;
    return fail(error, "config.json: missing field " + where + key);
  }
  if (!config[key].is_number()) {
    return fail(error, "config.json: field " + where + key + " must be a number, got " +
                           json_excerpt(config[key]));
  }
  return config[key].get<double>();
}

/// The config plus whether it named a dtype (otherwise the tensors decide).
struct ParsedConfig {
  ModelShape shape;
  bool dtype_given = false;
};

/// Each field in range is not enough: their products size the buffers (the weight arena, the KV
/// cache, the activation arena), and a product beyond these limits would end a later stage in
/// bad_alloc or length_error instead of a message. The limits are far above llama-70B.
constexpr int64_t kMaxRowElements = int64_t{1} << 31;  // q_dim, kv_dim, ffn: 32-bit operands
constexpr int64_t kMaxWeightElements = int64_t{1} << 38;
constexpr int64_t kMaxKvElements = int64_t{1} << 36;
constexpr int64_t kMaxActivationElements = int64_t{1} << 32;  // 32-bit activation offsets

bool check_sizes(const ModelShape& s, std::string* error) {
  // Every factor is below 2^30 (read_dimensions), so each product of two fits; the sums and the
  // products of three or more are formed in long double to see past 2^63.
  using Wide = long double;
  const Wide h = s.hidden, layers = s.layers, q_dim = Wide(s.heads) * s.head_dim,
             kv_dim = Wide(s.kv_heads) * s.head_dim, ffn = s.ffn, vocab = s.vocab;
  const Wide weights =
      2 * vocab * h + layers * (2 * h + 2 * h * q_dim + 2 * h * kv_dim + 3 * h * ffn);
  const Wide kv = 2 * layers * kv_dim * s.max_seq;
  // The least activation arena a lowering needs: per layer the queries, the attention output,
  // the residual stream twice and the gate/up rows; then the logits.
  const Wide activations = layers * (2 * q_dim + 2 * h + 2 * ffn) + vocab + h;
  auto too_big = [&](const std::string& what, Wide value, int64_t limit) {
    char text[160];
    std::snprintf(text, sizeof text, "%s is %.4Lg elements, more than megasched handles (%lld)",
                  what.c_str(), value, static_cast<long long>(limit));
    return failed(error, "config.json: " + std::string(text) +
                             "; check hidden_size, num_hidden_layers, num_attention_heads, "
                             "head_dim, intermediate_size and vocab_size");
  };
  if (q_dim > kMaxRowElements)
    return too_big("num_attention_heads x head_dim", q_dim, kMaxRowElements);
  if (2 * q_dim + 2 * kv_dim > kMaxRowElements)
    return too_big("the QKV rows", q_dim + 2 * kv_dim, kMaxRowElements);
  if (2 * ffn > kMaxRowElements) return too_big("2 x intermediate_size", 2 * ffn, kMaxRowElements);
  if (weights > kMaxWeightElements) return too_big("the weight arena", weights, kMaxWeightElements);
  if (kv > kMaxKvElements) return too_big("the KV cache", kv, kMaxKvElements);
  if (activations >= kMaxActivationElements)
    return too_big("the activation arena", activations, kMaxActivationElements);
  return true;
}

/// The dimensions: hidden, layers, heads, KV heads, head_dim, FFN, vocabulary, KV capacity.
bool read_dimensions(const json& config, ModelShape& s, std::string* error) {
  const auto hidden = int_field(config, "hidden_size", std::nullopt, error);
  if (!hidden) return false;
  const auto layers = int_field(config, "num_hidden_layers", std::nullopt, error);
  if (!layers) return false;
  const auto heads = int_field(config, "num_attention_heads", std::nullopt, error);
  if (!heads) return false;
  const auto kv_heads = int_field(config, "num_key_value_heads", *heads, error);
  if (!kv_heads) return false;
  const auto ffn = int_field(config, "intermediate_size", std::nullopt, error);
  if (!ffn) return false;
  const auto vocab = int_field(config, "vocab_size", std::nullopt, error);
  if (!vocab) return false;
  const auto max_pos = int_field(config, "max_position_embeddings", 2048, error);
  if (!max_pos) return false;
  for (const auto& [value, key] : std::initializer_list<std::pair<int64_t, const char*>>{
           {*hidden, "hidden_size"},
           {*layers, "num_hidden_layers"},
           {*heads, "num_attention_heads"},
           {*kv_heads, "num_key_value_heads"},
           {*ffn, "intermediate_size"},
           {*vocab, "vocab_size"},
           {*max_pos, "max_position_embeddings"}}) {
    if (value <= 0 || value > (int64_t{1} << 30)) {
      return failed(error, std::string("config.json: field ") + key + " = " +
                               std::to_string(value) + " out of range");
    }
  }
  if (*heads % *kv_heads != 0) {
    return failed(error, "config.json: num_attention_heads " + std::to_string(*heads) +
                             " is not a multiple of num_key_value_heads " +
                             std::to_string(*kv_heads));
  }
  const auto head_dim = int_field(config, "head_dim", *hidden / *heads, error);
  if (!head_dim) return false;
  if (*head_dim > (int64_t{1} << 30)) {
    return failed(error, "config.json: head_dim " + std::to_string(*head_dim) +
                             " is out of range (at most 2^30; a Llama's is hidden_size / "
                             "num_attention_heads = " +
                             std::to_string(*hidden / *heads) + ")");
  }
  if (*head_dim <= 0 || *head_dim % 2 != 0 ||
      (!config.contains("head_dim") && *hidden % *heads != 0)) {
    return failed(
        error, "config.json: head_dim " + std::to_string(*head_dim) + " must be positive and even");
  }
  s.hidden = static_cast<int>(*hidden);
  s.layers = static_cast<int>(*layers);
  s.heads = static_cast<int>(*heads);
  s.kv_heads = static_cast<int>(*kv_heads);
  s.head_dim = static_cast<int>(*head_dim);
  s.ffn = static_cast<int>(*ffn);
  s.vocab = static_cast<int>(*vocab);
  s.max_seq = static_cast<int>(std::min<int64_t>(*max_pos, kCheckpointMaxSeq));
  return check_sizes(s, error);
}

/// RoPE theta (or transformers v5's rope_parameters), the RMSNorm epsilon and llama3 scaling.
bool read_rope(const json& config, ModelShape& s, std::string* error) {
  // transformers v5 moves rope_theta and the scaling into "rope_parameters".
  const json none = json::object();
  const json& rope_params =
      config.contains("rope_parameters") && config["rope_parameters"].is_object()
          ? config["rope_parameters"]
          : none;
  const json& theta_home = config.contains("rope_theta") ? config : rope_params;
  const auto theta = number_field(theta_home, "rope_theta", 10000.0, "", error);
  if (!theta) return false;
  if (!(*theta > 0) || !std::isfinite(static_cast<float>(*theta)))
    return failed(error, "config.json: rope_theta must be a positive finite number, got " +
                             json_excerpt(*theta) + " (Llama uses 10000 or 500000)");
  s.rope_theta = static_cast<float>(*theta);
  const auto eps = number_field(config, "rms_norm_eps", 1e-6, "", error);
  if (!eps) return false;
  if (!(*eps >= 0) || !std::isfinite(static_cast<float>(*eps)))
    return failed(error, "config.json: rms_norm_eps must be a finite number >= 0, got " +
                             json_excerpt(*eps) + " (Llama uses 1e-5 or 1e-6)");
  s.rms_eps = static_cast<float>(*eps);

  const json* scaling = nullptr;
  if (config.contains("rope_scaling") && config["rope_scaling"].is_object()) {
    scaling = &config["rope_scaling"];
  } else if (!rope_params.empty()) {
    scaling = &rope_params;
  }
  if (scaling != nullptr) {
    const json& r = *scaling;
    std::string type = "default";
    if (r.contains("rope_type") && r["rope_type"].is_string())
      type = r["rope_type"].get<std::string>();
    else if (r.contains("type") && r["type"].is_string())
      type = r["type"].get<std::string>();
    if (type == "llama3") {
      const auto factor = number_field(r, "factor", std::nullopt, "rope_scaling.", error);
      if (!factor) return false;
      const auto low = number_field(r, "low_freq_factor", std::nullopt, "rope_scaling.", error);
      if (!low) return false;
      const auto high = number_field(r, "high_freq_factor", std::nullopt, "rope_scaling.", error);
      if (!high) return false;
      const auto original =
          number_field(r, "original_max_position_embeddings", std::nullopt, "rope_scaling.", error);
      if (!original) return false;
      if (!(*factor > 0) || !(*high > *low) || !(*low > 0) || !std::isfinite(*factor) ||
          !std::isfinite(*high) || !(*original > 0 && *original <= (int64_t{1} << 30))) {
        return failed(
            error,
            "config.json: rope_scaling needs factor > 0, high_freq_factor > low_freq_factor > 0 "
            "and original_max_position_embeddings in [1, 2^30]");
      }
      s.rope_scaling_factor = static_cast<float>(*factor);
      s.rope_low_freq_factor = static_cast<float>(*low);
      s.rope_high_freq_factor = static_cast<float>(*high);
      s.rope_original_max_position = static_cast<int>(*original);
    } else if (type != "default") {
      return failed(error,
                    "config.json: rope_scaling type \"" + type + "\" unsupported (only llama3)");
    }
  }

  return true;
}

/// Tied embeddings and the dtype (*dtype_given: whether the config named one).
bool read_tying_and_dtype(const json& config, ModelShape& s, bool* dtype_given,
                          std::string* error) {
  if (config.contains("tie_word_embeddings") && !config["tie_word_embeddings"].is_null()) {
    if (!config["tie_word_embeddings"].is_boolean()) {
      return failed(error, "config.json: field tie_word_embeddings must be true or false");
    }
    s.tied_embeddings = config["tie_word_embeddings"].get<bool>();
  }

  const char* dtype_key = config.contains("torch_dtype") ? "torch_dtype"
                          : config.contains("dtype")     ? "dtype"
                                                         : nullptr;
  if (dtype_key != nullptr && !config[dtype_key].is_null()) {
    const std::string name = config[dtype_key].is_string() ? config[dtype_key].get<std::string>()
                                                           : json_excerpt(config[dtype_key]);
    if (name == "bfloat16") {
      s.dtype = DType::kBF16;
    } else if (name == "float32" || name == "float16") {
      s.dtype = DType::kF32;
    } else {
      return failed(error, std::string("config.json: ") + dtype_key + " \"" + name +
                               "\" unsupported (bfloat16, float16 or float32)");
    }
    *dtype_given = true;
  }
  return true;
}

std::optional<ParsedConfig> parse_config(const std::string& dir, std::string* error) {
  const fs::path path = fs::path(dir) / "config.json";
  const std::optional<std::string> text = read_text(path);
  if (!text)
    return fail(error, path.string() + ": cannot read (is " + dir +
                           " a Hugging Face checkpoint directory?)");
  std::string why;
  const std::optional<json> document = parse_json_text(*text, &why);
  if (!document) return fail(error, path.string() + ": " + why);
  const json& config = *document;
  if (!config.is_object()) return fail(error, path.string() + ": not a JSON object");

  if (config.contains("architectures")) {
    const json& arch = config["architectures"];
    const bool llama = arch.is_array() && std::any_of(arch.begin(), arch.end(), [](const json& a) {
                         return a.is_string() && a.get<std::string>() == "LlamaForCausalLM";
                       });
    if (!llama)
      return fail(error, "config.json: architectures " + json_excerpt(arch) +
                             " unsupported (only LlamaForCausalLM)");
  }
  if (!config.contains("model_type") || !config["model_type"].is_string()) {
    return fail(error, "config.json: missing field model_type (expected \"llama\")");
  }
  if (config["model_type"].get<std::string>() != "llama") {
    return fail(error, "config.json: model_type " + json_excerpt(config["model_type"]) +
                           " unsupported (only \"llama\")");
  }

  ParsedConfig parsed;
  ModelShape& s = parsed.shape;
  s.name = dir;
  if (!read_dimensions(config, s, error) || !read_rope(config, s, error) ||
      !read_tying_and_dtype(config, s, &parsed.dtype_given, error))
    return std::nullopt;
  return parsed;
}

/// The safetensors files of a checkpoint: those the index names, else every *.safetensors.
std::optional<std::vector<std::string>> safetensors_files(const std::string& dir,
                                                          std::string* error) {
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index)) {
    const std::optional<std::string> text = read_text(index);
    const json j = text ? json::parse(*text, nullptr, false) : json();
    if (!text || j.is_discarded() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return fail(error, index.string() + ": cannot read its weight_map");
    }
    std::set<std::string> unique;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string())
        return fail(error, index.string() + ": weight_map entry " + tensor + " is not a file name");
      unique.insert(file.get<std::string>());
    }
    files.assign(unique.begin(), unique.end());
  } else {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      if (e.is_regular_file() && e.path().extension() == ".safetensors")
        files.push_back(e.path().filename().string());
    }
    if (ec) return fail(error, dir + ": cannot list (" + ec.message() + ")");
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) return fail(error, dir + ": no *.safetensors files");
  return files;
}

/// Whether one checkpoint tensor has a supported dtype, the expected shape and the bytes for it.
bool check_tensor(const TensorRef& ref, const std::string& name, const std::vector<int64_t>& shape,
                  std::string* error) {
  const std::optional<int64_t> size = safetensors_dtype_bytes(ref.dtype);
  if (!size) {
    return failed(error, "tensor " + name + " in " + ref.file + ": unsupported dtype " + ref.dtype +
                             " (supported: F32, F16, BF16)");
  }
  if (ref.shape != shape) {
    return failed(error, "tensor " + name + " in " + ref.file + ": shape " +
                             shape_string(ref.shape) + ", expected " + shape_string(shape));
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (static_cast<int64_t>(ref.bytes) != n * *size) {
    return failed(error, "tensor " + name + " in " + ref.file + ": holds " +
                             std::to_string(ref.bytes) + " bytes, expected " +
                             std::to_string(n * *size));
  }
  return true;
}

/// Converts one checked tensor (check_tensor) into the arena at `offset` (elements).
void copy_tensor(const TensorRef& ref, const std::vector<int64_t>& shape, Weights& weights,
                 int64_t offset) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const bool to_bf16 = weights.shape.dtype == DType::kBF16;
  if (to_bf16 && ref.dtype == "BF16") {
    std::memcpy(weights.bf16.data() + offset, ref.data, ref.bytes);
    return;
  }
  if (!to_bf16 && ref.dtype == "F32") {
    std::memcpy(weights.f32.data() + offset, ref.data, ref.bytes);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float value = 0.0f;
    if (ref.dtype == "F32") {
      std::memcpy(&value, ref.data + 4 * i, 4);
    } else {
      uint16_t bits = 0;
      std::memcpy(&bits, ref.data + 2 * i, 2);
      value = ref.dtype == "F16" ? f16_to_f32(bits) : bf16_to_f32(bits);
    }
    if (to_bf16) {
      weights.bf16[static_cast<size_t>(offset + i)] = f32_to_bf16(value);
    } else {
      weights.f32[static_cast<size_t>(offset + i)] = value;
    }
  }
}

/// The shortest decimal of a float, as a double (so config.json says 1e-05, not 9.99999974e-06).
double json_number(float value) {
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::strtod(std::string(buf, result.ptr).c_str(), nullptr);
}

std::optional<Weights> load_checkpoint_unguarded(const std::string& dir, std::string* error);

}  // namespace

std::string hf_tensor_name(const std::string& arena_name) {
  if (arena_name == "embed") return "model.embed_tokens.weight";
  if (arena_name == "final_norm") return "model.norm.weight";
  if (arena_name == "lm_head") return "lm_head.weight";
  if (arena_name.rfind("layers.", 0) != 0) return "";
  const size_t dot = arena_name.find('.', 7);
  if (dot == std::string::npos) return "";
  const std::string prefix = "model." + arena_name.substr(0, dot + 1);
  static const std::map<std::string, std::string> kParts = {
      {"attn_norm", "input_layernorm.weight"}, {"wq", "self_attn.q_proj.weight"},
      {"wk", "self_attn.k_proj.weight"},       {"wv", "self_attn.v_proj.weight"},
      {"wo", "self_attn.o_proj.weight"},       {"mlp_norm", "post_attention_layernorm.weight"},
      {"w_gate", "mlp.gate_proj.weight"},      {"w_up", "mlp.up_proj.weight"},
      {"w_down", "mlp.down_proj.weight"}};
  const auto it = kParts.find(arena_name.substr(dot + 1));
  return it == kParts.end() ? "" : prefix + it->second;
}

std::optional<ModelShape> read_checkpoint_config(const std::string& dir, std::string* error) {
  std::optional<ParsedConfig> parsed;
  try {
    parsed = parse_config(dir, error);
  } catch (const json::exception& e) {
    return fail(error, dir + "/config.json: " + e.what());
  }
  if (!parsed) return std::nullopt;
  return parsed->shape;
}

std::optional<Weights> load_checkpoint(const std::string& dir, std::string* error) {
  try {
    return load_checkpoint_unguarded(dir, error);
  } catch (const json::exception& e) {
    return fail(error, dir + ": malformed JSON (" + e.what() + ")");
  } catch (const fs::filesystem_error& e) {
    return fail(error, dir + ": " + e.what());
  }
}

namespace {

std::optional<Weights> load_checkpoint_unguarded(const std::string& dir, std::string* error) {
  std::optional<ParsedConfig> parsed = parse_config(dir, error);
  if (!parsed) return std::nullopt;
  const std::optional<std::vector<std::string>> files = safetensors_files(dir, error);
  if (!files) return std::nullopt;

  std::vector<std::unique_ptr<MappedFile>> maps;
  std::map<std::string, TensorRef> tensors;
  for (const std::string& file : *files) {
    maps.push_back(std::make_unique<MappedFile>());
    if (!maps.back()->open(fs::path(dir) / file, error)) return std::nullopt;
    if (!index_safetensors(*maps.back(), file, tensors, error)) return std::nullopt;
  }

  ModelShape shape = parsed->shape;
  if (!parsed->dtype_given) {
    // No torch_dtype in config.json: keep the embedding's precision (BF16 stays bf16).
    const auto embed = tensors.find("model.embed_tokens.weight");
    shape.dtype =
        embed != tensors.end() && embed->second.dtype == "BF16" ? DType::kBF16 : DType::kF32;
  }
  Weights weights;
  weights.shape = shape;
  weights.layout = layout_for(shape);
  // Every tensor is checked before the arena is allocated: a config.json whose sizes the tensors
  // do not back is a message, not an allocation of what it claims.
  std::vector<std::pair<const TensorRef*, std::vector<int64_t>>> sources;
  for (const TensorInfo& t : weights.layout.tensors) {
    const std::string name = hf_tensor_name(t.name);
    const auto it = tensors.find(name);
    if (it == tensors.end()) {
      std::string hint = name == "lm_head.weight"
                             ? " (set tie_word_embeddings if the LM head is the embedding)"
                             : "";
      return fail(error, "missing tensor " + name + " in " + dir + hint);
    }
    std::vector<int64_t> expected = t.rows == 1 && t.name.ends_with("norm")
                                        ? std::vector<int64_t>{t.cols}
                                        : std::vector<int64_t>{t.rows, t.cols};
    if (!check_tensor(it->second, name, expected, error)) return std::nullopt;
    sources.emplace_back(&it->second, std::move(expected));
  }
  try {
    if (shape.dtype == DType::kF32) {
      weights.f32.assign(static_cast<size_t>(weights.layout.total_elements), 0.0f);
    } else {
      weights.bf16.assign(static_cast<size_t>(weights.layout.total_elements), 0);
    }
  } catch (const std::bad_alloc&) {
    return fail(error,
                dir + ": not enough memory for its " +
                    std::to_string(weights.layout.total_elements * dtype_bytes(shape.dtype) >> 20) +
                    " MiB of weights");
  }
  for (size_t i = 0; i < sources.size(); ++i)
    copy_tensor(*sources[i].first, sources[i].second, weights, weights.layout.tensors[i].offset);
  return weights;
}

}  // namespace

bool save_checkpoint(const Weights& weights, const std::string& dir, std::string* error) {
  const ModelShape& s = weights.shape;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return failed(error, dir + ": cannot create (" + ec.message() + ")");

  json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"hidden_size", s.hidden},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"head_dim", s.head_dim},
      {"intermediate_size", s.ffn},
      {"vocab_size", s.vocab},
      {"max_position_embeddings", s.max_seq},
      {"rope_theta", json_number(s.rope_theta)},
      {"rms_norm_eps", json_number(s.rms_eps)},
      {"tie_word_embeddings", s.tied_embeddings},
      {"torch_dtype", s.dtype == DType::kBF16 ? "bfloat16" : "float32"},
  };
  if (s.rope_scaling_factor > 0.0f) {
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", json_number(s.rope_scaling_factor)},
                              {"low_freq_factor", json_number(s.rope_low_freq_factor)},
                              {"high_freq_factor", json_number(s.rope_high_freq_factor)},
                              {"original_max_position_embeddings", s.rope_original_max_position}};
  } else {
    config["rope_scaling"] = nullptr;
  }
  {
    std::ofstream out(fs::path(dir) / "config.json");
    out << config.dump(2) << "\n";
    if (!out) return failed(error, (fs::path(dir) / "config.json").string() + ": write failed");
  }

  const int64_t elem = dtype_bytes(s.dtype);
  const char* arena = static_cast<const char*>(weights.data());
  std::vector<TensorWrite> tensors;
  for (const TensorInfo& t : weights.layout.tensors) {
    const bool vector = t.rows == 1 && t.name.ends_with("norm");
    tensors.push_back({hf_tensor_name(t.name), s.dtype == DType::kBF16 ? "BF16" : "F32",
                       vector ? std::vector<int64_t>{t.cols} : std::vector<int64_t>{t.rows, t.cols},
                       arena + t.offset * elem, t.rows * t.cols * elem});
  }
  return write_safetensors(fs::path(dir) / "model.safetensors", tensors, error);
}

}  // namespace megasched::schedule
