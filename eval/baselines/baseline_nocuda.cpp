// Without the CUDA toolkit there is no baseline of either kind to run (see
// eval/baselines/baseline.h).
#include "eval/baselines/baseline.h"

namespace megasched::eval {

struct CublasBaseline::Impl {};
CublasBaseline::~CublasBaseline() = default;

std::unique_ptr<CublasBaseline> CublasBaseline::create(const schedule::Weights&,
                                                       std::string* error) {
  *error = "this megasched was built without the CUDA toolkit (no cuBLAS baseline)";
  return nullptr;
}
std::vector<float> CublasBaseline::step(int32_t, int32_t) { return {}; }
int32_t CublasBaseline::last_argmax() { return -1; }
int32_t CublasBaseline::step_argmax(int32_t, int32_t) { return -1; }
double CublasBaseline::time_step_us(int32_t, int32_t, bool) { return 0.0; }

struct GraphPdlBaseline::Impl {};
GraphPdlBaseline::~GraphPdlBaseline() = default;

std::unique_ptr<GraphPdlBaseline> GraphPdlBaseline::create(const schedule::Weights&,
                                                           std::string* error) {
  *error = "this megasched was built without the CUDA toolkit (no graph-pdl baseline)";
  return nullptr;
}
std::vector<float> GraphPdlBaseline::step(int32_t, int32_t) { return {}; }
int32_t GraphPdlBaseline::last_argmax() { return -1; }
int32_t GraphPdlBaseline::step_argmax(int32_t, int32_t) { return -1; }
double GraphPdlBaseline::time_step_us(int32_t, int32_t, bool) { return 0.0; }

}  // namespace megasched::eval
