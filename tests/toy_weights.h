// The toy preset's weights (seed 1), generated once per test binary: the ground truth's tests
// record element accesses through the ReferenceVm, which needs weights but not their values.
#pragma once

#include "schedule/model.h"

namespace megasched::testing_support {

inline const schedule::Weights& toy_weights() {
  static const schedule::Weights w =
      schedule::generate_weights(*schedule::find_preset("toy"), 1, 1);
  return w;
}

}  // namespace megasched::testing_support
