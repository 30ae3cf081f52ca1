// The verbs the command line (harness/cmd_*.cpp) and the MCP server (harness/mcp_tools.cpp) share.
// Each takes its options, already parsed, and gives a VerbResult: the JSON document the CLI prints
// on stdout, the exit code it returns (the kExit* codes below, HARNESS.md section 6) and the one
// line it prints on stderr. Nothing here prints to stdout or reads stdin, so the MCP server, whose
// stdout is the protocol, calls the same code as the CLI.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"
#include "flywheel/shared_corpus.h"
#include "harness/trial_flags.h"
#include "schedule/config.h"
#include "schedule/plan.h"
#include "schedule/program.h"
#include "search/compile_ahead.h"
#include "search/loop.h"
#include "search/strategy.h"
#include "search/trial_pool.h"

namespace megasched::harness {

// Exit codes shared by every subcommand (HARNESS.md documents them).
constexpr int kExitOk = 0;           // success (evaluate: valid and correct)
constexpr int kExitFailure = 1;      // the trial ran but failed: rejected / incorrect / unsafe
constexpr int kExitUsage = 2;        // bad arguments, bad config, unknown model or target
constexpr int kExitEnvironment = 3;  // missing GPU / file / toolkit

/// What one verb came to.
struct VerbResult {
  int exit_code = kExitOk;
  nlohmann::json document;  // what the CLI prints on stdout; null when the verb failed first
  std::string message;      // what the CLI prints on stderr ("" when nothing went wrong)
};

/// `megasched evaluate`'s exit code for a verdict: 0 only when valid and correct.
int verdict_exit_code(const eval::Verdict& verdict);

/// `propose`: the incumbent, whether it fits, and the search space of `model` on `gpu`.
VerbResult propose_incumbent(const std::string& model, const std::string& gpu,
                             const schedule::ScheduleConfig& incumbent);

/// `validate`: what to prove safe. One of `config` or `plan` (lowered for model and gpu), `program`
/// (a program JSON, named `program_label` in messages) or random_configs > 0.
struct ValidateRequest {
  std::string model = "toy";
  bool model_given = false;  // a program is checked against `model` when given, else the one it
                             // names when that is a preset or a checkpoint (else judged alone)
  std::string gpu = "h100";
  std::optional<schedule::ScheduleConfig> config;  // nullopt: the default config
  std::optional<schedule::Plan> plan;        // instead of config: every bucket's config lowered and
                                             // validated, diagnostics per bucket (schedule/plan.h)
  std::optional<schedule::Program> program;  // read by the caller (a file, a tool argument)
  std::string program_label;
  int random_configs = 0;  // > 0: lower and validate this many random configs instead
  uint64_t seed = 1;       // of the random configs
  bool kernel = false;     // also build the megakernel with NVRTC (no GPU) and report its
                           // resources: registers, spills, stack (a config or a program only)
};
VerbResult validate_schedule(const ValidateRequest& request);

/// `report`: the report document of results.tsv and corpus.jsonl, filtered to one model and
/// target when given; the HTML page is written to html_path unless it is empty.
struct ReportRequest {
  std::string results_path = "workspace/results.tsv";
  std::string corpus_path = "workspace/corpus.jsonl";
  std::string html_path = "workspace/report.html";
  std::string model;   // "": every model
  std::string target;  // "": every target
  std::string plan;    // the plan whose buckets the report plots over positions (read_plan_arg);
                       // "": the newest runs/<run id>/plan.json beside results_path, if any
};
/// A bad or unreadable plan: its exit code (2 or 3) and a message with a hint.
VerbResult build_report_document(const ReportRequest& request);

/// `loop`: the flags of one loop, and the hooks of whoever runs it.
struct LoopCommand {
  LoopCommand() {  // --baselines auto, --stop-slower 2 (HARNESS.md section 2)
    trial.ev.gpu_options.baselines = {"auto"};
    trial.ev.stop_slower = 2.0;
  }
  TrialFlags trial;
  search::LoopOptions loop;  // its stop, cancel, progress and on_trial hooks are the caller's
  search::StrategyOptions strategy;
  std::string device = "auto";  // cpu, gpu or auto (gpu when one is usable)
  bool isolate = false;         // CPU trials in a worker process too (GPU trials always are)
  double trial_timeout_s = 300;
  std::string start;  // trial 0's config as `--start` takes it; "" for none
  std::optional<schedule::ScheduleConfig> start_config;  // or already parsed
  std::string executable;  // the megasched binary that runs `worker`; "": this one
  // Many workers at once (run_loop_on_pool): one per GPU, N CPU slots, or the ranks of an MPI job.
  std::string gpus;            // --gpus: "all" or "0,1,..": one worker per GPU; "": none
  int workers = 0;             // --workers N: N CPU workers (--device cpu); 0: none
  bool mpi = false;            // --mpi: under mpirun, rank 0 runs the loop, the others trials
  double rank_timeout_s = 60;  // --rank-timeout: an MPI rank's silence before it counts as lost
  // Compile-ahead (search/compile_ahead.h): proposals kept queued with their kernels building
  // (-1: kDefaultCompileAhead on a GPU device, 0 on a CPU one; 0: off) and the CPU threads that
  // build them (0: search::default_compile_threads()).
  int compile_ahead = -1;
  int compile_threads = 0;
  // The keep rule's --min-gain and --confirm (search/loop.h): -1 takes the device's default,
  // kGpuMinGain and kGpuConfirm on a GPU device, LoopOptions' 1% and no rounds on a CPU one
  // (resolve_keep_rule).
  double min_gain = -1;
  int confirm = -1;
  std::string objective_flag = "--objective";  // how messages name trial.objective ("objective"
                                               // for the MCP tool)
  // The shared corpus (flywheel/shared_corpus.h): where the GPU trials go and what a prior or
  // guided strategy warm-starts from ("none": off), and whether rows of other kernel builds train.
  std::string flywheel_dir = flywheel::default_flywheel_dir();  // --flywheel
  bool corpus_stale = false;                                    // --corpus-stale include
  /// Called once the evaluator and the strategy are ready, right before the first trial (the
  /// CLI installs its signal handlers there).
  std::function<void()> on_start;
  /// Called with the loop's result once it has run (rank 0 of an MPI job too, before the job
  /// ends); the CLI writes the run directory there.
  std::function<void(const VerbResult&)> on_end;
};
/// Where a loop's trials run: one evaluator, or a pool of workers (--gpus, --workers, --mpi).
struct LoopBackend {
  std::unique_ptr<eval::Evaluator> evaluator;
  std::unique_ptr<search::TrialPool> pool;
  std::optional<int> served;  // an MPI rank other than 0: its exit code after serving trials
  std::string warning;        // workers that did not come up while others did
};
/// The multi-worker flags of `command` checked against each other and the device; "" when they
/// agree.
std::string check_worker_flags(const LoopCommand& command);
/// Starts what evaluates the trials of `command` on `device` ("cpu" | "gpu", resolved): a
/// VerbResult when that fails (or when an MPI rank other than 0 is done serving). Also used by
/// `landscape record` (harness/cmd_landscape.cpp).
std::optional<VerbResult> start_loop_backend(LoopCommand& command, const std::string& device,
                                             LoopBackend* backend);

/// Proposals a GPU loop keeps queued with their kernels building (a pool: tickets per worker),
/// unless --compile-ahead says. On one H200 (BENCHMARKS.md, "The search's throughput") a cold
/// search ran 58.5 trials a minute at 4, 119.9 at 8 and 145.8 at 16: at 4 its trials waited 35 s
/// of the minute for kernels, at 16 under 1 s. Two H200s at 16 per worker ran 2.20x one H200 at 16
/// in the same call (309.4 against 140.4 trials a minute), although a pool's queued tickets run
/// even when a keep made them stale (HARNESS.md section 13).
constexpr int kDefaultCompileAhead = 16;

/// The keep rule a GPU loop takes unless --min-gain / --confirm say: gains of half a percent,
/// those inside the timings' 2-sigma margin settled by three back-to-back rounds. Two cold
/// 4.5-minute loops from the default config on two H200s of one host, this rule against 1% with
/// no rounds, twice with the GPUs swapped (BENCHMARKS.md, "The search of record"): this rule's
/// best ran 1.3% and 0.9% faster in the bench that followed each, both within 0.4% of the record.
/// On a CPU device the latencies are predictions without noise: 1% (LoopOptions) and no rounds,
/// which only measured latencies take.
constexpr double kGpuMinGain = 0.005;
constexpr int kGpuConfirm = 3;

/// Sets command.loop's min_gain and confirm for `device` ("cpu" | "gpu", resolved): the flags'
/// values when given, else kGpuMinGain and kGpuConfirm on a GPU and LoopOptions' on a CPU.
void resolve_keep_rule(LoopCommand& command, const std::string& device);

/// The compile-ahead pool of a loop or landscape recording on `device` ("cpu" | "gpu", resolved)
/// into *pool: none on a CPU device (a refusal, exit 2, when --compile-ahead or
/// --compile-threads asked for one) or with --compile-ahead 0, none with a warning on `progress`
/// when this binary cannot build kernels ahead (an exit 2 when --compile-ahead asked for it).
/// Sets command.loop's compile_ahead and compile_pool.
/// Its threads: --compile-threads, else search::default_compile_threads(workers), `workers` the
/// trial slots the loop runs (GPUs of a pool; 1 without one); its depth: --compile-ahead, else
/// kDefaultCompileAhead (a pool: per worker).
std::optional<VerbResult> start_compile_ahead(LoopCommand& command, const std::string& device,
                                              const schedule::ModelShape& shape,
                                              const schedule::GpuTarget& target,
                                              std::unique_ptr<search::CompileAhead>* pool,
                                              int workers);
/// What a prior or guided strategy of `command` trains on (flywheel::training_records): the records
/// of its own corpus on this target and device, and the shared corpus's rows of this target and
/// model, of the current kernel build unless command.corpus_stale. *note: one line saying so.
std::vector<flywheel::CorpusRecord> loop_training(const LoopCommand& command,
                                                  const flywheel::TrainingRequest& request,
                                                  std::string* note);

/// Runs the loop the flags describe. document: the summary (also after a log error, exit 3).
/// Under --mpi, a rank other than 0 serves trials and returns a null document.
VerbResult run_loop_command(LoopCommand& command);

/// `registry list`: every entry of the verified registry at `path` and every corrupt line (exit 1
/// when there is one; the good entries are listed all the same). Defined in cmd_registry.cpp.
VerbResult registry_list(const std::string& path);
/// `registry show ID`: the entry called `id` (exit 2 naming the nearest id when there is none).
VerbResult registry_show(const std::string& path, const std::string& id);

/// This executable's path (for the worker's command line); "megasched" when it cannot be read.
std::string this_executable();

/// The shell command that starts `megasched worker` with these trial flags.
std::string worker_command(const std::string& executable, const TrialFlags& flags);

}  // namespace megasched::harness
