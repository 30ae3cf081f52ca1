#include "schedule/search.h"

#include <algorithm>
#include <optional>

#include "abi/ring.h"
#include "schedule/launch_fit.h"

namespace megasched::schedule {

int ring_x_floats(const ModelShape& shape) {
  const int longest = std::max({shape.hidden, shape.heads * shape.head_dim, shape.ffn});
  return (longest + 255) / 256 * 256;
}

int dynamic_smem_bytes(const ScheduleConfig& config, const ModelShape& shape) {
  if (config.kernel.weight_stream == WeightStream::kSmemRing)
    return static_cast<int>(
        ring_smem_bytes(config.smem.pages, config.smem.page_bytes, ring_x_floats(shape)));
  return config.smem.pages * config.smem.page_bytes;
}

std::string silu_copies_misfit(const ScheduleConfig& config, const ModelShape& shape) {
  const int64_t need = 8 * static_cast<int64_t>(shape.ffn);
  if (config.kernel.silu_stage != SiluStage::kCopies || dynamic_smem_bytes(config, shape) >= need)
    return "";
  return "kernel.silu_stage = copies needs smem.pages x smem.page_bytes >= 8 x ffn = " +
         std::to_string(need) +
         " bytes (gate and up, fp32, copied side by side); hint: more or larger pages, or "
         "kernel.silu_stage registers";
}

bool config_fits(const ScheduleConfig& config, const ModelShape& shape, const GpuTarget& target,
                 std::string* why) {
  auto fail = [&](std::string msg) {
    if (why) *why = std::move(msg);
    return false;
  };
  const nlohmann::json j = to_json(config);
  for (const auto& spec : knob_specs()) {
    const auto dot = spec.path.find('.');
    const auto& v = j[spec.path.substr(0, dot)][spec.path.substr(dot + 1)];
    if (!knob_value_fits(spec.path, v, shape))
      return fail(spec.path + "=" + v.dump() + " does not fit model " + shape.name);
  }
  if (std::string conflict = knob_conflict(config); !conflict.empty()) return fail(conflict);
  if (config.tiling.qkv_rope_pairs &&
      dynamic_smem_bytes(config, shape) < 4 * static_cast<int64_t>(shape.hidden))
    return fail(
        "tiling.qkv_rope_pairs = true needs smem.pages x smem.page_bytes >= 4 x hidden = " +
        std::to_string(4 * static_cast<int64_t>(shape.hidden)) +
        " bytes (the streamed GEMV stages the QKV input there); hint: more or larger pages");
  if (config.fusion.combine_into_o && config.tiling.attn_kv_partitions > 1) {
    const auto heads = static_cast<uint32_t>(shape.heads);
    const auto parts = static_cast<uint32_t>(config.tiling.attn_kv_partitions);
    const uint64_t need =
        ms_abi::stream_combine_min_bytes(heads * static_cast<uint32_t>(shape.head_dim), heads,
                                         static_cast<uint32_t>(shape.head_dim), parts);
    if (static_cast<uint64_t>(dynamic_smem_bytes(config, shape)) < need)
      return fail("fusion.combine_into_o = true with " + std::to_string(parts) +
                  " KV partitions needs smem.pages x smem.page_bytes >= " + std::to_string(need) +
                  " bytes (the O projection's input, the partition weights and one partition's "
                  "records of every head); hint: more or larger pages");
  }
  if (std::string misfit = silu_copies_misfit(config, shape); !misfit.empty()) return fail(misfit);
  if (config.fusion.attention_into_o &&
      dynamic_smem_bytes(config, shape) < 4 * static_cast<int64_t>(shape.q_dim()))
    return fail(
        "fusion.attention_into_o = true needs smem.pages x smem.page_bytes >= 4 x q_dim = " +
        std::to_string(4 * static_cast<int64_t>(shape.q_dim())) +
        " bytes (the streamed GEMV stages the attention's output there); hint: more or "
        "larger pages");
  const LaunchRequest launch{config.launch.threads_per_block,
                             config.launch.blocks_per_sm,
                             dynamic_smem_bytes(config, shape),
                             shape.head_dim,
                             config.kernel.weight_stream == WeightStream::kSmemRing,
                             config.assignment.policy == AssignPolicy::kDynamic};
  const std::vector<std::string> misfits = launch_misfits(launch, target);
  if (!misfits.empty()) return fail(misfits.front());
  return true;
}

namespace {

std::vector<nlohmann::json> fitting_choices(const KnobSpec& spec, const ModelShape& shape) {
  std::vector<nlohmann::json> out;
  for (const auto& c : spec.choices)
    if (knob_value_fits(spec.path, c, shape)) out.push_back(c);
  return out;
}

// Whether a knob acts only under another knob's value: some non-default choice of it alone, on the
// default config, is refused by knob_conflict (smem.inflight_pages without the weight ring,
// fusion.combine_into_o without KV partitions). kernel.stream_depth is the ring cap's mirror: it
// acts only under the default weight stream (registers), so the default config accepts every
// depth, but drawn with the rest it would refuse two of three ring draws; it is named here.
bool conditional_knob(const KnobSpec& spec) {
  if (spec.path == "kernel.stream_depth") return true;
  for (const auto& c : spec.choices) {
    if (c == spec.default_value) continue;
    ScheduleConfig config;
    set_knob(&config, spec.path, c, nullptr);
    if (!knob_conflict(config).empty()) return true;
  }
  return false;
}

}  // namespace

// Each knob uniformly among its fitting choices, the conditional ones last, each uniformly among
// the choices the others allow (knob_conflict), so a knob that acts only under one value of
// another does not tilt that other knob's draw (rejecting whole configs did: a cap on the ring's
// pages in flight, refused without the ring, made 4 of 5 registers draws fail). Configs that still
// do not fit are drawn again.
ScheduleConfig random_config(const ModelShape& shape, const GpuTarget& target,
                             std::mt19937_64& rng) {
  static const std::vector<char> conditional = [] {
    std::vector<char> out;
    for (const auto& spec : knob_specs()) out.push_back(conditional_knob(spec) ? 1 : 0);
    return out;
  }();
  const auto& specs = knob_specs();
  for (;;) {
    ScheduleConfig config;
    for (size_t k = 0; k < specs.size(); ++k) {
      if (conditional[k]) continue;
      const auto choices = fitting_choices(specs[k], shape);
      std::uniform_int_distribution<size_t> pick(0, choices.size() - 1);
      set_knob(&config, specs[k].path, choices[pick(rng)], nullptr);
    }
    for (size_t k = 0; k < specs.size(); ++k) {
      if (!conditional[k]) continue;
      std::vector<nlohmann::json> allowed;
      for (const auto& c : fitting_choices(specs[k], shape)) {
        ScheduleConfig trial = config;
        set_knob(&trial, specs[k].path, c, nullptr);
        if (knob_conflict(trial).empty()) allowed.push_back(c);
      }
      if (allowed.empty()) continue;  // the default stays (it conflicts too: redrawn below)
      std::uniform_int_distribution<size_t> pick(0, allowed.size() - 1);
      set_knob(&config, specs[k].path, allowed[pick(rng)], nullptr);
    }
    if (config_fits(config, shape, target)) return config;
  }
}

namespace {

// `moved` (one knob changed) with the fewest more pages (smem.pages) that make it fit, when it is
// a registers build and the move was not a shared-memory knob's own; nothing when no page count
// does. More pages fix only a shortage of the staging room (kernel.silu_stage copies, the
// attention or combine in O, QKV tiles of RoPE pairs: config_fits' shared-memory needs); in a
// registers build pages size nothing else.
std::optional<ScheduleConfig> with_room(const ScheduleConfig& moved, const KnobSpec& spec,
                                        const ModelShape& shape, const GpuTarget& target) {
  if (moved.kernel.weight_stream != WeightStream::kRegisters || spec.path.rfind("smem.", 0) == 0)
    return std::nullopt;
  std::vector<int> more;  // the page counts above the move's, fewest first
  for (const auto& k : knob_specs())
    if (k.path == "smem.pages")
      for (const auto& c : fitting_choices(k, shape))
        if (c.get<int>() > moved.smem.pages) more.push_back(c.get<int>());
  std::sort(more.begin(), more.end());
  for (int p : more) {
    ScheduleConfig roomy = moved;
    roomy.smem.pages = p;
    if (config_fits(roomy, shape, target)) return roomy;
  }
  return std::nullopt;
}

}  // namespace

std::vector<ScheduleConfig> neighbours(const ScheduleConfig& config, const ModelShape& shape,
                                       const GpuTarget& target) {
  std::vector<ScheduleConfig> out;
  for (const auto& spec : knob_specs()) {
    const auto current = get_knob(config, spec.path);
    for (const auto& c : fitting_choices(spec, shape)) {
      if (c == current) continue;
      ScheduleConfig n = config;
      set_knob(&n, spec.path, c, nullptr);
      if (config_fits(n, shape, target))
        out.push_back(n);
      else if (auto roomy = with_room(n, spec, shape, target))
        out.push_back(*roomy);
    }
  }
  return out;
}

ScheduleConfig mutate(const ScheduleConfig& config, const ModelShape& shape,
                      const GpuTarget& target, std::mt19937_64& rng, int knobs) {
  ScheduleConfig out = config;
  for (int i = 0; i < knobs; ++i) {
    auto n = neighbours(out, shape, target);
    if (n.empty()) break;
    std::uniform_int_distribution<size_t> pick(0, n.size() - 1);
    out = n[pick(rng)];
  }
  return out;
}

}  // namespace megasched::schedule
