// The cuBLAS + CUDA-graph op-by-op baseline (see eval/baselines/baseline.h).
#include "eval/baselines/baseline.h"

#include <cmath>

#include "abi/kernel_args.h"
#include "eval/baselines/graph_replay.h"
#include "vm/cuda_check.h"
#include "vm/cuda_runtime.h"
#include "vm/nvrtc_build.h"

namespace megasched::eval {

using vm::GpuError;

namespace {

constexpr int kThreads = 256;  // MS_THREADS of the baseline build (vm::baseline_defines)

}  // namespace

struct CublasBaseline::Impl {
  schedule::ModelShape shape;
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t ev_start = nullptr, ev_stop = nullptr;
  std::unique_ptr<DeviceBuf> hidden, xn, qkv, q, attn, gu, hmid, logits, kv, step, inv_freq,
      workspace;
  ms_abi::StepCell* host_cell = nullptr;
  CUfunction f_embed, f_norm, f_rope, f_attn, f_silu, f_argmax;
  const void* weights = nullptr;

  ~Impl() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (handle) cublasDestroy(handle);
    if (ev_start) cudaEventDestroy(ev_start);
    if (ev_stop) cudaEventDestroy(ev_stop);
    if (host_cell) cudaFreeHost(host_cell);
  }

  template <typename... Args>
  void launch(CUfunction f, unsigned grid, unsigned block, unsigned smem, Args... args) {
    void* params[] = {static_cast<void*>(&args)...};
    MS_CHECK_CUDA(cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem, stream, params, nullptr));
  }

  /// y[0 .. m) (fp32) = W[m x k] x[k] + beta * y, W row-major at element offset w.
  void gemv(int64_t w, int m, int k, const void* x, void* y, float beta) {
    const bool bf16 = shape.dtype == schedule::DType::kBF16;
    const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const float alpha = 1.0f;
    const char* W = static_cast<const char*>(weights) + w * (bf16 ? 2 : 4);
    MS_CHECK_CUDA(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, 1, k, &alpha, W, t, k, x, t, k,
                               &beta, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  void record_step() {
    const schedule::ModelShape& s = shape;
    const schedule::WeightLayout layout = schedule::layout_for(s);
    const ms_abi::ModelParams mp = baseline_model_params(s);
    const uint32_t H = mp.hidden, F = mp.ffn;
    const int q_dim = s.q_dim(), kv_dim = s.kv_dim();
    const float* invf = static_cast<const float*>(inv_freq->ptr);
    const ms_abi::StepCell* cell = static_cast<const ms_abi::StepCell*>(step->ptr);
    const void* W = weights;
    const unsigned attn_smem = static_cast<unsigned>((s.max_seq + kThreads) * sizeof(float));
    launch(f_embed, (H + kThreads - 1) / kThreads, kThreads, 0, W,
           static_cast<uint64_t>(layout.embed), H, cell, static_cast<float*>(hidden->ptr));
    for (int l = 0; l < s.layers; ++l) {
      const auto& L = layout.layer[static_cast<size_t>(l)];
      launch(f_norm, 1, kThreads, 0, static_cast<const float*>(hidden->ptr), W,
             static_cast<uint64_t>(L.attn_norm), H, s.rms_eps, xn->ptr);
      gemv(L.wq, q_dim + 2 * kv_dim, s.hidden, xn->ptr, qkv->ptr, 0.0f);
      const unsigned rope_threads = static_cast<unsigned>((q_dim + kv_dim) / 2 + kv_dim);
      launch(f_rope, (rope_threads + kThreads - 1) / kThreads, kThreads, 0,
             static_cast<const float*>(qkv->ptr), invf, cell, mp, static_cast<uint32_t>(l), kv->ptr,
             static_cast<float*>(q->ptr));
      launch(f_attn, mp.heads, kThreads, attn_smem, static_cast<const float*>(q->ptr),
             static_cast<const void*>(kv->ptr), cell, mp, static_cast<uint32_t>(l), attn->ptr);
      gemv(L.wo, s.hidden, q_dim, attn->ptr, hidden->ptr, 1.0f);
      launch(f_norm, 1, kThreads, 0, static_cast<const float*>(hidden->ptr), W,
             static_cast<uint64_t>(L.mlp_norm), H, s.rms_eps, xn->ptr);
      gemv(L.w_gate, 2 * s.ffn, s.hidden, xn->ptr, gu->ptr, 0.0f);
      launch(f_silu, (F + kThreads - 1) / kThreads, kThreads, 0, static_cast<const float*>(gu->ptr),
             F, hmid->ptr);
      gemv(L.w_down, s.hidden, s.ffn, hmid->ptr, hidden->ptr, 1.0f);
    }
    launch(f_norm, 1, kThreads, 0, static_cast<const float*>(hidden->ptr), W,
           static_cast<uint64_t>(layout.final_norm), H, s.rms_eps, xn->ptr);
    gemv(layout.lm_head, s.vocab, s.hidden, xn->ptr, logits->ptr, 0.0f);
    launch(f_argmax, 1, kThreads, 0, static_cast<const float*>(logits->ptr), mp.vocab,
           static_cast<ms_abi::StepCell*>(step->ptr));
  }

  void write_cell(int32_t token, int32_t position) {
    write_step_cell(host_cell, step->ptr, stream, token, position);
  }
};

CublasBaseline::~CublasBaseline() = default;

std::unique_ptr<CublasBaseline> CublasBaseline::create(const schedule::Weights& weights,
                                                       std::string* error) {
  try {
    std::string why;
    const auto dev = vm::device_info(&why);
    if (!dev) {
      *error = why;
      return nullptr;
    }
    auto b = std::unique_ptr<CublasBaseline>(new CublasBaseline());
    b->impl_ = std::make_unique<Impl>();
    Impl& m = *b->impl_;
    m.shape = weights.shape;
    const schedule::ModelShape& s = weights.shape;
    m.stream = static_cast<cudaStream_t>(vm::shared_stream());
    m.weights = reinterpret_cast<const void*>(vm::device_weights(weights));

    vm::BuildRequest req;
    req.entry = "eval/baselines/baseline.cuh";
    req.defines = vm::baseline_defines(s);
    req.sm_arch = dev->sm_arch;
    req.cache_dir = vm::default_cache_dir();
    const vm::BuildResult build = vm::build_cubin(req);
    if (!build.ok) {
      *error = build.error;
      return nullptr;
    }
    const auto fns = vm::load_functions(build.cubin, build.key,
                                        {"ms_bl_embed", "ms_bl_rmsnorm", "ms_bl_rope_kv",
                                         "ms_bl_attention", "ms_bl_silu_mul", "ms_bl_argmax"});
    m.f_embed = static_cast<CUfunction>(fns[0]);
    m.f_norm = static_cast<CUfunction>(fns[1]);
    m.f_rope = static_cast<CUfunction>(fns[2]);
    m.f_attn = static_cast<CUfunction>(fns[3]);
    m.f_silu = static_cast<CUfunction>(fns[4]);
    m.f_argmax = static_cast<CUfunction>(fns[5]);
    const int attn_smem = (s.max_seq + kThreads) * 4;
    if (attn_smem > 48 * 1024) {
      MS_CHECK_CUDA(
          cuFuncSetAttribute(m.f_attn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, attn_smem));
    }

    const size_t wb = s.dtype == schedule::DType::kBF16 ? 2 : 4;
    m.hidden = std::make_unique<DeviceBuf>(static_cast<size_t>(s.hidden) * 4);
    m.xn = std::make_unique<DeviceBuf>(static_cast<size_t>(s.hidden) * wb);
    m.qkv = std::make_unique<DeviceBuf>(static_cast<size_t>(s.q_dim() + 2 * s.kv_dim()) * 4);
    m.q = std::make_unique<DeviceBuf>(static_cast<size_t>(s.q_dim()) * 4);
    m.attn = std::make_unique<DeviceBuf>(static_cast<size_t>(s.q_dim()) * wb);
    m.gu = std::make_unique<DeviceBuf>(static_cast<size_t>(2 * s.ffn) * 4);
    m.hmid = std::make_unique<DeviceBuf>(static_cast<size_t>(s.ffn) * wb);
    m.logits = std::make_unique<DeviceBuf>(static_cast<size_t>(s.vocab) * 4);
    const size_t kv_bytes =
        static_cast<size_t>(s.layers) * 2 * s.kv_heads * s.max_seq * s.head_dim * wb;
    m.kv = std::make_unique<DeviceBuf>(kv_bytes);
    MS_CHECK_CUDA(cudaMemset(m.kv->ptr, 0, kv_bytes));
    m.step = std::make_unique<DeviceBuf>(sizeof(ms_abi::StepCell));
    const std::vector<float> invf = schedule::rope_inv_freq(s);
    m.inv_freq = std::make_unique<DeviceBuf>(invf.size() * 4);
    MS_CHECK_CUDA(
        cudaMemcpy(m.inv_freq->ptr, invf.data(), invf.size() * 4, cudaMemcpyHostToDevice));
    constexpr size_t kWorkspace = 32u << 20;
    m.workspace = std::make_unique<DeviceBuf>(kWorkspace);
    MS_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&m.host_cell), sizeof(ms_abi::StepCell)));
    MS_CHECK_CUDA(cudaEventCreate(&m.ev_start));
    MS_CHECK_CUDA(cudaEventCreate(&m.ev_stop));
    MS_CHECK_CUDA(cublasCreate(&m.handle));
    MS_CHECK_CUDA(cublasSetStream(m.handle, m.stream));
    MS_CHECK_CUDA(cublasSetWorkspace(m.handle, m.workspace->ptr, kWorkspace));
    MS_CHECK_CUDA(cublasSetMathMode(m.handle, CUBLAS_DEFAULT_MATH));

    MS_CHECK_CUDA(cudaStreamSynchronize(m.stream));
    MS_CHECK_CUDA(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal));
    m.record_step();
    MS_CHECK_CUDA(cudaStreamEndCapture(m.stream, &m.graph));
    MS_CHECK_CUDA(cudaGraphInstantiate(&m.exec, m.graph, 0));
    size_t nodes = 0;
    MS_CHECK_CUDA(cudaGraphGetNodes(m.graph, nullptr, &nodes));
    int cublas_version = 0;
    MS_CHECK_CUDA(cublasGetVersion(m.handle, &cublas_version));
    b->info_ = {{"graph_nodes", nodes},
                {"cublas_version", cublas_version},
                {"kernels_build_key", build.key},
                {"activations_into_gemv", schedule::dtype_name(s.dtype)}};
    return b;
  } catch (const GpuError& e) {
    *error = e.what();
    return nullptr;
  }
}

std::vector<float> CublasBaseline::step(int32_t token, int32_t position) {
  Impl& m = *impl_;
  m.write_cell(token, position);
  return replay_logits(m.exec, m.stream, m.logits->ptr, m.shape.vocab);
}

int32_t CublasBaseline::last_argmax() { return read_step_argmax(impl_->step->ptr); }

int32_t CublasBaseline::step_argmax(int32_t token, int32_t position) {
  Impl& m = *impl_;
  m.write_cell(token, position);
  return replay_argmax(m.exec, m.stream, m.host_cell, m.step->ptr);
}

double CublasBaseline::time_step_us(int32_t token, int32_t position, bool flush) {
  Impl& m = *impl_;
  if (flush) vm::flush_l2();
  m.write_cell(token, position);
  return time_replay_us(m.exec, m.stream, m.ev_start, m.ev_stop);
}

}  // namespace megasched::eval
