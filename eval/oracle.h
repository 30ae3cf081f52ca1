// The correctness oracle: compares logits from a VM with the eager reference under per-dtype
// tolerances held in one table.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/model.h"

namespace megasched::eval {

/// Tolerances for one weight dtype.
struct Tolerance {
  double rel_err;      // max ||out - ref||_2 / ||ref||_2
  double max_abs_err;  // max |out - ref| (absolute, in logit units)
};

/// The table: fp32 models are held tightly, bf16 models allow for bf16 KV storage and reordered
/// fp32 sums.
Tolerance tolerance_for(schedule::DType dtype);

struct Comparison {
  double max_abs_err = 0.0;
  double rel_err = 0.0;
  bool argmax_match = false;
  bool finite = false;  // no NaN / inf in the output
  bool pass = false;    // finite && argmax_match && within tolerance
  // The logit with the largest |out - ref| (the first non-finite one when there is one): its
  // index and both values, for the run directory's correctness.json.
  size_t worst_index = 0;
  double worst_out = 0.0;
  double worst_ref = 0.0;
};

Comparison compare_logits(const std::vector<float>& out, const std::vector<float>& ref,
                          schedule::DType dtype);

/// {"index", "value", "reference"} of the comparison's worst logit (a non-finite value as null).
nlohmann::json worst_logit_json(const Comparison& c);

}  // namespace megasched::eval
