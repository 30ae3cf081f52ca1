#include "schedule/named_configs.h"

#include "schedule/plan.h"

namespace megasched::schedule {

namespace {

/// `base` with `patch` merged in (objects key by key).
nlohmann::json patched(nlohmann::json base, const nlohmann::json& patch) {
  base.merge_patch(patch);
  return base;
}

/// One bucket of plan_of: `config` up to `end` (kToMax: the model's last position).
struct Bucket {
  const nlohmann::json& config;
  int end;
};
constexpr int kToMax = 0;

/// The plan document of `buckets` in turn, the first from position 0, each next from the end of
/// the one before.
nlohmann::json plan_of(std::initializer_list<Bucket> buckets) {
  nlohmann::json list = nlohmann::json::array();
  int begin = 0;
  for (const Bucket& b : buckets) {
    nlohmann::json bucket = nlohmann::json::object();
    bucket["begin"] = begin;
    bucket["end"] = b.end == kToMax ? nlohmann::json("max") : nlohmann::json(b.end);
    bucket["config"] = b.config;
    list.push_back(std::move(bucket));
    begin = b.end;
  }
  nlohmann::json plan = nlohmann::json::object();
  plan["buckets"] = std::move(list);
  return plan;
}

/// The records' plans (and llama-8b's config), built from the configs they are made of, each
/// commented where it is defined.
struct RecordPlans {
  nlohmann::json h100, h200, llama8b_h200;
};

RecordPlans record_plans() {
  // The streamed GEMV of registers builds (vm/device/stream.cuh) with QKV in tiles of RoPE pairs
  // over every block and the argmax folded into the LM-head tiles
  // (bench/configs/stream_r2u4_pairs_am.json): no ring, each warp's first weight chunks loaded
  // before its dependency wait; the fastest config at position 0 on both GPUs (measured 2026-11-26
  // 09:26-09:56 UTC, dev/benchmarks_history.md).
  const nlohmann::json stream = {{"kernel",
                                  {{"weight_stream", "registers"},
                                   {"vector_bytes", 16},
                                   {"rows_per_warp", 2},
                                   {"unroll", 4},
                                   {"weight_load", "ldg_stream"}}},
                                 {"pipeline", {{"prefetch_depth", 0}}},
                                 {"launch", {{"threads_per_block", 256}}},
                                 {"tiling",
                                  {{"gemv_rows_per_task", 0},
                                   {"lm_head_rows_per_task", 0},
                                   {"attn_q_heads_per_task", 1},
                                   {"qkv_rope_pairs", true}}},
                                 {"fusion", {{"argmax_into_lm_head", true}}}};
  // The same with the whole KV group per attention task and the KV history in 8 or 16 partitions
  // staged in 5 x 16 KiB of shared memory (bench/configs/stream_r2u4_g4p8_pairs_am_st.json,
  // stream_r2u4_g4p16_pairs_am_st.json): the fastest configs from about position 128 on.
  const nlohmann::json staged =
      patched(stream, {{"kernel", {{"attention", "staged"}}},
                       {"smem", {{"pages", 5}, {"page_bytes", 16384}}},
                       {"tiling", {{"attn_q_heads_per_task", 0}, {"attn_kv_partitions", 8}}}});
  const nlohmann::json g4p16 = patched(staged, {{"tiling", {{"attn_kv_partitions", 16}}}});
  // The H100's position-0 config with three weight chunks in flight per warp
  // (kernel.stream_depth 3): the loop's pick from the record on an H100 (2026-11-28), promoted.
  const nlohmann::json stream_d3 = patched(stream, {{"kernel", {{"stream_depth", 3}}}});
  // The H200's position-0 config: three rows a warp (a 24-row QKV tile wholly in flight before its
  // wait), blocks assigned layer-affine and LM-head tiles of 1024 rows: the loop's pick from the
  // record on an H200 (2026-11-28, dev/perf_log.md section 33), promoted.
  const nlohmann::json stream_r3 = patched(stream, {{"kernel", {{"rows_per_warp", 3}}},
                                                    {"assignment", {{"policy", "layer_affine"}}},
                                                    {"tiling", {{"lm_head_rows_per_task", 1024}}}});
  // The H200's config for positions 0-2: four rows a warp, the attention in the O projection's
  // input load (no attention tasks; every O tile reads the whole KV history, so it loses from
  // position 4 on), blocks dealt round robin: what a 6-minute loop from the default config kept
  // (2026-11-28, dev/perf_log.md section 37); `bench --fit-plan` placed it on [0, 3).
  const nlohmann::json search_r4_attn_in_o =
      patched(stream_r3, {{"kernel", {{"rows_per_warp", 4}}},
                          {"assignment", {{"policy", "round_robin"}}},
                          {"fusion", {{"attention_into_o", true}}},
                          {"tiling", {{"attn_q_heads_per_task", 0}}}});
  // The same with kernel.stream_held 1 (one weight chunk of each warp's two issued only once the
  // wait holds, on every second block: kernel.stream_held_every's default) and LM-head tiles of
  // 512 rows: what a 6-minute loop from the record kept on an H200 (2026-11-29, dev/perf_log.md
  // section 42), promoted.
  const nlohmann::json search_held =
      patched(search_r4_attn_in_o,
              {{"kernel", {{"stream_held", 1}}}, {"tiling", {{"lm_head_rows_per_task", 512}}}});
  // The H200's long-context config: the staged attention in 16 partitions with three weight
  // chunks in flight per warp, all three held back until the wait on every second block: what a
  // 6-minute loop from the record at position 4096 kept on an H200 (2026-11-29, dev/perf_log.md
  // section 42), promoted.
  const nlohmann::json search_d3_held3 =
      patched(g4p16, {{"kernel", {{"stream_depth", 3}, {"stream_held", 3}}}});
  // The same with the KV history in one partition: what a 5-minute loop from the record at
  // position 256 kept on two H200s (2026-11-29, BENCHMARKS.md "Plans over positions"), promoted.
  // Up to a few hundred keys, 16 partitions cost more in their merge than they save.
  const nlohmann::json search_kv1 =
      patched(search_d3_held3, {{"tiling", {{"attn_kv_partitions", 1}}}});
  // The staged attention in 8 partitions with three rows a warp and one weight chunk of each warp
  // held back until the wait on every second block: what `loop --plan` kept in the record's
  // [363, 958) bucket, timed at its midpoint 660 (an H200, 2026-11-29, BENCHMARKS.md "Plans over
  // positions" [P]); `bench --fit-plan` placed it on [394, 1096), promoted.
  const nlohmann::json staged_r3_held1 =
      patched(staged, {{"kernel", {{"rows_per_warp", 3}, {"stream_held", 1}}}});
  // The position-0 config with down's SiLU x up input copied into shared memory
  // (kernel.silu_stage copies) and the four pages that takes at llama-1b (8 x ffn bytes): placed
  // on [0, 3) by `bench --fit-plan` (878.7 us at position 0 against 888.2 for the config without;
  // an H200, 2026-11-29, BENCHMARKS.md "Plans over positions" [Q]), promoted.
  const nlohmann::json search_held_copies =
      patched(search_held, {{"kernel", {{"silu_stage", "copies"}}}, {"smem", {{"pages", 4}}}});
  // Four rows a warp with one weight chunk of each warp held back until the wait on every fourth
  // block and 512-row LM-head tiles: what `loop --plan` kept in the record's [3, 62) bucket at its
  // midpoint 32 (dev/configs/search_h200_p32_plansearch_r4_held1_every4.json); the refit placed it
  // on [21, 67) ([Q]).
  const nlohmann::json r4_held1_every4 = patched(
      stream_r3, {{"kernel", {{"rows_per_warp", 4}, {"stream_held", 1}, {"stream_held_every", 4}}},
                  {"tiling", {{"lm_head_rows_per_task", 512}}}});
  // The staged attention's config in two pages (its staging still fits at llama-1b's head_dim):
  // what `loop --plan` kept in the record's [394, 1096) bucket at its midpoint 744
  // (dev/configs/search_h200_p744_plansearch_staged_pages2.json); the refit placed it on
  // [382, 700) ([Q]).
  const nlohmann::json staged_r3_held1_p2 = patched(staged_r3_held1, {{"smem", {{"pages", 2}}}});
  // The position-0 config with two weight chunks of each warp held back until the wait on every
  // fourth block, five pages and one LM-head tile a block: what a 3-minute `loop --confirm 3` from
  // the position-0 config without the copies kept, each step confirmed in three back-to-back rounds
  // (dev/configs/search_h200_p1_loop_confirm_held2_every4.json, dev/perf_log.md section 64); the
  // refit placed it on [0, 4).
  const nlohmann::json search_held2_every4 =
      patched(search_held_copies, {{"kernel", {{"stream_held", 2}, {"stream_held_every", 4}}},
                                   {"smem", {{"pages", 5}}},
                                   {"tiling", {{"lm_head_rows_per_task", 0}}}});
  // llama-8b's config on an H200: the long-context config with its KV history in one partition,
  // one query head a task (four attention warps a block, so llama-8b's streamed GEMV keeps its
  // registers, dev/perf_log.md section 53) and LM-head tiles of 512 rows: what a loop at llama-8b
  // kept (dev/configs/search_h200_llama8b_p0_loop.json), promoted against the default.
  const nlohmann::json llama8b_h200 = patched(
      search_kv1, {{"tiling", {{"attn_q_heads_per_task", 1}, {"lm_head_rows_per_task", 512}}}});
  return {plan_of({{stream_d3, 129}, {staged, 2049}, {g4p16, kToMax}}),
          plan_of({{search_held2_every4, 4},
                   {r4_held1_every4, 65},
                   {search_kv1, 370},
                   {staged_r3_held1_p2, 667},
                   {staged_r3_held1, 1112},
                   {search_d3_held3, kToMax}}),
          llama8b_h200};
}

}  // namespace

const std::vector<NamedConfig>& named_configs() {
  static const RecordPlans plans = record_plans();
  // The records are plans over positions: the configs on the buckets `bench --fit-plan`
  // measured for each GPU (bench/plans/llama-1b-h100-fitted.json, llama-1b-h200-fitted.json).
  static const std::vector<NamedConfig> table = {
      {"best:llama-1b:h100", "llama-1b", "h100",
       "bench/results/h100-2026-11-27-1619-plan-table.md and "
       "h100-2026-11-27-1630-generate-128-4096.md (plan bench/plans/llama-1b-h100-fitted.json); "
       "its position-0 bucket's kernel.stream_depth 3: "
       "h100-2026-11-28-0846-stream-depth.md, "
       "h100-2026-11-28-0850-search-from-record.results.tsv.gz "
       "and h100-2026-11-28-0904-promote-llama-1b.json",
       "a plan within 0.3% of the fastest single config at positions 0, 512, 1024, 2048 and 4096 "
       "on an H100 (1114.9 us at 0, 1266.9 us at 4096), generating 128:4096 in 5277.7 ms where "
       "its position-0 config alone took 9742.6 ms; its position-0 config with three weight chunks "
       "in flight per warp, which a loop from the record kept, ran 1097.8 us against 1114.5 "
       "(2026-11-28, side by side)",
       plans.h100},
      {"best:llama-1b:h200", "llama-1b", "h200",
       "bench/results/h200-2026-11-27-1647-plan-table.md and "
       "h200-2026-11-27-1649-generate-128-4096.md (plan bench/plans/llama-1b-h200-fitted.json); "
       "its position-0 bucket's three rows a warp: h200-2026-11-28-1432-rows-per-warp.md, "
       "h200-2026-11-28-1437-search-from-record.results.tsv.gz "
       "and h200-2026-11-28-1445-promote-llama-1b.json; its [0, 3) bucket, the loop's find "
       "from the default: h200-2026-11-28-2159-planfit-search-p0.md and "
       "h200-2026-11-28-2210-promote-llama-1b.json; that bucket's held weight chunk and 512-row "
       "LM-head tiles, a loop from the record's pick: "
       "h200-2026-11-29-0325-search-from-record.bench.md, h200-2026-11-29-0349-held-l2.md and "
       "h200-2026-11-29-0409-promote-llama-1b.json; the long-context config, a loop from the "
       "record at 4096: h200-2026-11-29-0412-search-4096-from-record.bench.md and "
       "h200-2026-11-29-0521-promote-llama-1b.json; the buckets refitted on the lower envelope: "
       "h200-2026-11-29-0529-planfit.bench.json (`bench --from-bench`), "
       "h200-2026-11-29-0546-envelope-table.md and h200-2026-11-29-0547-promote-llama-1b.json; "
       "the middle config, a loop from the record at 256: "
       "h200-2026-11-29-0909-search-256-from-record.bench.md, h200-2026-11-29-0926-planfit.md "
       "(its .bench.json) and h200-2026-11-29-0928-promote-llama-1b.json; the buckets' own "
       "loops (`loop --plan`) and the refit with their finds: "
       "h200-2026-11-29-1542-plansearch.md (its .results.tsv.gz), "
       "h200-2026-11-29-1544-planfit.md (its .bench.json) and "
       "h200-2026-11-29-1546-promote-llama-1b.json; a second `loop --plan` and a refit with "
       "its finds and kernel.silu_stage copies: h200-2026-11-29-2045-plansearch.md (its "
       ".results.tsv.gz), h200-2026-11-29-2053-planfit.md (its .bench.json) and "
       "h200-2026-11-29-2101-promote-llama-1b.json; its [0, 4) bucket, a `loop --confirm 3` "
       "and the refit with its find: h200-2026-11-29-2235-loop-confirm.md (its "
       ".results.tsv.gz), h200-2026-11-29-2243-planfit.md (its .bench.json) and "
       "h200-2026-11-29-2245-promote-llama-1b.json",
       "a plan within 0.3% of the fastest single config at positions 0, 512, 1024, 2048 and 4096 "
       "on an H200 (921.2 us at 0, 1063.4 us at 4096), generating 128:4096 in 4417.2 ms where "
       "its position-0 config alone took 8912.8 ms; on [0, 3) the config a 6-minute loop from "
       "the default kept (four rows a warp, the attention in the O projection), which "
       "`bench --fit-plan` placed there: the plan ran 890.4 us at position 0 against 919.0 for "
       "the three-rows config (2026-11-28, side by side); with one weight chunk a warp held "
       "back until the wait on every second block and 512-row LM-head tiles, which a 6-minute "
       "loop from the record kept, that config ran 882.2 us against 889.8 (2026-11-29, side by "
       "side); with the long-context config a loop from the record kept at 4096 on [89, 356) and "
       "from 874 on, where the lower envelope of the measured lines put it, the plan ran "
       "1001.4 us at position 100 against 1024.3 and 1011.4 at 1200 against 1023.4 (2026-11-29, "
       "side by side); with that config's KV history in one partition, which a loop from the "
       "record kept at 256, on [40, 363), the plan ran 948.5 us at position 192 against 1018.8 "
       "(2026-11-29, side by side); with the staged attention's config that a loop of the "
       "bucket at its own position kept (three rows a warp, one chunk held) on [394, 1096), "
       "refitted on this run's lines, the plan ran 999.9 us at position 660 against 1011.1 "
       "(2026-11-29, side by side); refitted with a second `loop --plan`'s finds and the "
       "position-0 config with down's input copied into shared memory, the plan passed the "
       "promotion's gate at 1.000x over the weighted objective: 884.5 us against 888.1 at "
       "position 1 and 990.0 against 997.7 at 540, 938.4 against 931.5 at 43 (2026-11-29, side "
       "by side, three rounds); refitted with the config a `loop --confirm 3` kept on [0, 4), "
       "the plan passed the gate at 1.000x again: 875.5 us against 884.4 at position 1 "
       "(2026-11-29, side by side, three rounds)",
       plans.h200},
      {"best:llama-8b:h200", "llama-8b", "h200",
       "dev/perf_log.md section 53 (the loop) and "
       "bench/results/h200-2026-11-29-1555-promote-llama-8b.json",
       "4295.5 us at position 0 against the default config's 11837.5 (2026-11-29, side by side, "
       "promoted at 2.76x); graph-pdl ran 3924.1-3946.1 us on the same GPU that hour",
       plans.llama8b_h200},
  };
  return table;
}

std::optional<NamedConfig> find_named_config(const std::string& name, std::string* error) {
  std::string known;
  for (const NamedConfig& c : named_configs()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  if (error) *error = "no named config '" + name + "'; known: " + known;
  return std::nullopt;
}

std::optional<ScheduleConfig> named_config_at(const std::string& name, int position,
                                              std::string* error) {
  const auto named = find_named_config(name, error);
  if (!named) return std::nullopt;
  const auto plan = parse_plan(named->config, error);
  if (!plan) return std::nullopt;
  return plan_config_for(*plan, position);
}

bool is_config_name(const std::string& arg) { return arg.rfind("best:", 0) == 0; }

}  // namespace megasched::schedule
