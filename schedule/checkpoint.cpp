#include "schedule/checkpoint.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

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
                           config[key].dump());
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
                           config[key].dump());
  }
  return config[key].get<double>();
}

/// The config plus whether it named a dtype (otherwise the tensors decide).
struct ParsedConfig {
  ModelShape shape;
  bool dtype_given = false;
};

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

  return true;
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
  s.rope_theta = static_cast<float>(*theta);
  const auto eps = number_field(config, "rms_norm_eps", 1e-6, "", error);
  if (!eps) return false;
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
      if (*factor <= 0 || *high <= *low) {
        return failed(
            error,
            "config.json: rope_scaling needs factor > 0 and high_freq_factor > low_freq_factor");
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
                                                           : config[dtype_key].dump();
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
  const json config = json::parse(*text, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return fail(error, path.string() + ": not a JSON object");

  if (config.contains("architectures")) {
    const json& arch = config["architectures"];
    const bool llama = arch.is_array() && std::any_of(arch.begin(), arch.end(), [](const json& a) {
                         return a.is_string() && a.get<std::string>() == "LlamaForCausalLM";
                       });
    if (!llama)
      return fail(error, "config.json: architectures " + arch.dump() +
                             " unsupported (only LlamaForCausalLM)");
  }
  if (!config.contains("model_type") || !config["model_type"].is_string()) {
    return fail(error, "config.json: missing field model_type (expected \"llama\")");
  }
  if (config["model_type"].get<std::string>() != "llama") {
    return fail(error, "config.json: model_type " + config["model_type"].dump() +
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

/// Converts one checkpoint tensor into the arena at `offset` (elements), after checking its shape.
bool copy_tensor(const TensorRef& ref, const std::string& name, const std::vector<int64_t>& shape,
                 Weights& weights, int64_t offset, std::string* error) {
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
  const bool to_bf16 = weights.shape.dtype == DType::kBF16;
  if (to_bf16 && ref.dtype == "BF16") {
    std::memcpy(weights.bf16.data() + offset, ref.data, ref.bytes);
    return true;
  }
  if (!to_bf16 && ref.dtype == "F32") {
    std::memcpy(weights.f32.data() + offset, ref.data, ref.bytes);
    return true;
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
  return true;
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
  if (shape.dtype == DType::kF32) {
    weights.f32.assign(static_cast<size_t>(weights.layout.total_elements), 0.0f);
  } else {
    weights.bf16.assign(static_cast<size_t>(weights.layout.total_elements), 0);
  }
  for (const TensorInfo& t : weights.layout.tensors) {
    const std::string name = hf_tensor_name(t.name);
    const auto it = tensors.find(name);
    if (it == tensors.end()) {
      std::string hint = name == "lm_head.weight"
                             ? " (set tie_word_embeddings if the LM head is the embedding)"
                             : "";
      return fail(error, "missing tensor " + name + " in " + dir + hint);
    }
    const std::vector<int64_t> expected = t.rows == 1 && t.name.ends_with("norm")
                                              ? std::vector<int64_t>{t.cols}
                                              : std::vector<int64_t>{t.rows, t.cols};
    if (!copy_tensor(it->second, name, expected, weights, t.offset, error)) return std::nullopt;
  }
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
