#include "eval/baselines/graph_replay.h"

#include <algorithm>
#include <cmath>

#include "abi/kernel_args.h"
#include "vm/cuda_check.h"

namespace megasched::eval {

using vm::GpuError;

ms_abi::ModelParams baseline_model_params(const schedule::ModelShape& s) {
  ms_abi::ModelParams mp{};
  mp.hidden = static_cast<uint32_t>(s.hidden);
  mp.layers = static_cast<uint32_t>(s.layers);
  mp.heads = static_cast<uint32_t>(s.heads);
  mp.kv_heads = static_cast<uint32_t>(s.kv_heads);
  mp.head_dim = static_cast<uint32_t>(s.head_dim);
  mp.ffn = static_cast<uint32_t>(s.ffn);
  mp.vocab = static_cast<uint32_t>(s.vocab);
  mp.max_seq = static_cast<uint32_t>(s.max_seq);
  mp.rms_eps = s.rms_eps;
  mp.attn_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return mp;
}

DeviceBuf::DeviceBuf(size_t bytes) { MS_CHECK_CUDA(cudaMalloc(&ptr, std::max<size_t>(bytes, 16))); }

DeviceBuf::~DeviceBuf() { cudaFree(ptr); }

void write_step_cell(void* host_cell, void* step_cell, cudaStream_t stream, int32_t token,
                     int32_t position) {
  auto* cell = static_cast<ms_abi::StepCell*>(host_cell);
  *cell = {token, position, 0, -1};
  MS_CHECK_CUDA(cudaMemcpyAsync(step_cell, cell, sizeof *cell, cudaMemcpyHostToDevice, stream));
}

std::vector<float> replay_logits(cudaGraphExec_t exec, cudaStream_t stream, const void* logits,
                                 int vocab) {
  MS_CHECK_CUDA(cudaGraphLaunch(exec, stream));
  MS_CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<float> out(static_cast<size_t>(vocab));
  MS_CHECK_CUDA(cudaMemcpy(out.data(), logits, out.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}

int32_t replay_argmax(cudaGraphExec_t exec, cudaStream_t stream, void* host_cell,
                      const void* step_cell) {
  auto* cell = static_cast<ms_abi::StepCell*>(host_cell);
  MS_CHECK_CUDA(cudaGraphLaunch(exec, stream));
  MS_CHECK_CUDA(cudaMemcpyAsync(cell, step_cell, sizeof *cell, cudaMemcpyDeviceToHost, stream));
  MS_CHECK_CUDA(cudaStreamSynchronize(stream));
  return cell->argmax;
}

int32_t read_step_argmax(const void* step_cell) {
  ms_abi::StepCell cell{};
  MS_CHECK_CUDA(cudaMemcpy(&cell, step_cell, sizeof cell, cudaMemcpyDeviceToHost));
  return cell.argmax;
}

double time_replay_us(cudaGraphExec_t exec, cudaStream_t stream, cudaEvent_t start,
                      cudaEvent_t stop) {
  MS_CHECK_CUDA(cudaEventRecord(start, stream));
  MS_CHECK_CUDA(cudaGraphLaunch(exec, stream));
  MS_CHECK_CUDA(cudaEventRecord(stop, stream));
  MS_CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0.0f;
  MS_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  return static_cast<double>(ms) * 1000.0;
}

}  // namespace megasched::eval
