// `mpirun -np N megasched loop --mpi ...`: one search over the ranks of an MPI job (OpenMPI).
// Rank 0 owns the strategy, the results file, the corpus and their lock: it runs the loop
// (run_loop_on_pool) over an MpiPool whose slots are the other ranks. Every other rank owns one
// GPU of its host (the i-th worker rank on a host takes the host's i-th GPU, as
// CUDA_VISIBLE_DEVICES lists them when set) or, with --device cpu, one CPU trial slot; it runs the
// trials rank 0 sends it through its own `megasched worker` child (search/worker_evaluator.h), so
// a crashing or hanging trial kills only that child, and writes no file.
//
// Messages (JSON text, MPI_CHAR, MPI_COMM_WORLD): a worker rank sends rank 0 one hello
// {"ready", "identity", "timed_on", "error"}, then answers each trial {"ticket", "config"} with
// {"ticket", "verdict", "harness_failure"} until rank 0 sends stop. A rank that sends no answer
// within the trial timeout + the worker's start timeout + --rank-timeout is reported lost (its
// trial requeued once by the loop) and gets no more trials; as MPI_Finalize would wait for it
// forever, rank 0 then ends the job with MPI_Abort after the summary (exit code 4 from mpirun).
//
// Built only with -DMEGASCHED_MPI=ON (search/mpi_pool_mpi.cpp, CMake's FindMPI); otherwise
// search/mpi_pool_nompi.cpp says how to get it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "search/trial_pool.h"
#include "search/worker_evaluator.h"

namespace megasched::search {

struct MpiLoopOptions {
  WorkerOptions worker;        // the worker command (not yet pinned to a GPU) and its timeouts
  bool gpu = false;            // one GPU per worker rank; false: one CPU trial slot
  double rank_timeout_s = 60;  // silence past the trial and start timeouts before a rank is lost
  int timed_position = 0;      // of the schedule ids rank 0 computes
  eval::Objective objective;   // of the schedule ids rank 0 computes
};

/// True when this megasched was built with MPI.
bool mpi_built();

/// Starts MPI. On rank 0: waits for every other rank's hello and returns the pool of those that
/// are ready (*error lists the others, as a warning). On any other rank: serves trials until rank 0
/// says stop, ends MPI, and returns nullptr with *served set to the rank's exit code. nullptr
/// with *error (and *served empty) when MPI is missing, the job has a single rank, or no rank
/// came up; *usage says whether the arguments are at fault (no MPI in this build, one rank).
std::unique_ptr<TrialPool> start_mpi_loop(const MpiLoopOptions& options, std::string* error,
                                          std::optional<int>* served, bool* usage);

/// Rank 0, after the loop: tells the ranks to stop and ends MPI (MPI_Abort with `exit_code`, or
/// 4 when it is 0, if a rank stopped answering).
void finish_mpi_loop(TrialPool* pool, int exit_code);

}  // namespace megasched::search
