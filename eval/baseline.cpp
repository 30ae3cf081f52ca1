// The toolkit-free half of eval/baseline.h: timing the baseline against the floor.
#include "eval/baseline.h"

#include <exception>

#include "eval/eager.h"
#include "eval/evaluate.h"
#include "eval/oracle.h"
#include "eval/roofline.h"
#include "eval/timing.h"

namespace megasched::eval {

std::optional<nlohmann::json> time_baseline(const schedule::Weights& weights,
                                            const schedule::GpuTarget& target,
                                            const BaselineTiming& timing, std::string* error) {
  auto base = CublasBaseline::create(weights, error);
  if (!base) return std::nullopt;
  try {
    const int position = timing.position;
    const auto tokens = trial_tokens(weights.shape.vocab, position + 1, timing.seed);
    EagerModel eager(weights);
    const Comparison c =
        compare_logits(base->step(tokens[0], 0), eager.step(tokens[0], 0), weights.shape.dtype);
    for (int p = 1; p <= position; ++p) base->step(tokens[static_cast<size_t>(p)], p);
    const int32_t tok = tokens[static_cast<size_t>(position)];
    const bool flush = weights.bytes() <= 2 * target.l2_bytes;
    for (int i = 0; i < timing.warmup; ++i) base->time_step_us(tok, position, flush);
    std::vector<double> samples;
    for (int i = 0; i < timing.iterations; ++i)
      samples.push_back(base->time_step_us(tok, position, flush));
    const SampleStats s = sample_stats(samples);
    const Floor floor = floor_for(weights.shape, target, position);
    nlohmann::json out = {{"model", weights.shape.name},
                          {"device", target.name},
                          {"position", position},
                          {"latency_us", s.median},
                          {"latency_p90_us", s.p90},
                          {"latency_spread_us", s.p90 - s.p10},
                          {"iterations", timing.iterations},
                          {"l2_flushed", flush},
                          {"floor_us", floor.floor_us},
                          {"floor_datasheet_us", floor.floor_datasheet_us},
                          {"bytes_min", floor.bytes_min},
                          {"check_position_0",
                           {{"rel_err", c.rel_err},
                            {"max_abs_err", c.max_abs_err},
                            {"argmax_match", c.argmax_match}}},
                          {"info", base->info()}};
    if (s.median >= floor.floor_us && s.median > 0) {
      out["pct_of_floor"] = 100.0 * floor.floor_us / s.median;
      if (floor.floor_datasheet_us > 0)
        out["pct_of_datasheet"] = 100.0 * floor.floor_datasheet_us / s.median;
    } else {
      out["note"] = "median below the floor: withheld as a timing or accounting error";
      out.erase("latency_us");
    }
    return out;
  } catch (const std::exception& e) {
    *error = e.what();
    return std::nullopt;
  }
}

}  // namespace megasched::eval
