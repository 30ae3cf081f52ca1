// The GPU benchmark matrix behind bench/device_check.sh: for each model and timed position, the
// default config and a handful of others run through the library's GPU trial (kernel checked
// against eager at positions 0, 1, 2; KV filled by the kernel up to the timed position; CUDA-event
// timing interleaved with the cuBLAS CUDA-graph baseline; re-check after timing). Writes one JSON
// document (machine-readable) and a Markdown table. With --measure it first measures the
// streaming-read bandwidth (as `megasched doctor --measure`) so the floors use it.
//
//   device_bench --out DIR [--models toy,small,llama-1b] [--positions 0,1024] [--iterations 100]
//                [--measure] [--configs all|default|NAME,NAME...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "eval/device.h"
#include "eval/eager.h"
#include "eval/evaluate.h"
#include "eval/gpu_trial.h"
#include "eval/roofline.h"
#include "eval/timing.h"
#include "schedule/config.h"
#include "schedule/format.h"
#include "schedule/lower.h"
#include "schedule/named_configs.h"
#include "schedule/validate.h"
#include "vm/cuda_runtime.h"
#include "vm/gpu_vm.h"
#include "vm/nvrtc_build.h"

namespace {

using json = nlohmann::json;
using namespace megasched;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

/// The configs each model runs: the default and one change per family that matters for speed.
/// `which`: "all", "default", or a comma-separated list of the names below.
std::vector<std::pair<std::string, json>> bench_configs(const std::string& which) {
  std::vector<std::pair<std::string, json>> c = {{"default", json::object()}};
  c.push_back({"prefetch0", {{"pipeline", {{"prefetch_depth", 0}}}}});
  c.push_back({"prefetch4", {{"pipeline", {{"prefetch_depth", 4}}}}});
  c.push_back({"kv_part4", {{"tiling", {{"attn_kv_partitions", 4}}}}});
  c.push_back({"rows16", {{"tiling", {{"gemv_rows_per_task", 16}}}}});
  c.push_back({"unroll4_rpw4", {{"kernel", {{"unroll", 4}, {"rows_per_warp", 4}}}}});
  c.push_back({"ldg_stream", {{"kernel", {{"weight_load", "ldg_stream"}}}}});
  c.push_back({"dynamic", {{"assignment", {{"policy", "dynamic"}}}}});
  c.push_back(
      {"512thr_kv8",
       {{"launch", {{"threads_per_block", 512}}}, {"tiling", {{"attn_kv_partitions", 8}}}}});
  c.push_back({"1024thr_rows16_kv8",
               {{"launch", {{"threads_per_block", 1024}}},
                {"tiling", {{"attn_kv_partitions", 8}, {"gemv_rows_per_task", 16}}}}});
  // The weight ring: a loader warp streams GEMV tiles into the smem page ring.
  auto ring = [](int threads, int pages, int page_bytes, int kv, int rows = 64, int split = 1) {
    return json{
        {"kernel", {{"weight_stream", "smem_ring"}}},
        {"smem", {{"pages", pages}, {"page_bytes", page_bytes}}},
        {"pipeline", {{"prefetch_depth", 0}}},
        {"launch", {{"threads_per_block", threads}}},
        {"tiling",
         {{"attn_kv_partitions", kv}, {"gemv_rows_per_task", rows}, {"gemv_k_split", split}}}};
  };
  c.push_back({"ring_256thr_4x32k", ring(256, 4, 32768, 1)});
  c.push_back({"ring_256thr_4x32k_kv8", ring(256, 4, 32768, 8)});
  c.push_back({"ring_512thr_4x32k_kv8", ring(512, 4, 32768, 8)});
  c.push_back({"ring_512thr_8x16k_kv8", ring(512, 8, 16384, 8)});
  c.push_back({"ring_256thr_4x32k_rows16_kv8", ring(256, 4, 32768, 8, 16)});
  c.push_back({"ring_256thr_4x32k_rows32_kv8", ring(256, 4, 32768, 8, 32)});
  c.push_back({"ring_512thr_8x16k_rows16_kv8", ring(512, 8, 16384, 8, 16)});
  c.push_back({"ring_256thr_4x32k_split2_kv8", ring(256, 4, 32768, 8, 64, 2)});
  c.push_back({"ring_384thr_5x32k_rows32", ring(384, 5, 32768, 1, 32)});
  c.push_back({"ring_384thr_4x32k_rows32", ring(384, 4, 32768, 1, 32)});
  // The named config best:llama-1b:h200 (the GPU search's best), on every model.
  const json best = schedule::find_named_config("best:llama-1b:h200", nullptr)->config;
  c.push_back({"best_1b", best});
  // Long context: the same schedule with the KV history split into flash-decoding partitions.
  for (int parts : {4, 8, 16}) {
    json split = best;
    split["tiling"]["attn_kv_partitions"] = parts;
    c.push_back({"best_1b_kv" + std::to_string(parts), split});
  }
  if (which == "all") return c;
  std::vector<std::pair<std::string, json>> picked;
  for (const std::string& name : split(which)) {
    bool found = false;
    for (const auto& entry : c) {
      if (entry.first == name) {
        picked.push_back(entry);
        found = true;
      }
    }
    if (!found) {
      std::string names;
      for (const auto& entry : c) names += (names.empty() ? "" : ", ") + entry.first;
      throw std::invalid_argument("unknown bench config '" + name + "'; known: " + names);
    }
  }
  return picked;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

std::string f1(double v) { return schedule::fmt("%.1f", v); }
std::string f2(double v) { return schedule::fmt("%.2f", v); }

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = ".";
  std::string models = "toy,small,llama-1b";
  std::string positions_arg = "0,1024";
  std::string configs_arg = "all";
  int iterations = 100;
  bool measure = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--out")
      out_dir = next();
    else if (a == "--models")
      models = next();
    else if (a == "--positions")
      positions_arg = next();
    else if (a == "--iterations")
      iterations = std::stoi(next());
    else if (a == "--configs")
      configs_arg = next();
    else if (a == "--measure")
      measure = true;
    else {
      std::cerr << "device_bench: unknown argument " << a << "\n";
      return 2;
    }
  }
  try {
    bench_configs(configs_arg);
  } catch (const std::invalid_argument& e) {
    std::cerr << "device_bench: " << e.what() << "\n";
    return 2;
  }
  std::string err;
  if (!eval::gpu_available(&err)) {
    std::cerr << "device_bench: " << err << "\n";
    return 3;
  }
  std::filesystem::create_directories(out_dir);
  if (measure) {
    const auto d = vm::device_info(&err);
    std::string path;
    const auto stored =
        eval::measure_and_store_bandwidth(eval::default_probe_bytes(d->l2_bytes), 20, &path, &err);
    if (!stored) {
      std::cerr << "device_bench: bandwidth probe failed: " << err << "\n";
      return 3;
    }
    std::cout << "measured streaming read " << (*stored)["measured_bw_gbs"].get<double>()
              << " GB/s\n"
              << std::flush;
  }
  const auto target = eval::live_target(&err);
  if (!target) {
    std::cerr << "device_bench: " << err << "\n";
    return 3;
  }
  std::vector<int> timed_positions;
  for (const std::string& p : split(positions_arg)) timed_positions.push_back(std::stoi(p));

  json doc = {{"device", target->name},
              {"date", utc_now()},
              {"measured_bw_gbs", target->measured_bw_gbs},
              {"datasheet_bw_gbs", target->datasheet_bw_gbs},
              {"nvrtc", vm::nvrtc_version()},
              {"iterations", iterations},
              {"checked_positions", {0, 1, 2}},
              {"results", json::array()}};
  std::ofstream md(std::filesystem::path(out_dir) / "bench.md");
  md << "| model | pos | config | status | median us | p90 us | % measured BW | % datasheet BW | "
        "baseline us | "
        "speedup vs baseline | max abs err | regs | spill B |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const std::string& model : split(models)) {
    const auto t0 = std::chrono::steady_clock::now();
    auto weights = eval::load_weights(model, 0, &err);
    if (!weights) {
      std::cerr << "device_bench: " << err << "\n";
      return 2;
    }
    const std::vector<int> checked = {0, 1, 2};
    const std::vector<int32_t> tokens = eval::trial_tokens(weights->shape.vocab, 3, 0);
    std::vector<std::vector<float>> refs;
    {
      eval::EagerModel eager(*weights);
      for (int p = 0; p < 3; ++p) refs.push_back(eager.step(tokens[static_cast<size_t>(p)], p));
    }
    std::cout << "== " << model << ": weights + eager refs in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
              << " s\n"
              << std::flush;
    for (int pos_req : timed_positions) {
      const int pos = std::min(pos_req, weights->shape.max_seq - 1);
      const eval::Floor floor = eval::floor_for(weights->shape, *target, pos);
      for (const auto& [name, patch] : bench_configs(configs_arg)) {
        json row = {{"model", model},
                    {"position", pos},
                    {"config_name", name},
                    {"config_patch", patch},
                    {"floor_us", floor.floor_us},
                    {"floor_datasheet_us", floor.floor_datasheet_us},
                    {"bytes_min", floor.bytes_min}};
        auto config = schedule::parse_config(patch, &err);
        std::optional<schedule::Program> program;
        if (config) program = schedule::lower(weights->shape, *target, *config, &err);
        if (!program) {
          row["status"] = "lower_error";
          row["message"] = err;
        } else if (auto report = schedule::validate(*program, *target); !report.ok()) {
          row["status"] = "rejected";
          row["message"] = schedule::to_json(report).dump().substr(0, 400);
        } else {
          eval::GpuTrialOptions o;
          o.iterations = iterations;
          o.warmup = 10;
          o.timed_position = pos;
          const auto tt = std::chrono::steady_clock::now();
          const eval::GpuTrialResult r =
              eval::run_gpu_trial(*program, *weights, tokens, refs, checked, o);
          row["trial_s"] =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - tt).count();
          row["status"] = r.status;
          row["message"] = r.message;
          row["kernel"] = r.kernel;
          row["max_abs_err"] = r.max_abs_err;
          row["rel_err"] = r.rel_err;
          if (r.status == "hang") row["hang_dump"] = r.hang_dump;
          if (r.status == "ok") {
            const eval::SampleStats s = eval::sample_stats(r.samples_us);
            row["samples_us"] = r.samples_us;
            row["p90_us"] = s.p90;
            row["spread_us"] = s.p90 - s.p10;
            if (s.median < floor.floor_us) {
              row["status"] = "below_floor";
              row["message"] =
                  "median " + std::to_string(s.median) + " us below the floor: withheld";
            } else {
              row["median_us"] = s.median;
              row["pct_of_measured_bw"] = 100.0 * floor.floor_us / s.median;
              if (floor.floor_datasheet_us > 0)
                row["pct_of_datasheet_bw"] = 100.0 * floor.floor_datasheet_us / s.median;
            }
            if (!r.baseline_samples_us.empty()) {
              const eval::SampleStats b = eval::sample_stats(r.baseline_samples_us);
              row["baseline_median_us"] = b.median;
              row["baseline_p90_us"] = b.p90;
              row["baseline_samples_us"] = r.baseline_samples_us;
              if (row.contains("median_us")) row["speedup_vs_baseline"] = b.median / s.median;
            }
          }
        }
        const json& k = row.value("kernel", json::object());
        md << "| " << model << " | " << pos << " | " << name << " | "
           << row["status"].get<std::string>() << " | "
           << (row.contains("median_us") ? f1(row["median_us"]) : "-") << " | "
           << (row.contains("median_us") ? f1(row["p90_us"]) : "-") << " | "
           << (row.contains("pct_of_measured_bw") ? f1(row["pct_of_measured_bw"]) : "-") << " | "
           << (row.contains("pct_of_datasheet_bw") ? f1(row["pct_of_datasheet_bw"]) : "-") << " | "
           << (row.contains("baseline_median_us") ? f1(row["baseline_median_us"]) : "-") << " | "
           << (row.contains("speedup_vs_baseline") ? f2(row["speedup_vs_baseline"]) : "-") << " | "
           << (row.contains("max_abs_err") ? f2(row["max_abs_err"].get<double>() * 1000) + "e-3"
                                           : "-")
           << " | " << k.value("registers", -1) << " | " << k.value("local_bytes", -1) << " |\n"
           << std::flush;
        std::cout << model << " pos " << pos << " " << name << ": "
                  << row["status"].get<std::string>() << " "
                  << (row.contains("median_us") ? f1(row["median_us"]) + " us"
                                                : row.value("message", ""))
                  << (row.contains("speedup_vs_baseline")
                          ? " x" + f2(row["speedup_vs_baseline"]) + " vs baseline"
                          : "")
                  << "\n"
                  << std::flush;
        doc["results"].push_back(row);
        std::ofstream(std::filesystem::path(out_dir) / "bench.json") << doc.dump(1) << "\n";
      }
    }
  }
  return 0;
}
