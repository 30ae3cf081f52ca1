// What the two CUDA-graph baselines share (the cuBLAS graph, baselines/baseline_cuda.cpp, and
// graph-pdl, baselines/baseline_pdl_cuda.cpp): their model constants, a device buffer, and one
// captured step graph replayed for its logits, its argmax and its time. Included only by *_cuda.cpp
// files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "abi/abi.h"
#include "schedule/model.h"

namespace megasched::eval {

/// The model constants both baselines' kernels take (shapes, RMSNorm epsilon, attention scale).
ms_abi::ModelParams baseline_model_params(const schedule::ModelShape& shape);

/// A device allocation of at least 16 bytes, freed on destruction.
struct DeviceBuf {
  void* ptr = nullptr;
  explicit DeviceBuf(size_t bytes);
  ~DeviceBuf();
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  float* f() const { return static_cast<float*>(ptr); }
};

/// Queues the step cell {token, position} (argmax -1) from pinned `host_cell` to `step_cell` on
/// `stream`, ahead of the step's replay.
void write_step_cell(void* host_cell, void* step_cell, cudaStream_t stream, int32_t token,
                     int32_t position);

/// Replays `exec` on `stream`, waits, and returns the `vocab` fp32 logits at `logits`.
std::vector<float> replay_logits(cudaGraphExec_t exec, cudaStream_t stream, const void* logits,
                                 int vocab);

/// Replays `exec` on `stream`, copies the step cell at `step_cell` back into pinned `host_cell`
/// behind it, waits, and returns the argmax the replay wrote (no logits are copied).
int32_t replay_argmax(cudaGraphExec_t exec, cudaStream_t stream, void* host_cell,
                      const void* step_cell);

/// The argmax the last replay wrote into the step cell at `step_cell` (ms_abi::StepCell).
int32_t read_step_argmax(const void* step_cell);

/// One replay of `exec` between two events on `stream`, in microseconds.
double time_replay_us(cudaGraphExec_t exec, cudaStream_t stream, cudaEvent_t start,
                      cudaEvent_t stop);

}  // namespace megasched::eval
