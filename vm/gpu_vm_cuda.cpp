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
#include "vm/cuda_runtime.h"
#include "vm/device_buffer.h"
#include "vm/nvrtc_build.h"

namespace megasched::vm {

using json = nlohmann::json;

struct GpuVm::Impl {
  const schedule::Program* program = nullptr;
  CUfunction fn = nullptr;
  int registers = 0;                  // per thread, of the loaded kernel
  int max_threads = 0;                // per block the loaded kernel allows
  const void* weights_ptr = nullptr;  // the process's device copy of the weights
  cudaStream_t stream = nullptr;
  std::unique_ptr<DeviceBuffer> tasks, waits, totals, heads, qoff, qtasks, act, step, counters,
      ticket, abort_flag, dump, stamps, tagged;
  std::shared_ptr<DeviceBuffer> kv;  // shared by the VMs of a plan (create_sharing_kv)
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
  // Pinned: what step_argmax reads back, the step cell and the abort flag, in one place.
  struct Readback {
    ms_abi::StepCell cell;
    int32_t abort_flag;
  };
  Readback* host_readback = nullptr;

  /// Builds (cached) and loads the kernel; its resources go into *info. False with *error.
  bool build_kernel(const GpuVmOptions& options, const DeviceInfo& dev, json* info,
                    std::string* error);
  /// Why the loaded kernel cannot run blocks this large ("" when it can).
  std::string thread_limit_misfit() const;
  /// Why the grid is not co-resident by the occupancy API ("" when it is); the occupancy goes
  /// into *info.
  std::string occupancy_misfit(const DeviceInfo& dev, json* info);
  /// The program's tables, the buffers (the KV cache `shared_kv` when given, else a zeroed one
  /// of its own), the rope table, the step cell and the events.
  void upload_program(const schedule::Weights& weights, std::shared_ptr<DeviceBuffer> shared_kv);
  /// The kernel's argument block over the uploaded buffers.
  void fill_args(const GpuVmOptions& options);

  ~Impl() {
    if (ev_start) cudaEventDestroy(ev_start);
    if (ev_stop) cudaEventDestroy(ev_stop);
    if (host_cell) cudaFreeHost(host_cell);
    if (host_readback) cudaFreeHost(host_readback);
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
    epoch = static_cast<int32_t>(static_cast<uint32_t>(epoch) + 1u);  // wraps like the counters
  }

  /// Waits for the stream with a host-side watchdog (the device spin bound should always fire
  /// first; this catches a kernel that loops without waiting). Between polls the thread sleeps
  /// 50 us, or with `spin` only yields: a step that feeds the next one (generation) then learns of
  /// its end within a poll, not up to a sleep (~60-110 us on Linux) later.
  bool sync_with_watchdog(bool spin = false) {
    const auto t0 = std::chrono::steady_clock::now();
    while (true) {
      const cudaError_t rc = cudaStreamQuery(stream);
      if (rc == cudaSuccess) return true;
      if (rc != cudaErrorNotReady) MS_CHECK_CUDA(rc);
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > watchdog_s)
        return false;
      if (spin)
        std::this_thread::yield();
      else
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

bool GpuVm::Impl::build_kernel(const GpuVmOptions& options, const DeviceInfo& dev, json* info,
                               std::string* error) {
  const BuildRequest req = megakernel_request(*program, dev.sm_arch, options.cache_dir,
                                              options.profile, options.test_defines);
  profile = options.profile;
  const BuildResult build = build_cubin(req);
  if (!build.ok) {
    *error = build.error;
    return false;
  }
  fn = static_cast<CUfunction>(load_functions(build.cubin, build.key, {"ms_megakernel"})[0]);
  MS_CHECK_CUDA(cuFuncGetAttribute(&registers, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
  int local = 0, static_smem = 0;
  MS_CHECK_CUDA(cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn));
  MS_CHECK_CUDA(cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn));
  MS_CHECK_CUDA(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn));
  *info = {{"build_key", build.key},
           {"cache_hit", build.cache_hit},
           {"compile_ms", build.compile_ms},
           {"arch", arch_name(dev.sm_arch)},
           {"defines", req.defines},
           {"registers", registers},
           {"local_bytes", local},
           {"static_smem_bytes", static_smem},
           {"dynamic_smem_bytes", smem},
           {"threads_per_block", threads},
           {"grid_blocks", grid},
           {"nvrtc", nvrtc_version()},
           {"device", dev.name}};
  // The entry and the device functions it calls (the streamed GEMV's spills are its own).
  const KernelResources k = megakernel_resources(build.kernels);
  if (!k.name.empty()) {
    (*info)["spill_store_bytes"] = k.spill_store_bytes;
    (*info)["spill_load_bytes"] = k.spill_load_bytes;
    (*info)["stack_bytes"] = k.stack_bytes;
    if (k.spill_store_bytes > 0 || k.spill_load_bytes > 0)
      (*info)["spills_by_function"] = spills_json(build.kernels);
  }
  return true;
}

std::string GpuVm::Impl::thread_limit_misfit() const {
  if (threads <= max_threads) return "";
  return "threads_per_block " + std::to_string(threads) + " exceeds the kernel's limit " +
         std::to_string(max_threads) + " (registers: " + std::to_string(registers) + ")";
}

std::string GpuVm::Impl::occupancy_misfit(const DeviceInfo& dev, json* info) {
  if (smem > 48 * 1024)
    MS_CHECK_CUDA(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
  int per_sm = 0;
  MS_CHECK_CUDA(
      cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, static_cast<size_t>(smem)));
  (*info)["occupancy_blocks_per_sm"] = per_sm;
  (*info)["co_resident"] = per_sm * dev.num_sms >= grid;
  if (per_sm * dev.num_sms >= grid) return "";
  return "grid of " + std::to_string(grid) +
         " blocks is not co-resident: the occupancy API allows " + std::to_string(per_sm) +
         " block(s) per SM x " + std::to_string(dev.num_sms) + " SMs at " +
         std::to_string(threads) + " threads, " + std::to_string(smem) + " B dynamic smem, " +
         std::to_string(registers) + " registers";
}

void GpuVm::Impl::upload_program(const schedule::Weights& weights,
                                 std::shared_ptr<DeviceBuffer> shared_kv) {
  // Program tables.
  std::vector<uint32_t> offsets{0}, flat;
  for (const auto& q : program->queues) {
    flat.insert(flat.end(), q.begin(), q.end());
    offsets.push_back(static_cast<uint32_t>(flat.size()));
  }
  tasks = upload(program->tasks);
  waits = upload(program->waits);
  totals = upload(program->counter_totals);
  heads = upload(schedule::wait_heads(*program));
  qoff = upload(offsets);
  qtasks = upload(flat);
  // Buffers.
  const int kv_elem = program->model.kv_dtype == ms_abi::kDTypeBF16 ? 2 : 4;
  act = std::make_unique<DeviceBuffer>(
      std::max<uint64_t>(program->buffer_elements[ms_abi::kBufActivations], 4) * 4);
  const bool own_kv = shared_kv == nullptr;
  kv = own_kv ? std::make_shared<DeviceBuffer>(
                    std::max<uint64_t>(program->buffer_elements[ms_abi::kBufKv], 4) * kv_elem)
              : std::move(shared_kv);
  step = std::make_unique<DeviceBuffer>(sizeof(ms_abi::StepCell));
  counters =
      std::make_unique<DeviceBuffer>(std::max<size_t>(program->counter_totals.size(), 1) * 4);
  ticket = std::make_unique<DeviceBuffer>(16);
  abort_flag = std::make_unique<DeviceBuffer>(16);
  dump = std::make_unique<DeviceBuffer>(static_cast<size_t>(grid) * sizeof(ms_abi::HangRecord));
  if (profile)
    stamps = std::make_unique<DeviceBuffer>(std::max<size_t>(program->tasks.size(), 1) *
                                            ms_abi::kStampWords * sizeof(uint64_t));
  // The tagged mirror of the activations (abi/abi.h, Tagged words), zeroed: tag 0 is no step's,
  // and the epoch only grows for the life of this VM, so no word of an earlier step matches.
  const bool has_tags =
      std::any_of(program->tasks.begin(), program->tasks.end(), [](const ms_abi::Instr& t) {
        return (t.flags & (ms_abi::kFlagTagIn | ms_abi::kFlagTagOut)) != 0;
      });
  if (has_tags)
    tagged = std::make_unique<DeviceBuffer>(
        std::max<uint64_t>(program->buffer_elements[ms_abi::kBufActivations], 4) * 8);
  // A shared KV cache keeps what the other VM's steps wrote.
  for (DeviceBuffer* b : {act.get(), own_kv ? kv.get() : nullptr, step.get(), counters.get(),
                          ticket.get(), abort_flag.get(), dump.get(), tagged.get()})
    if (b != nullptr) MS_CHECK_CUDA(cudaMemset(b->ptr, 0, b->bytes));
  const std::vector<float> inv_freq = schedule::rope_inv_freq(weights.shape);
  MS_CHECK_CUDA(cudaMemcpy(static_cast<float*>(act->ptr) + program->model.rope_table,
                           inv_freq.data(), inv_freq.size() * sizeof(float),
                           cudaMemcpyHostToDevice));
  MS_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&host_cell), sizeof(ms_abi::StepCell)));
  MS_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&host_readback), sizeof(Readback)));
  MS_CHECK_CUDA(cudaEventCreate(&ev_start));
  MS_CHECK_CUDA(cudaEventCreate(&ev_stop));
  weights_ptr = reinterpret_cast<const void*>(device_weights(weights));
}

void GpuVm::Impl::fill_args(const GpuVmOptions& options) {
  ms_abi::KernelArgs& a = args;
  a.tasks = static_cast<const ms_abi::Instr*>(tasks->ptr);
  a.waits = static_cast<const ms_abi::Wait*>(waits->ptr);
  a.counter_totals = static_cast<const uint32_t*>(totals->ptr);
  a.wait_heads = static_cast<const ms_abi::WaitHead*>(heads->ptr);
  a.queue_offsets = static_cast<const uint32_t*>(qoff->ptr);
  a.queue_tasks = static_cast<const uint32_t*>(qtasks->ptr);
  a.weights = weights_ptr;
  a.act = static_cast<float*>(act->ptr);
  a.kv = kv->ptr;
  a.step = static_cast<ms_abi::StepCell*>(step->ptr);
  a.counters = static_cast<uint32_t*>(counters->ptr);
  a.ticket = static_cast<uint32_t*>(ticket->ptr);
  a.abort_flag = static_cast<int32_t*>(abort_flag->ptr);
  a.dump = static_cast<ms_abi::HangRecord*>(dump->ptr);
  a.spin_bound_ns = static_cast<uint64_t>(options.hang_timeout_s * 1e9);
  a.num_tasks = static_cast<uint32_t>(program->tasks.size());
  a.num_queues = static_cast<uint32_t>(program->queues.size());
  a.dynamic_queue = program->launch.dynamic_queue ? 1 : 0;
  a.prefetch_depth = static_cast<uint32_t>(std::max(program->launch.prefetch_depth, 0));
  a.smem_bytes = static_cast<uint32_t>(smem);
  a.stamps = stamps ? static_cast<uint64_t*>(stamps->ptr) : nullptr;
  a.tagged = tagged ? static_cast<uint64_t*>(tagged->ptr) : nullptr;
  a.model = program->model;
}

std::unique_ptr<GpuVm> GpuVm::create(const schedule::Program& program,
                                     const schedule::Weights& weights, const GpuVmOptions& options,
                                     std::string* error, bool* rejected) {
  return create_vm(program, weights, options, nullptr, error, rejected);
}

std::unique_ptr<GpuVm> GpuVm::create_sharing_kv(const schedule::Program& program,
                                                const schedule::Weights& weights,
                                                const GpuVmOptions& options, GpuVm& kv_owner,
                                                std::string* error, bool* rejected) {
  return create_vm(program, weights, options, &kv_owner, error, rejected);
}

std::unique_ptr<GpuVm> GpuVm::create_vm(const schedule::Program& program,
                                        const schedule::Weights& weights,
                                        const GpuVmOptions& options, GpuVm* kv_owner,
                                        std::string* error, bool* rejected) {
  if (rejected) *rejected = false;
  if (kv_owner) {
    const ms_abi::ModelParams& mine = program.model;
    const ms_abi::ModelParams& theirs = kv_owner->impl_->program->model;
    const uint64_t elements = program.buffer_elements[ms_abi::kBufKv];
    if (elements != kv_owner->impl_->program->buffer_elements[ms_abi::kBufKv] ||
        mine.kv_dtype != theirs.kv_dtype || mine.max_seq != theirs.max_seq ||
        mine.kv_heads != theirs.kv_heads || mine.head_dim != theirs.head_dim ||
        mine.layers != theirs.layers) {
      *error = "the program lays out the KV cache unlike the VM whose cache it would share";
      return nullptr;
    }
  }
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
  if (!m.build_kernel(options, *dev, &vm->kernel_info_, error)) return nullptr;
  // Nothing launches that the kernel or the occupancy API refuses (test-only override).
  for (int check = 0; check < 2; ++check) {
    const std::string misfit =
        check == 0 ? m.thread_limit_misfit() : m.occupancy_misfit(*dev, &vm->kernel_info_);
    if (misfit.empty()) continue;
    *error = misfit;
    if (rejected) *rejected = true;
    if (!options.force_launch) return nullptr;
  }
  m.upload_program(weights, kv_owner ? kv_owner->impl_->kv : nullptr);
  m.fill_args(options);
  MS_CHECK_CUDA(cudaDeviceSynchronize());
  return vm;
}

bool GpuVm::hung() {
  int32_t flag = 0;
  MS_CHECK_CUDA(cudaMemcpy(&flag, impl_->abort_flag->ptr, sizeof flag, cudaMemcpyDeviceToHost));
  return flag != 0;
}

namespace {

/// The step output of a launch the host watchdog gave up on.
StepOutput timeout_output(double watchdog_s) {
  StepOutput out;
  out.status = "timeout";
  out.message = "the megakernel did not finish within " + std::to_string(watchdog_s) +
                " s (host watchdog); the worker process must be restarted";
  return out;
}

/// The step output of a launch that hit the spin bound at `position`, with the blocks' dump.
StepOutput hang_output(nlohmann::json dump, int32_t position) {
  StepOutput out;
  out.status = "hang";
  out.hang_dump = std::move(dump);
  size_t timed_out = 0;
  for (const auto& r : out.hang_dump) timed_out += r["state"] == "timed_out";
  out.message = "hang: " + std::to_string(timed_out) + " block(s) hit the spin bound at position " +
                std::to_string(position) + "; " + std::to_string(out.hang_dump.size()) +
                " block(s) did not drain their queue (see the dump)";
  return out;
}

}  // namespace

StepOutput GpuVm::step(int32_t token, int32_t position) {
  Impl& m = *impl_;
  StepOutput out;
  m.write_cell(token, position);
  m.launch();
  if (!m.sync_with_watchdog()) return timeout_output(m.watchdog_s);
  MS_CHECK_CUDA(cudaGetLastError());
  if (hung()) return hang_output(m.read_dump(), position);
  out.logits.resize(m.logits_end - m.logits_begin);
  MS_CHECK_CUDA(cudaMemcpy(out.logits.data(), static_cast<float*>(m.act->ptr) + m.logits_begin,
                           out.logits.size() * sizeof(float), cudaMemcpyDeviceToHost));
  ms_abi::StepCell cell{};
  MS_CHECK_CUDA(cudaMemcpy(&cell, m.step->ptr, sizeof cell, cudaMemcpyDeviceToHost));
  out.argmax = cell.argmax;
  out.status = "ok";
  return out;
}

StepOutput GpuVm::step_argmax(int32_t token, int32_t position) {
  Impl& m = *impl_;
  StepOutput out;
  m.write_cell(token, position);
  m.launch();
  // The cell and the abort flag come back behind the kernel on its stream: one wait, no copy of
  // the logits.
  MS_CHECK_CUDA(cudaMemcpyAsync(&m.host_readback->cell, m.step->ptr, sizeof(ms_abi::StepCell),
                                cudaMemcpyDeviceToHost, m.stream));
  MS_CHECK_CUDA(cudaMemcpyAsync(&m.host_readback->abort_flag, m.abort_flag->ptr, sizeof(int32_t),
                                cudaMemcpyDeviceToHost, m.stream));
  if (!m.sync_with_watchdog(/*spin=*/true)) return timeout_output(m.watchdog_s);
  MS_CHECK_CUDA(cudaGetLastError());
  if (m.host_readback->abort_flag != 0) return hang_output(m.read_dump(), position);
  out.argmax = m.host_readback->cell.argmax;
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
    st.staged_ns = w[5] != 0 ? rel(w[5]) : 0;
    st.streamed_ns = w[6] != 0 ? rel(w[6]) : 0;
    st.block = static_cast<int32_t>(w[4] >> 32);
    st.order = static_cast<int32_t>(w[4] & 0xffffffffu);
  }
  return out;
}

bool GpuVm::load_kv(const KvSnapshot& kv, std::string* error) {
  Impl& m = *impl_;
  const ms_abi::ModelParams& mp = m.program->model;
  const bool bf16 = mp.kv_dtype == ms_abi::kDTypeBF16;
  if (kv.layers != static_cast<int>(mp.layers) || kv.kv_heads != static_cast<int>(mp.kv_heads) ||
      kv.head_dim != static_cast<int>(mp.head_dim) || kv.positions < 0 ||
      kv.positions > static_cast<int>(mp.max_seq) || (kv.dtype == schedule::DType::kBF16) != bf16 ||
      kv.bytes.size() != kv.elements() * static_cast<size_t>(schedule::dtype_bytes(kv.dtype))) {
    *error =
        "the KV snapshot does not fit the program's model (layers, KV heads, head_dim, dtype "
        "or positions differ)";
    return false;
  }
  if (kv.positions == 0) return true;
  // Both layouts are rows of (layer, k|v, kv head): max_seq positions apart on the device,
  // kv.positions apart in the snapshot.
  const size_t elem = bf16 ? 2 : 4;
  const size_t width = static_cast<size_t>(kv.positions) * kv.head_dim * elem;
  const size_t pitch = static_cast<size_t>(mp.max_seq) * mp.head_dim * elem;
  MS_CHECK_CUDA(cudaMemcpy2DAsync(m.kv->ptr, pitch, kv.bytes.data(), width, width,
                                  static_cast<size_t>(kv.layers) * 2 * kv.kv_heads,
                                  cudaMemcpyHostToDevice, m.stream));
  MS_CHECK_CUDA(cudaStreamSynchronize(m.stream));
  return true;
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
