// `megasched doctor`: what this machine offers the GPU path (driver, runtime, NVRTC, the device and
// its limits) and, with --measure, the streaming-read bandwidth of a read-only kernel over a buffer
// many times the L2 (median of repeats). The measurement is stored in <workspace>/device.json,
// where
// `--gpu auto` picks it up for the floor.
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "eval/gpu_trial.h"
#include "eval/timing.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "vm/gpu_vm.h"
#include "vm/nvrtc_build.h"

namespace megasched::harness {

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

void add_doctor_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    bool measure = false;
    bool json = false;
    int repeats = 20;
    int64_t buffer_mib = 0;  // 0: 40 x L2, at least 1 GiB
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "doctor", "Report the CUDA driver, runtime, NVRTC and device; --measure the bandwidth");
  cmd->add_flag("--measure", opt->measure,
                "Measure the streaming-read bandwidth and store it for the floor");
  cmd->add_option("--repeats", opt->repeats,
                  "Timed passes of the bandwidth probe (median reported)")
      ->capture_default_str();
  cmd->add_option("--buffer-mib", opt->buffer_mib,
                  "Probe buffer size in MiB (default: 40 x L2, >= 1 GiB)");
  cmd->add_flag("--json", opt->json, "Print JSON instead of text");
  cmd->callback([&ctx, opt] {
    nlohmann::json out = {{"nvrtc", vm::nvrtc_version()}};
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
      if (opt->json)
        print_json(out);
      else
        std::cout << "NVRTC " << out["nvrtc"].get<std::string>() << "\nno GPU: " << why << "\n";
      ctx.exit_code = kExitEnvironment;
      return;
    }
    std::string terr;
    const auto target = eval::live_target(&terr);
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
    if (opt->measure) {
      const int64_t bytes = opt->buffer_mib > 0
                                ? opt->buffer_mib << 20
                                : std::max<int64_t>(int64_t{1} << 30, 40 * d->l2_bytes);
      std::vector<double> samples;
      std::string err;
      const auto gbs = eval::measure_stream_bandwidth(bytes, opt->repeats, &samples, &err);
      if (!gbs) {
        print_error("doctor", "bandwidth probe failed: " + err);
        ctx.exit_code = kExitEnvironment;
        return;
      }
      const eval::SampleStats s = eval::sample_stats(samples);
      const nlohmann::json stored = {
          {"name", d->name},
          {"pci_bus_id", d->pci_bus_id},
          {"measured_bw_gbs", *gbs},
          {"p10_gbs", s.p10},
          {"p90_gbs", s.p90},
          {"samples_gbs", samples},
          {"buffer_bytes", bytes},
          {"repeats", opt->repeats},
          {"method",
           "ms_stream_read: grid-stride ld.global.nc.L1::no_allocate.v4, "
           "CUDA events, median"},
          {"date", utc_now()}};
      const std::filesystem::path path = eval::device_json_path();
      std::error_code ec;
      std::filesystem::create_directories(path.parent_path(), ec);
      std::ofstream f(path);
      f << stored.dump(2) << "\n";
      out["measured"] = stored;
      out["stored_in"] = path.string();
    }
    if (opt->json) {
      print_json(out);
      return;
    }
    const auto& dev = out["device"];
    std::cout << "driver   " << d->driver_version << "\nruntime  " << d->runtime_version
              << "\nNVRTC    " << out["nvrtc"].get<std::string>() << "\ndevice   " << d->name
              << " (" << d->pci_bus_id << ", sm_" << d->sm_arch << ")\nSMs      " << d->num_sms
              << "\nL2       " << (d->l2_bytes >> 20) << " MiB\nHBM      " << (d->hbm_bytes >> 20)
              << " MiB\nsmem     " << d->smem_per_sm << " B per SM, " << d->smem_per_block_optin
              << " B per block (opt-in)\nregs     " << d->regs_per_sm
              << " per SM\ndatasheet bandwidth " << dev["datasheet_bw_gbs"].get<double>()
              << " GB/s\n";
    if (out.contains("measured")) {
      const auto& m = out["measured"];
      std::cout << "measured streaming read " << m["measured_bw_gbs"].get<double>()
                << " GB/s (median of " << opt->repeats << ", p10 " << m["p10_gbs"].get<double>()
                << ", p90 " << m["p90_gbs"].get<double>() << ", buffer "
                << (m["buffer_bytes"].get<int64_t>() >> 20) << " MiB) -> "
                << out["stored_in"].get<std::string>() << "\n";
    } else {
      std::cout << "stored measured bandwidth " << dev["stored_measured_bw_gbs"].get<double>()
                << " GB/s (0: run `megasched doctor --measure`)\n";
    }
  });
}

}  // namespace megasched::harness
