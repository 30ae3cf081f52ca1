#include "schedule/model.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>
#include <thread>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace megasched::schedule {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

int dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
  }
  return 0;
}

std::optional<DType> parse_dtype(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "f32" || lower == "fp32" || lower == "float32") return DType::kF32;
  if (lower == "bf16" || lower == "bfloat16") return DType::kBF16;
  return std::nullopt;
}

uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    // NaN: keep the sign and the top payload bits, force the quiet bit so it cannot become inf.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7FFFu + lsb) >> 16);
}

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

int64_t ModelShape::param_count() const {
  const int64_t h = hidden;
  const int64_t per_layer = 2 * h                    // attn_norm, mlp_norm
                            + 2 * h * q_dim()        // wq, wo
                            + 2 * h * kv_dim()       // wk, wv
                            + 3 * h * int64_t{ffn};  // w_gate, w_up, w_down
  const int64_t embed = int64_t{vocab} * h;
  return embed + layers * per_layer + h + (tied_embeddings ? 0 : embed);
}

int64_t ModelShape::weight_bytes() const { return param_count() * dtype_bytes(dtype); }

int64_t ModelShape::kv_bytes_per_position() const {
  return int64_t{2} * layers * kv_dim() * dtype_bytes(dtype);
}

nlohmann::json to_json(const ModelShape& s) {
  return nlohmann::json{{"name", s.name},
                        {"hidden", s.hidden},
                        {"layers", s.layers},
                        {"heads", s.heads},
                        {"kv_heads", s.kv_heads},
                        {"head_dim", s.head_dim},
                        {"ffn", s.ffn},
                        {"vocab", s.vocab},
                        {"max_seq", s.max_seq},
                        {"tied_embeddings", s.tied_embeddings},
                        {"dtype", dtype_name(s.dtype)}};
}

ModelShape shape_from_json(const nlohmann::json& j) {
  ModelShape s;
  if (!j.is_object()) return s;
  s.name = j.value("name", "");
  s.hidden = j.value("hidden", 0);
  s.layers = j.value("layers", 0);
  s.heads = j.value("heads", 0);
  s.kv_heads = j.value("kv_heads", 0);
  s.head_dim = j.value("head_dim", 0);
  s.ffn = j.value("ffn", 0);
  s.vocab = j.value("vocab", 0);
  s.max_seq = j.value("max_seq", 0);
  s.tied_embeddings = j.value("tied_embeddings", false);
  if (auto dtype = parse_dtype(j.value("dtype", "f32"))) s.dtype = *dtype;
  return s;
}

std::vector<float> rope_inv_freq(const ModelShape& shape) {
  const int half = shape.head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    // As transformers: 1 / theta^(2i / d), evaluated in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(shape.head_dim);
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(shape.rope_theta, exponent);
  }
  if (shape.rope_scaling_factor <= 0.0f) return inv_freq;

  // transformers' _compute_llama3_parameters: low frequencies are divided by `factor`, high
  // frequencies are kept, and the band between is interpolated smoothly. Evaluated in fp32 one
  // operation at a time in torch's order (python scalars enter fp32 tensor ops as fp32), so the
  // table is bit-identical to transformers' inv_freq; in double, the smoothed band came out one
  // ulp off, an angle error that grows with position.
  const float factor = shape.rope_scaling_factor;
  const float low = shape.rope_low_freq_factor;
  const float high = shape.rope_high_freq_factor;
  const double old_len = shape.rope_original_max_position;
  const float low_freq_wavelen = static_cast<float>(old_len / low);
  const float high_freq_wavelen = static_cast<float>(old_len / high);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float band = static_cast<float>(static_cast<double>(high) - static_cast<double>(low));
  for (float& f : inv_freq) {
    const float wavelen = two_pi / f;
    const float kept_or_divided = wavelen > low_freq_wavelen ? f / factor : f;
    const float smooth = (static_cast<float>(old_len) / wavelen - low) / band;
    const float smoothed = (1.0f - smooth) * kept_or_divided / factor + smooth * kept_or_divided;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = medium ? smoothed : kept_or_divided;
  }
  return inv_freq;
}

namespace {

int64_t align_up(int64_t value) {
  return (value + kTensorAlignElements - 1) / kTensorAlignElements * kTensorAlignElements;
}

}  // namespace

WeightLayout layout_for(const ModelShape& shape) {
  WeightLayout layout;
  const int64_t h = shape.hidden;
  int64_t cursor = 0;
  // Places a tensor at the next aligned offset (or exactly at the cursor when `packed`).
  auto place = [&](const std::string& name, int64_t rows, int64_t cols, bool packed = false) {
    const int64_t offset = packed ? cursor : align_up(cursor);
    layout.tensors.push_back(TensorInfo{name, rows, cols, offset});
    cursor = offset + rows * cols;
    return offset;
  };
  layout.embed = place("embed", shape.vocab, h);
  for (int l = 0; l < shape.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    WeightLayout::Layer layer{};
    layer.attn_norm = place(p + "attn_norm", 1, h);
    layer.wq = place(p + "wq", shape.q_dim(), h);
    layer.wk = place(p + "wk", shape.kv_dim(), h, /*packed=*/true);
    layer.wv = place(p + "wv", shape.kv_dim(), h, /*packed=*/true);
    layer.wo = place(p + "wo", h, shape.q_dim());
    layer.mlp_norm = place(p + "mlp_norm", 1, h);
    layer.w_gate = place(p + "w_gate", shape.ffn, h);
    layer.w_up = place(p + "w_up", shape.ffn, h, /*packed=*/true);
    layer.w_down = place(p + "w_down", h, shape.ffn);
    layout.layer.push_back(layer);
  }
  layout.final_norm = place("final_norm", 1, h);
  layout.lm_head = shape.tied_embeddings ? layout.embed : place("lm_head", shape.vocab, h);
  layout.total_elements = align_up(cursor);
  return layout;
}

const void* Weights::data() const {
  return shape.dtype == DType::kF32 ? static_cast<const void*>(f32.data())
                                    : static_cast<const void*>(bf16.data());
}

int64_t Weights::bytes() const {
  return shape.dtype == DType::kF32 ? static_cast<int64_t>(f32.size() * sizeof(float))
                                    : static_cast<int64_t>(bf16.size() * sizeof(uint16_t));
}

const std::vector<ModelShape>& presets() {
  static const std::vector<ModelShape> all = [] {
    std::vector<ModelShape> list;
    ModelShape toy;
    toy.name = "toy";
    toy.hidden = 64;
    toy.layers = 1;
    toy.heads = 4;
    toy.kv_heads = 2;
    toy.head_dim = 16;
    toy.ffn = 128;
    toy.vocab = 256;
    toy.max_seq = 128;
    toy.rope_theta = 10000.0f;
    toy.rms_eps = 1e-5f;
    toy.tied_embeddings = false;
    toy.dtype = DType::kF32;
    list.push_back(toy);

    ModelShape toy2 = toy;
    toy2.name = "toy-2L";
    toy2.layers = 2;
    list.push_back(toy2);

    ModelShape small;
    small.name = "small";
    small.hidden = 2048;
    small.layers = 4;
    small.heads = 16;
    small.kv_heads = 4;
    small.head_dim = 128;
    small.ffn = 5632;
    small.vocab = 32000;
    small.max_seq = 2048;
    small.rope_theta = 10000.0f;
    small.rms_eps = 1e-5f;
    small.tied_embeddings = false;
    small.dtype = DType::kBF16;
    list.push_back(small);

    ModelShape l1b;  // meta-llama/Llama-3.2-1B
    l1b.name = "llama-1b";
    l1b.hidden = 2048;
    l1b.layers = 16;
    l1b.heads = 32;
    l1b.kv_heads = 8;
    l1b.head_dim = 64;
    l1b.ffn = 8192;
    l1b.vocab = 128256;
    l1b.max_seq = 8192;
    l1b.rope_theta = 500000.0f;
    l1b.rms_eps = 1e-5f;
    l1b.tied_embeddings = true;
    l1b.dtype = DType::kBF16;
    l1b.rope_scaling_factor = 32.0f;
    l1b.rope_low_freq_factor = 1.0f;
    l1b.rope_high_freq_factor = 4.0f;
    l1b.rope_original_max_position = 8192;
    list.push_back(l1b);

    ModelShape l8b;  // meta-llama/Llama-3.1-8B
    l8b.name = "llama-8b";
    l8b.hidden = 4096;
    l8b.layers = 32;
    l8b.heads = 32;
    l8b.kv_heads = 8;
    l8b.head_dim = 128;
    l8b.ffn = 14336;
    l8b.vocab = 128256;
    l8b.max_seq = 8192;
    l8b.rope_theta = 500000.0f;
    l8b.rms_eps = 1e-5f;
    l8b.tied_embeddings = false;
    l8b.dtype = DType::kBF16;
    l8b.rope_scaling_factor = 8.0f;
    l8b.rope_low_freq_factor = 1.0f;
    l8b.rope_high_freq_factor = 4.0f;
    l8b.rope_original_max_position = 8192;
    list.push_back(l8b);
    return list;
  }();
  return all;
}

std::optional<ModelShape> find_preset(const std::string& name) {
  for (const ModelShape& shape : presets()) {
    if (shape.name == name) return shape;
  }
  return std::nullopt;
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The top 24 bits as k * 2^-23 - 1: exact in fp32, uniform over [-1, 1).
float to_unit(uint64_t bits) { return static_cast<float>(bits >> 40) * (1.0f / 8388608.0f) - 1.0f; }

/// Per-tensor generator parameters: value = center + scale * u, u uniform in [-1, 1).
struct Distribution {
  float center = 0.0f;
  float scale = 0.0f;
};

// The constants. A uniform [-a, a) weight has variance a^2 / 3, so a = sqrt(3 / fan_in) maps an
// input of unit RMS to outputs of unit RMS. Every projection uses that, so q, k, v, the attention
// output, gate, up and each residual contribution are all of order 1; the residual stream grows
// like sqrt(2 * layers) and the RMSNorms bring it back to unit RMS before every projection.
// Attention scores q.k / sqrt(head_dim) then have a standard deviation of about 1 (softmax neither
// flat nor one-hot). Norm gammas are 1 +- 0.1.
// The LM head (and the embedding, which is the LM head when tied) uses a = kLogitStd *
// sqrt(3 / hidden): after the final norm the logits have a standard deviation of about kLogitStd,
// and they depend on the token through every layer, so greedy argmaxes differ across tokens. The
// embedding's small row RMS (kLogitStd / sqrt(hidden)) is harmless: the first RMSNorm rescales it.
constexpr float kNormGammaSpread = 0.1f;
constexpr float kLogitStd = 2.0f;

Distribution distribution_for(const ModelShape& shape, const TensorInfo& tensor) {
  const std::string& name = tensor.name;
  auto ends_with = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
  };
  if (ends_with("norm")) return {1.0f, kNormGammaSpread};
  if (name == "embed" || name == "lm_head") {
    return {0.0f, kLogitStd * std::sqrt(3.0f / static_cast<float>(shape.hidden))};
  }
  return {0.0f, std::sqrt(3.0f / static_cast<float>(tensor.cols))};
}

// The fill loops are built twice (AVX-512 and baseline x86-64, picked at load time) because the
// 64-bit multiplies of splitmix64 only vectorise with AVX-512DQ; both give identical bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MS_GENERATOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define MS_GENERATOR_CLONES
#endif

MS_GENERATOR_CLONES
void fill_f32(float* out, int64_t begin, int64_t end, uint64_t base, float center, float scale) {
  for (int64_t i = begin; i < end; ++i) {
    out[i] = center + scale * to_unit(splitmix64(base + static_cast<uint64_t>(i)));
  }
}

MS_GENERATOR_CLONES
void fill_bf16(uint16_t* out, int64_t begin, int64_t end, uint64_t base, float center,
               float scale) {
  for (int64_t i = begin; i < end; ++i) {
    const float value = center + scale * to_unit(splitmix64(base + static_cast<uint64_t>(i)));
    // Generated values are finite, so this is f32_to_bf16 without its NaN branch.
    const uint32_t bits = std::bit_cast<uint32_t>(value);
    out[i] = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  }
}

/// Faults in the pages of [data, data + bytes) from several threads: first-touch page faults of a
/// multi-GB arena cost more than generating its contents when done by one thread.
void populate_parallel(void* data, size_t bytes, int threads) {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kPage - 1) & ~(kPage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kPage - 1);
  if (end <= begin || threads <= 1) return;
  const uintptr_t pages = (end - begin) / kPage;
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w) {
    const uintptr_t first =
        begin + pages * static_cast<uintptr_t>(w) / static_cast<uintptr_t>(threads) * kPage;
    const uintptr_t last =
        begin + pages * static_cast<uintptr_t>(w + 1) / static_cast<uintptr_t>(threads) * kPage;
    // A failure (an old kernel) only loses the speed-up: the pages fault in on first use.
    pool.emplace_back([first, last] {
      (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE);
    });
  }
  for (std::thread& t : pool) t.join();
#else
  (void)data;
  (void)bytes;
  (void)threads;
#endif
}

}  // namespace

Weights generate_weights(const ModelShape& shape, uint64_t seed, int threads) {
  Weights weights;
  weights.shape = shape;
  weights.layout = layout_for(shape);
  const size_t total = static_cast<size_t>(weights.layout.total_elements);
  const int hw_threads =
      threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  if (shape.dtype == DType::kF32) {
    weights.f32.reserve(total);
    populate_parallel(weights.f32.data(), total * sizeof(float), hw_threads);
    weights.f32.resize(total, 0.0f);  // padding between tensors stays zero
  } else {
    weights.bf16.reserve(total);
    populate_parallel(weights.bf16.data(), total * sizeof(uint16_t), hw_threads);
    weights.bf16.resize(total, 0);
  }

  // Work items: fixed-size chunks of each tensor, so the split (and the result) never depends on
  // the thread count.
  constexpr int64_t kChunk = int64_t{1} << 20;
  struct Chunk {
    size_t tensor;
    int64_t begin, end;  // element range within the tensor
  };
  std::vector<Chunk> chunks;
  std::vector<Distribution> dists;
  for (size_t k = 0; k < weights.layout.tensors.size(); ++k) {
    const TensorInfo& t = weights.layout.tensors[k];
    dists.push_back(distribution_for(shape, t));
    const int64_t n = t.rows * t.cols;
    for (int64_t b = 0; b < n; b += kChunk) chunks.push_back({k, b, std::min(n, b + kChunk)});
  }

  auto run_chunk = [&](const Chunk& c) {
    const TensorInfo& t = weights.layout.tensors[c.tensor];
    const Distribution d = dists[c.tensor];
    const uint64_t base = seed + 0x9E3779B97F4A7C15ull * (c.tensor + 1);
    if (shape.dtype == DType::kF32) {
      fill_f32(weights.f32.data() + t.offset, c.begin, c.end, base, d.center, d.scale);
    } else {
      fill_bf16(weights.bf16.data() + t.offset, c.begin, c.end, base, d.center, d.scale);
    }
  };

  const int n_threads = std::max(1, std::min<int>(hw_threads, static_cast<int>(chunks.size())));
  if (n_threads == 1) {
    for (const Chunk& c : chunks) run_chunk(c);
    return weights;
  }
  std::vector<std::thread> pool;
  for (int w = 0; w < n_threads; ++w) {
    pool.emplace_back([&, w] {
      for (size_t i = static_cast<size_t>(w); i < chunks.size();
           i += static_cast<size_t>(n_threads)) {
        run_chunk(chunks[i]);
      }
    });
  }
  for (std::thread& t : pool) t.join();
  return weights;
}

}  // namespace megasched::schedule
