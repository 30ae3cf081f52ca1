// The toolkit-free half of eval/device.h: where device.json lives, its one writer, and the
// doctor's report (vm::device_info and vm::nvrtc_version answer without the toolkit too).
#include "eval/device.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "eval/timing.h"
#include "vm/cuda_runtime.h"
#include "vm/nvrtc_build.h"

namespace megasched::eval {

using json = nlohmann::json;

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

std::string device_json_path() {
  const char* ws = std::getenv("MEGASCHED_WORKSPACE");
  return (std::filesystem::path(ws && *ws ? ws : "workspace") / "device.json").string();
}

int64_t default_probe_bytes(int64_t l2_bytes) {
  return std::max<int64_t>(int64_t{1} << 30, 40 * l2_bytes);
}

std::optional<json> measure_and_store_bandwidth(int64_t buffer_bytes, int repeats,
                                                std::string* path, std::string* error) {
  std::optional<vm::DeviceInfo> d;
  try {
    d = vm::device_info(error);
  } catch (const std::exception& e) {
    *error = e.what();
  }
  if (!d) return std::nullopt;
  std::vector<double> samples;
  const auto gbs = measure_stream_bandwidth(buffer_bytes, repeats, &samples, error);
  if (!gbs) return std::nullopt;
  const SampleStats s = sample_stats(samples);
  const json stored = {{"name", d->name},
                       {"pci_bus_id", d->pci_bus_id},
                       {"measured_bw_gbs", *gbs},
                       {"p10_gbs", s.p10},
                       {"p90_gbs", s.p90},
                       {"samples_gbs", samples},
                       {"buffer_bytes", buffer_bytes},
                       {"repeats", repeats},
                       {"method",
                        "ms_stream_read: grid-stride ld.global.nc.L1::no_allocate.v4, "
                        "CUDA events, median"},
                       {"date", utc_now()}};
  const std::filesystem::path file = device_json_path();
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  std::ofstream(file) << stored.dump(2) << "\n";
  if (path) *path = file.string();
  return stored;
}

json device_report() {
  json out = {{"nvrtc", vm::nvrtc_version()}};
  std::string why;
  std::optional<vm::DeviceInfo> d;
  try {
    d = vm::device_info(&why);
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!d) {
    out["device"] = nullptr;
    out["error"] = why;
    return out;
  }
  std::string terr;
  const auto target = live_target(&terr);
  out["driver_version"] = d->driver_version;
  out["runtime_version"] = d->runtime_version;
  out["device"] = {{"name", d->name},
                   {"pci_bus_id", d->pci_bus_id},
                   {"sm_arch", d->sm_arch},
                   {"num_sms", d->num_sms},
                   {"l2_bytes", d->l2_bytes},
                   {"hbm_bytes", d->hbm_bytes},
                   {"smem_per_sm", d->smem_per_sm},
                   {"smem_per_block_optin", d->smem_per_block_optin},
                   {"regs_per_sm", d->regs_per_sm},
                   {"max_threads_per_sm", d->max_threads_per_sm},
                   {"max_blocks_per_sm", d->max_blocks_per_sm},
                   {"datasheet_bw_gbs", target ? target->datasheet_bw_gbs : 0.0},
                   {"stored_measured_bw_gbs", target ? target->measured_bw_gbs : 0.0}};
  return out;
}

}  // namespace megasched::eval
