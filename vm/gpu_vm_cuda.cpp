// GpuVm on CUDA: NVRTC build, module and weight caches, co-residency check, launch, hang dump.
#include "vm/gpu_vm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "abi/kernel_args.h"
#include "vm/cuda_check.h"
#include "vm/nvrtc_build.h"

namespace megasched::vm {
namespace {

using json = nlohmann::json;

void ensure_context() {
  static std::once_flag once;
  std::call_once(once, [] {
    MS_CHECK_CUDA(cudaSetDevice(0));
    MS_CHECK_CUDA(cudaFree(nullptr));  // creates the primary context the driver calls use
  });
}

/// A device allocation freed with the VM.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n) MS_CHECK_CUDA(cudaMalloc(&ptr, n));
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

template <typename T>
std::unique_ptr<DeviceBuffer> upload(const std::vector<T>& v) {
  auto b = std::make_unique<DeviceBuffer>(std::max<size_t>(v.size() * sizeof(T), 16));
  if (!v.empty())
    MS_CHECK_CUDA(cudaMemcpy(b->ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

std::string fingerprint(const schedule::Weights& w) {
  const auto* bytes = static_cast<const unsigned char*>(w.data());
  const int64_t n = w.bytes();
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(n);
  for (int i = 0; i < 4096 && n > 0; ++i) {
    const int64_t at = (n / 4096) * i + (i % 7);
    h = (h ^ bytes[std::min<int64_t>(at, n - 1)]) * 1099511628211ull;
  }
  return w.shape.name + "/" + schedule::dtype_name(w.shape.dtype) + "/" + std::to_string(n) + "/" +
         std::to_string(h);
}

}  // namespace

std::optional<DeviceInfo> device_info(std::string* why) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    if (why)
      *why = rc != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(rc)
                               : "no CUDA device";
    return std::nullopt;
  }
  ensure_context();
  cudaDeviceProp p{};
  MS_CHECK_CUDA(cudaGetDeviceProperties(&p, 0));
  DeviceInfo d;
  d.name = p.name;
  d.sm_arch = p.major * 10 + p.minor;
  d.num_sms = p.multiProcessorCount;
  d.l2_bytes = p.l2CacheSize;
  d.hbm_bytes = static_cast<int64_t>(p.totalGlobalMem);
  d.smem_per_sm = static_cast<int>(p.sharedMemPerMultiprocessor);
  d.smem_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
  d.regs_per_sm = p.regsPerMultiprocessor;
  d.max_threads_per_sm = p.maxThreadsPerMultiProcessor;
  d.max_blocks_per_sm = p.maxBlocksPerMultiProcessor;
  MS_CHECK_CUDA(cudaDriverGetVersion(&d.driver_version));
  MS_CHECK_CUDA(cudaRuntimeGetVersion(&d.runtime_version));
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, 0) == cudaSuccess) d.pci_bus_id = bus;
  return d;
}

void* shared_stream() {
  static cudaStream_t stream = [] {
    ensure_context();
    cudaStream_t s = nullptr;
    MS_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

void flush_l2() {
  static DeviceBuffer* scratch = [] {
    ensure_context();
    int l2 = 0;
    MS_CHECK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    return new DeviceBuffer(static_cast<size_t>(std::max(l2, 1 << 20)) * 2);
  }();
  static int value = 0;
  MS_CHECK_CUDA(cudaMemsetAsync(scratch->ptr, (++value) & 0xff, scratch->bytes,
                                static_cast<cudaStream_t>(shared_stream())));
}

uint64_t device_weights(const schedule::Weights& weights) {
  static std::mutex mu;
  static std::string key;
  static std::unique_ptr<DeviceBuffer> buffer;
  std::lock_guard<std::mutex> lock(mu);
  ensure_context();
  const std::string k = fingerprint(weights);
  if (!buffer || key != k) {
    buffer.reset();  // one model resident at a time
    buffer = std::make_unique<DeviceBuffer>(static_cast<size_t>(weights.bytes()));
    MS_CHECK_CUDA(cudaMemcpy(buffer->ptr, weights.data(), static_cast<size_t>(weights.bytes()),
                             cudaMemcpyHostToDevice));
    key = k;
  }
  return reinterpret_cast<uint64_t>(buffer->ptr);
}

std::vector<void*> load_functions(const std::vector<char>& cubin, const std::string& key,
                                  const std::vector<std::string>& names) {
  static std::mutex mu;
  static std::map<std::string, CUmodule> modules;
  std::lock_guard<std::mutex> lock(mu);
  ensure_context();
  CUmodule& mod = modules[key];
  if (!mod) MS_CHECK_CUDA(cuModuleLoadData(&mod, cubin.data()));
  std::vector<void*> fns;
  for (const std::string& n : names) {
    CUfunction f = nullptr;
    MS_CHECK_CUDA(cuModuleGetFunction(&f, mod, n.c_str()));
    fns.push_back(f);
  }
  return fns;
}

struct GpuVm::Impl {
  const schedule::Program* program = nullptr;
  CUfunction fn = nullptr;
  cudaStream_t stream = nullptr;
  std::unique_ptr<DeviceBuffer> tasks, waits, totals, qoff, qtasks, act, kv, step, counters, ticket,
      abort_flag, dump, stamps;
  ms_abi::KernelArgs args{};
  int grid = 0;
  int threads = 0;
  int smem = 0;
  bool profile = false;  // built with MS_PROFILE: tasks stamp their times into `stamps`
  int32_t epoch = 0;
  uint64_t logits_begin = 0, logits_end = 0;
  double watchdog_s = 10.0;
  cudaEvent_t ev_start = nullptr, ev_stop = nullptr;
  ms_abi::StepCell* host_cell = nullptr;  // pinned

  ~Impl() {
    if (ev_start) cudaEventDestroy(ev_start);
    if (ev_stop) cudaEventDestroy(ev_stop);
    if (host_cell) cudaFreeHost(host_cell);
  }

  void write_cell(int32_t token, int32_t position) {
    host_cell->token = token;
    host_cell->position = position;
    host_cell->epoch = epoch;
    host_cell->argmax = -1;
    MS_CHECK_CUDA(cudaMemcpyAsync(step->ptr, host_cell, sizeof(ms_abi::StepCell),
                                  cudaMemcpyHostToDevice, stream));
  }

  void launch() {
    void* params[] = {&args};
    MS_CHECK_CUDA(cuLaunchKernel(fn, static_cast<unsigned>(grid), 1, 1,
                                 static_cast<unsigned>(threads), 1, 1, static_cast<unsigned>(smem),
                                 stream, params, nullptr));
    ++epoch;
  }

  /// Waits for the stream with a host-side watchdog (the device spin bound should always fire
  /// first; this catches a kernel that loops without waiting).
  bool sync_with_watchdog() {
    const auto t0 = std::chrono::steady_clock::now();
    while (true) {
      const cudaError_t rc = cudaStreamQuery(stream);
      if (rc == cudaSuccess) return true;
      if (rc != cudaErrorNotReady) MS_CHECK_CUDA(rc);
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > watchdog_s)
        return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  json read_dump() {
    std::vector<ms_abi::HangRecord> recs(static_cast<size_t>(grid));
    MS_CHECK_CUDA(cudaMemcpy(recs.data(), dump->ptr, recs.size() * sizeof(ms_abi::HangRecord),
                             cudaMemcpyDeviceToHost));
    json out = json::array();
    static const char* states[] = {"running", "drained", "timed_out", "aborted"};
    for (size_t b = 0; b < recs.size(); ++b) {
      const ms_abi::HangRecord& r = recs[b];
      if (r.state == ms_abi::kExitDrained) continue;
      json j = {{"block", b},
                {"state", states[std::clamp(r.state, 0, 3)]},
                {"queue_index", r.queue_pos},
                {"task", r.task},
                {"tasks_run", r.tasks_run}};
      if (r.state == ms_abi::kExitTimedOut || r.state == ms_abi::kExitAborted) {
        j["counter"] = r.counter;
        j["counter_name"] =
            r.counter < program->counter_names.size() ? program->counter_names[r.counter] : "";
        j["value"] = r.value;
        j["target"] = r.target;
        j["threshold"] = r.threshold;
        if (r.task >= 0) j["task_label"] = program->task_label(static_cast<uint32_t>(r.task));
      }
      out.push_back(j);
    }
    return out;
  }
};

GpuVm::~GpuVm() = default;

std::unique_ptr<GpuVm> GpuVm::create(const schedule::Program& program,
                                     const schedule::Weights& weights, const GpuVmOptions& options,
                                     std::string* error, bool* rejected) {
  if (rejected) *rejected = false;
  std::string why;
  const auto dev = device_info(&why);
  if (!dev) {
    *error = why;
    return nullptr;
  }
  const schedule::Region* logits = program.find_region("logits");
  if (!logits) {
    *error = "the program has no region named \"logits\"";
    return nullptr;
  }
  auto vm = std::unique_ptr<GpuVm>(new GpuVm());
  vm->impl_ = std::make_unique<Impl>();
  Impl& m = *vm->impl_;
  m.program = &program;
  m.stream = static_cast<cudaStream_t>(shared_stream());
  m.threads = program.launch.threads_per_block;
  m.smem = program.launch.smem_bytes;
  m.grid = program.launch.grid_blocks > 0
               ? program.launch.grid_blocks
               : static_cast<int>(std::max<size_t>(program.queues.size(), 1));
  m.logits_begin = logits->begin;
  m.logits_end = logits->end;
  m.watchdog_s = options.hang_timeout_s * 2 + 10.0;

  // Build (cached) and load.
  BuildRequest req;
  req.entry = "vm/device/megakernel.cuh";
  req.defines = kernel_defines(program, options.profile);
  m.profile = options.profile;
  req.sm_arch = dev->sm_arch;
  req.cache_dir = options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
  const BuildResult build = build_cubin(req);
  if (!build.ok) {
    *error = build.error;
    return nullptr;
  }
  m.fn = static_cast<CUfunction>(load_functions(build.cubin, build.key, {"ms_megakernel"})[0]);
  int regs = 0, local = 0, static_smem = 0, max_threads = 0;
  MS_CHECK_CUDA(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, m.fn));
  MS_CHECK_CUDA(cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, m.fn));
  MS_CHECK_CUDA(cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, m.fn));
  MS_CHECK_CUDA(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, m.fn));
  json& info = vm->kernel_info_;
  info = {{"build_key", build.key},
          {"cache_hit", build.cache_hit},
          {"compile_ms", build.compile_ms},
          {"arch", "sm_" + std::to_string(dev->sm_arch)},
          {"defines", req.defines},
          {"registers", regs},
          {"local_bytes", local},
          {"static_smem_bytes", static_smem},
          {"dynamic_smem_bytes", m.smem},
          {"threads_per_block", m.threads},
          {"grid_blocks", m.grid},
          {"nvrtc", nvrtc_version()},
          {"device", dev->name}};
  for (const KernelResources& k : build.kernels) {
    if (k.name == "ms_megakernel") {
      info["spill_store_bytes"] = k.spill_store_bytes;
      info["spill_load_bytes"] = k.spill_load_bytes;
      info["stack_bytes"] = k.stack_bytes;
    }
  }
  if (m.threads > max_threads) {
    *error = "threads_per_block " + std::to_string(m.threads) + " exceeds the kernel's limit " +
             std::to_string(max_threads) + " (registers: " + std::to_string(regs) + ")";
    if (rejected) *rejected = true;
    if (!options.force_launch) return nullptr;
  }
  if (m.smem > 48 * 1024) {
    MS_CHECK_CUDA(
        cuFuncSetAttribute(m.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, m.smem));
  }
  int per_sm = 0;
  MS_CHECK_CUDA(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, m.fn, m.threads,
                                                            static_cast<size_t>(m.smem)));
  info["occupancy_blocks_per_sm"] = per_sm;
  info["co_resident"] = per_sm * dev->num_sms >= m.grid;
  if (per_sm * dev->num_sms < m.grid) {
    *error = "grid of " + std::to_string(m.grid) +
             " blocks is not co-resident: the occupancy API allows " + std::to_string(per_sm) +
             " block(s) per SM x " + std::to_string(dev->num_sms) + " SMs at " +
             std::to_string(m.threads) + " threads, " + std::to_string(m.smem) +
             " B dynamic smem, " + std::to_string(regs) + " registers";
    if (rejected) *rejected = true;
    if (!options.force_launch) return nullptr;
  }

  // Program tables.
  std::vector<uint32_t> qoff{0}, qtasks;
  for (const auto& q : program.queues) {
    qtasks.insert(qtasks.end(), q.begin(), q.end());
    qoff.push_back(static_cast<uint32_t>(qtasks.size()));
  }
  m.tasks = upload(program.tasks);
  m.waits = upload(program.waits);
  m.totals = upload(program.counter_totals);
  m.qoff = upload(qoff);
  m.qtasks = upload(qtasks);
  // Buffers.
  const int kv_elem = program.model.kv_dtype == ms_abi::kDTypeBF16 ? 2 : 4;
  m.act = std::make_unique<DeviceBuffer>(
      std::max<uint64_t>(program.buffer_elements[ms_abi::kBufActivations], 4) * 4);
  m.kv = std::make_unique<DeviceBuffer>(
      std::max<uint64_t>(program.buffer_elements[ms_abi::kBufKv], 4) * kv_elem);
  m.step = std::make_unique<DeviceBuffer>(sizeof(ms_abi::StepCell));
  m.counters =
      std::make_unique<DeviceBuffer>(std::max<size_t>(program.counter_totals.size(), 1) * 4);
  m.ticket = std::make_unique<DeviceBuffer>(16);
  m.abort_flag = std::make_unique<DeviceBuffer>(16);
  m.dump = std::make_unique<DeviceBuffer>(static_cast<size_t>(m.grid) * sizeof(ms_abi::HangRecord));
  if (m.profile)
    m.stamps = std::make_unique<DeviceBuffer>(std::max<size_t>(program.tasks.size(), 1) *
                                              ms_abi::kStampWords * sizeof(uint64_t));
  for (DeviceBuffer* b : {m.act.get(), m.kv.get(), m.step.get(), m.counters.get(), m.ticket.get(),
                          m.abort_flag.get(), m.dump.get()}) {
    MS_CHECK_CUDA(cudaMemset(b->ptr, 0, b->bytes));
  }
  const std::vector<float> inv_freq = schedule::rope_inv_freq(weights.shape);
  MS_CHECK_CUDA(cudaMemcpy(static_cast<float*>(m.act->ptr) + program.model.rope_table,
                           inv_freq.data(), inv_freq.size() * sizeof(float),
                           cudaMemcpyHostToDevice));
  MS_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&m.host_cell), sizeof(ms_abi::StepCell)));
  MS_CHECK_CUDA(cudaEventCreate(&m.ev_start));
  MS_CHECK_CUDA(cudaEventCreate(&m.ev_stop));

  ms_abi::KernelArgs& a = m.args;
  a.tasks = static_cast<const ms_abi::Instr*>(m.tasks->ptr);
  a.waits = static_cast<const ms_abi::Wait*>(m.waits->ptr);
  a.counter_totals = static_cast<const uint32_t*>(m.totals->ptr);
  a.queue_offsets = static_cast<const uint32_t*>(m.qoff->ptr);
  a.queue_tasks = static_cast<const uint32_t*>(m.qtasks->ptr);
  a.weights = reinterpret_cast<const void*>(device_weights(weights));
  a.act = static_cast<float*>(m.act->ptr);
  a.kv = m.kv->ptr;
  a.step = static_cast<ms_abi::StepCell*>(m.step->ptr);
  a.counters = static_cast<uint32_t*>(m.counters->ptr);
  a.ticket = static_cast<uint32_t*>(m.ticket->ptr);
  a.abort_flag = static_cast<int32_t*>(m.abort_flag->ptr);
  a.dump = static_cast<ms_abi::HangRecord*>(m.dump->ptr);
  a.spin_bound_ns = static_cast<uint64_t>(options.hang_timeout_s * 1e9);
  a.num_tasks = static_cast<uint32_t>(program.tasks.size());
  a.num_queues = static_cast<uint32_t>(program.queues.size());
  a.dynamic_queue = program.launch.dynamic_queue ? 1 : 0;
  a.prefetch_depth = static_cast<uint32_t>(std::max(program.launch.prefetch_depth, 0));
  a.smem_bytes = static_cast<uint32_t>(m.smem);
  a.stamps = m.stamps ? static_cast<uint64_t*>(m.stamps->ptr) : nullptr;
  a.model = program.model;
  MS_CHECK_CUDA(cudaDeviceSynchronize());
  return vm;
}

bool GpuVm::hung() {
  int32_t flag = 0;
  MS_CHECK_CUDA(cudaMemcpy(&flag, impl_->abort_flag->ptr, sizeof flag, cudaMemcpyDeviceToHost));
  return flag != 0;
}

StepOutput GpuVm::step(int32_t token, int32_t position) {
  Impl& m = *impl_;
  StepOutput out;
  m.write_cell(token, position);
  m.launch();
  if (!m.sync_with_watchdog()) {
    out.status = "timeout";
    out.message = "the megakernel did not finish within " + std::to_string(m.watchdog_s) +
                  " s (host watchdog); the worker process must be restarted";
    return out;
  }
  MS_CHECK_CUDA(cudaGetLastError());
  if (hung()) {
    out.status = "hang";
    out.hang_dump = m.read_dump();
    size_t timed_out = 0;
    for (const auto& r : out.hang_dump) timed_out += r["state"] == "timed_out";
    out.message = "hang: " + std::to_string(timed_out) +
                  " block(s) hit the spin bound at position " + std::to_string(position) + "; " +
                  std::to_string(out.hang_dump.size()) +
                  " block(s) did not drain their queue (see the dump)";
    return out;
  }
  out.logits.resize(m.logits_end - m.logits_begin);
  MS_CHECK_CUDA(cudaMemcpy(out.logits.data(), static_cast<float*>(m.act->ptr) + m.logits_begin,
                           out.logits.size() * sizeof(float), cudaMemcpyDeviceToHost));
  ms_abi::StepCell cell{};
  MS_CHECK_CUDA(cudaMemcpy(&cell, m.step->ptr, sizeof cell, cudaMemcpyDeviceToHost));
  out.argmax = cell.argmax;
  out.status = "ok";
  return out;
}

ProfileOutput GpuVm::profile_step(int32_t token, int32_t position) {
  Impl& m = *impl_;
  if (!m.profile || !m.stamps)
    throw GpuError("profile_step needs a VM created with GpuVmOptions::profile");
  ProfileOutput out;
  MS_CHECK_CUDA(cudaMemset(m.stamps->ptr, 0, m.stamps->bytes));
  m.write_cell(token, position);
  MS_CHECK_CUDA(cudaEventRecord(m.ev_start, m.stream));
  m.launch();
  MS_CHECK_CUDA(cudaEventRecord(m.ev_stop, m.stream));
  if (!m.sync_with_watchdog()) {
    out.step.status = "timeout";
    out.step.message = "the profiled step did not finish (host watchdog)";
    return out;
  }
  float ms = 0.0f;
  MS_CHECK_CUDA(cudaEventElapsedTime(&ms, m.ev_start, m.ev_stop));
  out.wall_us = static_cast<double>(ms) * 1000.0;
  // The step's outputs as step() reads them (no second launch).
  if (hung()) {
    out.step.status = "hang";
    out.step.hang_dump = m.read_dump();
    out.step.message = "hang during the profiled step at position " + std::to_string(position);
  } else {
    out.step.logits.resize(m.logits_end - m.logits_begin);
    MS_CHECK_CUDA(cudaMemcpy(out.step.logits.data(),
                             static_cast<float*>(m.act->ptr) + m.logits_begin,
                             out.step.logits.size() * sizeof(float), cudaMemcpyDeviceToHost));
    ms_abi::StepCell cell{};
    MS_CHECK_CUDA(cudaMemcpy(&cell, m.step->ptr, sizeof cell, cudaMemcpyDeviceToHost));
    out.step.argmax = cell.argmax;
    out.step.status = "ok";
  }
  std::vector<uint64_t> raw(m.stamps->bytes / sizeof(uint64_t));
  MS_CHECK_CUDA(cudaMemcpy(raw.data(), m.stamps->ptr, m.stamps->bytes, cudaMemcpyDeviceToHost));
  const size_t n = m.program->tasks.size();
  uint64_t t0 = ~uint64_t(0);
  for (size_t t = 0; t < n; ++t)
    if (raw[t * ms_abi::kStampWords] != 0) t0 = std::min(t0, raw[t * ms_abi::kStampWords]);
  out.stamps.resize(n);
  for (size_t t = 0; t < n; ++t) {
    const uint64_t* w = raw.data() + t * ms_abi::kStampWords;
    TaskStamp& st = out.stamps[t];
    st.task = static_cast<int32_t>(t);
    if (w[0] == 0) continue;  // not run (a hang)
    auto rel = [&](uint64_t v) { return v >= t0 ? v - t0 : 0; };
    st.start_ns = rel(w[0]);
    st.ready_ns = rel(w[1]);
    st.done_ns = rel(w[2]);
    st.signal_ns = rel(w[3]);
    st.block = static_cast<int32_t>(w[4] >> 32);
    st.order = static_cast<int32_t>(w[4] & 0xffffffffu);
  }
  return out;
}

double GpuVm::time_step_us(int32_t token, int32_t position, bool flush) {
  Impl& m = *impl_;
  if (flush) flush_l2();
  m.write_cell(token, position);
  MS_CHECK_CUDA(cudaEventRecord(m.ev_start, m.stream));
  m.launch();
  MS_CHECK_CUDA(cudaEventRecord(m.ev_stop, m.stream));
  if (!m.sync_with_watchdog())
    throw GpuError("timed megakernel step did not finish (host watchdog)");
  float ms = 0.0f;
  MS_CHECK_CUDA(cudaEventElapsedTime(&ms, m.ev_start, m.ev_stop));
  return static_cast<double>(ms) * 1000.0;
}

}  // namespace megasched::vm
