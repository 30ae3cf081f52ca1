// The graph-pdl baseline (see eval/baselines/baseline.h): the kernels of
// eval/baselines/pdl_baseline.cuh launched op by op with programmatic stream serialization,
// captured once in a CUDA graph.
#include <algorithm>
#include <array>
#include <cmath>

#include "abi/kernel_args.h"
#include "eval/baselines/baseline.h"
#include "eval/baselines/graph_replay.h"
#include "vm/cuda_check.h"
#include "vm/cuda_runtime.h"
#include "vm/nvrtc_build.h"

namespace megasched::eval {

using vm::GpuError;

namespace {

constexpr unsigned kBlock = 256;  // threads per block (MS_THREADS of the build)
constexpr unsigned kWarps = kBlock / 32;
constexpr unsigned kMinKeysPerSplit = 32;  // pdl::kMinKeysPerSplit
constexpr size_t kDefaultSmem = 48 * 1024;

const char* const kKernelNames[] = {"ms_pdl_embed",      "ms_pdl_qkv_rope", "ms_pdl_attention",
                                    "ms_pdl_o_residual", "ms_pdl_gate_up",  "ms_pdl_down_residual",
                                    "ms_pdl_lm_head"};
enum Fn { kEmbed, kQkv, kAttention, kO, kGateUp, kDown, kLm, kFnCount };

/// The GEMV kernels whose blocks per SM the baseline tunes, and the most it tries.
enum Gemv { kGemvQkv, kGemvO, kGemvGateUp, kGemvDown, kGemvLm, kGemvCount };
const char* const kGemvNames[] = {"qkv", "o", "gate_up", "down", "lm_head"};
constexpr unsigned kMaxBlocksPerSm = 2;  // __launch_bounds__(256, 2) of the GEMV kernels
using Geometry = std::array<unsigned, kGemvCount>;

nlohmann::json geometry_json(const Geometry& g) {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < kGemvCount; ++i) j[kGemvNames[i]] = g[static_cast<size_t>(i)];
  return j;
}

unsigned ceil_div(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace

struct GraphPdlBaseline::Impl {
  schedule::ModelShape shape;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t ev_start = nullptr, ev_stop = nullptr;
  std::unique_ptr<DeviceBuf> hidden, q, part_o, part_ml, attn, hmid, logits, cand_v, cand_i, kv,
      step, inv_freq;
  std::unique_ptr<DeviceBuf> attn_counters, lm_counter;  // last-arrival tickets (zero between uses)
  ms_abi::StepCell* host_cell = nullptr;
  CUfunction fn[kFnCount] = {};
  const void* weights = nullptr;
  bool pdl = false;          // programmatic stream serialization on every launch (sm_90+)
  unsigned attn_splits = 1;  // key splits per KV head
  unsigned attn_chunk_max = 1;
  unsigned sm_count = 1;
  Geometry per_sm{1, 1, 1, 1, 1};  // GEMV blocks per SM (tuned by create)
  unsigned lm_blocks = 1;
  int kernels = 0;                          // launches recorded per step
  std::vector<Fn> slot_fn;                  // the kernel of each launch slot
  unsigned long long* trace_dev = nullptr;  // stamps while a timeline graph is captured

  ~Impl() {
    drop_graph();
    if (ev_start) cudaEventDestroy(ev_start);
    if (ev_stop) cudaEventDestroy(ev_stop);
    if (host_cell) cudaFreeHost(host_cell);
  }

  template <typename... Args>
  void launch(Fn f, unsigned gx, unsigned gy, size_t smem, Args... args) {
    unsigned long long* trace = trace_dev;  // every kernel's last two parameters
    uint32_t slot = static_cast<uint32_t>(kernels);
    void* params[] = {static_cast<void*>(&args)..., &trace, &slot};
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
    slot_fn.push_back(f);
    ++kernels;
  }

  ms_abi::ModelParams params() const {
    const schedule::ModelShape& s = shape;
    return baseline_model_params(s);
  }

  void drop_graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
  }

  /// Blocks of GEMV `g` over `tasks` row pairs: one wave of per_sm[g] blocks of 8 warps per SM at
  /// most. At one per SM two kernels' blocks fit an SM together, so the next kernel's first loads
  /// overlap this one; at two, this one keeps twice the bytes in flight.
  unsigned gemv_blocks(int64_t tasks, Gemv g) const {
    return std::min<unsigned>(ceil_div(tasks, kWarps), sm_count * per_sm[static_cast<size_t>(g)]);
  }

  /// One decoder layer: 5 launches.
  void record_layer(const schedule::WeightLayout::Layer& L, uint32_t l) {
    const schedule::ModelShape& s = shape;
    const ms_abi::ModelParams mp = params();
    const void* W = weights;  // the kernels take WeightT*
    const uint32_t H = mp.hidden, F = mp.ffn;
    const auto* cell = static_cast<const ms_abi::StepCell*>(step->ptr);
    launch(kQkv, gemv_blocks((s.q_dim() + 2 * s.kv_dim()) / 2, kGemvQkv), 1, H * 8, W,
           static_cast<uint64_t>(L.wq), static_cast<uint64_t>(L.attn_norm),
           static_cast<const float*>(hidden->f()), static_cast<const float*>(inv_freq->f()), cell,
           mp, l, kv->ptr, q->f());
    const size_t attn_smem = attention_smem();
    launch(kAttention, attn_splits, mp.kv_heads, attn_smem, static_cast<const float*>(q->f()),
           static_cast<const void*>(kv->ptr), cell, mp, l, attn_chunk_max, part_o->f(),
           part_ml->f(), static_cast<uint32_t*>(attn_counters->ptr), attn->f());
    const uint32_t q_dim = static_cast<uint32_t>(s.q_dim());
    launch(kO, gemv_blocks((H + 1) / 2, kGemvO), 1, q_dim * 4, W, static_cast<uint64_t>(L.wo), H,
           q_dim, static_cast<const float*>(attn->f()), hidden->f());
    launch(kGateUp, gemv_blocks(F, kGemvGateUp), 1, H * 8, W, static_cast<uint64_t>(L.w_gate),
           static_cast<uint64_t>(L.mlp_norm), H, F, s.rms_eps,
           static_cast<const float*>(hidden->f()), hmid->f());
    launch(kDown, gemv_blocks((H + 1) / 2, kGemvDown), 1, F * 4, W, static_cast<uint64_t>(L.w_down),
           H, F, static_cast<const float*>(hmid->f()), hidden->f());
  }

  void record_step() {
    const schedule::ModelShape& s = shape;
    const schedule::WeightLayout layout = schedule::layout_for(s);
    const void* W = weights;
    const uint32_t H = static_cast<uint32_t>(s.hidden), V = static_cast<uint32_t>(s.vocab);
    const auto* cell = static_cast<const ms_abi::StepCell*>(step->ptr);
    kernels = 0;
    slot_fn.clear();
    lm_blocks = gemv_blocks((s.vocab + 1) / 2, kGemvLm);
    launch(kEmbed, ceil_div(H, kBlock), 1, 0, W, static_cast<uint64_t>(layout.embed), H, cell,
           hidden->f());
    for (int l = 0; l < s.layers; ++l)
      record_layer(layout.layer[static_cast<size_t>(l)], static_cast<uint32_t>(l));
    launch(kLm, lm_blocks, 1, H * 8, W, static_cast<uint64_t>(layout.lm_head),
           static_cast<uint64_t>(layout.final_norm), H, V, s.rms_eps,
           static_cast<const float*>(hidden->f()), logits->f(), cand_v->f(),
           static_cast<int32_t*>(cand_i->ptr), static_cast<uint32_t*>(lm_counter->ptr),
           static_cast<ms_abi::StepCell*>(step->ptr));
  }

  void allocate(int sms) {
    const schedule::ModelShape& s = shape;
    sm_count = static_cast<unsigned>(std::max(sms, 1));
    // Enough (KV head, split) blocks for two per SM; the kernel uses fewer splits while the
    // position has fewer than kMinKeysPerSplit keys per split.
    attn_splits =
        static_cast<unsigned>(std::clamp(ceil_div(2 * static_cast<int64_t>(sm_count), s.kv_heads),
                                         1u, ceil_div(s.max_seq, kMinKeysPerSplit)));
    attn_chunk_max = std::max(ceil_div(s.max_seq, attn_splits), kMinKeysPerSplit);
    const size_t wb = static_cast<size_t>(schedule::dtype_bytes(s.dtype));
    auto floats = [](int64_t n) { return std::make_unique<DeviceBuf>(static_cast<size_t>(n) * 4); };
    hidden = floats(s.hidden);
    q = floats(s.q_dim());
    part_o = floats(static_cast<int64_t>(s.heads) * attn_splits * s.head_dim);
    part_ml = floats(static_cast<int64_t>(s.heads) * attn_splits * 2);
    attn = floats(s.q_dim());
    hmid = floats(s.ffn);
    logits = floats(s.vocab);
    cand_v = floats(static_cast<int64_t>(sm_count) * kMaxBlocksPerSm);
    cand_i = floats(static_cast<int64_t>(sm_count) * kMaxBlocksPerSm);
    attn_counters = floats(s.kv_heads);
    MS_CHECK_CUDA(cudaMemset(attn_counters->ptr, 0, static_cast<size_t>(s.kv_heads) * 4));
    lm_counter = floats(1);
    MS_CHECK_CUDA(cudaMemset(lm_counter->ptr, 0, 4));
    const size_t kv_bytes =
        static_cast<size_t>(s.layers) * 2 * s.kv_heads * s.max_seq * s.head_dim * wb;
    kv = std::make_unique<DeviceBuf>(kv_bytes);
    MS_CHECK_CUDA(cudaMemset(kv->ptr, 0, kv_bytes));
    step = std::make_unique<DeviceBuf>(sizeof(ms_abi::StepCell));
    const std::vector<float> invf = schedule::rope_inv_freq(s);
    inv_freq = floats(static_cast<int64_t>(invf.size()));
    MS_CHECK_CUDA(cudaMemcpy(inv_freq->ptr, invf.data(), invf.size() * 4, cudaMemcpyHostToDevice));
    MS_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&host_cell), sizeof(ms_abi::StepCell)));
    MS_CHECK_CUDA(cudaEventCreate(&ev_start));
    MS_CHECK_CUDA(cudaEventCreate(&ev_stop));
  }

  /// The attention kernel's dynamic shared memory: q, the scores, the P.V slices, the combine's
  /// weights.
  size_t attention_smem() const {
    const size_t group = static_cast<size_t>(shape.heads / shape.kv_heads);
    const size_t per_vec = 16 / static_cast<size_t>(schedule::dtype_bytes(shape.dtype));
    return (group * shape.head_dim + group * attn_chunk_max + kBlock * group * per_vec +
            group * attn_splits) *
           4;
  }

  /// Dynamic shared memory past the default 48 KiB needs the opt-in attribute.
  void allow_smem(Fn f, size_t bytes) {
    if (bytes <= kDefaultSmem) return;
    MS_CHECK_CUDA(cuFuncSetAttribute(fn[f], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(bytes)));
  }

  /// Captures the step's launches with the current geometry into a fresh graph.
  void capture() {
    drop_graph();
    MS_CHECK_CUDA(cudaStreamSynchronize(stream));
    MS_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    record_step();
    MS_CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    MS_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  }

  /// Median of `reps` replays at position 0 (after two untimed ones), microseconds.
  double replay_median_us(int reps) {
    write_cell(0, 0);
    std::vector<double> us;
    for (int i = 0; i < reps + 2; ++i) {
      const double replay_us = time_replay_us(exec, stream, ev_start, ev_stop);
      if (i >= 2) us.push_back(replay_us);
    }
    std::nth_element(us.begin(), us.begin() + static_cast<long>(us.size() / 2), us.end());
    return us[us.size() / 2];
  }

  /// Chooses the GEMV blocks per SM by measurement, one kernel at a time (coordinate descent from
  /// one block per SM everywhere: a kernel keeps two when the step gets faster by more than 0.5%),
  /// and leaves the graph captured with the choice. Returns every geometry tried with its median.
  nlohmann::json tune() {
    constexpr int kReps = 15;
    nlohmann::json tried = nlohmann::json::array();
    capture();
    double best = replay_median_us(kReps);
    tried.push_back({{"blocks_per_sm", geometry_json(per_sm)}, {"median_us", best}});
    for (size_t g = 0; g < kGemvCount; ++g) {
      per_sm[g] = kMaxBlocksPerSm;
      capture();
      const double us = replay_median_us(kReps);
      tried.push_back({{"blocks_per_sm", geometry_json(per_sm)}, {"median_us", us}});
      if (us < best * 0.995)
        best = us;
      else
        per_sm[g] = 1;
    }
    capture();
    return tried;
  }

  /// See GraphPdlBaseline::timeline.
  nlohmann::json timeline(int32_t token, int32_t position) {
    constexpr uint64_t kNone = ~0ull;
    const size_t slots = static_cast<size_t>(kernels);
    DeviceBuf buf(slots * 4 * sizeof(uint64_t));
    trace_dev = static_cast<unsigned long long*>(buf.ptr);
    capture();
    trace_dev = nullptr;
    std::vector<uint64_t> t(slots * 4);
    for (int replay = 0; replay < 2; ++replay) {  // the second replay is read
      for (size_t i = 0; i < slots; ++i)
        t[4 * i] = t[4 * i + 1] = kNone, t[4 * i + 2] = t[4 * i + 3] = 0;
      MS_CHECK_CUDA(cudaMemcpy(buf.ptr, t.data(), t.size() * 8, cudaMemcpyHostToDevice));
      write_cell(token, position);
      MS_CHECK_CUDA(cudaGraphLaunch(exec, stream));
      MS_CHECK_CUDA(cudaStreamSynchronize(stream));
    }
    MS_CHECK_CUDA(cudaMemcpy(t.data(), buf.ptr, t.size() * 8, cudaMemcpyDeviceToHost));
    capture();  // the graph without stamps again
    const double t0 = static_cast<double>(t[0]);
    auto us = [&](uint64_t ns) { return (static_cast<double>(ns) - t0) / 1000.0; };
    nlohmann::json launches = nlohmann::json::array(), by = nlohmann::json::object();
    double prev_end = 0.0;
    for (size_t i = 0; i < slots; ++i) {
      const char* name = kKernelNames[slot_fn[i]];
      const double start = us(t[4 * i]), w0 = us(t[4 * i + 1]), w1 = us(t[4 * i + 2]);
      const double end = us(t[4 * i + 3]);
      launches.push_back({{"kernel", name},
                          {"start_us", start},
                          {"first_wait_us", w0},
                          {"last_wait_us", w1},
                          {"end_us", end}});
      nlohmann::json& k = by[name];
      if (k.is_null())
        k = {{"launches", 0}, {"critical_us", 0.0}, {"released_us", 0.0}, {"after_wait_us", 0.0}};
      k["launches"] = k["launches"].get<int>() + 1;
      k["critical_us"] = k["critical_us"].get<double>() + (end - prev_end);
      k["released_us"] = k["released_us"].get<double>() + (w0 - prev_end);
      k["after_wait_us"] = k["after_wait_us"].get<double>() + (end - w1);
      prev_end = end;
    }
    return {{"step_us", prev_end},
            {"kernels", launches},
            {"by_kernel", by},
            {"clock", "globaltimer (ns), from the first kernel's start"}};
  }

  void write_cell(int32_t token, int32_t position) {
    write_step_cell(host_cell, step->ptr, stream, token, position);
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
    req.entry = "eval/baselines/pdl_baseline.cuh";
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
    m.allow_smem(kQkv, static_cast<size_t>(s.hidden) * 8);
    m.allow_smem(kGateUp, static_cast<size_t>(s.hidden) * 8);
    m.allow_smem(kLm, static_cast<size_t>(s.hidden) * 8);
    m.allow_smem(kO, static_cast<size_t>(s.q_dim()) * 4);
    m.allow_smem(kDown, static_cast<size_t>(s.ffn) * 4);

    const nlohmann::json tuning = m.tune();
    size_t nodes = 0;
    MS_CHECK_CUDA(cudaGraphGetNodes(m.graph, nullptr, &nodes));
    b->info_ = {{"graph_nodes", nodes},
                {"kernels_per_step", m.kernels},
                {"programmatic_dependent_launch", m.pdl},
                {"attention_splits", m.attn_splits},
                {"attention_min_keys_per_split", kMinKeysPerSplit},
                {"gemv_blocks_per_sm", geometry_json(m.per_sm)},
                {"gemv_tuning", tuning},
                {"lm_head_blocks", m.lm_blocks},
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
  return replay_logits(m.exec, m.stream, m.logits->ptr, m.shape.vocab);
}

std::optional<nlohmann::json> GraphPdlBaseline::timeline(int32_t token, int32_t position) {
  return impl_->timeline(token, position);
}

int32_t GraphPdlBaseline::last_argmax() { return read_step_argmax(impl_->step->ptr); }

int32_t GraphPdlBaseline::step_argmax(int32_t token, int32_t position) {
  Impl& m = *impl_;
  m.write_cell(token, position);
  return replay_argmax(m.exec, m.stream, m.host_cell, m.step->ptr);
}

double GraphPdlBaseline::time_step_us(int32_t token, int32_t position, bool flush) {
  Impl& m = *impl_;
  if (flush) vm::flush_l2();
  m.write_cell(token, position);
  return time_replay_us(m.exec, m.stream, m.ev_start, m.ev_stop);
}

}  // namespace megasched::eval
