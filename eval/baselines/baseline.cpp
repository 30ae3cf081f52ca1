// The toolkit-free half of eval/baselines/baseline.h: timing the baseline against the floor.
#include "eval/baselines/baseline.h"

#include <algorithm>
#include <exception>

#include "eval/eager.h"
#include "eval/evaluate.h"
#include "eval/oracle.h"
#include "eval/roofline.h"
#include "eval/timing.h"

namespace megasched::eval {

const std::vector<std::string>& baseline_kinds() {
  static const std::vector<std::string> kinds = {"cublas", "graph-pdl"};
  return kinds;
}

std::unique_ptr<Baseline> create_baseline(const std::string& kind, const schedule::Weights& weights,
                                          std::string* error) {
  if (kind == "cublas") return CublasBaseline::create(weights, error);
  if (kind == "graph-pdl") return GraphPdlBaseline::create(weights, error);
  std::string known;
  for (const std::string& k : baseline_kinds()) known += (known.empty() ? "" : ", ") + k;
  *error = "unknown baseline kind '" + kind + "' (known: " + known + ")";
  return nullptr;
}

std::optional<std::vector<std::string>> parse_baseline_selection(const std::string& text,
                                                                 std::string* error) {
  const std::vector<std::string>& kinds = baseline_kinds();
  std::string known;
  for (const std::string& k : kinds) known += ", " + k;
  auto fail = [&](const std::string& why) -> std::optional<std::vector<std::string>> {
    if (error)
      *error = "'" + text + "': " + why + " (choices: all, none, auto" + known +
               "; kinds comma-separated)";
    return std::nullopt;
  };
  if (text == "all") return kinds;
  if (text == "none") return std::vector<std::string>{};
  if (text == "auto") return std::vector<std::string>{"auto"};
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    const std::string item =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (item.empty()) return fail("an empty kind");
    if (std::find(kinds.begin(), kinds.end(), item) == kinds.end())
      return fail(item == "all" || item == "none" || item == "auto"
                      ? "'" + item + "' stands alone, not in a list"
                      : "unknown baseline kind '" + item + "'");
    if (std::find(out.begin(), out.end(), item) != out.end())
      return fail("'" + item + "' named twice");
    out.push_back(item);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

std::string baseline_selection_text(const std::vector<std::string>& selection) {
  std::string out;
  for (const std::string& k : selection) out += (out.empty() ? "" : ",") + k;
  return out.empty() ? "none" : out;
}

std::vector<std::string> baselines_for(const std::vector<std::string>& selection,
                                       const schedule::ModelShape& shape) {
  std::vector<std::string> out;
  for (const std::string& k : selection) {
    const std::string kind =
        k != "auto" ? k : (graph_pdl_misfit(shape).empty() ? "graph-pdl" : "cublas");
    if (std::find(out.begin(), out.end(), kind) == out.end()) out.push_back(kind);
  }
  return out;
}

std::optional<BaselineMedian> strongest_baseline(const std::vector<BaselineMedian>& measured) {
  std::optional<BaselineMedian> best;
  for (const BaselineMedian& m : measured) {
    if (!(m.median_us > 0.0)) continue;  // a kind that failed or gave no samples
    if (!best || m.median_us < best->median_us) best = m;
  }
  return best;
}

std::string graph_pdl_misfit(const schedule::ModelShape& s) {
  const int vec = 16 / schedule::dtype_bytes(s.dtype);
  auto fail = [&](const std::string& what, int value, int multiple) -> std::string {
    return what + " " + std::to_string(value) + " is not a multiple of " +
           std::to_string(multiple) + " (the graph-pdl GEMVs stream rows of 16-byte vectors)";
  };
  if (s.hidden % vec != 0) return fail("hidden", s.hidden, vec);
  if (s.q_dim() % vec != 0) return fail("q_dim", s.q_dim(), vec);
  if (s.ffn % vec != 0) return fail("ffn", s.ffn, vec);
  if (s.head_dim % 2 != 0 || (s.head_dim * schedule::dtype_bytes(s.dtype)) % 16 != 0)
    return fail("head_dim", s.head_dim, vec);
  if (s.heads / s.kv_heads > 8) return "more than 8 query heads per KV head";
  if (s.head_dim * schedule::dtype_bytes(s.dtype) > 16 * 256)
    return "a key row over 4 KiB (head_dim " + std::to_string(s.head_dim) + ")";
  // The largest GEMV input (the down projection's ffn floats) is staged in shared memory.
  constexpr int kSmemFloats = 200 * 1024 / 4;
  for (const auto& [what, k] : {std::pair<const char*, int>{"ffn", s.ffn}, {"hidden", s.hidden}})
    if (k > kSmemFloats)
      return std::string(what) + " " + std::to_string(k) + " floats exceed the " +
             std::to_string(kSmemFloats) + " a GEMV block stages in shared memory";
  return "";
}

std::optional<nlohmann::json> time_baseline(const schedule::Weights& weights,
                                            const schedule::GpuTarget& target,
                                            const BaselineTiming& timing, std::string* error,
                                            std::vector<double>* samples_us) {
  auto base = create_baseline(timing.kind, weights, error);
  if (!base) return std::nullopt;
  try {
    const int position = timing.position;
    const auto tokens = trial_tokens(weights.shape.vocab, position + 1, timing.seed);
    EagerModel eager(weights);
    const std::vector<float> logits0 = base->step(tokens[0], 0);
    const Comparison c = compare_logits(logits0, eager.step(tokens[0], 0), weights.shape.dtype);
    const int32_t kernel_argmax = base->last_argmax();
    for (int p = 1; p <= position; ++p) base->step(tokens[static_cast<size_t>(p)], p);
    const int32_t tok = tokens[static_cast<size_t>(position)];
    const bool flush = weights.bytes() <= 2 * target.l2_bytes;
    for (int i = 0; i < timing.warmup; ++i) base->time_step_us(tok, position, flush);
    std::vector<double> samples;
    for (int i = 0; i < timing.iterations; ++i)
      samples.push_back(base->time_step_us(tok, position, flush));
    const SampleStats s = sample_stats(samples);
    if (samples_us) *samples_us = samples;
    std::optional<nlohmann::json> timeline;
    if (timing.timeline && !(timeline = base->timeline(tok, position))) {
      *error = std::string("the ") + base->kind() +
               " baseline has no per-kernel timeline (hint: --kind graph-pdl has one)";
      return std::nullopt;
    }
    const Floor floor = floor_for(weights.shape, target, position);
    nlohmann::json out = {{"model", weights.shape.name},
                          {"device", target.name},
                          {"position", position},
                          {"kind", base->kind()},
                          {"latency_us", s.median},
                          {"latency_p10_us", s.p10},
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
                            {"argmax_match", c.argmax_match},
                            {"pass", c.pass},
                            {"kernel_argmax_matches_logits", kernel_argmax == argmax(logits0)}}},
                          {"info", base->info()}};
    if (timeline) out["timeline"] = *timeline;
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
