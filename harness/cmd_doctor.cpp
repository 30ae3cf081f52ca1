// `megasched doctor`: what this machine offers the GPU path (driver, runtime, NVRTC, the device and
// its limits) and, with --measure, the streaming-read bandwidth of a read-only kernel over a buffer
// many times the L2 (median of repeats). The measurement is stored in <workspace>/device.json,
// where `--gpu auto` picks it up for the floor (eval/device.h).
#include <iostream>

#include "eval/device.h"
#include "harness/cli_util.h"
#include "harness/commands.h"

namespace megasched::harness {

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
      ->check(integer_in(1, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--buffer-mib", opt->buffer_mib,
                  "Probe buffer size in MiB (default: 40 x L2, >= 1 GiB)")
      ->check(integer_in(1, 1 << 24));
  cmd->add_flag("--json", opt->json, "Print JSON instead of text");
  cmd->callback([&ctx, opt] {
    nlohmann::json out = eval::device_report();
    if (out["device"].is_null()) {
      if (opt->json)
        print_json(out);
      else
        std::cout << "NVRTC    " << out["nvrtc"].get<std::string>()
                  << "\nGPU      none: " << out["error"].get<std::string>() << "\n"
                  << "Without a GPU everything but the GPU path works: evaluate, loop, promote, "
                     "generate and worker with --device cpu (the ReferenceVm checks every "
                     "output; latencies are the cost model's predictions), and propose, validate, "
                     "fuzz-validator, report, prior, runs and `make demo`. GPU-only: --device gpu, "
                     "--gpu auto, bench, baseline, profile, doctor --measure.\n";
      ctx.exit_code = kExitEnvironment;
      return;
    }
    const auto& dev = out["device"];
    if (opt->measure) {
      const int64_t bytes = opt->buffer_mib > 0
                                ? opt->buffer_mib << 20
                                : eval::default_probe_bytes(dev["l2_bytes"].get<int64_t>());
      std::string err, path;
      const auto stored = eval::measure_and_store_bandwidth(bytes, opt->repeats, &path, &err);
      if (!stored) {
        print_error("doctor", "bandwidth probe failed: " + err);
        ctx.exit_code = kExitEnvironment;
        return;
      }
      out["measured"] = *stored;
      out["stored_in"] = path;
    }
    if (opt->json) {
      print_json(out);
      return;
    }
    const int64_t l2 = dev["l2_bytes"].get<int64_t>(), hbm = dev["hbm_bytes"].get<int64_t>();
    std::cout << "driver   " << out["driver_version"].get<int>() << "\nruntime  "
              << out["runtime_version"].get<int>() << "\nNVRTC    "
              << out["nvrtc"].get<std::string>() << "\ndevice   " << dev["name"].get<std::string>()
              << " (" << dev["pci_bus_id"].get<std::string>() << ", sm_"
              << dev["sm_arch"].get<int>() << ")\nSMs      " << dev["num_sms"].get<int>()
              << "\nL2       " << (l2 >> 20) << " MiB\nHBM      " << (hbm >> 20)
              << " MiB\nsmem     " << dev["smem_per_sm"].get<int>() << " B per SM, "
              << dev["smem_per_block_optin"].get<int>() << " B per block (opt-in)\nregs     "
              << dev["regs_per_sm"].get<int>() << " per SM\ndatasheet bandwidth "
              << dev["datasheet_bw_gbs"].get<double>() << " GB/s\n";
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
