// Search moves over the ScheduleConfig space of one model on one target: the default, uniform
// random sampling, one-knob neighbours (with the pages a move needs) and mutation. Every config
// these produce lowers for the shape (knob_value_fits) and fits the target's launch limits
// (config_fits, with the validator's launch_misfits), so the search never wastes trials on configs
// that cannot launch; validate() still checks every lowered program.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "schedule/config.h"
#include "schedule/model.h"
#include "schedule/target.h"

namespace megasched::schedule {

/// The shape's knob constraints (knob_value_fits) and the launch limits of the target, checked by
/// launch_misfits (schedule/launch_fit.h), the validator's own launch check. Returns false with a
/// one-line reason (the first misfit).
bool config_fits(const ScheduleConfig& config, const ModelShape& shape, const GpuTarget& target,
                 std::string* why = nullptr);

/// Floats of the GEMV input staging area of a weight-ring build: the longest GEMV input of the
/// shape (hidden, heads x head_dim, ffn), rounded up to 256 (the staging layout's block).
int ring_x_floats(const ModelShape& shape);

/// Dynamic shared memory per block the config asks for: the page ring, plus with
/// kernel.weight_stream = smem_ring the input staging area and two mbarriers per page.
int dynamic_smem_bytes(const ScheduleConfig& config, const ModelShape& shape);

/// Why kernel.silu_stage = copies does not fit `shape` (both SiLU x up inputs, 8 x ffn bytes, in
/// the dynamic shared memory), with a hint; empty when it fits or the knob is registers. Lowering
/// and config_fits refuse with it.
std::string silu_copies_misfit(const ScheduleConfig& config, const ModelShape& shape);

/// Every knob drawn uniformly from its fitting choices (rejection-sampled until config_fits).
ScheduleConfig random_config(const ModelShape& shape, const GpuTarget& target,
                             std::mt19937_64& rng);

/// Every config that differs from `config` in exactly one knob and fits; where that knob's value
/// needs more staging room than a registers build's pages hold (kernel.silu_stage copies, the
/// attention or combine in O, QKV tiles of RoPE pairs), it comes with the fewest more pages
/// (smem.pages) that fit, so that one move reaches it (dev/perf_log.md section 61: the H200
/// record's SiLU copies need four pages where it runs two).
std::vector<ScheduleConfig> neighbours(const ScheduleConfig& config, const ModelShape& shape,
                                       const GpuTarget& target);

/// `config` with `knobs` randomly chosen knobs changed to other fitting values.
ScheduleConfig mutate(const ScheduleConfig& config, const ModelShape& shape,
                      const GpuTarget& target, std::mt19937_64& rng, int knobs = 1);

}  // namespace megasched::schedule
