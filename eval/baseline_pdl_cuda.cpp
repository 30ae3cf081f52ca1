// The graph-pdl baseline (see eval/baseline.h): the kernels of vm/device/pdl_baseline.cuh launched
// op by op with programmatic stream serialization, captured once in a CUDA graph.
#include <algorithm>
#include <cmath>

#include "abi/kernel_args.h"
#include "eval/baseline.h"
#include "vm/cuda_check.h"
#include "vm/cuda_runtime.h"
#include "vm/nvrtc_build.h"

namespace megasched::eval {

using vm::GpuError;

namespace {

struct Buf {
  void* ptr = nullptr;
  explicit Buf(size_t bytes) { MS_CHECK_CUDA(cudaMalloc(&ptr, std::max<size_t>(bytes, 16))); }
  ~Buf() { cudaFree(ptr); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float* f() const { return static_cast<float*>(ptr); }
};

constexpr unsigned kBlock = 128;         // threads per block (MS_THREADS of the build)
constexpr unsigned kRowsPerBlock = 8;    // 4 warps x one pair of rows
constexpr int kDownSplits = 4;           // down projection split along K
constexpr unsigned kLmPairsPerWarp = 8;  // LM head: 64 rows per block
constexpr size_t kDefaultSmem = 48 * 1024;

const char* const kKernelNames[] = {"ms_pdl_embed",      "ms_pdl_qkv_rope", "ms_pdl_attention",
                                    "ms_pdl_o_residual", "ms_pdl_gate_up",  "ms_pdl_down_residual",
                                    "ms_pdl_lm_head",    "ms_pdl_argmax"};
enum Fn { kEmbed, kQkv, kAttention, kO, kGateUp, kDown, kLm, kArgmax, kFnCount };

unsigned ceil_div(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace

struct GraphPdlBaseline::Impl {
  schedule::ModelShape shape;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t ev_start = nullptr, ev_stop = nullptr;
  std::unique_ptr<Buf> hidden, q, part_o, part_ml, attn, hmid, part_down, logits, cand_v, cand_i,
      kv, step, inv_freq;
  std::unique_ptr<Buf> attn_counters, down_counters;  // last-arrival tickets (zero between uses)
  ms_abi::StepCell* host_cell = nullptr;
  CUfunction fn[kFnCount] = {};
  const void* weights = nullptr;
  bool pdl = false;          // programmatic stream serialization on every launch (sm_90+)
  unsigned attn_splits = 1;  // key splits per KV head
  unsigned attn_chunk_max = 1;
  unsigned lm_blocks = 1;
  int kernels = 0;  // launches recorded per step

  ~Impl() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (ev_start) cudaEventDestroy(ev_start);
    if (ev_stop) cudaEventDestroy(ev_stop);
    if (host_cell) cudaFreeHost(host_cell);
  }

  template <typename... Args>
  void launch(Fn f, unsigned gx, unsigned gy, size_t smem, Args... args) {
    void* params[] = {static_cast<void*>(&args)...};
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = gx;
    cfg.gridDimY = gy;
    cfg.gridDimZ = 1;
    cfg.blockDimX = kBlock;
    cfg.blockDimY = 1;
    cfg.blockDimZ = 1;
    cfg.sharedMemBytes = static_cast<unsigned>(smem);
    cfg.hStream = stream;
    cfg.attrs = pdl ? &attr : nullptr;
    cfg.numAttrs = pdl ? 1 : 0;
    MS_CHECK_CUDA(cuLaunchKernelEx(&cfg, fn[f], params, nullptr));
    ++kernels;
  }

  ms_abi::ModelParams params() const {
    const schedule::ModelShape& s = shape;
    ms_abi::ModelParams mp{};
    mp.hidden = static_cast<uint32_t>(s.hidden);
    mp.layers = static_cast<uint32_t>(s.layers);
    mp.heads = static_cast<uint32_t>(s.heads);
    mp.kv_heads = static_cast<uint32_t>(s.kv_heads);
    mp.head_dim = static_cast<uint32_t>(s.head_dim);
    mp.ffn = static_cast<uint32_t>(s.ffn);
    mp.vocab = static_cast<uint32_t>(s.vocab);
    mp.max_seq = static_cast<uint32_t>(s.max_seq);
    mp.rms_eps = s.rms_eps;
    mp.attn_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    return mp;
  }

  /// One decoder layer: 5 launches.
  void record_layer(const schedule::WeightLayout::Layer& L, uint32_t l) {
    const schedule::ModelShape& s = shape;
    const ms_abi::ModelParams mp = params();
    const void* W = weights;  // the kernels take WeightT*
    const uint32_t H = mp.hidden, F = mp.ffn;
    const auto* cell = static_cast<const ms_abi::StepCell*>(step->ptr);
    const unsigned qkv_pairs = static_cast<unsigned>((s.q_dim() + 2 * s.kv_dim()) / 2);
    launch(kQkv, ceil_div(qkv_pairs, kBlock / 32), 1, H * 4, W, static_cast<uint64_t>(L.wq),
           static_cast<uint64_t>(L.attn_norm), static_cast<const float*>(hidden->f()),
           static_cast<const float*>(inv_freq->f()), cell, mp, l, kv->ptr, q->f());
    const size_t attn_smem = attention_smem();
    launch(kAttention, attn_splits, mp.kv_heads, attn_smem, static_cast<const float*>(q->f()),
           static_cast<const void*>(kv->ptr), cell, mp, l, attn_chunk_max, part_o->f(),
           part_ml->f(), static_cast<uint32_t*>(attn_counters->ptr), attn->f());
    const uint32_t q_dim = static_cast<uint32_t>(s.q_dim());
    launch(kO, ceil_div(H, kRowsPerBlock), 1, q_dim * 4, W, static_cast<uint64_t>(L.wo), H, q_dim,
           static_cast<const float*>(attn->f()), hidden->f());
    launch(kGateUp, ceil_div(F, kBlock / 32), 1, H * 4, W, static_cast<uint64_t>(L.w_gate),
           static_cast<uint64_t>(L.mlp_norm), H, F, s.rms_eps,
           static_cast<const float*>(hidden->f()), hmid->f());
    const uint32_t k_split = F / kDownSplits;
    launch(kDown, ceil_div(H, kRowsPerBlock), kDownSplits, k_split * 4, W,
           static_cast<uint64_t>(L.w_down), H, F, k_split, static_cast<const float*>(hmid->f()),
           part_down->f(), static_cast<uint32_t*>(down_counters->ptr), hidden->f());
  }

  void record_step() {
    const schedule::ModelShape& s = shape;
    const schedule::WeightLayout layout = schedule::layout_for(s);
    const void* W = weights;
    const uint32_t H = static_cast<uint32_t>(s.hidden), V = static_cast<uint32_t>(s.vocab);
    const auto* cell = static_cast<const ms_abi::StepCell*>(step->ptr);
    kernels = 0;
    launch(kEmbed, ceil_div(H, kBlock), 1, 0, W, static_cast<uint64_t>(layout.embed), H, cell,
           hidden->f());
    for (int l = 0; l < s.layers; ++l)
      record_layer(layout.layer[static_cast<size_t>(l)], static_cast<uint32_t>(l));
    launch(kLm, lm_blocks, 1, H * 4, W, static_cast<uint64_t>(layout.lm_head),
           static_cast<uint64_t>(layout.final_norm), H, V, s.rms_eps, kLmPairsPerWarp,
           static_cast<const float*>(hidden->f()), logits->f(), cand_v->f(),
           static_cast<int32_t*>(cand_i->ptr));
    launch(kArgmax, 1, 1, 0, static_cast<const float*>(cand_v->f()),
           static_cast<const int32_t*>(cand_i->ptr), lm_blocks,
           static_cast<ms_abi::StepCell*>(step->ptr));
  }

  void allocate(int sm_count) {
    const schedule::ModelShape& s = shape;
    // Enough (KV head, split) blocks for two per SM; a split never holds fewer than one key.
    attn_splits =
        static_cast<unsigned>(std::clamp(ceil_div(2 * static_cast<int64_t>(sm_count), s.kv_heads),
                                         1u, static_cast<unsigned>(s.max_seq)));
    attn_chunk_max = ceil_div(s.max_seq, attn_splits);
    lm_blocks = ceil_div(s.vocab, 2 * kLmPairsPerWarp * (kBlock / 32));
    const size_t wb = static_cast<size_t>(schedule::dtype_bytes(s.dtype));
    auto floats = [](int64_t n) { return std::make_unique<Buf>(static_cast<size_t>(n) * 4); };
    hidden = floats(s.hidden);
    q = floats(s.q_dim());
    part_o = floats(static_cast<int64_t>(s.heads) * attn_splits * s.head_dim);
    part_ml = floats(static_cast<int64_t>(s.heads) * attn_splits * 2);
    attn = floats(s.q_dim());
    hmid = floats(s.ffn);
    part_down = floats(static_cast<int64_t>(kDownSplits) * s.hidden);
    logits = floats(s.vocab);
    cand_v = floats(lm_blocks);
    cand_i = floats(lm_blocks);
    attn_counters = floats(s.kv_heads);
    down_counters = floats(ceil_div(s.hidden, kRowsPerBlock));
    MS_CHECK_CUDA(cudaMemset(attn_counters->ptr, 0, static_cast<size_t>(s.kv_heads) * 4));
    MS_CHECK_CUDA(cudaMemset(down_counters->ptr, 0,
                             static_cast<size_t>(ceil_div(s.hidden, kRowsPerBlock)) * 4));
    const size_t kv_bytes =
        static_cast<size_t>(s.layers) * 2 * s.kv_heads * s.max_seq * s.head_dim * wb;
    kv = std::make_unique<Buf>(kv_bytes);
    MS_CHECK_CUDA(cudaMemset(kv->ptr, 0, kv_bytes));
    step = std::make_unique<Buf>(sizeof(ms_abi::StepCell));
    const std::vector<float> invf = schedule::rope_inv_freq(s);
    inv_freq = floats(static_cast<int64_t>(invf.size()));
    MS_CHECK_CUDA(cudaMemcpy(inv_freq->ptr, invf.data(), invf.size() * 4, cudaMemcpyHostToDevice));
    MS_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&host_cell), sizeof(ms_abi::StepCell)));
    MS_CHECK_CUDA(cudaEventCreate(&ev_start));
    MS_CHECK_CUDA(cudaEventCreate(&ev_stop));
  }

  /// The attention kernel's dynamic shared memory: q, the scores, the P.V slices.
  size_t attention_smem() const {
    const size_t group = static_cast<size_t>(shape.heads / shape.kv_heads);
    const size_t per_vec = 16 / static_cast<size_t>(schedule::dtype_bytes(shape.dtype));
    return (group * shape.head_dim + group * attn_chunk_max + kBlock * group * per_vec) * 4;
  }

  /// Dynamic shared memory past the default 48 KiB needs the opt-in attribute.
  void allow_smem(Fn f, size_t bytes) {
    if (bytes <= kDefaultSmem) return;
    MS_CHECK_CUDA(cuFuncSetAttribute(fn[f], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(bytes)));
  }

  void write_cell(int32_t token, int32_t position) {
    *host_cell = {token, position, 0, -1};
    MS_CHECK_CUDA(
        cudaMemcpyAsync(step->ptr, host_cell, sizeof *host_cell, cudaMemcpyHostToDevice, stream));
  }
};

GraphPdlBaseline::~GraphPdlBaseline() = default;

std::unique_ptr<GraphPdlBaseline> GraphPdlBaseline::create(const schedule::Weights& weights,
                                                           std::string* error) {
  try {
    const schedule::ModelShape& s = weights.shape;
    if (const std::string why = graph_pdl_misfit(s); !why.empty()) {
      *error = "the graph-pdl baseline cannot serve model " + s.name + ": " + why;
      return nullptr;
    }
    std::string why;
    const auto dev = vm::device_info(&why);
    if (!dev) {
      *error = why;
      return nullptr;
    }
    auto b = std::unique_ptr<GraphPdlBaseline>(new GraphPdlBaseline());
    b->impl_ = std::make_unique<Impl>();
    Impl& m = *b->impl_;
    m.shape = s;
    m.stream = static_cast<cudaStream_t>(vm::shared_stream());
    m.weights = reinterpret_cast<const void*>(vm::device_weights(weights));
    m.pdl = dev->sm_arch >= 90;

    vm::BuildRequest req;
    req.entry = "vm/device/pdl_baseline.cuh";
    req.defines = vm::pdl_baseline_defines(s);
    req.sm_arch = dev->sm_arch;
    req.cache_dir = vm::default_cache_dir();
    const vm::BuildResult build = vm::build_cubin(req);
    if (!build.ok) {
      *error = build.error;
      return nullptr;
    }
    const auto fns = vm::load_functions(
        build.cubin, build.key,
        std::vector<std::string>(std::begin(kKernelNames), std::end(kKernelNames)));
    for (int i = 0; i < kFnCount; ++i)
      m.fn[i] = static_cast<CUfunction>(fns[static_cast<size_t>(i)]);
    m.allocate(dev->num_sms);
    m.allow_smem(kAttention, m.attention_smem());
    m.allow_smem(kQkv, static_cast<size_t>(s.hidden) * 4);
    m.allow_smem(kGateUp, static_cast<size_t>(s.hidden) * 4);
    m.allow_smem(kLm, static_cast<size_t>(s.hidden) * 4);
    m.allow_smem(kO, static_cast<size_t>(s.q_dim()) * 4);
    m.allow_smem(kDown, static_cast<size_t>(s.ffn / kDownSplits) * 4);

    MS_CHECK_CUDA(cudaStreamSynchronize(m.stream));
    MS_CHECK_CUDA(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal));
    m.record_step();
    MS_CHECK_CUDA(cudaStreamEndCapture(m.stream, &m.graph));
    MS_CHECK_CUDA(cudaGraphInstantiate(&m.exec, m.graph, 0));
    size_t nodes = 0;
    MS_CHECK_CUDA(cudaGraphGetNodes(m.graph, nullptr, &nodes));
    b->info_ = {{"graph_nodes", nodes},
                {"kernels_per_step", m.kernels},
                {"programmatic_dependent_launch", m.pdl},
                {"attention_splits", m.attn_splits},
                {"down_splits", kDownSplits},
                {"lm_head_rows_per_block", 2 * kLmPairsPerWarp * (kBlock / 32)},
                {"threads_per_block", kBlock},
                {"kernels_build_key", build.key}};
    return b;
  } catch (const GpuError& e) {
    *error = e.what();
    return nullptr;
  }
}

std::vector<float> GraphPdlBaseline::step(int32_t token, int32_t position) {
  Impl& m = *impl_;
  m.write_cell(token, position);
  MS_CHECK_CUDA(cudaGraphLaunch(m.exec, m.stream));
  MS_CHECK_CUDA(cudaStreamSynchronize(m.stream));
  std::vector<float> out(static_cast<size_t>(m.shape.vocab));
  MS_CHECK_CUDA(cudaMemcpy(out.data(), m.logits->ptr, out.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}

int32_t GraphPdlBaseline::last_argmax() {
  ms_abi::StepCell cell{};
  MS_CHECK_CUDA(cudaMemcpy(&cell, impl_->step->ptr, sizeof cell, cudaMemcpyDeviceToHost));
  return cell.argmax;
}

double GraphPdlBaseline::time_step_us(int32_t token, int32_t position, bool flush) {
  Impl& m = *impl_;
  if (flush) vm::flush_l2();
  m.write_cell(token, position);
  MS_CHECK_CUDA(cudaEventRecord(m.ev_start, m.stream));
  MS_CHECK_CUDA(cudaGraphLaunch(m.exec, m.stream));
  MS_CHECK_CUDA(cudaEventRecord(m.ev_stop, m.stream));
  MS_CHECK_CUDA(cudaEventSynchronize(m.ev_stop));
  float ms = 0.0f;
  MS_CHECK_CUDA(cudaEventElapsedTime(&ms, m.ev_start, m.ev_stop));
  return static_cast<double>(ms) * 1000.0;
}

}  // namespace megasched::eval
