// `megasched bench --model M --positions 0,1024,4096 [--config C]... [--peers FILE]...`: the
// comparison of eval/bench.h in one process on the live GPU: the floor, the default config and the
// given ones, every baseline kind and the peers' rows; a table (text) or the JSON on stdout, and
// bench.json, bench.md and bench.svg written to --out. With --generate PROMPT_LEN:NEW_TOKENS it
// times whole greedy generations instead (eval/generate_bench.h: a plan, configs, the baselines,
// the PyTorch peer), into generate.json and generate.md. Measures only: without a GPU it fails with
// exit 3 (`megasched evaluate --device cpu` predicts a config's latency instead). `--from-bench
// bench.json --fit-plan FILE` fits a plan to a bench.json written earlier, on any machine.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "eval/baselines/baseline.h"
#include "eval/bench.h"
#include "eval/device.h"
#include "eval/evaluate.h"
#include "eval/generate_bench.h"
#include "flywheel/measured_records.h"
#include "flywheel/run_dir.h"
#include "flywheel/shared_corpus.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "schedule/lookup.h"
#include "schedule/lower.h"
#include "schedule/named_configs.h"
#include "search/plan_fit.h"
#include "vm/nvrtc_build.h"

namespace megasched::harness {

namespace {

struct BenchOptionsCli {
  std::string model = "llama-1b";
  std::string positions;  // default: 0,1024,4096 clipped to the model's KV cache
  std::vector<std::string> configs;
  std::vector<std::string> peers;
  std::vector<std::string> baselines;
  std::vector<std::string> generate;  // PROMPT_LEN:NEW_TOKENS items: whole generations
  std::string plan;                   // with --generate: a plan file or name
  std::string torch_peer = "bench/peers/torch_peer.py";  // with --generate
  std::string out = "workspace/bench";
  std::string format = "text";
  std::string flywheel_dir = flywheel::default_flywheel_dir();
  int warmup = 10;
  int iterations = 100;
  int rounds = 1;  // interleaved rounds of every row at a position
  uint64_t seed = 0;
  std::string fit_plan;      // a file: the plan fitted to the config rows (search/plan_fit.h)
  double fit_margin = 0.01;  // its tie margin
  std::vector<std::string> from_bench;  // with fit_plan: bench.json files written earlier, fitted
                                        // without a GPU
};

/// The arguments checked on any machine; the exit code and message of the first bad one.
struct Parsed {
  schedule::ModelShape shape;
  eval::BenchOptions bench;
};

/// The baseline kinds of --baseline (default: every kind that serves `shape`).
std::optional<std::vector<std::string>> baseline_kinds_for(const BenchOptionsCli& o,
                                                           const schedule::ModelShape& shape,
                                                           std::string* error) {
  for (const std::string& kind : o.baselines) {
    if (kind == "graph-pdl" && !eval::graph_pdl_misfit(shape).empty()) {
      *error = "--baseline graph-pdl cannot serve model " + shape.name + ": " +
               eval::graph_pdl_misfit(shape);
      return std::nullopt;
    }
  }
  if (!o.baselines.empty()) return o.baselines;
  std::vector<std::string> kinds;
  for (const std::string& kind : eval::baseline_kinds())
    if (kind != "graph-pdl" || eval::graph_pdl_misfit(shape).empty()) kinds.push_back(kind);
  return kinds;
}

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
  if (!o.fit_plan.empty() &&
      std::find(positions->begin(), positions->end(), 0) == positions->end()) {
    *error =
        "--fit-plan needs position 0 among --positions (a plan covers every position from 0; "
        "hint: --positions 0,256,1024,4096)";
    return std::nullopt;
  }
  p.bench.configs.push_back({"default", schedule::ScheduleConfig{}});
  for (const std::string& arg : o.configs) {
    auto plan = read_plan_arg(arg, error, exit_code);
    if (!plan || !schedule::check_plan_covers(*plan, shape->max_seq, error)) {
      if (exit_code && plan) *exit_code = kExitUsage;
      *error = "--config " + arg + ": " + *error;
      return std::nullopt;
    }
    const std::string label =
        schedule::is_config_name(arg) ? arg : std::filesystem::path(arg).stem().string();
    // A plan of several buckets: each position runs the config of the bucket that holds it; with
    // --fit-plan its buckets' configs are candidates instead, each timed at every position
    // (labelled "PLAN [begin, end)", one per distinct config, the first bucket's range).
    if (plan->single()) {
      p.bench.configs.push_back({label, plan->buckets[0].config});
    } else if (!o.fit_plan.empty()) {
      for (const schedule::PlanBucket& b : plan->buckets) {
        const bool seen =
            std::any_of(p.bench.configs.begin(), p.bench.configs.end(), [&](const auto& c) {
              return c.first.rfind(label + " [", 0) == 0 &&
                     schedule::to_json(c.second) == schedule::to_json(b.config);
            });
        if (!seen) p.bench.configs.push_back({label + " " + schedule::bucket_label(b), b.config});
      }
    } else {
      p.bench.plans.push_back({label, *plan});
    }
  }
  auto kinds = baseline_kinds_for(o, *shape, error);
  if (!kinds) return std::nullopt;
  p.bench.baselines = *kinds;
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
  p.bench.rounds = o.rounds;
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

/// The --generate comparison's options, checked on any machine (a bad case, plan or config, a
/// case beyond the model's positions: exit 2).
std::optional<eval::GenerateBenchOptions> parse_generate(const BenchOptionsCli& o,
                                                         const schedule::ModelShape& shape,
                                                         std::string* error, int* exit_code) {
  *exit_code = kExitUsage;
  if (!o.positions.empty()) {
    *error = "--positions times single steps and --generate whole generations; pass one of them";
    return std::nullopt;
  }
  if (!o.peers.empty()) {
    *error =
        "--peers holds single-step rows; with --generate the PyTorch peer runs itself "
        "(--torch-peer)";
    return std::nullopt;
  }
  eval::GenerateBenchOptions g;
  auto cases = eval::parse_generate_cases(o.generate, error);
  if (!cases) return std::nullopt;
  for (const eval::GenerateCase& c : *cases)
    if (*error = eval::generate_case_error(shape, c); !error->empty()) return std::nullopt;
  g.cases = *cases;
  std::vector<std::string> args = o.configs;
  if (!o.plan.empty()) args.insert(args.begin(), o.plan);
  if (args.empty()) args.push_back("default");
  for (const std::string& arg : args) {
    const std::string flag = arg == o.plan ? "--plan " : "--config ";
    auto plan = read_plan_arg(arg, error, exit_code);
    if (!plan) return *error = flag + arg + ": " + *error, std::nullopt;
    *exit_code = kExitUsage;
    if (!schedule::check_plan_covers(*plan, shape.max_seq, error))
      return *error = flag + arg + " does not fit model " + shape.name + ": " + *error,
             std::nullopt;
    const std::string label = schedule::is_config_name(arg) || arg == "default"
                                  ? arg
                                  : std::filesystem::path(arg).stem().string();
    g.plans.emplace_back(label, std::move(*plan));
  }
  auto kinds = baseline_kinds_for(o, shape, error);
  if (!kinds) return std::nullopt;
  g.baselines = *kinds;
  g.seed = o.seed;
  g.torch_peer.script = o.torch_peer;
  if (std::filesystem::is_directory(o.model))
    g.torch_peer.checkpoint = std::filesystem::absolute(o.model).string();
  g.torch_peer.work_dir = (std::filesystem::path(o.out) / "torch_peer").string();
  *exit_code = kExitOk;
  return g;
}

/// `bench --generate`: the exit code.
int run_generate_bench_cli(const BenchOptionsCli& o) {
  std::string error;
  int code = kExitUsage;
  auto shape = schedule::resolve_shape(o.model, &error);
  if (!shape) {
    print_error("bench", error + " (hint: `megasched models` lists the presets)");
    return kExitUsage;
  }
  const auto options = parse_generate(o, *shape, &error, &code);
  if (!options) return print_error("bench", error), code;
  if (!eval::gpu_available(&error)) {
    print_error("bench", error +
                             "; bench --generate times generations on a GPU (hint: `megasched "
                             "generate --device cpu` runs a plan's generation on the CPU)");
    return kExitEnvironment;
  }
  auto weights = schedule::load_weights(o.model, o.seed, &error);
  auto target = weights ? eval::live_target(&error) : std::nullopt;
  if (!weights || !target)
    return print_error("bench", error), weights ? kExitEnvironment : kExitUsage;
  const auto result =
      eval::run_generate_bench(*weights, *target, *options, &error, [](const std::string& line) {
        std::cerr << "bench: " << line << "\n" << std::flush;
      });
  if (!result) return print_error("bench", error), kExitEnvironment;
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  const std::filesystem::path d(o.out);
  if (ec ||
      !write_text_file((d / "generate.json").string(),
                       eval::generate_bench_to_json(*result).dump(1) + "\n", &error) ||
      !write_text_file((d / "generate.md").string(), eval::generate_bench_table(*result), &error))
    return print_error("bench", ec ? "cannot create '" + o.out + "': " + ec.message() : error),
           kExitEnvironment;
  if (o.format == "json")
    print_json(eval::generate_bench_to_json(*result));
  else
    std::cout << eval::generate_bench_table(*result) << "\nwritten: " << o.out
              << "/generate.{json,md}\n";
  return kExitOk;
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

/// The plan fitted to the config rows of `r` (search/plan_fit.h): each config of --config and the
/// default at the positions it has a row (every one when `bench` measured it; several
/// --from-bench files may measure a config at some of them); a config that failed at one, or
/// was measured nowhere, is left out (named in *left_out).
std::optional<search::PlanFit> fit_plan_to(const eval::BenchResult& r, const Parsed& parsed,
                                           double margin, std::vector<std::string>* left_out,
                                           std::string* error) {
  search::PlanFitInput in;
  in.positions = r.positions;
  std::sort(in.positions.begin(), in.positions.end());
  in.tie_margin = margin;
  for (const auto& [label, config] : parsed.bench.configs) {
    search::MeasuredConfig m{label, config, {}};
    bool failed = false;
    for (int pos : in.positions) {
      const auto row = std::find_if(r.rows.begin(), r.rows.end(), [&](const eval::BenchRow& x) {
        return x.kind == "config" && x.name == label && x.position == pos;
      });
      if (row == r.rows.end()) continue;  // not measured there (another --from-bench file)
      if (row->status != "ok" || !row->median_us) {
        failed = true;
        break;
      }
      m.median_us.push_back(*row->median_us);
      m.positions.push_back(pos);
    }
    if (!failed && !m.median_us.empty())
      in.configs.push_back(std::move(m));
    else
      left_out->push_back(label);
  }
  return search::fit_plan(in, error);
}

/// `bench --fit-plan FILE`: fits the plan, writes it to FILE and its explanation to
/// OUT/plan_fit.json, and says what it chose on stderr. False with *error.
bool write_fitted_plan(const eval::BenchResult& r, const Parsed& parsed, const BenchOptionsCli& o,
                       std::string* error, const nlohmann::json& more = nlohmann::json::object(),
                       nlohmann::json* written = nullptr) {
  std::vector<std::string> left_out;
  auto fit = fit_plan_to(r, parsed, o.fit_margin, &left_out, error);
  if (!fit) return *error = "--fit-plan: " + *error, false;
  nlohmann::json explain = fit->explain;
  explain.update(more);
  explain["left_out"] = left_out;
  explain["plan_file"] = o.fit_plan;
  if (written) *written = explain;
  std::error_code made;  // a failure to make them shows as the write's error
  std::filesystem::create_directories(o.out, made);
  if (const auto dir = std::filesystem::path(o.fit_plan).parent_path(); !dir.empty())
    std::filesystem::create_directories(dir, made);
  if (!write_text_file(o.fit_plan, schedule::to_json(fit->plan).dump(1) + "\n", error) ||
      !write_text_file((std::filesystem::path(o.out) / "plan_fit.json").string(),
                       explain.dump(1) + "\n", error))
    return false;
  std::string buckets;
  for (size_t i = 0; i < fit->plan.buckets.size(); ++i)
    buckets +=
        (i ? ", " : "") + schedule::bucket_label(fit->plan.buckets[i]) + " " + fit->labels[i];
  std::cerr << "bench: fitted plan (" << fit->plan.buckets.size() << " bucket(s)): " << buckets
            << " -> " << o.fit_plan << "\n";
  for (const std::string& label : left_out)
    std::cerr << "bench: --fit-plan left out " << label
              << ": it failed at a position or was measured at none\n";
  return true;
}

/// The kernel build key this megasched gives `config` on the registry GPU named `device` (a
/// bench.json's device), or "" with *why when it cannot tell (no NVRTC, an unknown GPU, a config
/// that does not lower).
std::string kernel_key_on(const schedule::ModelShape& shape, const std::string& device,
                          const schedule::ScheduleConfig& config, std::string* why) {
  if (!vm::nvrtc_available()) return *why = "this megasched has no NVRTC", "";
  const auto target = schedule::find_target(device);
  if (!target) return *why = "GPU " + device + " is not in the registry", "";
  std::string error;
  const auto program = schedule::lower(shape, *target, config, &error);
  if (!program) return *why = "the config does not lower: " + error, "";
  return vm::build_key(vm::megakernel_request(*program, target->sm_arch, ""));
}

/// The bench.json files of --from-bench as one measurement: their rows, the union of their
/// positions. nullopt with *error (and *code) for a file that cannot be read or is not a
/// bench.json, files of different models or GPUs, or a config row measured twice.
std::optional<eval::BenchResult> read_measurements(const std::vector<std::string>& files,
                                                   std::string* error, int* code) {
  std::optional<eval::BenchResult> all;
  for (const std::string& path : files) {
    const std::string file = "--from-bench " + path;
    *code = kExitEnvironment;
    const auto text = read_text(path, error);
    if (!text) return *error = file + ": " + *error, std::nullopt;
    *code = kExitUsage;
    const auto doc = nlohmann::json::parse(*text, nullptr, false);
    auto one = doc.is_discarded() ? std::nullopt : eval::bench_from_json(doc, error);
    if (!one) {
      *error = file + ": " + (doc.is_discarded() ? "not JSON" : *error) +
               " (hint: pass the bench.json that `bench --out DIR` wrote)";
      return std::nullopt;
    }
    if (!all) {
      all = std::move(one);
      continue;
    }
    if (one->model != all->model || one->device != all->device) {
      *error = file + " measured " + one->model + " on " + one->device + ", the file before it " +
               all->model + " on " + all->device +
               " (hint: fit the measurements of one model on one GPU)";
      return std::nullopt;
    }
    for (const eval::BenchRow& row : one->rows) {
      const bool twice =
          row.kind == "config" &&
          std::any_of(all->rows.begin(), all->rows.end(), [&](const auto& r) {
            return r.kind == "config" && r.name == row.name && r.position == row.position;
          });
      if (twice) {
        *error = file + " measured " + row.name + " at position " + std::to_string(row.position) +
                 " again (hint: give each position of a config in one file only)";
        return std::nullopt;
      }
      all->rows.push_back(row);
    }
    for (int p : one->positions)
      if (std::find(all->positions.begin(), all->positions.end(), p) == all->positions.end())
        all->positions.push_back(p);
  }
  std::sort(all->positions.begin(), all->positions.end());
  return all;
}

/// `bench --from-bench FILE... --fit-plan PLAN`: the plan fitted to the medians of bench.json
/// files written earlier, no GPU. The files' config rows carry their configs (detail.config); a
/// --config of the same label must be that config, and one a file measured without its config
/// (a bench.json from before rows carried it) is fitted when --config names it. Each config's
/// kernel must build to the key it was measured with (detail.kernel.build_key) where this
/// megasched can tell: a measurement of another kernel build is refused. Returns the exit code.
int run_fit_from_bench(const BenchOptionsCli& o) {
  std::string names;
  for (const std::string& f : o.from_bench) names += (names.empty() ? "" : ", ") + f;
  const std::string file = "--from-bench " + names;
  const std::string again =
      " (hint: measure again: bench --positions 0,128,512,1024,4096 --config ... --fit-plan "
      "FILE)";
  std::string error;
  int read_code = kExitOk;
  auto measured = read_measurements(o.from_bench, &error, &read_code);
  if (!measured) return print_error("bench", error), read_code;
  BenchOptionsCli opts = o;
  if (opts.positions.empty())
    for (int p : measured->positions)
      opts.positions += (opts.positions.empty() ? "" : ",") + std::to_string(p);
  int code = kExitOk;
  auto parsed = parse(opts, &error, &code);
  if (!parsed) return print_error("bench", error), code;
  if (measured->model != parsed->shape.name) {
    print_error("bench", file + " measured model " + measured->model + ", not " +
                             parsed->shape.name + " (hint: --model " + measured->model + ")");
    return kExitUsage;
  }
  for (int p : parsed->bench.positions)
    if (std::find(measured->positions.begin(), measured->positions.end(), p) ==
        measured->positions.end()) {
      print_error("bench", "--positions: " + std::to_string(p) + " was not measured in " + names +
                               " (hint: leave --positions out to fit every "
                               "position the file measured)");
      return kExitUsage;
    }
  measured->positions = parsed->bench.positions;

  // The configs: the file's, checked against any --config of the same label.
  auto& configs = parsed->bench.configs;
  std::vector<std::string> labels;
  for (const eval::BenchRow& row : measured->rows)
    if (row.kind == "config" && !row.detail.contains("bucket") &&
        std::find(labels.begin(), labels.end(), row.name) == labels.end())
      labels.push_back(row.name);
  for (const std::string& label : labels) {
    const auto row = std::find_if(
        measured->rows.begin(), measured->rows.end(),
        [&](const eval::BenchRow& r) { return r.name == label && r.detail.contains("config"); });
    auto given = std::find_if(configs.begin(), configs.end(),
                              [&](const auto& c) { return c.first == label; });
    if (row == measured->rows.end()) {
      if (given == configs.end())
        std::cerr << "bench: " << file << " measured " << label
                  << " without its config (a bench.json from before its rows carried one): "
                     "pass --config with that label to fit it\n";
      continue;
    }
    auto config = schedule::parse_config(row->detail.at("config"), &error);
    if (!config) {
      print_error("bench", file + ": the config of " + label + " does not parse: " + error);
      return kExitUsage;
    }
    for (const eval::BenchRow& r : measured->rows)
      if (r.name == label && r.detail.contains("config") &&
          r.detail["config"] != row->detail["config"]) {
        print_error("bench", file + " measured two configs under the label " + label +
                                 " (hint: fit the files one at a time)");
        return kExitUsage;
      }
    if (given == configs.end()) {
      configs.push_back({label, *config});
    } else if (schedule::to_json(given->second) != schedule::to_json(*config)) {
      print_error("bench", "--config " + label + " is not the config " + names +
                               " measured under that label (hint: leave that --config out to "
                               "fit the file's own)");
      return kExitUsage;
    }
  }
  // The kernel each config builds today against the one measured.
  nlohmann::json identity = nlohmann::json::object();
  for (const auto& [label, config] : configs) {
    std::vector<std::string> keys;  // every build key the label was measured with
    for (const eval::BenchRow& r : measured->rows)
      if (r.name == label && r.kind == "config" && r.detail.contains("kernel") &&
          r.detail["kernel"].contains("build_key")) {
        const std::string key = r.detail["kernel"]["build_key"].get<std::string>();
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
      }
    if (keys.empty()) continue;
    std::string why;
    const std::string now = kernel_key_on(parsed->shape, measured->device, config, &why);
    if (now.empty()) {
      identity[label] = "not checked: " + why;
      std::cerr << "bench: " << file << ": the kernel of " << label << " not checked: " << why
                << "\n";
      continue;
    }
    for (const std::string& then : keys)
      if (then != now) {
        print_error("bench", file + " measured " + label + " with kernel build " + then +
                                 "; this megasched builds " + now +
                                 " for it (the kernel sources or the config changed since)" +
                                 again);
        return kExitUsage;
      }
    identity[label] = "checked: " + now;
  }
  nlohmann::json explain;
  if (!write_fitted_plan(*measured, *parsed, o, &error,
                         {{"from_bench",
                           {{"files", o.from_bench},
                            {"device", measured->device},
                            {"kernel_identity", identity}}}},
                         &explain)) {
    print_error("bench", error);
    return kExitEnvironment;
  }
  if (o.format == "json") {
    print_json(explain);
  } else {
    for (const auto& b : explain["buckets"])
      std::cout << "[" << b["begin"].dump() << ", "
                << (b["end"].is_string() ? "max" : b["end"].dump()) << ") "
                << b["config"].get<std::string>() << " (measured fastest at "
                << (b["fastest_at"].empty() ? std::string("no measured position")
                                            : b["fastest_at"].dump())
                << ")\n";
    std::cout << "written: " << o.fit_plan << " and " << o.out << "/plan_fit.json\n";
  }
  return kExitOk;
}

/// `megasched bench`'s run once its flags are parsed: the exit code.
int run_bench_cli(const BenchOptionsCli& o) {
  if (!o.fit_plan.empty() && !o.generate.empty()) {
    print_error("bench",
                "--fit-plan fits a plan to single steps: run bench --positions ... --fit-plan "
                "FILE first, then bench --generate ... --plan FILE");
    return kExitUsage;
  }
  if (o.rounds > 1 && (!o.generate.empty() || !o.from_bench.empty())) {
    print_error("bench",
                "--rounds interleaves single-step rows on the GPU; --generate times every "
                "step of a generation once and --from-bench measures nothing (hint: drop "
                "--rounds, or run bench --positions ... --rounds N)");
    return kExitUsage;
  }
  if (!o.from_bench.empty()) {
    if (o.fit_plan.empty() || !o.generate.empty()) {
      print_error("bench",
                  "--from-bench fits a plan to a saved bench.json: pass --fit-plan FILE (and "
                  "no --generate)");
      return kExitUsage;
    }
    return run_fit_from_bench(o);
  }
  if (!o.generate.empty()) return run_generate_bench_cli(o);
  if (!o.plan.empty()) {
    print_error("bench", "--plan times a whole generation: pass --generate PROMPT_LEN:NEW_TOKENS");
    return kExitUsage;
  }
  std::string error;
  int code = kExitOk;
  const auto parsed = parse(o, &error, &code);
  if (!parsed) {
    print_error("bench", error);
    return code;
  }
  if (!eval::gpu_available(&error)) {
    print_error("bench", error +
                             "; bench measures on a GPU and predicts nothing (hint: `megasched "
                             "evaluate --device cpu` gives a config's predicted latency)");
    return kExitEnvironment;
  }
  auto weights = schedule::load_weights(o.model, o.seed, &error);
  auto target = weights ? eval::live_target(&error) : std::nullopt;
  if (!weights || !target) {
    print_error("bench", error);
    return weights ? kExitEnvironment : kExitUsage;
  }
  const auto result =
      eval::run_bench(*weights, *target, parsed->bench, &error, [](const std::string& line) {
        std::cerr << "bench: " << line << "\n" << std::flush;
      });
  if (!result) {
    print_error("bench", error);
    return kExitEnvironment;
  }
  if (!write_outputs(*result, o.out, &error)) {
    print_error("bench", error);
    return kExitEnvironment;
  }
  append_to_shared_corpus(*result, *parsed, o);
  if (!o.fit_plan.empty() && !write_fitted_plan(*result, *parsed, o, &error)) {
    print_error("bench", error);
    return kExitEnvironment;
  }
  if (o.format == "json")
    print_json(eval::bench_to_json(*result));
  else
    std::cout << eval::bench_table(*result) << "\nwritten: " << o.out << "/bench.{json,md,svg}\n";
  return kExitOk;
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
  cmd->add_option(
      "--generate", opt->generate,
      "Time whole greedy generations instead of single steps: PROMPT_LEN:NEW_TOKENS "
      "(repeatable or comma-separated, e.g. 128:4096,4096:512; PROMPT_LEN + "
      "NEW_TOKENS <= the model's positions): the plan, the configs, every baseline kind "
      "and the PyTorch peer, per-token p50/p90, tokens/s, and whether each row's "
      "tokens match the first megasched row's; generate.{json,md} in --out (every step "
      "timed once: --warmup and --iterations are for single steps)");
  cmd->add_option(
      "--plan", opt->plan,
      "With --generate: a plan file or name (best:MODEL:GPU) generated first, switching "
      "kernel at its bucket boundaries (--config also takes plans with --generate)");
  cmd->add_option("--torch-peer", opt->torch_peer,
                  "With --generate: bench/peers/torch_peer.py, run where python3 imports torch and "
                  "transformers (CUDA graph with eager ops and with torch.compile, transformers' "
                  "generate with a static cache); a missing script or package: a skipped row")
      ->capture_default_str();
  cmd->add_option("--out", opt->out,
                  "Folder for bench.json, bench.md and bench.svg (generate.{json,md} with "
                  "--generate)")
      ->capture_default_str();
  cmd->add_option("--format", opt->format, "stdout format: text (the table) or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "Untimed steps per row")
      ->check(integer_in(0, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--iterations", opt->iterations, "Timed steps per row (and round)")
      ->check(integer_in(1, kMaxInt))
      ->capture_default_str();
  cmd->add_option("--rounds", opt->rounds,
                  "Interleaved rounds: at each position every config and baseline row is "
                  "checked and timed once a round, in turn; its median and p10/p90 are over all "
                  "rounds' steps (detail round_medians_us), so drift between rows falls on all "
                  "alike (single steps only)")
      ->check(integer_in(1, 1000))
      ->capture_default_str();
  cmd->add_option("--fit-plan", opt->fit_plan,
                  "Write to this file the plan that runs at each position the config measured "
                  "fastest (the default and each --config; --positions must include 0): "
                  "boundaries where two configs' latencies cross between measured positions, "
                  "noise within --fit-margin no boundary; its reasoning in OUT/plan_fit.json");
  cmd->add_option("--from-bench", opt->from_bench,
                  "With --fit-plan: fit to the medians of bench.json files written earlier "
                  "instead of measuring (no GPU; repeatable, one model on one GPU, each config "
                  "at a position in one file): the configs their rows carry (or --config of the "
                  "same label), at their positions (or those of --positions measured); a config "
                  "whose kernel builds differently today is refused");
  cmd->add_option("--fit-margin", opt->fit_margin,
                  "With --fit-plan: a config already running keeps its place while within this "
                  "share of the fastest")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  add_seed_flag(cmd, &opt->seed);
  add_flywheel_flag(cmd, &opt->flywheel_dir);
  cmd->callback([&ctx, opt] { ctx.exit_code = run_bench_cli(*opt); });
}

}  // namespace megasched::harness
