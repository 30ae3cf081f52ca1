// Plans over positions (schedule/plan.h): parsing, coverage, bucket resolution, canonical form.
#include "schedule/plan.h"

#include <gtest/gtest.h>

namespace megasched::schedule {
namespace {

using nlohmann::json;

json bucket(int begin, json end, json config = json::object()) {
  return {{"begin", begin}, {"end", end}, {"config", config}};
}

std::string parse_error(const json& j) {
  std::string error;
  EXPECT_FALSE(parse_plan(j, &error).has_value()) << j.dump();
  return error;
}

TEST(Plan, AConfigIsTheOneBucketPlanWithTheSameCanonicalJson) {
  ScheduleConfig config;
  config.kernel.unroll = 4;
  std::string error;
  auto plan = parse_plan(to_json(config), &error);
  ASSERT_TRUE(plan) << error;
  ASSERT_EQ(plan->buckets.size(), 1u);
  EXPECT_TRUE(plan->single());
  EXPECT_EQ(plan->buckets[0].config, config);
  EXPECT_EQ(to_json(*plan), to_json(config));
  // The same plan written as a bucket document is the same plan, with the same canonical JSON.
  auto doc = parse_plan({{"buckets", {bucket(0, "max", to_json(config))}}}, &error);
  ASSERT_TRUE(doc) << error;
  EXPECT_EQ(to_json(*doc), to_json(config));
}

TEST(Plan, ResolvesEveryBoundaryToTheBucketItBegins) {
  json lo = {{"kernel", {{"unroll", 1}}}};
  json mid = {{"kernel", {{"unroll", 4}}}};
  json hi = {{"kernel", {{"unroll", 8}}}};
  std::string error;
  auto plan = parse_plan(
      {{"buckets", {bucket(512, 2048, mid), bucket(0, 512, lo), bucket(2048, "max", hi)}}}, &error);
  ASSERT_TRUE(plan) << error;
  ASSERT_EQ(plan->buckets.size(), 3u);
  EXPECT_EQ(plan->buckets[0].begin, 0);  // sorted by begin
  EXPECT_FALSE(plan->single());
  ASSERT_TRUE(check_plan_covers(*plan, 4096, &error)) << error;
  const std::vector<std::pair<int, int>> expect = {{0, 1},   {1, 1},    {511, 1},  {512, 4},
                                                   {513, 4}, {2047, 4}, {2048, 8}, {4095, 8}};
  for (const auto& [position, unroll] : expect) {
    EXPECT_EQ(plan_config_for(*plan, position).kernel.unroll, unroll) << position;
  }
  EXPECT_EQ(plan_bucket_index(*plan, 511), 0u);
  EXPECT_EQ(plan_bucket_index(*plan, 512), 1u);
  EXPECT_EQ(plan_bucket_index(*plan, 2048), 2u);
  EXPECT_EQ(bucket_end(plan->buckets[2], 4096), 4096);
  EXPECT_EQ(bucket_label(plan->buckets[2]), "[2048, max)");
}

TEST(Plan, RefusesOverlappingBucketsNamingThePositions) {
  const std::string error = parse_error({{"buckets", {bucket(0, 600), bucket(512, "max")}}});
  EXPECT_EQ(error,
            "positions [512, 600) are in bucket 0 [0, 600) and bucket 1 [512, max) (buckets must "
            "not overlap: end one where the next begins)");
  EXPECT_NE(parse_error({{"buckets", {bucket(0, "max"), bucket(512, "max")}}})
                .find("positions [512, max) are in bucket 0 [0, max) and bucket 1 [512, max)"),
            std::string::npos);
  EXPECT_NE(parse_error({{"buckets", {bucket(0, 64), bucket(0, "max")}}})
                .find("positions [0, 64) are in bucket 0"),
            std::string::npos);
}

TEST(Plan, RefusesMissingRangesNamingThePositions) {
  EXPECT_EQ(parse_error({{"buckets", {bucket(0, 512), bucket(600, "max")}}}),
            "positions [512, 600) have no bucket (between bucket 0 [0, 512) and bucket 1 [600, "
            "max); end one where the next begins)");
  EXPECT_NE(
      parse_error({{"buckets", {bucket(16, "max")}}}).find("positions [0, 16) have no bucket"),
      std::string::npos);
  std::string error;
  auto short_plan = parse_plan({{"buckets", {bucket(0, 64), bucket(64, 100)}}}, &error);
  ASSERT_TRUE(short_plan) << error;
  EXPECT_FALSE(check_plan_covers(*short_plan, 128, &error));
  EXPECT_EQ(error,
            "positions [100, 128) have no bucket (the model has max_seq 128; end the last "
            "bucket at \"max\")");
  EXPECT_TRUE(check_plan_covers(*short_plan, 100, &error)) << error;
  EXPECT_FALSE(check_plan_covers(*short_plan, 64, &error));
  EXPECT_NE(error.find("bucket 1 [64, 100) lies beyond the model's 64 positions"),
            std::string::npos)
      << error;
}

TEST(Plan, RefusesMalformedBucketsNamingTheBucket) {
  EXPECT_NE(parse_error({{"buckets", json::array()}}).find("non-empty array"), std::string::npos);
  EXPECT_NE(parse_error({{"buckets", {bucket(0, 0)}}}).find("bucket 0: end 0 is not past begin 0"),
            std::string::npos);
  EXPECT_NE(parse_error({{"buckets", {bucket(-1, "max")}}}).find("bucket 0: begin -1"),
            std::string::npos);
  EXPECT_NE(parse_error({{"buckets", {bucket(0, "end")}}}).find("bucket 0: end \"end\""),
            std::string::npos);
  EXPECT_NE(
      parse_error({{"buckets", {bucket(0, 8), bucket(8, "max", {{"kernel", {{"unrol", 2}}}})}}})
          .find("bucket 1: config: unknown config key 'kernel.unrol'"),
      std::string::npos);
  EXPECT_NE(
      parse_error({{"buckets", {bucket(0, "max")}}, {"name", "x"}}).find("unknown plan key 'name'"),
      std::string::npos);
  json extra = bucket(0, "max");
  extra["position"] = 3;
  EXPECT_NE(parse_error({{"buckets", {extra}}}).find("bucket 0: unknown key 'position'"),
            std::string::npos);
}

TEST(Plan, CanonicalJsonRoundTripsAndIsSortedByBegin) {
  std::string error;
  auto plan = parse_plan_text(
      R"({"buckets": [{"begin": 64, "end": "max", "config": {"kernel": {"unroll": 8}}},
                      {"begin": 0, "end": 64, "config": {}}]})",
      &error);
  ASSERT_TRUE(plan) << error;
  const json canonical = to_json(*plan);
  ASSERT_EQ(canonical["buckets"].size(), 2u);
  EXPECT_EQ(canonical["buckets"][0]["begin"], 0);
  EXPECT_EQ(canonical["buckets"][1]["end"], "max");
  EXPECT_EQ(canonical["buckets"][0]["config"], to_json(ScheduleConfig{}));
  auto again = parse_plan(canonical, &error);
  ASSERT_TRUE(again) << error;
  EXPECT_EQ(to_json(*again), canonical);
  EXPECT_FALSE(parse_plan_text(R"({"buckets": [], "buckets": []})", &error));
  EXPECT_NE(error.find("appears twice"), std::string::npos) << error;
}

}  // namespace
}  // namespace megasched::schedule
