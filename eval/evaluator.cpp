#include "eval/evaluator.h"

#include "abi/abi.h"
#include "vm/nvrtc_build.h"

namespace megasched::eval {

nlohmann::json trial_versions(const nlohmann::json& identity) {
  return {{"abi", ms_abi::kAbiVersion},
          {"ir", identity.value("ir_version", nlohmann::json(ms_abi::kAbiVersion))},
          {"build", identity.value("build", nlohmann::json(vm::build_identity()))}};
}

}  // namespace megasched::eval
