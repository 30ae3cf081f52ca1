#include "harness/plan_loop.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "flywheel/run_dir.h"
#include "harness/cli_util.h"
#include "harness/run_record.h"
#include "schedule/format.h"
#include "schedule/lookup.h"
#include "search/plan_search.h"

namespace megasched::harness {
namespace {

using nlohmann::json;

VerbResult refuse(const std::string& message) { return {kExitUsage, nullptr, message}; }

/// The flags a plan search cannot take, or "".
std::string conflicting_flags(const LoopCommand& c, const PlanLoopFlags& f) {
  if (!f.buckets.empty() && !f.plan.empty())
    return "--plan-buckets and --plan both give the buckets; give one (hint: --plan FILE starts "
           "from that plan's buckets and configs)";
  if (!c.trial.objective.empty() || !c.trial.ev.objective.empty())
    return "--objective with a plan search: each bucket is timed at its own midpoint (hint: drop "
           "--objective; choose the buckets with --plan-buckets)";
  if (c.trial.ev.timed_position != 0)
    return "--timed-position with a plan search: each bucket is timed at its own midpoint (hint: "
           "drop --timed-position)";
  if (c.loop.resume)
    return "--resume with a plan search: each bucket is a run of its own (hint: run the same "
           "command again; every trial the logs know is adopted or skipped, not re-run)";
  if (c.mpi) return "--mpi with a plan search is not supported (hint: --gpus or --workers)";
  if (c.loop.warm_start)
    return "--warm-start with a plan search: every bucket already starts from the best config "
           "known at its timed position (hint: drop --warm-start)";
  if (!f.plan.empty() && (!c.start.empty() || c.start_config))
    return "--start with --plan: the plan's configs are the buckets' seeds; give one";
  return "";
}

/// The buckets (and with --plan their seeds) for a model of `max_seq` positions.
std::optional<schedule::Plan> buckets_of(const PlanLoopFlags& f, const schedule::ModelShape& shape,
                                         std::string* error, int* code) {
  *code = kExitUsage;
  if (!f.plan.empty()) {
    auto plan = read_plan_arg(f.plan, error, code);
    if (!plan) {
      *error = "--plan " + f.plan + ": " + *error;
      return std::nullopt;
    }
    if (!schedule::check_plan_covers(*plan, shape.max_seq, error)) {
      *error = "--plan " + f.plan + " does not fit model " + shape.name + ": " + *error;
      return std::nullopt;
    }
    return plan;
  }
  const auto list = schedule::parse_int_list(f.buckets);
  if (!list) {
    *error = "--plan-buckets '" + f.buckets +
             "' is not a list of positions such as 0,512,2048 (hint: each bucket's first position, "
             "ascending from 0)";
    return std::nullopt;
  }
  return search::plan_from_boundaries(*list, shape.max_seq, shape.name, error);
}

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int p : v) out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}

/// One bucket's loop: the command's flags, timed at the bucket's position, checked inside it.
search::LoopResult run_bucket(const LoopCommand& base, const search::BucketSearch& s) {
  LoopCommand c = base;
  c.trial.ev.timed_position = s.timed_position;
  c.trial.positions = join(s.positions);
  c.loop.budget = s.budget;
  c.loop.minutes = s.minutes;
  // Trial 0: the best known at the position, else s.start (LoopOptions::start as the warm start's
  // fallback; the --start flag itself is not combined with --warm-start).
  c.loop.warm_start = true;
  c.start.clear();
  c.start_config.reset();
  c.loop.start = s.start;
  if (s.index > 0) c.on_start = nullptr;  // the CLI's signal handlers: once
  c.on_end = nullptr;                     // the plan's run directory, not one per bucket
  const VerbResult r = run_loop_command(c);
  search::LoopResult out;
  out.summary = r.document;
  out.ok = r.exit_code == kExitOk || r.exit_code == kExitFailure;
  out.bad_arguments = r.exit_code == kExitUsage;
  out.error = r.message;
  return out;
}

/// summary.json and plan.json in <runs_dir>/<run id>/.
void write_plan_run_dir(const LoopCommand& c, const PlanLoopFlags& f, double start_s,
                        VerbResult* r) {
  std::string root = f.runs_dir;
  if (root.empty()) {
    const std::filesystem::path parent = std::filesystem::path(c.loop.results_path).parent_path();
    root = (parent.empty() ? std::filesystem::path("runs") : parent / "runs").string();
  }
  std::string error;
  auto run = flywheel::open_run_dir(root, r->document["run_id"].get<std::string>(), "loop",
                                    command_line(), start_s, &error);
  if (run && !r->document["plan"].is_null()) {
    r->document["plan_file"] = (std::filesystem::path(run->path) / "plan.json").string();
    if (!flywheel::write_run_json(*run, "plan.json", r->document["plan"], &error))
      r->document.erase("plan_file");
  }
  if (!run || !error.empty() ||
      !flywheel::write_run_json(*run, "summary.json", r->document, &error)) {
    print_error("loop", "run directory: " + error);
    return;
  }
  std::fprintf(stderr, "megasched loop: plan run %s (%s)\n", run->run_id.c_str(),
               run->path.c_str());
  end_run(*run, r->exit_code);
}

}  // namespace

VerbResult run_plan_loop_command(LoopCommand& command, const PlanLoopFlags& flags) {
  if (const std::string why = conflicting_flags(command, flags); !why.empty()) return refuse(why);
  std::string error;
  if (!command.trial.parse_positions(&error)) return refuse(error);
  auto shape = schedule::resolve_shape(command.trial.ev.model, &error);
  if (!shape) return refuse(error);
  int code = kExitUsage;
  const auto buckets = buckets_of(flags, *shape, &error, &code);
  if (!buckets) return {code, nullptr, error};
  search::PlanSearchOptions o;
  o.buckets = *buckets;
  o.use_configs = !flags.plan.empty();
  if (!command.start.empty() && !command.start_config) {
    // Bucket 0's seed: a plan's config at position 0.
    command.start_config = read_config_arg(command.start, &error, &code, 0);
    if (!command.start_config) return {code, nullptr, "--start: " + error};
  }
  o.start = command.start_config;
  o.max_seq = shape->max_seq;
  o.positions = command.trial.ev.positions;
  o.budget = command.loop.budget;
  o.minutes = command.loop.minutes;
  o.stop = command.loop.stop;
  o.cancel = command.loop.cancel;
  o.progress = command.loop.progress;
  const double start_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  json identity = {{"target", nullptr}, {"device", nullptr}};  // the first bucket loop's
  const search::PlanSearchResult found = search::search_plan(o, [&](const search::BucketSearch& s) {
    search::LoopResult loop = run_bucket(command, s);
    if (identity["target"].is_null() && loop.summary.is_object())
      identity = {{"target", loop.summary.value("target", json(nullptr))},
                  {"device", loop.summary.value("device", json(nullptr))}};
    return loop;
  });
  json doc = found.summary;
  doc["run_id"] = flywheel::new_run_id(start_s);
  doc["model"] = shape->name;
  doc["target"] = identity["target"];
  doc["device"] = identity["device"];
  doc["budget"] = command.loop.budget;
  doc["budget_split"] = "even: each bucket budget / buckets trials (the remainder to the first)";
  doc["timed_positions"] = "each bucket's midpoint (begin + end - 1) / 2";
  doc["seeds"] =
      std::string("the best config known at each bucket's timed position, else ") +
      (flags.plan.empty() ? "bucket 0: --start or the default, then the left neighbour's winner"
                          : "the starting plan's config of the bucket");
  int evaluations = 0;
  for (const json& b : doc["buckets"]) evaluations += b.value("evaluations", json(0)).get<int>();
  doc["evaluations"] = evaluations;
  VerbResult r{kExitOk, doc, ""};
  if (!found.ok) {
    r.exit_code = found.bad_arguments ? kExitUsage : kExitEnvironment;
    r.message = found.error;
  } else if (!found.plan) {
    r.exit_code = kExitFailure;
    r.message = "no plan: " + doc.value("incomplete", std::string("a bucket has no winner"));
  }
  if (found.ok && !flags.no_run_dir) write_plan_run_dir(command, flags, start_s, &r);
  return r;
}

}  // namespace megasched::harness
