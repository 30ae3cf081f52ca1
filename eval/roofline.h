// The floor: the fewest bytes one decode step must move through HBM, over the bandwidth.
//   bytes_min = every weight byte the step reads, once: all layer weights, the final norm, the
//               LM head (the embedding table when tied) and the one embedding row the lookup reads
//             + the KV history the attention reads at this position (positions 0 .. position)
//             + the bytes written (this position's K and V, the logits)
//   floor_us  = bytes_min / bandwidth
// A latency below floor_us is physically impossible and is never reported.
#pragma once

#include <cstdint>

#include "schedule/model.h"
#include "schedule/target.h"

namespace megasched::eval {

struct Floor {
  uint64_t weight_bytes = 0;        // weights read once (all but the untied embedding table)
  uint64_t kv_read_bytes = 0;       // KV history read at the position
  uint64_t write_bytes = 0;         // K/V append + logits
  uint64_t bytes_min = 0;           // the sum (+ the embedding row)
  double floor_us = 0.0;            // over target.floor_bw_gbs() (measured when known)
  double floor_datasheet_us = 0.0;  // over the datasheet bandwidth
  bool measured_bandwidth = false;  // floor_us used a measured bandwidth
};

Floor floor_for(const schedule::ModelShape& shape, const schedule::GpuTarget& target, int position);

}  // namespace megasched::eval
