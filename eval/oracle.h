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
  double argmax_tie;   // a generation step's near tie: largest reference gap between two tokens
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
  // When the argmaxes differ: how far the reference's value at out's argmax lies below the
  // reference's maximum (0 when they agree). A near tie: every logit within tolerance and the gap
  // at most Tolerance::argmax_tie (two logits each off by e can swap order only when their gap is
  // at most 2e, so within tolerance a swap always has gap <= 2 x max_abs_err; the tie bound keeps
  // only the swaps of tokens the reference itself all but ties). compare_logits never passes one; a
  // greedy generation's verify (eval/generate.cpp) accepts it, reports the step and goes on with
  // the kernel's token.
  double argmax_gap = 0.0;
  bool near_tie = false;
  // The logit with the largest |out - ref| (the first non-finite one when there is one): its
  // index and both values, for the run directory's correctness.json.
  size_t worst_index = 0;
  double worst_out = 0.0;
  double worst_ref = 0.0;
};

Comparison compare_logits(const std::vector<float>& out, const std::vector<float>& ref,
                          schedule::DType dtype);

/// Whether a generation step's logits verify: they pass, or differ from the reference only by a
/// near tie of the argmax (Comparison::near_tie).
inline bool step_verified(const Comparison& c) { return c.pass || c.near_tie; }

/// {"index", "value", "reference"} of the comparison's worst logit (a non-finite value as null).
nlohmann::json worst_logit_json(const Comparison& c);

}  // namespace megasched::eval
