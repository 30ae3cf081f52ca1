// The GPU benchmark matrix behind bench/device_check.sh: for each model and timed position, the
// default config and the named ones of bench/configs/ (kAllConfigs) run through the library's GPU
// trial (kernel checked against eager at positions 0, 1, 2; KV filled by the kernel up to the timed
// position; CUDA-event timing interleaved with the cuBLAS CUDA-graph baseline; re-check after
// timing). Writes one JSON document (machine-readable) and a Markdown table. With --measure it
// first measures the streaming-read bandwidth (as `megasched doctor --measure`) so the floors use
// it.
//
//   device_bench --out DIR [--models toy,small,llama-1b] [--positions 0,1024] [--iterations 100]
//                [--measure] [--configs all|default|NAME,NAME...|PATH.json,...]
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
#include "eval/prepare.h"
#include "eval/roofline.h"
#include "eval/timing.h"
#include "schedule/config.h"
#include "schedule/format.h"
#include "schedule/lookup.h"
#include "vm/cuda_runtime.h"
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

/// The configs `--configs all` runs, chosen (not whatever the folder holds): the named configs of
/// bench/configs/ (bench/configs/README.md: the records per GPU and position, the ring-path and
/// register-path configs the device_check defaults use).
constexpr const char* kAllConfigs[] = {"stream_r2u4_pairs_am", "stream_r2u4_g4p8_pairs_am_st",
                                       "stream_r2u4_g4p16_pairs_am_st", "stream_r2u4", "best_1b"};

/// A ScheduleConfig patch from a file (a relative path that is not found from the working
/// directory is read from the source tree, e.g. dev/configs/NAME.json).
json read_config(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in.good() && file.is_relative()) in.open(std::filesystem::path(MS_SOURCE_DIR) / file);
  if (!in.good()) throw std::invalid_argument("cannot read config " + file.string());
  return json::parse(in);
}

/// The configs each model runs, by name: the default and the configs of kAllConfigs
/// (bench/configs/NAME.json, a ScheduleConfig patch). `which`: "all", "default", or a
/// comma-separated list of those names or of config files (PATH.json, e.g. dev/configs/NAME.json).
std::vector<std::pair<std::string, json>> bench_configs(const std::string& which) {
  std::vector<std::pair<std::string, json>> c = {{"default", json::object()}};
  for (const char* name : kAllConfigs)
    c.push_back({name, read_config(std::string(MS_SOURCE_DIR "/bench/configs/") + name + ".json")});
  if (which == "all") return c;
  std::vector<std::pair<std::string, json>> picked;
  for (const std::string& name : split(which)) {
    const std::filesystem::path file(name);
    if (file.extension() == ".json") {
      picked.push_back({file.stem().string(), read_config(file)});
      continue;
    }
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
      throw std::invalid_argument("unknown bench config '" + name + "'; known: " + names +
                                  " (or a config file, PATH.json)");
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

std::string f2(double v) { return schedule::fmt("%.2f", v); }

struct Args {
  std::string out_dir = ".";
  std::string models = "toy,small,llama-1b";
  std::string positions = "0,1024";
  std::string configs = "all";
  int iterations = 100;
  bool measure = false;
};

/// Parses the command line; nullopt (with the message printed) on an unknown argument.
std::optional<Args> parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--out")
      args.out_dir = next();
    else if (a == "--models")
      args.models = next();
    else if (a == "--positions")
      args.positions = next();
    else if (a == "--iterations")
      args.iterations = std::stoi(next());
    else if (a == "--configs")
      args.configs = next();
    else if (a == "--measure")
      args.measure = true;
    else {
      std::cerr << "device_bench: unknown argument " << a << "\n";
      return std::nullopt;
    }
  }
  return args;
}

/// What a model's trials share: its weights, the checked positions, their tokens and eager logits.
struct ModelRefs {
  schedule::Weights weights;
  std::vector<int> checked = {0, 1, 2};
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> refs;
};

std::optional<ModelRefs> model_refs(const std::string& model, std::string* error) {
  auto weights = schedule::load_weights(model, 0, error);
  if (!weights) return std::nullopt;
  ModelRefs m;
  m.weights = std::move(*weights);
  m.tokens = eval::trial_tokens(m.weights.shape.vocab, 3, 0);
  eval::EagerModel eager(m.weights);
  for (int p = 0; p < 3; ++p) m.refs.push_back(eager.step(m.tokens[static_cast<size_t>(p)], p));
  return m;
}

/// The latency figures of a finished trial against the floor (withheld below it).
void add_timing(const eval::GpuTrialResult& r, const eval::Floor& floor, json* row) {
  const eval::SampleStats s = eval::sample_stats(r.samples_us);
  (*row)["samples_us"] = r.samples_us;
  (*row)["p90_us"] = s.p90;
  (*row)["spread_us"] = s.p90 - s.p10;
  if (s.median < floor.floor_us) {
    (*row)["status"] = "below_floor";
    (*row)["message"] = "median " + std::to_string(s.median) + " us below the floor: withheld";
  } else {
    (*row)["median_us"] = s.median;
    (*row)["pct_of_measured_bw"] = 100.0 * floor.floor_us / s.median;
    if (floor.floor_datasheet_us > 0)
      (*row)["pct_of_datasheet_bw"] = 100.0 * floor.floor_datasheet_us / s.median;
  }
  if (!r.baseline_samples_us.empty()) {
    const eval::SampleStats b = eval::sample_stats(r.baseline_samples_us);
    (*row)["baseline_median_us"] = b.median;
    (*row)["baseline_p90_us"] = b.p90;
    (*row)["baseline_samples_us"] = r.baseline_samples_us;
    if (row->contains("median_us")) (*row)["speedup_vs_baseline"] = b.median / s.median;
  }
}

/// One row of the matrix: the config prepared (lowered and validated), then the library's GPU
/// trial at `position`.
json bench_row(const ModelRefs& m, const schedule::GpuTarget& target, int position,
               const std::string& name, const json& patch, int iterations) {
  const eval::Floor floor = eval::floor_for(m.weights.shape, target, position);
  json row = {{"model", m.weights.shape.name}, {"position", position},
              {"config_name", name},           {"config_patch", patch},
              {"floor_us", floor.floor_us},    {"floor_datasheet_us", floor.floor_datasheet_us},
              {"bytes_min", floor.bytes_min}};
  std::string err;
  const auto config = schedule::parse_config(patch, &err);
  if (!config) return row.update({{"status", "lower_error"}, {"message", err}}), row;
  const eval::PreparedProgram prepared = eval::prepare_program(m.weights.shape, target, *config);
  if (!prepared.program)
    return row.update({{"status", "lower_error"}, {"message", prepared.error}}), row;
  if (!prepared.report.ok())
    return row.update({{"status", "rejected"},
                       {"message", schedule::to_json(prepared.report).dump().substr(0, 400)}}),
           row;
  eval::GpuTrialOptions o;
  o.iterations = iterations;
  o.warmup = 10;
  o.timed_position = position;
  const auto t0 = std::chrono::steady_clock::now();
  const eval::GpuTrialResult r =
      eval::run_gpu_trial(*prepared.program, m.weights, m.tokens, m.refs, m.checked, o);
  row["trial_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  row["status"] = r.status;
  row["message"] = r.message;
  row["kernel"] = r.kernel;
  row["max_abs_err"] = r.max_abs_err;
  row["rel_err"] = r.rel_err;
  if (r.status == "hang") row["hang_dump"] = r.hang_dump;
  if (r.status == "ok") add_timing(r, floor, &row);
  return row;
}

/// The row in the Markdown table and on stdout.
void print_row(const json& row, std::ostream& md) {
  auto num = [&row](const char* key, const char* format) {
    return row.contains(key) ? schedule::fmt(format, row[key].get<double>()) : std::string("-");
  };
  const json& k = row.value("kernel", json::object());
  md << "| " << row["model"].get<std::string>() << " | " << row["position"] << " | "
     << row["config_name"].get<std::string>() << " | " << row["status"].get<std::string>() << " | "
     << num("median_us", "%.1f") << " | "
     << (row.contains("median_us") ? num("p90_us", "%.1f") : "-") << " | "
     << num("pct_of_measured_bw", "%.1f") << " | " << num("pct_of_datasheet_bw", "%.1f") << " | "
     << num("baseline_median_us", "%.1f") << " | " << num("speedup_vs_baseline", "%.2f") << " | "
     << (row.contains("max_abs_err") ? f2(row["max_abs_err"].get<double>() * 1000) + "e-3" : "-")
     << " | " << k.value("registers", -1) << " | " << k.value("local_bytes", -1) << " |\n"
     << std::flush;
  std::cout << row["model"].get<std::string>() << " pos " << row["position"] << " "
            << row["config_name"].get<std::string>() << ": " << row["status"].get<std::string>()
            << " "
            << (row.contains("median_us") ? num("median_us", "%.1f") + " us"
                                          : row.value("message", ""))
            << (row.contains("speedup_vs_baseline")
                    ? " x" + num("speedup_vs_baseline", "%.2f") + " vs baseline"
                    : "")
            << "\n"
            << std::flush;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Args> args = parse_args(argc, argv);
  if (!args) return 2;
  try {
    bench_configs(args->configs);
  } catch (const std::invalid_argument& e) {
    std::cerr << "device_bench: " << e.what() << "\n";
    return 2;
  }
  std::string err;
  if (!eval::gpu_available(&err)) {
    std::cerr << "device_bench: " << err << "\n";
    return 3;
  }
  std::filesystem::create_directories(args->out_dir);
  if (args->measure) {
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
  json doc = {{"device", target->name},
              {"date", utc_now()},
              {"measured_bw_gbs", target->measured_bw_gbs},
              {"datasheet_bw_gbs", target->datasheet_bw_gbs},
              {"nvrtc", vm::nvrtc_version()},
              {"iterations", args->iterations},
              {"checked_positions", {0, 1, 2}},
              {"results", json::array()}};
  std::ofstream md(std::filesystem::path(args->out_dir) / "bench.md");
  md << "| model | pos | config | status | median us | p90 us | % measured BW | % datasheet BW | "
        "baseline us | "
        "speedup vs baseline | max abs err | regs | spill B |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const std::string& model : split(args->models)) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::optional<ModelRefs> m = model_refs(model, &err);
    if (!m) {
      std::cerr << "device_bench: " << err << "\n";
      return 2;
    }
    std::cout << "== " << model << ": weights + eager refs in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
              << " s\n"
              << std::flush;
    for (const std::string& p : split(args->positions)) {
      const int pos = std::min(std::stoi(p), m->weights.shape.max_seq - 1);
      for (const auto& [name, patch] : bench_configs(args->configs)) {
        const json row = bench_row(*m, *target, pos, name, patch, args->iterations);
        print_row(row, md);
        doc["results"].push_back(row);
        std::ofstream(std::filesystem::path(args->out_dir) / "bench.json") << doc.dump(1) << "\n";
      }
    }
  }
  return 0;
}
