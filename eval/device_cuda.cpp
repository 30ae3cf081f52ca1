// The live device on CUDA (see eval/device.h): cudaGetDeviceProperties through vm::device_info,
// and the streaming-read probe (ms_stream_read in eval/baselines/baseline.cuh).
#include "eval/device.h"

#include <algorithm>
#include <cctype>
#include <fstream>

#include "eval/timing.h"
#include "vm/cuda_check.h"
#include "vm/cuda_runtime.h"
#include "vm/nvrtc_build.h"

namespace megasched::eval {

using json = nlohmann::json;

bool gpu_available(std::string* why) {
  try {
    return vm::device_info(why).has_value();
  } catch (const vm::GpuError& e) {
    if (why) *why = e.what();
    return false;
  }
}

int gpu_count(std::string* why) {
  try {
    return vm::device_count(why);
  } catch (const vm::GpuError& e) {
    if (why) *why = e.what();
    return 0;
  }
}

std::optional<schedule::GpuTarget> live_target(std::string* error) {
  std::optional<vm::DeviceInfo> d;
  try {
    d = vm::device_info(error);
  } catch (const vm::GpuError& e) {
    if (error) *error = e.what();
    return std::nullopt;
  }
  if (!d) return std::nullopt;
  schedule::GpuTarget t;
  // Datasheet bandwidth from the registry entry the device's name matches (none: 0, and the floor
  // uses the measured figure only).
  std::optional<schedule::GpuTarget> known = schedule::find_target(d->name);
  if (!known) {
    std::string upper = d->name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const schedule::GpuTarget& r : schedule::target_registry()) {
      std::string key = r.name;
      for (char& c : key) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (upper.find(key) != std::string::npos && r.sm_arch == d->sm_arch) known = r;
    }
  }
  t.name = d->name;
  t.sm_arch = d->sm_arch;
  t.num_sms = d->num_sms;
  t.smem_per_sm = d->smem_per_sm;
  t.smem_per_block_optin = d->smem_per_block_optin;
  t.regs_per_sm = d->regs_per_sm;
  t.max_threads_per_sm = d->max_threads_per_sm;
  t.max_blocks_per_sm = d->max_blocks_per_sm;
  t.l2_bytes = d->l2_bytes;
  t.hbm_bytes = d->hbm_bytes;
  t.datasheet_bw_gbs = known ? known->datasheet_bw_gbs : 0.0;
  t.source = "live";
  std::ifstream in(device_json_path());
  if (in) {
    const json j = json::parse(in, nullptr, false);
    if (j.is_object() && j.value("name", "") == d->name &&
        j.value("pci_bus_id", "") == d->pci_bus_id) {
      t.measured_bw_gbs = j.value("measured_bw_gbs", 0.0);
    }
  }
  return t;
}

std::optional<double> measure_stream_bandwidth(int64_t buffer_bytes, int repeats,
                                               std::vector<double>* samples_gbs,
                                               std::string* error) {
  try {
    std::string why;
    const auto d = vm::device_info(&why);
    if (!d) {
      *error = why;
      return std::nullopt;
    }
    schedule::ModelShape shape;  // the probe kernel does not depend on the model: any valid build
    shape.head_dim = 64;
    shape.dtype = schedule::DType::kBF16;
    vm::BuildRequest req;
    req.entry = "eval/baselines/baseline.cuh";
    req.defines = vm::baseline_defines(shape);
    req.sm_arch = d->sm_arch;
    req.cache_dir = vm::default_cache_dir();
    const vm::BuildResult build = vm::build_cubin(req);
    if (!build.ok) {
      *error = build.error;
      return std::nullopt;
    }
    CUfunction fn =
        static_cast<CUfunction>(vm::load_functions(build.cubin, build.key, {"ms_stream_read"})[0]);
    const uint64_t n_vec = static_cast<uint64_t>(buffer_bytes) / 16;
    void* buf = nullptr;
    void* sink = nullptr;
    MS_CHECK_CUDA(cudaMalloc(&buf, n_vec * 16));
    MS_CHECK_CUDA(cudaMalloc(&sink, 16));
    MS_CHECK_CUDA(cudaMemset(buf, 0x5a, n_vec * 16));
    cudaStream_t stream = static_cast<cudaStream_t>(vm::shared_stream());
    cudaEvent_t e0, e1;
    MS_CHECK_CUDA(cudaEventCreate(&e0));
    MS_CHECK_CUDA(cudaEventCreate(&e1));
    int per_sm = 0;
    MS_CHECK_CUDA(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, 512, 0));
    const unsigned grid = static_cast<unsigned>(std::max(per_sm, 1) * d->num_sms);
    uint32_t never = 0x12345678u;
    std::vector<double> gbs;
    for (int i = 0; i < repeats + 2; ++i) {
      void* params[] = {&buf, const_cast<uint64_t*>(&n_vec), &never, &sink};
      MS_CHECK_CUDA(cudaEventRecord(e0, stream));
      MS_CHECK_CUDA(cuLaunchKernel(fn, grid, 1, 1, 512, 1, 1, 0, stream, params, nullptr));
      MS_CHECK_CUDA(cudaEventRecord(e1, stream));
      MS_CHECK_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      MS_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 2) gbs.push_back(static_cast<double>(n_vec * 16) / (ms * 1e-3) / 1e9);  // 2 warm-ups
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(buf);
    cudaFree(sink);
    if (samples_gbs) *samples_gbs = gbs;
    return sample_stats(gbs).median;
  } catch (const vm::GpuError& e) {
    *error = e.what();
    return std::nullopt;
  }
}

}  // namespace megasched::eval
