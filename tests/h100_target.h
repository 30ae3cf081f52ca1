// The GPU the tests lower for: the H100 SXM of the registry (schedule/target.cpp), so no test types
// its figures out. `num_sms` shrinks the grid for tests that want few queues; `name` relabels it.
#pragma once

#include <string>

#include "schedule/target.h"

namespace megasched::testing_support {

inline schedule::GpuTarget h100_target(int num_sms = 132, const std::string& name = "h100") {
  schedule::GpuTarget t = *schedule::find_target("h100");
  t.num_sms = num_sms;
  t.name = name;
  return t;
}

}  // namespace megasched::testing_support
