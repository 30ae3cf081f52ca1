// The fp32 eager forward on the GPU (see eval/gpu_reference.h).
#include "eval/gpu_reference.h"

#include <algorithm>
#include <cmath>

#include "vm/cuda_check.h"
#include "vm/cuda_runtime.h"
#include "vm/device_buffer.h"
#include "vm/nvrtc_build.h"

namespace megasched::eval {

namespace {

using vm::DeviceBuffer;

constexpr unsigned kThreads = 256;  // MS_REF_THREADS
/// Weights upcast per Sgemm: a block of rows of at most this many elements (64 MiB of fp32).
constexpr int64_t kUpcastElements = int64_t{16} << 20;

class GpuReference : public ReferenceForward {
 public:
  explicit GpuReference(const schedule::Weights& weights)
      : w_(weights), s_(weights.shape), layout_(weights.layout) {}
  ~GpuReference() override {
    if (handle_) cublasDestroy(handle_);
  }

  /// Builds the kernels, allocates the buffers; throws vm::GpuError.
  bool init(std::string* error) {
    std::string why;
    const auto dev = vm::device_info(&why);
    if (!dev) {
      *error = why;
      return false;
    }
    stream_ = static_cast<cudaStream_t>(vm::shared_stream());
    weights_ = reinterpret_cast<const void*>(vm::device_weights(w_));
    vm::BuildRequest req;
    req.entry = "vm/device/reference_forward.cuh";
    req.sm_arch = dev->sm_arch;
    req.cache_dir = vm::default_cache_dir();
    const vm::BuildResult build = vm::build_cubin(req);
    if (!build.ok) {
      *error = build.error;
      return false;
    }
    const auto f = vm::load_functions(build.cubin, build.key,
                                      {"ms_ref_upcast", "ms_ref_embed", "ms_ref_rmsnorm",
                                       "ms_ref_rope_store", "ms_ref_attention", "ms_ref_swiglu"});
    f_upcast_ = static_cast<CUfunction>(f[0]);
    f_embed_ = static_cast<CUfunction>(f[1]);
    f_norm_ = static_cast<CUfunction>(f[2]);
    f_rope_ = static_cast<CUfunction>(f[3]);
    f_attn_ = static_cast<CUfunction>(f[4]);
    f_swiglu_ = static_cast<CUfunction>(f[5]);
    attn_smem_ = static_cast<int>(s_.max_seq * sizeof(float));
    if (attn_smem_ > 48 * 1024)
      MS_CHECK_CUDA(
          cuFuncSetAttribute(f_attn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, attn_smem_));
    const size_t T = kChunkTokens;
    auto floats = [](size_t n) {
      return std::make_unique<DeviceBuffer>(std::max<size_t>(n, 4) * 4);
    };
    x_ = floats(T * s_.hidden);
    xn_ = floats(T * s_.hidden);
    qkv_ = floats(T * (s_.q_dim() + 2 * s_.kv_dim()));
    q_ = floats(T * s_.q_dim());
    attn_ = floats(T * s_.q_dim());
    gu_ = floats(T * 2 * s_.ffn);
    mlp_ = floats(T * s_.ffn);
    logits_ = floats(s_.vocab);
    wscratch_ = floats(static_cast<size_t>(kUpcastElements));
    tokens_ = std::make_unique<DeviceBuffer>(T * sizeof(int32_t));
    const size_t cache = static_cast<size_t>(s_.layers) * s_.kv_heads * s_.max_seq * s_.head_dim;
    k_ = floats(cache);
    v_ = floats(cache);
    const std::vector<float> inv = schedule::rope_inv_freq(s_);
    inv_freq_ = vm::upload(inv);
    MS_CHECK_CUDA(cublasCreate(&handle_));
    MS_CHECK_CUDA(cublasSetStream(handle_, stream_));
    MS_CHECK_CUDA(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH));  // fp32 FMA, never TF32
    reset();
    return true;
  }

  std::string name() const override { return "gpu-eager"; }

  void reset() override {
    MS_CHECK_CUDA(cudaMemsetAsync(k_->ptr, 0, k_->bytes, stream_));
    MS_CHECK_CUDA(cudaMemsetAsync(v_->ptr, 0, v_->bytes, stream_));
    MS_CHECK_CUDA(cudaStreamSynchronize(stream_));
  }

  std::vector<float> step(int32_t token, int position) override {
    forward(&token, position, 1, true);
    std::vector<float> out(static_cast<size_t>(s_.vocab));
    MS_CHECK_CUDA(
        cudaMemcpyAsync(out.data(), logits_->ptr, out.size() * 4, cudaMemcpyDeviceToHost, stream_));
    MS_CHECK_CUDA(cudaStreamSynchronize(stream_));
    return out;
  }

  void prefill(const std::vector<int32_t>& tokens, int begin, int end) override {
    for (int p = begin; p < end; p += kChunkTokens)
      forward(tokens.data() + p, p, std::min(kChunkTokens, end - p), false);
    MS_CHECK_CUDA(cudaStreamSynchronize(stream_));
  }

  vm::KvSnapshot kv_snapshot(int positions) override {
    vm::KvSnapshot kv = vm::KvSnapshot::zeros(s_, positions);
    if (positions == 0) return kv;
    const size_t rows = static_cast<size_t>(s_.layers) * s_.kv_heads;
    const size_t width = static_cast<size_t>(positions) * s_.head_dim;
    std::vector<float> host(rows * width);
    for (int which = 0; which < 2; ++which) {
      MS_CHECK_CUDA(cudaMemcpy2D(host.data(), width * 4, (which == 0 ? k_ : v_)->ptr,
                                 static_cast<size_t>(s_.max_seq) * s_.head_dim * 4, width * 4, rows,
                                 cudaMemcpyDeviceToHost));
      for (int l = 0; l < s_.layers; ++l)
        for (int g = 0; g < s_.kv_heads; ++g) {
          const float* src = host.data() + (static_cast<size_t>(l) * s_.kv_heads + g) * width;
          const size_t dst = kv.index(l, which, g, 0, 0);
          for (size_t i = 0; i < width; ++i) kv.set(dst + i, src[i]);
        }
    }
    return kv;
  }

 private:
  template <typename... Args>
  void launch(CUfunction f, unsigned gx, unsigned gy, unsigned smem, Args... args) {
    void* params[] = {static_cast<void*>(&args)...};
    MS_CHECK_CUDA(cuLaunchKernel(f, gx, gy, 1, kThreads, 1, 1, smem, stream_, params, nullptr));
  }

  /// Y[t][0 .. rows) = W[rows x cols] X[t] (+ Y when accumulate), t < T: W row-major at element
  /// `offset`, upcast to fp32 a block of rows at a time; X is T rows of `cols`, Y T rows of `rows`.
  void gemm(int64_t offset, int64_t rows, int64_t cols, const float* x, float* y, int T,
            bool accumulate) {
    const int bf16 = s_.dtype == schedule::DType::kBF16 ? 1 : 0;
    const int64_t block = std::max<int64_t>(1, kUpcastElements / cols);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
      const int64_t n = std::min(block, rows - r0);
      const unsigned long long off = static_cast<unsigned long long>(offset + r0 * cols);
      const unsigned long long count = static_cast<unsigned long long>(n * cols);
      launch(f_upcast_, 1024, 1, 0, weights_, bf16, off, count,
             static_cast<float*>(wscratch_->ptr));
      // Column-major: W block is cols x n (ld cols), X is cols x T, Y is rows x T (ld rows).
      MS_CHECK_CUDA(cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), T,
                                static_cast<int>(cols), &alpha,
                                static_cast<const float*>(wscratch_->ptr), static_cast<int>(cols),
                                x, static_cast<int>(cols), &beta, y + r0, static_cast<int>(rows)));
    }
  }

  /// T tokens at positions pos0 .. pos0 + T - 1; the last token's logits when `logits`.
  void forward(const int32_t* tokens, int pos0, int T, bool logits);

  const schedule::Weights& w_;
  const schedule::ModelShape& s_;
  const schedule::WeightLayout& layout_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  const void* weights_ = nullptr;
  CUfunction f_upcast_{}, f_embed_{}, f_norm_{}, f_rope_{}, f_attn_{}, f_swiglu_{};
  int attn_smem_ = 0;
  std::unique_ptr<DeviceBuffer> x_, xn_, qkv_, q_, attn_, gu_, mlp_, logits_, wscratch_, tokens_,
      k_, v_, inv_freq_;
};

void GpuReference::forward(const int32_t* tokens, int pos0, int T, bool want_logits) {
  const int bf16 = s_.dtype == schedule::DType::kBF16 ? 1 : 0;
  const int q_dim = s_.q_dim(), kv_dim = s_.kv_dim();
  const unsigned t = static_cast<unsigned>(T);
  float* x = static_cast<float*>(x_->ptr);
  float* xn = static_cast<float*>(xn_->ptr);
  MS_CHECK_CUDA(cudaMemcpyAsync(tokens_->ptr, tokens, static_cast<size_t>(T) * 4,
                                cudaMemcpyHostToDevice, stream_));
  launch(f_embed_, t, 1, 0, weights_, bf16, static_cast<unsigned long long>(layout_.embed),
         static_cast<const int*>(tokens_->ptr), s_.hidden, x);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s_.head_dim));
  const int round = bf16;  // the KV cache holds dtype-rounded values
  for (int l = 0; l < s_.layers; ++l) {
    const auto& L = layout_.layer[static_cast<size_t>(l)];
    launch(f_norm_, t, 1, 0, static_cast<const float*>(x), weights_, bf16,
           static_cast<unsigned long long>(L.attn_norm), s_.hidden, s_.rms_eps, xn);
    // wq, wk, wv are adjacent in the arena: one product gives [q; k; v].
    gemm(L.wq, q_dim + 2 * kv_dim, s_.hidden, xn, static_cast<float*>(qkv_->ptr), T, false);
    launch(f_rope_, t, 1, 0, static_cast<const float*>(qkv_->ptr),
           static_cast<const float*>(inv_freq_->ptr), pos0, s_.heads, s_.kv_heads, s_.head_dim, l,
           s_.max_seq, round, static_cast<float*>(q_->ptr), static_cast<float*>(k_->ptr),
           static_cast<float*>(v_->ptr));
    launch(f_attn_, static_cast<unsigned>(s_.heads), t, static_cast<unsigned>(attn_smem_),
           static_cast<const float*>(q_->ptr), static_cast<const float*>(k_->ptr),
           static_cast<const float*>(v_->ptr), pos0, s_.heads, s_.kv_heads, s_.head_dim, l,
           s_.max_seq, scale, static_cast<float*>(attn_->ptr));
    gemm(L.wo, s_.hidden, q_dim, static_cast<const float*>(attn_->ptr), x, T, true);
    launch(f_norm_, t, 1, 0, static_cast<const float*>(x), weights_, bf16,
           static_cast<unsigned long long>(L.mlp_norm), s_.hidden, s_.rms_eps, xn);
    // w_gate and w_up are adjacent: one product gives [gate; up].
    gemm(L.w_gate, 2 * int64_t{s_.ffn}, s_.hidden, xn, static_cast<float*>(gu_->ptr), T, false);
    launch(f_swiglu_, t, 1, 0, static_cast<const float*>(gu_->ptr), s_.ffn,
           static_cast<float*>(mlp_->ptr));
    gemm(L.w_down, s_.hidden, s_.ffn, static_cast<const float*>(mlp_->ptr), x, T, true);
  }
  if (!want_logits) return;
  // Only the last token's logits are read: the final norm and the head run on that row.
  const float* last = x + static_cast<size_t>(T - 1) * s_.hidden;
  launch(f_norm_, 1, 1, 0, last, weights_, bf16,
         static_cast<unsigned long long>(layout_.final_norm), s_.hidden, s_.rms_eps, xn);
  gemm(layout_.lm_head, s_.vocab, s_.hidden, xn, static_cast<float*>(logits_->ptr), 1, false);
}

}  // namespace

std::unique_ptr<ReferenceForward> make_gpu_reference(const schedule::Weights& weights,
                                                     std::string* error) {
  try {
    auto r = std::make_unique<GpuReference>(weights);
    if (!r->init(error)) return nullptr;
    return r;
  } catch (const vm::GpuError& e) {
    *error = e.what();
    return nullptr;
  }
}

}  // namespace megasched::eval
