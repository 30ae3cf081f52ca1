#include "schedule/plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace megasched::schedule {

namespace {

using nlohmann::json;

std::string end_text(int end) { return end == kPlanEndOfModel ? "max" : std::to_string(end); }

std::string range_text(int begin, int end) {
  return "[" + std::to_string(begin) + ", " + end_text(end) + ")";
}

std::string bucket_text(const std::vector<PlanBucket>& buckets, size_t i) {
  return "bucket " + std::to_string(i) + " " + bucket_label(buckets[i]);
}

// A position field: an integer in [0, INT_MAX].
std::optional<int> position_field(const json& value) {
  if (!value.is_number_integer()) return std::nullopt;
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int>::max())) return std::nullopt;
    return static_cast<int>(v);
  }
  const auto v = value.get<int64_t>();
  if (v < 0 || v > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<PlanBucket> parse_bucket(const json& j, size_t i, std::string* error) {
  const std::string where = "bucket " + std::to_string(i);
  auto fail = [&](const std::string& why) -> std::optional<PlanBucket> {
    if (error) *error = where + ": " + why;
    return std::nullopt;
  };
  if (!j.is_object())
    return fail("not an object (" + json_excerpt(j) +
                "); write {\"begin\": 0, \"end\": 512, "
                "\"config\": {...}}");
  for (const auto& [key, value] : j.items())
    if (key != "begin" && key != "end" && key != "config")
      return fail("unknown key '" + text_excerpt(key) + "' (a bucket has begin, end and config)");
  if (!j.contains("begin") || !j.contains("end") || !j.contains("config"))
    return fail("a bucket needs begin, end and config");
  PlanBucket b;
  const auto begin = position_field(j["begin"]);
  if (!begin)
    return fail("begin " + json_excerpt(j["begin"]) + " is not a position (an integer >= 0)");
  b.begin = *begin;
  if (j["end"] == "max") {
    b.end = kPlanEndOfModel;
  } else {
    const auto end = position_field(j["end"]);
    if (!end)
      return fail("end " + json_excerpt(j["end"]) +
                  " is not a position (an integer > begin, or \"max\" for the model's max_seq)");
    if (*end <= b.begin)
      return fail("end " + std::to_string(*end) + " is not past begin " + std::to_string(b.begin) +
                  " (a bucket holds the positions [begin, end))");
    b.end = *end;
  }
  std::string why;
  auto config = parse_config(j["config"], &why);
  if (!config) return fail("config: " + why);
  b.config = *config;
  return b;
}

// The sorted buckets leave no position without a bucket and put none in two; "" or the message.
std::string coverage_fault(const std::vector<PlanBucket>& buckets) {
  if (buckets.front().begin != 0)
    return "positions " + range_text(0, buckets.front().begin) +
           " have no bucket (the first bucket begins at " + std::to_string(buckets.front().begin) +
           "; a plan covers every position from 0)";
  for (size_t i = 0; i + 1 < buckets.size(); ++i) {
    const PlanBucket& a = buckets[i];
    const PlanBucket& b = buckets[i + 1];
    if (a.end == kPlanEndOfModel || a.end > b.begin) {
      const int overlap_end = a.end == kPlanEndOfModel
                                  ? b.end
                                  : (b.end == kPlanEndOfModel ? a.end : std::min(a.end, b.end));
      return "positions " + range_text(b.begin, overlap_end) + " are in " +
             bucket_text(buckets, i) + " and " + bucket_text(buckets, i + 1) +
             " (buckets must not overlap: end one where the next begins)";
    }
    if (a.end < b.begin)
      return "positions " + range_text(a.end, b.begin) + " have no bucket (between " +
             bucket_text(buckets, i) + " and " + bucket_text(buckets, i + 1) +
             "; end one where the next begins)";
  }
  return "";
}

}  // namespace

Plan single_config_plan(const ScheduleConfig& config) {
  return Plan{{PlanBucket{0, kPlanEndOfModel, config}}};
}

bool is_plan_document(const json& j) { return j.is_object() && j.contains("buckets"); }

std::optional<Plan> parse_plan(const json& j, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<Plan> {
    if (error) *error = why;
    return std::nullopt;
  };
  if (!is_plan_document(j)) {
    auto config = parse_config(j, error);
    if (!config) return std::nullopt;
    return single_config_plan(*config);
  }
  for (const auto& [key, value] : j.items())
    if (key != "buckets")
      return fail("unknown plan key '" + text_excerpt(key) +
                  "' (a plan document has only \"buckets\"; schemas/plan.schema.json)");
  const json& list = j["buckets"];
  if (!list.is_array() || list.empty())
    return fail(
        "\"buckets\" must be a non-empty array of {begin, end, config} "
        "(schemas/plan.schema.json)");
  Plan plan;
  for (size_t i = 0; i < list.size(); ++i) {
    auto bucket = parse_bucket(list[i], i, error);
    if (!bucket) return std::nullopt;
    plan.buckets.push_back(std::move(*bucket));
  }
  std::stable_sort(plan.buckets.begin(), plan.buckets.end(),
                   [](const PlanBucket& a, const PlanBucket& b) { return a.begin < b.begin; });
  const std::string fault = coverage_fault(plan.buckets);
  if (!fault.empty()) return fail(fault);
  return plan;
}

std::optional<Plan> parse_plan_text(const std::string& text, std::string* error) {
  auto j = parse_json_text(text, error);
  if (!j) return std::nullopt;
  return parse_plan(*j, error);
}

json to_json(const Plan& plan) {
  if (plan.single()) return to_json(plan.buckets[0].config);
  json buckets = json::array();
  for (const PlanBucket& b : plan.buckets)
    buckets.push_back({{"begin", b.begin},
                       {"end", b.end == kPlanEndOfModel ? json("max") : json(b.end)},
                       {"config", to_json(b.config)}});
  return {{"buckets", buckets}};
}

int bucket_end(const PlanBucket& bucket, int max_seq) {
  return bucket.end == kPlanEndOfModel ? max_seq : bucket.end;
}

std::string bucket_label(const PlanBucket& bucket) { return range_text(bucket.begin, bucket.end); }

bool check_plan_covers(const Plan& plan, int max_seq, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return false;
  };
  if (plan.buckets.empty()) return fail("the plan has no bucket");
  for (size_t i = 0; i < plan.buckets.size(); ++i) {
    const PlanBucket& b = plan.buckets[i];
    if (b.begin >= max_seq || (b.end != kPlanEndOfModel && b.end > max_seq))
      return fail(bucket_text(plan.buckets, i) + " lies beyond the model's " +
                  std::to_string(max_seq) +
                  " positions (max_seq): the plan is for a longer "
                  "context; end the last bucket at \"max\" below " +
                  std::to_string(max_seq));
  }
  const PlanBucket& last = plan.buckets.back();
  if (last.end != kPlanEndOfModel && last.end < max_seq)
    return fail("positions " + range_text(last.end, max_seq) +
                " have no bucket (the model has max_seq " + std::to_string(max_seq) +
                "; end the last bucket at \"max\")");
  return true;
}

size_t plan_bucket_index(const Plan& plan, int position) {
  for (size_t i = 0; i < plan.buckets.size(); ++i) {
    const PlanBucket& b = plan.buckets[i];
    if (position >= b.begin && (b.end == kPlanEndOfModel || position < b.end)) return i;
  }
  std::fprintf(stderr, "%s:%d: bug: position %d is in no bucket of the plan\n", __FILE__, __LINE__,
               position);
  std::abort();
}

const ScheduleConfig& plan_config_for(const Plan& plan, int position) {
  return plan.buckets[plan_bucket_index(plan, position)].config;
}

json plan_schema_json() {
  const json bucket = {
      {"type", "object"},
      {"additionalProperties", false},
      {"required", {"begin", "end", "config"}},
      {"properties",
       {{"begin", {{"type", "integer"}, {"minimum", 0}, {"description", "first position"}}},
        {"end",
         {{"description",
           "one past the last position, or \"max\": the model's max_seq (a position at end "
           "belongs to the next bucket)"},
          {"anyOf", {{{"type", "integer"}, {"minimum", 1}}, {{"enum", {"max"}}}}}}},
        {"config", {{"$ref", "schedule_config.schema.json"}}}}}};
  return {{"$id", "https://megasched.dev/schemas/plan.schema.json"},
          {"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"title", "Plan"},
          {"description",
           "A schedule for every decode position: buckets [begin, end) covering [0, max_seq) of "
           "the model without a gap or an overlap, each with its ScheduleConfig. A plain config "
           "is the one-bucket plan [0, max); every reader of a config reads a plan too. "
           "Generated by plan_schema_json in schedule/plan.cpp (tests/schemas_test.cpp checks "
           "the file is what it generates)."},
          {"type", "object"},
          {"additionalProperties", false},
          {"required", {"buckets"}},
          {"properties", {{"buckets", {{"type", "array"}, {"minItems", 1}, {"items", bucket}}}}}};
}

}  // namespace megasched::schedule
