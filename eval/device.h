// The live GPU as the evaluation sees it: whether one is usable, the device as a GpuTarget
// (`--gpu auto`), its streaming-read bandwidth (the floor's figure, `doctor --measure`) and the
// one file that keeps that measurement, <workspace>/device.json. Implemented in
// eval/device_cuda.cpp; without the CUDA toolkit eval/device_nocuda.cpp reports that no GPU is
// available.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/target.h"

namespace megasched::eval {

/// False (with the reason) when there is no CUDA toolkit in this build or no device.
bool gpu_available(std::string* why);

/// GPUs this process sees (0 with the reason when none; `loop --gpus all` starts one worker each).
int gpu_count(std::string* why);

/// `--gpu auto`: the live device as a GpuTarget (cudaGetDeviceProperties), with the measured
/// bandwidth from device.json when `doctor --measure` has stored one for this device.
std::optional<schedule::GpuTarget> live_target(std::string* error);

/// Where the measured device data lives: <workspace>/device.json ($MEGASCHED_WORKSPACE, else
/// ./workspace).
std::string device_json_path();

/// The streaming-read bandwidth of a read-only kernel over a buffer `buffer_bytes` long (many
/// times the L2), median of `repeats` timed passes, GB/s (1e9 B/s). Samples in *samples_gbs.
std::optional<double> measure_stream_bandwidth(int64_t buffer_bytes, int repeats,
                                               std::vector<double>* samples_gbs,
                                               std::string* error);

/// The probe buffer `doctor --measure` uses by default: 40 x the L2, at least 1 GiB.
int64_t default_probe_bytes(int64_t l2_bytes);

/// Measures the live device's streaming-read bandwidth and stores it in device.json, where
/// live_target finds it: {"name", "pci_bus_id", "measured_bw_gbs", "p10_gbs", "p90_gbs",
/// "samples_gbs", "buffer_bytes", "repeats", "method", "date"}. The one writer of device.json.
/// Returns the stored document and *path, or nullopt with *error.
std::optional<nlohmann::json> measure_and_store_bandwidth(int64_t buffer_bytes, int repeats,
                                                          std::string* path, std::string* error);

/// `megasched doctor`: the NVRTC version and, when a device answers, the driver and runtime
/// versions and the device: {"nvrtc", "driver_version", "runtime_version", "device": {name,
/// pci_bus_id, sm_arch, num_sms, l2_bytes, hbm_bytes, smem_per_sm, smem_per_block_optin,
/// regs_per_sm, max_threads_per_sm, max_blocks_per_sm, datasheet_bw_gbs,
/// stored_measured_bw_gbs}}; without a device {"nvrtc", "device": null, "error"}.
nlohmann::json device_report();

}  // namespace megasched::eval
