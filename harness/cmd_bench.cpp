// `megasched bench --model M --positions 0,1024,4096 [--config C]... [--peers FILE]...`: the
// comparison of eval/bench.h in one process on the live GPU: the floor, the default config and the
// given ones, every baseline kind and the peers' rows; a table (text) or the JSON on stdout, and
// bench.json, bench.md and bench.svg written to --out. Measures only: without a GPU it fails with
// exit 3 (`megasched evaluate --device cpu` predicts a config's latency instead).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "eval/baselines/baseline.h"
#include "eval/bench.h"
#include "eval/device.h"
#include "eval/evaluate.h"
#include "flywheel/measured_records.h"
#include "flywheel/run_dir.h"
#include "flywheel/shared_corpus.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "schedule/lookup.h"
#include "schedule/named_configs.h"

namespace megasched::harness {

namespace {

struct BenchOptionsCli {
  std::string model = "llama-1b";
  std::string positions;  // default: 0,1024,4096 clipped to the model's KV cache
  std::vector<std::string> configs;
  std::vector<std::string> peers;
  std::vector<std::string> baselines;
  std::string out = "workspace/bench";
  std::string format = "text";
  std::string flywheel_dir = flywheel::default_flywheel_dir();
  int warmup = 10;
  int iterations = 100;
  uint64_t seed = 0;
};

/// The arguments checked on any machine; the exit code and message of the first bad one.
struct Parsed {
  schedule::ModelShape shape;
  eval::BenchOptions bench;
};

std::optional<Parsed> parse(const BenchOptionsCli& o, std::string* error, int* exit_code) {
  *exit_code = kExitUsage;
  Parsed p;
  auto shape = schedule::resolve_shape(o.model, error);
  if (!shape) {
    *error += " (hint: `megasched models` lists the presets)";
    return std::nullopt;
  }
  p.shape = *shape;
  std::string listed = o.positions;
  if (listed.empty()) {  // 0, 1024 and 4096, each clipped to the model's last position
    std::vector<int> clipped;
    for (int pos : {0, 1024, 4096})
      if (int c = std::min(pos, shape->max_seq - 1);
          std::find(clipped.begin(), clipped.end(), c) == clipped.end())
        clipped.push_back(c);
    for (int c : clipped) listed += (listed.empty() ? "" : ",") + std::to_string(c);
  }
  const auto positions = schedule::parse_int_list(listed);
  if (!positions || positions->empty()) {
    *error = "--positions takes comma-separated integers, got '" + o.positions + "'";
    return std::nullopt;
  }
  for (int pos : *positions) {
    if (pos < 0 || pos >= shape->max_seq) {
      *error = "--positions: " + std::to_string(pos) + " is not in [0, " +
               std::to_string(shape->max_seq - 1) + "] for model " + shape->name;
      return std::nullopt;
    }
  }
  p.bench.positions = *positions;
  p.bench.configs.push_back({"default", schedule::ScheduleConfig{}});
  for (const std::string& arg : o.configs) {
    auto config = read_config_arg(arg, error, exit_code);
    if (!config) {
      *error = "--config " + arg + ": " + *error;
      return std::nullopt;
    }
    const std::string label =
        schedule::is_config_name(arg) ? arg : std::filesystem::path(arg).stem().string();
    p.bench.configs.push_back({label, *config});
  }
  p.bench.baselines = o.baselines;
  for (const std::string& kind : o.baselines) {
    if (kind == "graph-pdl" && !eval::graph_pdl_misfit(*shape).empty()) {
      *error = "--baseline graph-pdl cannot serve model " + shape->name + ": " +
               eval::graph_pdl_misfit(*shape);
      return std::nullopt;
    }
  }
  if (o.baselines.empty())
    for (const std::string& kind : eval::baseline_kinds())
      if (kind != "graph-pdl" || eval::graph_pdl_misfit(*shape).empty())
        p.bench.baselines.push_back(kind);
  for (const std::string& file : o.peers) {
    *exit_code = kExitEnvironment;
    const auto text = read_text(file, error);
    if (!text) return std::nullopt;
    *exit_code = kExitUsage;
    const auto doc = nlohmann::json::parse(*text, nullptr, false);
    if (doc.is_discarded()) {
      *error = "--peers " + file + " is not JSON";
      return std::nullopt;
    }
    auto rows = eval::peer_rows(doc, error);
    if (!rows) {
      *error = "--peers " + file + ": " + *error;
      return std::nullopt;
    }
    p.bench.peers.insert(p.bench.peers.end(), rows->begin(), rows->end());
  }
  p.bench.warmup = o.warmup;
  p.bench.iterations = o.iterations;
  p.bench.seed = o.seed;
  *exit_code = kExitOk;
  return p;
}

/// bench.json, bench.md and bench.svg into `dir`.
bool write_outputs(const eval::BenchResult& r, const std::string& dir, std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    *error = "cannot create '" + dir + "': " + ec.message();
    return false;
  }
  const std::filesystem::path d(dir);
  return write_text_file((d / "bench.json").string(), eval::bench_to_json(r).dump(1) + "\n",
                         error) &&
         write_text_file((d / "bench.md").string(), eval::bench_table(r), error) &&
         write_text_file((d / "bench.svg").string(), eval::bench_svg(r), error);
}

/// Every config row of `r` into the shared corpus (flywheel/shared_corpus.h); a failure warns, as
/// the rows are already measured and written to --out.
void append_to_shared_corpus(const eval::BenchResult& r, const Parsed& parsed,
                             const BenchOptionsCli& o) {
  if (!flywheel::flywheel_enabled(o.flywheel_dir)) return;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string error;
  const int appended =
      flywheel::append_shared_all(o.flywheel_dir,
                                  flywheel::bench_records(r, parsed.bench.configs, parsed.shape,
                                                          o.seed, flywheel::new_run_id(now), now),
                                  flywheel::kSourceBench, &error);
  if (appended < 0)
    std::cerr << "bench: warning: shared corpus: " << error << "\n";
  else
    std::cerr << "bench: " << appended << " config rows appended to "
              << flywheel::shared_corpus_path(o.flywheel_dir, r.device) << "\n";
}

}  // namespace

void add_bench_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<BenchOptionsCli>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Compare on the live GPU, in one process: floor, default and given configs, every baseline "
      "kind, peers' JSON; a table, JSON and an SVG chart (GPU)");
  add_model_flag(cmd, &opt->model)->capture_default_str();
  cmd->add_option("--positions", opt->positions,
                  "Positions timed, comma-separated (default: 0,1024,4096, each clipped to the "
                  "model's last position: 0,127 for toy)");
  cmd->add_option("--config", opt->configs,
                  "A config to measure besides the default: a file or a name (best:MODEL:GPU); "
                  "repeatable");
  cmd->add_option("--baseline", opt->baselines,
                  "Baseline kinds to time (repeatable; default: every kind that serves the model)")
      ->check(CLI::IsMember(eval::baseline_kinds()));
  cmd->add_option("--peers", opt->peers,
                  "A peers JSON file (bench/peers/torch_peer.py writes one); repeatable");
  cmd->add_option("--out", opt->out, "Folder for bench.json, bench.md and bench.svg")
      ->capture_default_str();
  cmd->add_option("--format", opt->format, "stdout format: text (the table) or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "Untimed steps per row")
      ->check(integer_in(0, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--iterations", opt->iterations, "Timed steps per row")
      ->check(integer_in(1, kMaxInt))
      ->capture_default_str();
  add_seed_flag(cmd, &opt->seed);
  add_flywheel_flag(cmd, &opt->flywheel_dir);
  cmd->callback([&ctx, opt] {
    std::string error;
    int code = kExitOk;
    const auto parsed = parse(*opt, &error, &code);
    if (!parsed) {
      print_error("bench", error);
      ctx.exit_code = code;
      return;
    }
    if (!eval::gpu_available(&error)) {
      print_error("bench", error +
                               "; bench measures on a GPU and predicts nothing (hint: `megasched "
                               "evaluate --device cpu` gives a config's predicted latency)");
      ctx.exit_code = kExitEnvironment;
      return;
    }
    auto weights = schedule::load_weights(opt->model, opt->seed, &error);
    auto target = weights ? eval::live_target(&error) : std::nullopt;
    if (!weights || !target) {
      print_error("bench", error);
      ctx.exit_code = weights ? kExitEnvironment : kExitUsage;
      return;
    }
    const auto result =
        eval::run_bench(*weights, *target, parsed->bench, &error, [](const std::string& line) {
          std::cerr << "bench: " << line << "\n" << std::flush;
        });
    if (!result) {
      print_error("bench", error);
      ctx.exit_code = kExitEnvironment;
      return;
    }
    if (!write_outputs(*result, opt->out, &error)) {
      print_error("bench", error);
      ctx.exit_code = kExitEnvironment;
      return;
    }
    append_to_shared_corpus(*result, *parsed, *opt);
    if (opt->format == "json")
      print_json(eval::bench_to_json(*result));
    else
      std::cout << eval::bench_table(*result) << "\nwritten: " << opt->out
                << "/bench.{json,md,svg}\n";
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
