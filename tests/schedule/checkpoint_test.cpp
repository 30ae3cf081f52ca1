#include "schedule/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "eval/eager.h"

namespace megasched::schedule {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// A scratch directory removed when the test ends.
class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(fs::temp_directory_path() /
              ("megasched_ckpt_" + tag + "_" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  fs::path path() const { return path_; }

 private:
  fs::path path_;
};

/// One tensor as the test's own safetensors writer takes it.
struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

/// An independent safetensors writer (the loader is not tested against its own writer only).
void write_safetensors(const fs::path& path, const std::vector<RawTensor>& tensors) {
  json header = json::object();
  uint64_t cursor = 0;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {cursor, cursor + t.bytes.size()}}};
    cursor += t.bytes.size();
  }
  const std::string text = header.dump();
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << text;
  for (const RawTensor& t : tensors)
    out.write(reinterpret_cast<const char*>(t.bytes.data()),
              static_cast<std::streamsize>(t.bytes.size()));
}

/// The tensors of `w` in HF naming and the arena dtype.
std::vector<RawTensor> raw_tensors(const Weights& w) {
  std::vector<RawTensor> out;
  const int64_t elem = dtype_bytes(w.shape.dtype);
  for (const TensorInfo& t : w.layout.tensors) {
    RawTensor r;
    r.name = hf_tensor_name(t.name);
    r.dtype = w.shape.dtype == DType::kBF16 ? "BF16" : "F32";
    r.shape = t.name.ends_with("norm") ? std::vector<int64_t>{t.cols}
                                       : std::vector<int64_t>{t.rows, t.cols};
    const auto* begin = static_cast<const uint8_t*>(w.data()) + t.offset * elem;
    r.bytes.assign(begin, begin + t.rows * t.cols * elem);
    out.push_back(std::move(r));
  }
  return out;
}

/// Saves `w`, then rewrites model.safetensors after `edit` changes the tensor list.
void save_with_edit(const Weights& w, const TempDir& dir,
                    const std::function<void(std::vector<RawTensor>&)>& edit) {
  std::string error;
  ASSERT_TRUE(save_checkpoint(w, dir.str(), &error)) << error;
  std::vector<RawTensor> tensors = raw_tensors(w);
  edit(tensors);
  write_safetensors(dir.path() / "model.safetensors", tensors);
}

void edit_config(const TempDir& dir, const std::function<void(json&)>& edit) {
  json config;
  std::ifstream(dir.path() / "config.json") >> config;
  edit(config);
  std::ofstream(dir.path() / "config.json") << config.dump(2);
}

std::string load_error(const TempDir& dir) {
  std::string error;
  EXPECT_FALSE(load_checkpoint(dir.str(), &error).has_value());
  EXPECT_EQ(error.find('\n'), std::string::npos) << "one line: " << error;
  return error;
}

TEST(CheckpointNames, MapArenaNamesToHuggingFaceNames) {
  EXPECT_EQ(hf_tensor_name("embed"), "model.embed_tokens.weight");
  EXPECT_EQ(hf_tensor_name("layers.3.wq"), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.12.attn_norm"), "model.layers.12.input_layernorm.weight");
  EXPECT_EQ(hf_tensor_name("layers.0.mlp_norm"), "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(hf_tensor_name("layers.1.w_down"), "model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(hf_tensor_name("final_norm"), "model.norm.weight");
  EXPECT_EQ(hf_tensor_name("lm_head"), "lm_head.weight");
  EXPECT_EQ(hf_tensor_name("layers.1.bogus"), "");
}

TEST(CheckpointRoundTrip, ToyWeightsAndLogitsSurviveSaveAndLoad) {
  TempDir dir("toy");
  const Weights w = generate_weights(*find_preset("toy-2L"), 5);
  std::string error;
  ASSERT_TRUE(save_checkpoint(w, dir.str(), &error)) << error;
  const std::optional<Weights> loaded = load_checkpoint(dir.str(), &error);
  ASSERT_TRUE(loaded.has_value()) << error;
  EXPECT_EQ(loaded->shape.name, dir.str());
  EXPECT_EQ(loaded->shape.layers, 2);
  EXPECT_EQ(loaded->shape.dtype, DType::kF32);
  EXPECT_FALSE(loaded->shape.tied_embeddings);
  EXPECT_EQ(loaded->shape.rms_eps, w.shape.rms_eps);
  EXPECT_EQ(loaded->shape.rope_theta, w.shape.rope_theta);
  EXPECT_EQ(loaded->shape.max_seq, 128);
  EXPECT_EQ(loaded->f32, w.f32);
  eval::EagerModel a(w);
  eval::EagerModel b(*loaded);
  for (int32_t pos = 0; pos < 3; ++pos) EXPECT_EQ(a.step(40 + pos, pos), b.step(40 + pos, pos));
}

TEST(CheckpointRoundTrip, TiedBf16ModelKeepsRopeScalingAndDtype) {
  TempDir dir("tied");
  ModelShape shape = *find_preset("llama-1b");
  shape.layers = 2;
  shape.hidden = 128;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 32;
  shape.ffn = 256;
  shape.vocab = 512;
  const Weights w = generate_weights(shape, 9);
  std::string error;
  ASSERT_TRUE(save_checkpoint(w, dir.str(), &error)) << error;
  json config;
  std::ifstream(dir.path() / "config.json") >> config;
  EXPECT_EQ(config.at("rms_norm_eps").get<double>(), 1e-5);
  EXPECT_EQ(config.at("rope_scaling").at("rope_type"), "llama3");
  const std::optional<Weights> loaded = load_checkpoint(dir.str(), &error);
  ASSERT_TRUE(loaded.has_value()) << error;
  EXPECT_TRUE(loaded->shape.tied_embeddings);
  EXPECT_EQ(loaded->shape.dtype, DType::kBF16);
  EXPECT_EQ(loaded->shape.rope_theta, 500000.0f);
  EXPECT_EQ(loaded->shape.rope_scaling_factor, 32.0f);
  EXPECT_EQ(loaded->shape.rope_low_freq_factor, 1.0f);
  EXPECT_EQ(loaded->shape.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(loaded->shape.rope_original_max_position, 8192);
  EXPECT_EQ(loaded->shape.max_seq, 8192);
  EXPECT_EQ(loaded->layout.lm_head, loaded->layout.embed);
  EXPECT_EQ(loaded->bf16, w.bf16);
}

TEST(CheckpointImport, ReadsF16TensorsIntoAnF32Arena) {
  TempDir dir("f16");
  const Weights w = generate_weights(*find_preset("toy"), 1);
  // Re-encode every tensor as F16, using values on a 2^-10 grid (exact in binary16).
  std::vector<float> expected(w.f32.size(), 0.0f);
  save_with_edit(w, dir, [&](std::vector<RawTensor>& tensors) {
    for (size_t k = 0; k < tensors.size(); ++k) {
      const TensorInfo& t = w.layout.tensors[k];
      tensors[k].dtype = "F16";
      tensors[k].bytes.clear();
      for (int64_t i = 0; i < t.rows * t.cols; ++i) {
        const float v = std::round(w.f32[static_cast<size_t>(t.offset + i)] * 1024.0f) / 1024.0f;
        expected[static_cast<size_t>(t.offset + i)] = v;
        uint16_t bits = 0;
        if (v != 0.0f) {
          int e = 0;
          const float m = std::frexp(std::abs(v), &e);  // v = m 2^e, m in [0.5, 1)
          bits = static_cast<uint16_t>((v < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10) |
                                       static_cast<int>(std::lround((m * 2.0f - 1.0f) * 1024.0f)));
        }
        tensors[k].bytes.push_back(static_cast<uint8_t>(bits & 0xFF));
        tensors[k].bytes.push_back(static_cast<uint8_t>(bits >> 8));
      }
    }
  });
  edit_config(dir, [](json& c) { c["torch_dtype"] = "float16"; });
  std::string error;
  const std::optional<Weights> loaded = load_checkpoint(dir.str(), &error);
  ASSERT_TRUE(loaded.has_value()) << error;
  EXPECT_EQ(loaded->shape.dtype, DType::kF32);
  EXPECT_EQ(loaded->f32, expected);
}

TEST(CheckpointImport, ReadsShardedCheckpointThroughTheIndex) {
  TempDir dir("sharded");
  const Weights w = generate_weights(*find_preset("toy-2L"), 3);
  std::string error;
  ASSERT_TRUE(save_checkpoint(w, dir.str(), &error)) << error;
  fs::remove(dir.path() / "model.safetensors");
  std::vector<RawTensor> all = raw_tensors(w);
  const std::vector<RawTensor> first(all.begin(), all.begin() + 7);
  const std::vector<RawTensor> second(all.begin() + 7, all.end());
  write_safetensors(dir.path() / "model-00001-of-00002.safetensors", first);
  write_safetensors(dir.path() / "model-00002-of-00002.safetensors", second);
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  for (const RawTensor& t : first) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const RawTensor& t : second)
    index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  std::ofstream(dir.path() / "model.safetensors.index.json") << index.dump();
  const std::optional<Weights> loaded = load_checkpoint(dir.str(), &error);
  ASSERT_TRUE(loaded.has_value()) << error;
  EXPECT_EQ(loaded->f32, w.f32);
}

TEST(CheckpointImport, ConfigDefaultsAndCaps) {
  TempDir dir("config");
  std::ofstream(dir.path() / "config.json") << json{
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", 4096},
      {"num_hidden_layers", 32},
      {"num_attention_heads", 32},
      {"num_key_value_heads", 8},
      {"intermediate_size", 14336},
      {"vocab_size", 128256},
      {"max_position_embeddings", 131072},
      {"rope_theta", 500000.0},
      {"torch_dtype", "bfloat16"},
      {"rms_norm_eps", 1e-5},
      {"rope_scaling",
       {{"rope_type", "llama3"},
        {"factor", 8.0},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings",
         8192}}}}.dump();
  std::string error;
  const std::optional<ModelShape> shape = read_checkpoint_config(dir.str(), &error);
  ASSERT_TRUE(shape.has_value()) << error;
  EXPECT_EQ(shape->head_dim, 128);  // hidden / heads when head_dim is absent
  EXPECT_EQ(shape->max_seq, 8192);  // capped
  EXPECT_FALSE(shape->tied_embeddings);
  EXPECT_EQ(shape->dtype, DType::kBF16);
  EXPECT_EQ(shape->rope_scaling_factor, 8.0f);
  EXPECT_EQ(shape->param_count(), find_preset("llama-8b")->param_count());
  EXPECT_EQ(rope_inv_freq(*shape), rope_inv_freq(*find_preset("llama-8b")));
}

TEST(CheckpointErrors, MissingTensorIsNamed) {
  TempDir dir("missing");
  save_with_edit(generate_weights(*find_preset("toy"), 0), dir, [](std::vector<RawTensor>& t) {
    std::erase_if(t,
                  [](const RawTensor& r) { return r.name == "model.layers.0.mlp.up_proj.weight"; });
  });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("missing tensor model.layers.0.mlp.up_proj.weight"), std::string::npos)
      << error;
}

TEST(CheckpointErrors, MissingLmHeadOfUntiedModelHintsAtTying) {
  TempDir dir("lmhead");
  save_with_edit(generate_weights(*find_preset("toy"), 0), dir, [](std::vector<RawTensor>& t) {
    std::erase_if(t, [](const RawTensor& r) { return r.name == "lm_head.weight"; });
  });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("lm_head.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("tie_word_embeddings"), std::string::npos) << error;
}

TEST(CheckpointErrors, WrongShapeIsNamed) {
  TempDir dir("shape");
  save_with_edit(generate_weights(*find_preset("toy"), 0), dir, [](std::vector<RawTensor>& t) {
    for (RawTensor& r : t) {
      if (r.name == "model.layers.0.self_attn.k_proj.weight") r.shape = {64, 32};  // transposed
    }
  });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.layers.0.self_attn.k_proj.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("shape [64, 32], expected [32, 64]"), std::string::npos) << error;
}

TEST(CheckpointErrors, UnsupportedDtypeIsNamed) {
  TempDir dir("dtype");
  save_with_edit(generate_weights(*find_preset("toy"), 0), dir, [](std::vector<RawTensor>& t) {
    for (RawTensor& r : t) {
      if (r.name == "model.norm.weight") {
        r.dtype = "F64";
        r.bytes.resize(r.bytes.size() * 2);
      }
    }
  });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.norm.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("unsupported dtype F64"), std::string::npos) << error;
}

TEST(CheckpointErrors, WrongArchitectureOrModelTypeIsNamed) {
  TempDir dir("arch");
  std::string error;
  ASSERT_TRUE(save_checkpoint(generate_weights(*find_preset("toy"), 0), dir.str(), &error))
      << error;
  edit_config(dir, [](json& c) { c["architectures"] = {"MistralForCausalLM"}; });
  error = load_error(dir);
  EXPECT_NE(error.find("architectures"), std::string::npos) << error;
  EXPECT_NE(error.find("MistralForCausalLM"), std::string::npos) << error;
  edit_config(dir, [](json& c) {
    c["architectures"] = {"LlamaForCausalLM"};
    c["model_type"] = "gpt2";
  });
  error = load_error(dir);
  EXPECT_NE(error.find("model_type \"gpt2\""), std::string::npos) << error;
}

TEST(CheckpointErrors, MissingOrMistypedConfigFieldIsNamed) {
  TempDir dir("field");
  std::string error;
  ASSERT_TRUE(save_checkpoint(generate_weights(*find_preset("toy"), 0), dir.str(), &error))
      << error;
  edit_config(dir, [](json& c) { c.erase("intermediate_size"); });
  EXPECT_FALSE(read_checkpoint_config(dir.str(), &error).has_value());
  EXPECT_EQ(error, "config.json: missing field intermediate_size");
  edit_config(dir, [](json& c) { c["intermediate_size"] = "big"; });
  error = load_error(dir);
  EXPECT_NE(error.find("intermediate_size must be an integer"), std::string::npos) << error;
  edit_config(dir, [](json& c) {
    c["intermediate_size"] = 128;
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  });
  error = load_error(dir);
  EXPECT_NE(error.find("rope_scaling type \"yarn\" unsupported"), std::string::npos) << error;
}

TEST(CheckpointErrors, MissingDirectoryAndTruncatedFileAreReported) {
  std::string error;
  EXPECT_FALSE(load_checkpoint("/nonexistent/megasched_model", &error).has_value());
  EXPECT_NE(error.find("config.json"), std::string::npos) << error;

  TempDir dir("truncated");
  ASSERT_TRUE(save_checkpoint(generate_weights(*find_preset("toy"), 0), dir.str(), &error))
      << error;
  const fs::path file = dir.path() / "model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);
  error = load_error(dir);
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
}

/// What the eager model gives on a transformers fixture (tests/data/hf/make_fixtures.py).
struct TransformersComparison {
  Weights weights;
  int positions = 0;
  int argmax_matches = 0;
  double worst_rel_err = 0;  // max over positions of ||eager - hf||_2 / ||hf||_2
};

TransformersComparison compare_with_transformers(const std::string& name) {
  const std::string dir = std::string(MS_SOURCE_DIR) + "/tests/data/hf/" + name;
  TransformersComparison out;
  std::string error;
  std::optional<Weights> loaded = load_checkpoint(dir, &error);
  EXPECT_TRUE(loaded.has_value()) << error;
  if (!loaded) return out;
  out.weights = std::move(*loaded);
  json tokens;
  std::ifstream(dir + "/tokens.json") >> tokens;
  const int vocab = out.weights.shape.vocab;
  std::vector<float> ref(tokens.at("tokens").size() * static_cast<size_t>(vocab));
  std::ifstream logits(dir + "/logits.f32", std::ios::binary);
  logits.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * 4));
  EXPECT_TRUE(logits.good()) << dir << "/logits.f32";
  eval::EagerModel model(out.weights);
  for (const json& token : tokens.at("tokens")) {
    const int32_t pos = out.positions++;
    const std::vector<float> got = model.step(token.get<int32_t>(), pos);
    const std::vector<float> want(ref.begin() + int64_t{pos} * vocab,
                                  ref.begin() + int64_t{pos + 1} * vocab);
    double num = 0, den = 0;
    for (int v = 0; v < vocab; ++v) {
      num += (double(got[v]) - want[v]) * (double(got[v]) - want[v]);
      den += double(want[v]) * want[v];
    }
    out.worst_rel_err = std::max(out.worst_rel_err, std::sqrt(num / den));
    out.argmax_matches += eval::argmax(got) == eval::argmax(want);
  }
  return out;
}

TEST(CheckpointTransformers, F32Llama3ModelMatchesLlamaForCausalLM) {
  const TransformersComparison c = compare_with_transformers("llama3_f32_untied");
  // transformers 5 writes "dtype" and "rope_parameters" (llama3, original context 64).
  EXPECT_EQ(c.weights.shape.dtype, DType::kF32);
  EXPECT_FALSE(c.weights.shape.tied_embeddings);
  EXPECT_EQ(c.weights.shape.rope_scaling_factor, 8.0f);
  EXPECT_EQ(c.weights.shape.rope_original_max_position, 64);
  EXPECT_EQ(c.weights.shape.max_seq, 256);
  EXPECT_EQ(c.positions, 24);
  EXPECT_EQ(c.argmax_matches, 24);
  EXPECT_LT(c.worst_rel_err, 1e-5);  // measured 8.9e-7
}

TEST(CheckpointTransformers, Bf16TiedModelMatchesLlamaForCausalLMUpToKvRounding) {
  const TransformersComparison c = compare_with_transformers("plain_bf16_tied");
  EXPECT_EQ(c.weights.shape.dtype, DType::kBF16);
  EXPECT_TRUE(c.weights.shape.tied_embeddings);
  EXPECT_EQ(c.weights.shape.rope_scaling_factor, 0.0f);
  EXPECT_EQ(c.positions, 24);
  EXPECT_EQ(c.argmax_matches, 24);
  // transformers keeps K and V in fp32; the eager model (like the VMs) stores them in bf16.
  EXPECT_LT(c.worst_rel_err, 1e-2);  // measured 3.5e-3
}

TEST(CheckpointErrors, SizesWhoseProductNoBufferHoldsAreRefusedByTheConfig) {
  TempDir dir("huge");
  std::string error;
  ASSERT_TRUE(save_checkpoint(generate_weights(*find_preset("toy"), 0), dir.str(), &error))
      << error;
  // Each field in range (< 2^30); the weight arena would be ~2^49 elements.
  edit_config(dir, [](json& c) {
    c["hidden_size"] = 1 << 16;
    c["num_hidden_layers"] = 4096;
    c["num_attention_heads"] = 512;
    c["num_key_value_heads"] = 512;
    c["head_dim"] = 128;
    c["intermediate_size"] = 1 << 20;
    c["vocab_size"] = 1 << 20;
  });
  EXPECT_FALSE(read_checkpoint_config(dir.str(), &error));
  EXPECT_NE(error.find("more than megasched handles"), std::string::npos) << error;
  EXPECT_NE(load_error(dir).find("more than megasched handles"), std::string::npos);
  // A long KV cache alone.
  edit_config(dir, [](json& c) {
    c["hidden_size"] = 64;
    c["num_hidden_layers"] = 1 << 20;
    c["num_attention_heads"] = 4;
    c["num_key_value_heads"] = 4;
    c["head_dim"] = 16;
    c["intermediate_size"] = 128;
    c["vocab_size"] = 256;
    c["max_position_embeddings"] = 8192;
  });
  EXPECT_FALSE(read_checkpoint_config(dir.str(), &error));
  EXPECT_NE(error.find("more than megasched handles"), std::string::npos) << error;
}

TEST(CheckpointErrors, SizesTheTensorsDoNotBackAreRefusedBeforeTheArenaIsAllocated) {
  TempDir dir("unbacked");
  std::string error;
  ASSERT_TRUE(save_checkpoint(generate_weights(*find_preset("toy"), 0), dir.str(), &error))
      << error;
  // A vocabulary of 2^26 words x 2^10 columns (2^36 elements, 256 GiB of f32): within the
  // limits, and backed by no tensor of that size.
  edit_config(dir, [](json& c) {
    c["vocab_size"] = 1 << 26;
    c["hidden_size"] = 1024;
    c["num_attention_heads"] = 8;
    c["num_key_value_heads"] = 8;
    c["head_dim"] = 128;
  });
  const std::string why = load_error(dir);  // not bad_alloc
  EXPECT_NE(why.find("tensor model.embed_tokens.weight"), std::string::npos) << why;
  EXPECT_NE(why.find("expected [67108864, 1024]"), std::string::npos) << why;
}

TEST(CheckpointErrors, RopeThetaAndRmsNormEpsOutOfRangeAreTheConfigsFault) {
  TempDir dir("consts");
  std::string error;
  ASSERT_TRUE(save_checkpoint(generate_weights(*find_preset("toy"), 0), dir.str(), &error))
      << error;
  for (const json& theta : {json(0), json(-10000.0), json(1e300)}) {
    edit_config(dir, [&](json& c) { c["rope_theta"] = theta; });
    EXPECT_FALSE(read_checkpoint_config(dir.str(), &error)) << theta;
    EXPECT_NE(error.find("rope_theta must be a positive finite number"), std::string::npos)
        << error;
  }
  edit_config(dir, [](json& c) {
    c["rope_theta"] = 10000.0;
    c["rms_norm_eps"] = -1e-5;
  });
  EXPECT_FALSE(read_checkpoint_config(dir.str(), &error));
  EXPECT_NE(error.find("rms_norm_eps must be a finite number >= 0"), std::string::npos) << error;
  edit_config(dir, [](json& c) {
    c["rms_norm_eps"] = 1e-5;
    c["vocab_size"] = json::array({json::array({json::array({1})})});
  });
  EXPECT_FALSE(read_checkpoint_config(dir.str(), &error));
  EXPECT_NE(error.find("vocab_size must be an integer, got [[[1]]]"), std::string::npos) << error;
}

}  // namespace
}  // namespace megasched::schedule
