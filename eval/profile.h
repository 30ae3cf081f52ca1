// The analysis of one profiled decode step (`megasched profile`): the per-task stamps of a
// GpuVm built with GpuVmOptions::profile (vm/gpu_vm.h TaskStamp) read against the program that
// produced them. Each task that ran spends its time in three phases, and each block's step in five:
//   wait    ready - start     the task was taken (its prefetches issued) and its waits did not
//                             hold yet
//   exec    done - ready      the opcode ran (up to the block barrier after its writes)
//   signal  signal - done     publishing the task's counter increment
//   gap     a block's time between one task's signal and the next task's start (and before its
//           first task): taking the next task (the dynamic queue's claim, the next load)
//   idle    a block's time after its last signal until the step's last signal
// For every block wait + exec + signal + gap + idle = the step's span (the last signal; stamps
// are relative to the earliest start), so the per-block fractions sum to 1. A streamed GEMV's exec
// splits further at its staged and streamed stamps (vm/device/stream.cuh, after the block
// barriers that end each part):
//   staging   staged - ready      its input loaded (with the norm's reduction, or the combine or
//                                 attention prologue) while its first weight chunks land
//   stream    streamed - staged   its weights multiplied, to the barrier after the last warp's rows
//   epilogue  done - streamed     its writes (residual, RoPE and the KV append, argmax record)
//
// The critical path walks back from the task that signals last. The predecessor of a task is
// whichever ended last of (a) the task before it in the same block (it ended at its signal) and
// (b) for each of its waits (counter c, threshold th), the releaser: the task whose signal made c
// reach th (the tasks signalling c sorted by signal time, increments accumulated, the first at
// which the sum reaches th). Thresholds are per step (epoch-relative) and a profile is one step,
// so this holds as written. A hop through (b) is a dependency stage; a hop through (a) is a queue
// hop. Along the path the time splits exactly (it telescopes) into gap, wait, exec and signal.
// A signal is stamped just after its atomic add, so a consumer can see the counter a few ns before
// its releaser's stamp; phases are clamped at zero rather than going negative.
//
// A task's ready lag is ready - max(start, release), release being the latest releaser signal of
// its waits: how long after it could have gone on (taken, and every wait held) it was ready. A
// block that takes its task early polls and is ready ~one L2 round trip after the release; a block
// that arrives late (often the last producer itself) shows what else stands between its start
// and its first useful poll. Tasks without waits (or with a wait no task released) have none.
//
// Pure host code: no CUDA. Stamps carry globaltimer ns; the analysis reports microseconds.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/program.h"
#include "vm/gpu_vm.h"

namespace megasched::eval {

/// The analysis of one profiled step, as a JSON object:
///   tasks          the timeline, one entry per task that ran, by start time: {task, op, opcode,
///                  layer, block, order, start_us, ready_us, done_us, signal_us, and for a
///                  streamed GEMV staged_us and streamed_us}
///   per_op         per logical op, in program order: {op, kind, layer, tasks, wait_us, exec_us,
///                  signal_us (each {sum, max} over its tasks), exec_parts ({tasks, staging_us,
///                  stream_us, epilogue_us}: the streamed GEMVs among them, each part {sum, max};
///                  tasks 0 for other ops), ready_lag_us ({tasks, median, max}
///                  of the ready lags, below), first_start_us, last_signal_us, span_us (first start
///                  to last signal)}
///   per_kind       the same sums and ready lags per op kind ("qkv", "attention", ...), by exec
///                  time
///   per_block      per block of the grid: {block, tasks, wait_us, exec_us, signal_us, gap_us,
///                  idle_us (after its last signal), and each as a fraction of the span}
///   totals         {span_us, wall_us, blocks, tasks_run, tasks_not_run, and the sums over
///                  blocks of wait / exec / signal / gap / idle in us and as fractions of
///                  blocks x span}
///   critical_path  {stages (dependency hops), tasks (chain length), span_us, gap_us, wait_us,
///                  exec_us, signal_us, path: [{task, op, opcode, block, via ("start" |
///                  "dependency" | "queue"), counter (dependency hops), start_us, signal_us}]
///                  from first to last}
/// Throws std::invalid_argument when stamps.size() != program.tasks.size() or a stamp that ran
/// names another task than its index.
nlohmann::json analyze_profile(const schedule::Program& program,
                               const std::vector<vm::TaskStamp>& stamps, double wall_us);

/// A human summary of analyze_profile's output: the `top_ops` ops with the most exec time, the
/// streamed GEMVs' exec in parts per kind (means per task), the blocks with the most idle time,
/// the totals and the critical path in one line each.
std::string format_profile(const nlohmann::json& analysis, int top_ops);

}  // namespace megasched::eval
