// The fp32 eager forward on the GPU: the reference for long positions, independent of the
// megakernel. cuBLAS Sgemm (pedantic math: no TF32) on weights upcast to fp32 a block of rows at a
// time, and the plain kernels of vm/device/reference_forward.cuh (embedding, RMSNorm, RoPE + KV
// store, attention, SwiGLU), which share no code with the megakernel's ops. The KV cache is fp32
// holding values rounded to the model dtype, as eval/eager.h's. A prompt is fed in chunks of
// kChunkTokens tokens (one GEMM per weight matrix per chunk), so reaching position 4096 costs a few
// dozen GEMMs, not 4096 decode steps. Implemented in eval/gpu_reference_cuda.cpp; without the
// toolkit eval/gpu_reference_nocuda.cpp reports that there is no GPU.
#pragma once

#include <memory>
#include <string>

#include "eval/reference_forward.h"
#include "schedule/model.h"

namespace megasched::eval {

/// Tokens per chunk of a prefill.
constexpr int kChunkTokens = 128;

/// The GPU engine over `weights` (which must outlive it). nullptr with *error when there is no
/// device, the kernels do not build or a device call fails.
std::unique_ptr<ReferenceForward> make_gpu_reference(const schedule::Weights& weights,
                                                     std::string* error);

}  // namespace megasched::eval
