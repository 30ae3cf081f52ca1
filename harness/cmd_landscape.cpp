// `megasched landscape record`: a measured (on a GPU) or predicted (on CPU) landscape of the knob
// space for `search-bench` to replay (search/landscape.h, search/landscape_recorder.h): a
// space-filling sample of --sample valid configs plus each --neighbours-of config and every
// one-knob neighbour of it, judged through the normal evaluator (one, or a worker per GPU with
// --gpus, or N CPU workers with --workers), one row appended per config. Running it again with
// the same --out resumes: configs the file holds are skipped. SIGINT / SIGTERM stop it after the
// configs in flight.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <iostream>

#include "eval/evaluate.h"
#include "flywheel/corpus.h"
#include "flywheel/shared_corpus.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "harness/verbs.h"
#include "schedule/lookup.h"
#include "schedule/named_configs.h"
#include "search/landscape_recorder.h"
#include "vm/cuda_runtime.h"

namespace megasched::harness {
namespace {

std::atomic<bool> g_landscape_stop{false};

void on_landscape_signal(int) { g_landscape_stop = true; }

struct RecordCommand {
  LoopCommand loop;  // the evaluator flags and where trials run (--gpus, --workers)
  int sample = 600;
  std::vector<std::string> neighbours_of;
  uint64_t seed = 0;
  std::string out;
  std::string note;
};

VerbResult failed(int code, const std::string& message) { return {code, nullptr, message}; }

VerbResult run_record(RecordCommand& c) {
  std::string error;
  if (!c.loop.trial.parse_positions(&error)) return failed(kExitUsage, error);
  if (const std::string why = check_worker_flags(c.loop); !why.empty())
    return failed(kExitUsage, why);
  std::string& device = c.loop.device;
  if (device == "auto" && c.loop.workers > 0) device = "cpu";
  if (device == "auto" && !c.loop.gpus.empty()) device = "gpu";
  if (device == "auto") device = eval::gpu_available(nullptr) ? "gpu" : "cpu";
  c.loop.trial.ev.device = device;
  const eval::EvaluatorOptions& ev = c.loop.trial.ev;
  auto shape = schedule::resolve_shape(ev.model, &error);
  if (!shape) return failed(kExitUsage, error);
  auto target = eval::resolve_target(ev.gpu, &error);
  if (!target) return failed(target_error_code(ev.gpu), error);
  std::vector<std::pair<std::string, schedule::ScheduleConfig>> named;
  for (const std::string& name : c.neighbours_of) {
    int config_code = kExitUsage;
    // A plan (best:MODEL:GPU) gives the config of the bucket that holds the timed position.
    auto config = read_config_arg(name, &error, &config_code, ev.timed_position);
    if (!config) return failed(config_code, "--neighbours-of: " + error);
    named.emplace_back(name, *config);
  }
  LoopBackend backend;
  if (std::optional<VerbResult> done = start_loop_backend(c.loop, ev.device, &backend))
    return *done;
  std::unique_ptr<search::CompileAhead> builds;
  c.loop.loop.progress = &std::cerr;  // where a warning that kernels cannot be built ahead goes
  if (std::optional<VerbResult> refused = start_compile_ahead(
          c.loop, ev.device, *shape, *target, &builds, backend.pool ? backend.pool->size() : 1))
    return *refused;
  const nlohmann::json identity =
      backend.pool ? backend.pool->identity(0) : backend.evaluator->identity();
  search::RecordOptions ro;
  search::LandscapeHeader& h = ro.header;
  h.model = shape->name;
  // The registry's name of the GPU (h200), whether --gpu named it or auto read the live device
  // ("NVIDIA H200"): one GPU's landscape is one file and one header either way.
  h.target = flywheel::target_file_key(target->name);
  h.device = ev.device;
  h.device_name = identity.value("device_name", "");
  if (h.device_name.empty() && ev.device == "gpu") {
    // The trial's identity names no GPU; the header says which one measured the rows.
    std::string why;
    if (const std::optional<vm::DeviceInfo> info = vm::device_info(&why))
      h.device_name = info->name;
  }
  h.position = ev.timed_position;
  h.latency_kind = ev.device == "gpu" ? "measured-gpu" : "predicted";
  h.versions = eval::trial_versions(identity);
  h.build = h.versions.value("build", "");
  h.date = flywheel::utc_timestamp(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  h.commit = working_commit();
  h.note = c.note;
  ro.path = c.out.empty() ? "search/landscapes/" + search::landscape_file_name(h) : c.out;
  ro.progress = &std::cerr;
  ro.flywheel_dir = c.loop.flywheel_dir;
  ro.shape = *shape;
  ro.stop = &g_landscape_stop;
  ro.compile_pool = builds.get();
  ::signal(SIGINT, on_landscape_signal);
  ::signal(SIGTERM, on_landscape_signal);
  const auto plan = search::plan_landscape(*shape, *target, c.sample, named, c.seed);
  const search::RecordResult r = backend.pool
                                     ? search::record_landscape_on_pool(*backend.pool, plan, ro)
                                     : search::record_landscape(*backend.evaluator, plan, ro);
  if (!r.ok) return failed(r.bad_arguments ? kExitUsage : kExitEnvironment, r.error);
  nlohmann::json doc = {{"path", ro.path},      {"planned", r.planned},
                        {"already", r.already}, {"recorded", r.recorded},
                        {"lost", r.lost},       {"latency_kind", h.latency_kind},
                        {"build", h.build},     {"stopped", g_landscape_stop.load()}};
  doc["compile_ahead"] = builds ? builds->summary() : nlohmann::json(nullptr);
  return {kExitOk, doc, ""};
}

}  // namespace

void add_landscape_command(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("landscape",
                                 "Record a landscape of the knob space for "
                                 "`search-bench` (subcommand: record)");
  cmd->require_subcommand(1);
  auto c = std::make_shared<RecordCommand>();
  auto* rec = cmd->add_subcommand(
      "record",
      "Judge a space-filling sample of valid configs and the one-knob neighbours of "
      "named configs; append one row each to a landscape file (resumable)");
  add_model_flag(rec, &c->loop.trial.ev.model);
  add_gpu_flag(rec, &c->loop.trial.ev.gpu);
  add_device_flag(rec, &c->loop.device,
                  "cpu (predicted latency), gpu (measured), or auto (gpu when one is usable)",
                  {"cpu", "gpu", "auto"});
  add_positions_flag(rec, &c->loop.trial.positions);
  add_timed_position_flag(rec, &c->loop.trial.ev.timed_position);
  add_seed_flag(rec, &c->loop.trial.ev.seed, "--weight-seed");
  // A landscape row holds the kernel's latency alone: no baseline is timed unless asked for.
  add_baselines_flag(rec, &c->loop.trial.ev.gpu_options.baselines, "none");
  add_stop_slower_flag(rec, &c->loop.trial.ev.stop_slower, c->loop.trial.ev.stop_slower);
  rec->add_option("--sample", c->sample, "Configs in the space-filling sample")
      ->check(integer_in(0, 1000000))
      ->capture_default_str();
  rec->add_option("--neighbours-of", c->neighbours_of,
                  "A config (file or a name such as best:llama-1b:h100) recorded with every "
                  "one-knob neighbour; repeatable");
  rec->add_option("--seed", c->seed, "Sample seed")
      ->check(unsigned_integer())
      ->capture_default_str();
  rec->add_option("--out", c->out,
                  "Landscape file (default: search/landscapes/<model>.<target>.p<position>."
                  "<build>.landscape.jsonl); an existing one is resumed");
  rec->add_option("--note", c->note, "Free text for the header (how it was made)");
  add_flywheel_flag(rec, &c->loop.flywheel_dir);
  rec->add_option("--gpus", c->loop.gpus, "One worker per GPU: all, or GPU indexes (0,1,...)")
      ->type_name("all|LIST");
  rec->add_option("--workers", c->loop.workers, "CPU trials in this many worker processes")
      ->check(integer_in(1, 4096));
  add_compile_threads_flag(rec, &c->loop.compile_threads);
  rec->add_option("--trial-timeout", c->loop.trial_timeout_s,
                  "Seconds a worker trial may take before it is killed (timeout)")
      ->check(finite_number_in(0.0, 7 * 24 * 3600.0, /*min_exclusive=*/true))
      ->capture_default_str();
  rec->callback([&ctx, c] { ctx.exit_code = finish_verb("landscape record", run_record(*c)); });
}

}  // namespace megasched::harness
