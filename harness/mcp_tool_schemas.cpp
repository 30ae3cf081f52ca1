// The MCP tools' JSON Schemas (harness/mcp_tools.h): the argument schema of every tool, built from
// the CLI's defaults (the loop's, the strategies', the profile's, the evaluator's) so the two
// surfaces cannot drift, and the output schemas read from schemas/.
#include "harness/mcp_tool_schemas.h"

#include "eval/evaluate.h"
#include "eval/profile_run.h"
#include "harness/embedded_docs.h"
#include "harness/json_schema.h"
#include "harness/promote.h"
#include "harness/verbs.h"
#include "schedule/config.h"
#include "schedule/format.h"
#include "search/loop.h"
#include "search/strategy.h"

namespace megasched::harness {

using nlohmann::json;

namespace {

json object_schema(json properties, json required = json::array()) {
  return {{"type", "object"},
          {"properties", std::move(properties)},
          {"required", std::move(required)},
          {"additionalProperties", false}};
}

json model_property() {
  return {{"type", "string"},
          {"minLength", 1},
          {"default", "toy"},
          {"description",
           "Model: a preset (toy, toy-2L, small, llama-1b, llama-8b) or a local Hugging Face "
           "checkpoint directory"}};
}

json gpu_property(const std::string& fallback) {
  return {{"type", "string"},
          {"minLength", 1},
          {"default", fallback},
          {"description",
           "GPU target the config is lowered for (h100, h200, ...; `megasched targets`), or auto "
           "(the live device)"}};
}

/// `schema` without its descriptions and titles.
json undescribed(json schema) {
  if (schema.is_object()) {
    schema.erase("description");
    schema.erase("title");
    for (auto& [key, value] : schema.items()) value = undescribed(std::move(value));
  } else if (schema.is_array()) {
    for (json& value : schema) value = undescribed(std::move(value));
  }
  return schema;
}

/// The ScheduleConfig's schema (schemas/schedule_config.schema.json). Only evaluate's `config`
/// carries the knobs' descriptions: every tool listing them again would make tools/list several
/// times longer for an agent to read (propose's search_space describes them too).
json config_schema(bool described) {
  json schema = embeddable_schema(schedule::config_schema_json());
  return described ? schema : undescribed(std::move(schema));
}

json config_property(const std::string& what, bool described = false) {
  return {{"description",
           what + ": a ScheduleConfig object (any knob to any listed choice; a missing key takes "
                  "its default; schemas/schedule_config.schema.json), or a string: a named "
                  "config such as best:llama-1b:h100 (a plan over positions: a tool of one "
                  "config takes the bucket that holds its timed position), `default`, or a config "
                  "file path. Absent: the default config."},
          {"anyOf", {config_schema(described), {{"type", "string"}, {"minLength", 1}}}}};
}

json positions_property() {
  return {{"type", "array"},
          {"items", {{"type", "integer"}, {"minimum", 0}, {"maximum", 1 << 20}}},
          {"minItems", 1},
          {"default", eval::EvaluatorOptions{}.positions},
          {"description", "Positions whose logits are checked against the eager forward"}};
}

json integer_property(const std::string& description, json fallback, json minimum, json maximum) {
  return {{"type", "integer"},
          {"default", std::move(fallback)},
          {"minimum", std::move(minimum)},
          {"maximum", std::move(maximum)},
          {"description", description}};
}

json number_property(const std::string& description, double fallback, double minimum) {
  return {{"type", "number"},
          {"default", fallback},
          {"minimum", minimum},
          {"description", description}};
}

json boolean_property(const std::string& description, bool fallback) {
  return {{"type", "boolean"}, {"default", fallback}, {"description", description}};
}

json enum_property(const std::string& description, const std::vector<std::string>& choices,
                   const std::string& fallback) {
  return {{"enum", choices}, {"default", fallback}, {"description", description}};
}

/// A property whose default the server resolves (the loop's keep rule, by device): none in the
/// schema, its description says what absent means.
json without_default(json property) {
  property.erase("default");
  return property;
}

/// A required property has no default: the client gives it.
json required_without_default(json schema) {
  for (const json& key : schema["required"])
    schema["properties"][key.get<std::string>()].erase("default");
  return schema;
}

constexpr int64_t kMaxSeed = int64_t{1} << 53;  // integers JSON carries exactly

json timed_position_property() {
  return integer_property(
      "Position the latency and the floor refer to (the KV cache filled up "
      "to it)",
      0, 0, 1 << 20);
}

json baselines_property(const std::string& fallback) {
  return {{"type", "string"},
          {"default", fallback},
          {"description",
           "GPU trials: the CUDA-graph baselines timed beside the megakernel, as the CLI's "
           "--baselines takes them: \"all\", \"none\", \"auto\" (graph-pdl, or cublas where "
           "graph-pdl cannot run the model) or kinds comma-separated (\"cublas,graph-pdl\"); "
           "speedup_vs_baseline is against the fastest one timed"}};
}

json objective_property() {
  return {{"type", "string"},
          {"default", ""},
          {"description",
           "Positions timed and their weights, as the CLI's --objective takes them: "
           "\"POS:WEIGHT,POS:WEIGHT,...\" (e.g. \"0:1,1024:1,4096:2\"; a bare POS weighs 1). "
           "latency_us is then the weighted mean over them (the verdict's objective lists each); "
           "instead of timed_position. Empty: the timed position alone"}};
}

}  // namespace

const json& propose_schema() {
  static const json schema =
      object_schema({{"model", model_property()},
                     {"gpu", gpu_property("h100")},
                     {"config", config_property("The incumbent")},
                     {"position", integer_property("With a plan as config: the incumbent "
                                                   "is the config of the bucket that "
                                                   "holds this position",
                                                   0, 0, 1 << 20)}});
  return schema;
}

const json& evaluate_schema() {
  static const json schema = object_schema(
      {{"model", model_property()},
       {"gpu", gpu_property("h100")},
       {"device", enum_property("cpu (correctness on the CPU reference VM, predicted latency) or "
                                "gpu (the kernel too, measured latency)",
                                {"cpu", "gpu"}, "cpu")},
       {"config", config_property("The config to evaluate", /*described=*/true)},
       {"positions", positions_property()},
       {"timed_position", timed_position_property()},
       {"objective", objective_property()},
       {"baselines", baselines_property("all")},
       {"seed", integer_property("Weight and token seed for presets", 0, 0, kMaxSeed)},
       {"trial_timeout", number_property("Seconds the trial may take before its worker is killed "
                                         "(status timeout)",
                                         300, 1)}});
  return schema;
}

const json& validate_schema() {
  static const json schema = object_schema(
      {{"model", model_property()},
       {"gpu", gpu_property("h100")},
       {"config", config_property("The config to lower and validate")},
       {"program",
        {{"type", "object"},
         {"description",
          "Instead of a config: a program JSON (schemas/program.schema.json), validated as is"}}},
       {"random_configs", integer_property("Instead: lower and validate this many random configs "
                                           "of the search space (0: none)",
                                           0, 0, 10000)},
       {"seed", integer_property("Seed of random_configs", 1, 0, kMaxSeed)},
       {"kernel", boolean_property("Also build the megakernel of the config or program with NVRTC "
                                   "for the target (no GPU needed) and report its registers, "
                                   "spills and stack under kernel",
                                   false)}});
  return schema;
}

const json& loop_schema() {
  const search::StrategyOptions strategy;
  const search::LoopOptions loop;
  static const json schema = required_without_default(object_schema(
      {{"model", model_property()},
       {"gpu", gpu_property("h100")},
       {"device", enum_property("cpu (predicted latency), gpu (measured), or auto (gpu when one "
                                "is usable)",
                                {"cpu", "gpu", "auto"}, "auto")},
       {"budget", integer_property("Trials in the run, counted across resume (required: a loop "
                                   "through MCP is always bounded)",
                                   loop.budget, 1, 1000)},
       {"minutes", number_property("Wall-clock budget of this call (0: none)", loop.minutes, 0)},
       {"plateau", integer_property("Stop after this many trials in a row without a keep (0: "
                                    "never)",
                                    loop.plateau, 0, 1000)},
       // No default in the schema: absent, the device decides (harness/verbs.h kGpuMinGain).
       {"min_gain",
        without_default(number_property(
            "Keep rule: a candidate replaces the incumbent when faster by more than this share "
            "of it (at most 0.5) and by more than 2 sigma of the two timings' noise. Absent: " +
                schedule::fmt("%g", kGpuMinGain) + " on a GPU device, " +
                schedule::fmt("%g", loop.min_gain) + " on the CPU (predicted latencies)",
            loop.min_gain, 0))},
       {"confirm",
        without_default(integer_property(
            "Keep rule: a measured difference of min_gain or more inside the noise is settled "
            "by timing both configs again back to back this many rounds: a faster candidate is "
            "kept, and a simpler slower one (a near-tie trade) refused, when the faster side "
            "won every round by min_gain in the median (0: never). Absent: " +
                std::to_string(kGpuConfirm) +
                " on a GPU device; the CPU's predicted latencies take no rounds",
            loop.confirm, 0, 10))},
       {"strategy",
        enum_property("Search strategy (the external proposer is the CLI's: through "
                      "MCP, propose and evaluate yourself)",
                      {"random", "hillclimb", "elite", "sweep", "guided", "prior", "bandit"},
                      search::StrategyOptions{}.name)},
       {"seed", integer_property("Strategy seed", strategy.seed, 0, kMaxSeed)},
       {"restart_after", integer_property("hillclimb: restart after this many trials without a "
                                          "local gain",
                                          strategy.restart_after, 1, 1000000)},
       {"exploration", number_property("prior: share of random trials", strategy.exploration, 0)},
       {"pool", integer_property("prior: random candidates ranked per trial", strategy.pool_size, 1,
                                 1000000)},
       {"elite",
        integer_property("elite, sweep, guided: the fastest configs kept to restart or breed from",
                         strategy.elite_size, 1, 4096)},
       {"candidates", integer_property("guided: candidates the model ranks per proposal",
                                       strategy.candidates, 1, 1 << 20)},
       {"guard", number_property("guided: a candidate predicted slower than this x the incumbent "
                                 "is measured only as exploration",
                                 strategy.guard, 1.0)},
       {"resume",
        boolean_property("Continue the last run of this model, target and device", loop.resume)},
       {"warm_start", boolean_property("Trial 0: the best config known for this model, target "
                                       "and device",
                                       loop.warm_start)},
       {"start", config_property("Trial 0 instead of the default config")},
       {"positions", positions_property()},
       {"timed_position", timed_position_property()},
       {"objective", objective_property()},
       {"plan_buckets",
        {{"type", "array"},
         {"items", {{"type", "integer"}, {"minimum", 0}, {"maximum", 1 << 20}}},
         {"default", json::array()},
         {"description",
          "Search a plan (CLI --plan-buckets): each bucket's first position, ascending from 0 "
          "([0, 512, 2048]: [0,512) [512,2048) [2048,max)); each bucket is a loop timed at its "
          "midpoint and checked at its ends, the budget split evenly; gives the per-bucket "
          "summaries and the merged plan (written to plan.json in the run directory). Empty: "
          "one config"}}},
       {"baselines", baselines_property("auto")},
       {"stop_slower",
        number_property("GPU trials: stop timing after 10 steps when their median is above this "
                        "many times the fastest latency measured at that position (as the CLI's "
                        "--stop-slower: 0, or 1.05 and up); 0: time every iteration",
                        2.0, 0)},
       {"weight_seed", integer_property("Weight and token seed for presets", 0, 0, kMaxSeed)},
       {"trial_timeout", number_property("Seconds a trial may take before its worker is killed "
                                         "(status timeout)",
                                         300, 1)}},
      {"budget"}));
  return schema;
}

const json& report_schema() {
  static const json schema = object_schema(
      {{"model", {{"type", "string"}, {"default", ""}, {"description", "Only this model"}}},
       {"target", {{"type", "string"}, {"default", ""}, {"description", "Only this target"}}},
       {"html", boolean_property("Also write the self-contained HTML page (the server's report "
                                 "path; resource megasched://workspace/report.html)",
                                 true)}});
  return schema;
}

const json& profile_schema() {
  const eval::ProfileRunOptions profile;
  static const json schema = object_schema(
      {{"model", model_property()},
       {"gpu", gpu_property("auto")},
       {"config", config_property("The config to profile")},
       {"position", integer_property("Position profiled (positions before it run first, filling "
                                     "the KV cache)",
                                     profile.position, 0, 1 << 20)},
       {"token", integer_property("Token fed at position (-1: the seeded token sequence of "
                                  "evaluate)",
                                  -1, -1, 1 << 30)},
       {"warmup", integer_property("Unstamped steps at position before the stamped one",
                                   profile.warmup, 0, 1000)},
       {"seed", integer_property("Weight and token seed for presets", 0, 0, kMaxSeed)},
       {"timeout", number_property("Seconds the profile may take before it is killed", 900, 1)}});
  return schema;
}

// ---- output schemas, from schemas/ --------------------------------------------------------

json schema_file(const std::string& name) {
  const char* text = embedded_doc("schemas/" + name);
  return text ? embeddable_schema(json::parse(text)) : json(nullptr);
}

const json& propose_output_schema() {
  static const json schema = [] {
    json s =
        object_schema({{"model", {{"type", "string"}}},
                       {"target", {{"type", "string"}}},
                       {"incumbent", config_schema(/*described=*/false)},
                       {"incumbent_fits", {{"type", "boolean"}}},
                       {"incumbent_fit_error", {{"type", "string"}}},
                       {"search_space", schema_file("search_space.schema.json")},
                       {"next", {{"type", "string"}}}},
                      {"model", "target", "incumbent", "incumbent_fits", "search_space", "next"});
    return s;
  }();
  return schema;
}

const json& promote_schema() {
  static const json schema = object_schema(
      {{"model", model_property()},
       {"gpu", gpu_property("h100")},
       {"device",
        enum_property("gpu (measured) or cpu (the ReferenceVm; the benchmark gate on the cost "
                      "model's predicted latencies, entries marked predicted)",
                      {"gpu", "cpu"}, "gpu")},
       {"config", config_property("The candidate")},
       {"rounds", integer_property("Interleaved benchmark rounds", 3, 1, 1000)},
       {"tokens", integer_property("Tokens the verify gate's generate --verify decodes",
                                   kVerifyTokens, 1, 1 << 20)},
       {"verify_only", boolean_property("Run the verify gate alone; promote nothing", false)},
       {"timeout", number_property("Seconds the promotion may take before it is killed", 3600, 1)}},
      {"config"});
  return schema;
}

const json& registry_list_schema() {
  static const json schema = object_schema(json::object());
  return schema;
}

const json& registry_show_schema() {
  static const json schema = object_schema(
      {{"id",
        {{"type", "string"},
         {"minLength", 1},
         {"description", "Entry id (registry_list), <model>_<gpu>_<dtype>_<hash8>_v<n>"}}}},
      {"id"});
  return schema;
}

}  // namespace megasched::harness
