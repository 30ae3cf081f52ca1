// search/mpi_pool.h over MPI (built with -DMEGASCHED_MPI=ON). The C API only: without these
// OpenMPI's and MPICH's mpi.h pull in their C++ bindings, which need a library this does not link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>

#include "eval/device.h"
#include "search/child_process.h"
#include "search/mpi_pool.h"
#include "search/worker_pool.h"

namespace megasched::search {
namespace {

using nlohmann::json;

constexpr int kTagHello = 1;
constexpr int kTagTrial = 2;
constexpr int kTagVerdict = 3;
constexpr int kTagStop = 4;

void send_json(const json& message, int rank, int tag) {
  const std::string text = message.dump(-1, ' ', false, json::error_handler_t::replace);
  MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, rank, tag, MPI_COMM_WORLD);
}

// A message waiting from `source` (MPI_ANY_SOURCE: anyone) with `tag` (MPI_ANY_TAG), received;
// nullopt when none is there now. *from and *tag_out say whose and which.
std::optional<std::string> try_receive(int source, int tag, int* from, int* tag_out) {
  int flag = 0;
  MPI_Status status;
  MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, &status);
  if (!flag) return std::nullopt;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string text(static_cast<size_t>(count), '\0');
  MPI_Recv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
  if (from) *from = status.MPI_SOURCE;
  if (tag_out) *tag_out = status.MPI_TAG;
  return text;
}

// Polling, not a blocking receive: OpenMPI's blocking calls spin a core at 100%, and the idle
// ranks share the host with the ranks that evaluate.
void nap() {
  const timespec ms{0, 1000000};
  nanosleep(&ms, nullptr);
}

// The i-th worker rank on this host (rank 0 excluded), from a split of the host's ranks.
int worker_index_on_host(int rank) {
  MPI_Comm host, workers;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
  MPI_Comm_split(host, rank == 0 ? MPI_UNDEFINED : 0, rank, &workers);
  int index = 0;
  if (workers != MPI_COMM_NULL) {
    MPI_Comm_rank(workers, &index);
    MPI_Comm_free(&workers);
  }
  MPI_Comm_free(&host);
  return index;
}

// This rank's worker, pinned to its GPU; nullptr with *error when it cannot start.
std::unique_ptr<WorkerEvaluator> start_rank_worker(const MpiLoopOptions& options, int rank,
                                                   int index, std::string* label,
                                                   std::string* error) {
  WorkerOptions w = options.worker;
  *label = "rank" + std::to_string(rank) + ":cpu@" + host_name();
  if (options.gpu) {
    std::string why;
    bool environment = false;
    const auto gpus = parse_gpu_list("all", &why, &environment);
    if (!gpus) {
      *error = "rank " + std::to_string(rank) + " on " + host_name() + ": " + why;
      return nullptr;
    }
    if (index >= static_cast<int>(gpus->size())) {
      *error = "rank " + std::to_string(rank) + " is worker rank " + std::to_string(index) +
               " on " + host_name() + ", which has " + std::to_string(gpus->size()) +
               " GPUs: start at most one worker rank per GPU (plus rank 0)";
      return nullptr;
    }
    w.command = pinned_command(w.command, (*gpus)[index]);
    *label = "rank" + std::to_string(rank) + ":gpu" + (*gpus)[index] + "@" + host_name();
  }
  auto worker = std::make_unique<WorkerEvaluator>(w);
  if (!worker->start(error)) return nullptr;
  return worker;
}

// A worker rank: hello, then trials until stop. Returns the rank's exit code.
int serve_rank(const MpiLoopOptions& options, int rank, int index) {
  // Rank 0 decides when the job ends (a signal mpirun forwards stops it after its trials in
  // flight); a rank whose parent (mpirun's daemon) is gone has nobody left to answer.
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  const pid_t parent = ::getppid();
  std::string label, error;
  std::unique_ptr<WorkerEvaluator> worker = start_rank_worker(options, rank, index, &label, &error);
  send_json({{"ready", worker != nullptr},
             {"identity", worker ? worker->identity() : json::object()},
             {"timed_on", label},
             {"error", error}},
            0, kTagHello);
  for (;;) {
    int tag = 0;
    std::optional<std::string> text = try_receive(0, MPI_ANY_TAG, nullptr, &tag);
    if (!text) {
      if (::getppid() != parent) return 1;
      nap();
      continue;
    }
    if (tag == kTagStop) break;
    if (tag != kTagTrial || !worker) continue;
    const json request = json::parse(*text, nullptr, false);
    json reply = {{"ticket", request.value("ticket", uint64_t{0})}};
    std::string why;
    const auto config = schedule::parse_config(request.value("config", json::object()), &why);
    if (!config) {
      reply["verdict"] = eval::to_json(eval::Verdict{});
      reply["harness_failure"] = "rank " + std::to_string(rank) + ": bad trial message: " + why;
    } else {
      reply["verdict"] = eval::to_json(worker->evaluate(*config));
      reply["harness_failure"] = worker->harness_failure();
    }
    send_json(reply, 0, kTagVerdict);
  }
  return worker ? 0 : 3;
}

// Rank 0's view of the worker ranks: slot i is rank i + 1.
class MpiPool : public TrialPool {
 public:
  MpiPool(const MpiLoopOptions& options, int ranks)
      : options_(options), slots_(static_cast<size_t>(ranks - 1)) {}

  // Collects the hellos; false when no rank is ready. *problems names the ranks that are not.
  bool collect_hellos(std::string* problems) {
    const double deadline = monotonic_seconds() + options_.worker.start_timeout_s + 30;
    size_t heard = 0;
    while (heard < slots_.size() && monotonic_seconds() < deadline) {
      int from = 0;
      std::optional<std::string> text = try_receive(MPI_ANY_SOURCE, kTagHello, &from, nullptr);
      if (!text) {
        nap();
        continue;
      }
      Slot& s = slots_[from - 1];
      const json hello = json::parse(*text, nullptr, false);
      s.heard = true;
      ++heard;
      s.label = hello.value("timed_on", "rank" + std::to_string(from));
      s.identity = hello.value("identity", json::object());
      s.usable = hello.value("ready", false);
      if (!s.usable)
        *problems += (problems->empty() ? "" : "; ") + hello.value("error", std::string("?"));
    }
    int usable = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].heard) {
        slots_[i].silent = true;
        slots_[i].label = "rank" + std::to_string(i + 1);
        *problems += (problems->empty() ? "" : "; ") + std::string("rank ") +
                     std::to_string(i + 1) + " sent no hello";
      }
      usable += slots_[i].usable;
    }
    // Slot 0 is the primary: the loop asks it for identities and ids, so it must be a ready one.
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].usable) {
        primary_ = static_cast<int>(i);
        break;
      }
    return usable > 0;
  }

  int size() const override { return static_cast<int>(slots_.size()); }
  json identity(int slot) const override {
    return slots_[slot].usable ? slots_[slot].identity : slots_[primary_].identity;
  }
  std::string label(int slot) const override { return slots_[slot].label; }
  std::string schedule_id(int slot, const schedule::ScheduleConfig& config) const override {
    return schedule_id_for_identity(config, identity(slot), options_.timed_position,
                                    options_.objective);
  }
  bool alive(int slot) const override { return slots_[slot].usable && !slots_[slot].silent; }

  void submit(int slot, uint64_t ticket, const schedule::ScheduleConfig& config) override {
    Slot& s = slots_[slot];
    s.ticket = ticket;
    s.busy = true;
    s.deadline = monotonic_seconds() + options_.worker.trial_timeout_s +
                 options_.worker.start_timeout_s + options_.rank_timeout_s;
    send_json({{"ticket", ticket}, {"config", schedule::to_json(config)}}, slot + 1, kTagTrial);
  }

  std::optional<PoolEvent> wait(double timeout_s) override {
    const double until = monotonic_seconds() + timeout_s;
    for (;;) {
      int from = 0;
      if (std::optional<std::string> text =
              try_receive(MPI_ANY_SOURCE, kTagVerdict, &from, nullptr)) {
        Slot& s = slots_[from - 1];
        if (s.silent || !s.busy) continue;  // a late answer from a rank given up on
        s.busy = false;
        const json reply = json::parse(*text, nullptr, false);
        PoolEvent event;
        event.slot = from - 1;
        event.ticket = s.ticket;
        try {
          event.verdict = eval::verdict_from_json(reply.at("verdict"));
          event.harness_failure = reply.value("harness_failure", "");
        } catch (const json::exception& e) {
          event.harness_failure = s.label + " sent a malformed verdict: " + e.what();
        }
        return event;
      }
      const double now = monotonic_seconds();
      for (size_t i = 0; i < slots_.size(); ++i) {
        Slot& s = slots_[i];
        if (!s.busy || s.silent || now < s.deadline) continue;
        s.silent = true;
        s.busy = false;
        PoolEvent event;
        event.slot = static_cast<int>(i);
        event.ticket = s.ticket;
        event.lost = true;
        event.lost_reason = s.label + " sent no answer in time (trial timeout + start timeout + " +
                            std::to_string(static_cast<int>(options_.rank_timeout_s)) +
                            " s --rank-timeout)";
        return event;
      }
      if (now >= until) return std::nullopt;
      nap();
    }
  }

  // Stop to every rank that answers; true when one stopped answering.
  bool stop_all() {
    bool lost = false;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].silent) {
        lost = true;
        continue;
      }
      send_json(json::object(), static_cast<int>(i) + 1, kTagStop);
    }
    return lost;
  }

 private:
  struct Slot {
    bool heard = false, usable = false, silent = false, busy = false;
    std::string label;
    json identity = json::object();
    uint64_t ticket = 0;
    double deadline = 0;
  };
  MpiLoopOptions options_;
  std::vector<Slot> slots_;
  int primary_ = 0;
};

}  // namespace

bool mpi_built() { return true; }

std::unique_ptr<TrialPool> start_mpi_loop(const MpiLoopOptions& options, std::string* error,
                                          std::optional<int>* served, bool* usage) {
  served->reset();
  *usage = false;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(nullptr, nullptr);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int index = worker_index_on_host(rank);
  if (ranks < 2) {
    MPI_Finalize();
    *usage = true;
    *error =
        "--mpi needs at least 2 ranks (rank 0 runs the loop, the others the trials): "
        "mpirun -np 3 megasched loop --mpi ...";
    return nullptr;
  }
  if (rank != 0) {
    *served = serve_rank(options, rank, index);
    MPI_Finalize();
    return nullptr;
  }
  auto pool = std::make_unique<MpiPool>(options, ranks);
  if (!pool->collect_hellos(error)) {
    *error = "no worker rank is ready: " + *error;
    if (pool->stop_all()) {  // a rank that sent nothing would hold MPI_Finalize forever
      std::fprintf(stderr, "megasched loop: %s\n", error->c_str());
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Finalize();
    return nullptr;
  }
  return pool;
}

void finish_mpi_loop(TrialPool* pool, int exit_code) {
  auto* mpi = dynamic_cast<MpiPool*>(pool);
  if (!mpi) return;
  if (mpi->stop_all()) MPI_Abort(MPI_COMM_WORLD, exit_code ? exit_code : 4);
  MPI_Finalize();
}

}  // namespace megasched::search
