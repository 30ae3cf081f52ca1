#include "schedule/config.h"

#include <gtest/gtest.h>

#include <set>

namespace megasched::schedule {
namespace {

TEST(ScheduleConfigParse, EmptyObjectGivesDefaults) {
  std::string error;
  auto c = parse_config_text("{}", &error);
  ASSERT_TRUE(c) << error;
  EXPECT_EQ(*c, ScheduleConfig{});
}

TEST(ScheduleConfigParse, UnknownTopLevelKeyNamesItAndSuggestsNearest) {
  std::string error;
  EXPECT_FALSE(parse_config_text(R"({"tilng": {}})", &error));
  EXPECT_NE(error.find("'tilng'"), std::string::npos) << error;
  EXPECT_NE(error.find("did you mean 'tiling'"), std::string::npos) << error;
}

TEST(ScheduleConfigParse, UnknownNestedKeyNamesFullPathAndSuggestion) {
  std::string error;
  EXPECT_FALSE(parse_config_text(R"({"tiling": {"gemv_rows_per_tsk": 64}})", &error));
  EXPECT_NE(error.find("tiling.gemv_rows_per_tsk"), std::string::npos) << error;
  EXPECT_NE(error.find("did you mean 'tiling.gemv_rows_per_task'"), std::string::npos) << error;
}

TEST(ScheduleConfigParse, WrongTypeNamesKeyAndAllowedValues) {
  std::string error;
  EXPECT_FALSE(parse_config_text(R"({"fusion": {"norm_into_gemv": 1}})", &error));
  EXPECT_NE(error.find("fusion.norm_into_gemv"), std::string::npos) << error;
  EXPECT_NE(error.find("allowed values: true, false"), std::string::npos) << error;
}

TEST(ScheduleConfigParse, OutOfRangeValueNamesAllowedValues) {
  std::string error;
  EXPECT_FALSE(parse_config_text(R"({"tiling": {"gemv_rows_per_task": 63}})", &error));
  EXPECT_NE(error.find("63"), std::string::npos) << error;
  EXPECT_NE(error.find("8, 16, 32, 64, 128, 256"), std::string::npos) << error;
}

TEST(ScheduleConfigParse, FloatWhereIntegerExpectedIsRejected) {
  std::string error;
  EXPECT_FALSE(parse_config_text(R"({"tiling": {"gemv_rows_per_task": 64.0}})", &error));
  EXPECT_NE(error.find("tiling.gemv_rows_per_task"), std::string::npos) << error;
}

TEST(ScheduleConfigParse, BadJsonIsAnErrorWithPosition) {
  std::string error;
  EXPECT_FALSE(parse_config_text(R"({"tiling": )", &error));
  EXPECT_NE(error.find("not valid JSON"), std::string::npos) << error;
}

TEST(ScheduleConfigParse, NonObjectGroupIsRejected) {
  std::string error;
  EXPECT_FALSE(parse_config_text(R"({"tiling": 3})", &error));
  EXPECT_NE(error.find("'tiling' must be an object"), std::string::npos) << error;
}

TEST(ScheduleConfigCanonical, RoundTripsEveryKnob) {
  ScheduleConfig c;
  c.tiling.gemv_k_split = 4;
  c.dependencies.residual = Granularity::kPerSlice;
  c.assignment.policy = AssignPolicy::kDynamic;
  c.kernel.weight_load = WeightLoad::kLdgStream;
  std::string error;
  auto back = parse_config(to_json(c), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(*back, c);
  EXPECT_EQ(canonical_string(*back), canonical_string(c));
}

TEST(ScheduleConfigCanonical, EveryKnobHasItsDefaultAmongChoicesAndDistinctPaths) {
  std::set<std::string> paths;
  for (const auto& k : knob_specs()) {
    EXPECT_TRUE(paths.insert(k.path).second) << k.path;
    bool found = false;
    for (const auto& c : k.choices) found = found || c == k.default_value;
    EXPECT_TRUE(found) << k.path;
    EXPECT_GE(k.choices.size(), 2u) << k.path << " has a single choice: a knob that does nothing";
    EXPECT_FALSE(k.description.empty()) << k.path;
  }
  EXPECT_EQ(paths.size(), 38u);
}

TEST(ScheduleConfigKnobs, DefaultConstructionTakesEveryDefaultOfTheTable) {
  const ScheduleConfig c;
  for (const KnobSpec& spec : knob_specs()) EXPECT_EQ(get_knob(c, spec.path), spec.default_value);
}

TEST(ScheduleConfigKnobs, KernelKnobsBecomeTheirMacrosWithNamedChoicesAsEnumValues) {
  ScheduleConfig c;
  EXPECT_EQ(kernel_knob_defines(c), (std::map<std::string, int>{{"MS_ATTN_STAGED", 0},
                                                                {"MS_RING_INFLIGHT", 0},
                                                                {"MS_ROWS_PER_WARP", 2},
                                                                {"MS_SILU_COPIES", 0},
                                                                {"MS_STREAM_DEPTH", 2},
                                                                {"MS_STREAM_HELD", 0},
                                                                {"MS_STREAM_HELD_EVERY", 2},
                                                                {"MS_UNROLL", 2},
                                                                {"MS_VECTOR_BYTES", 16},
                                                                {"MS_WEIGHT_LOAD", 0},
                                                                {"MS_WEIGHT_RING", 0}}));
  c.kernel.weight_load = WeightLoad::kLdgStream;
  c.kernel.weight_stream = WeightStream::kSmemRing;
  c.kernel.unroll = 8;
  const std::map<std::string, int> d = kernel_knob_defines(c);
  EXPECT_EQ(d.at("MS_WEIGHT_LOAD"), static_cast<int>(WeightLoad::kLdgStream));
  EXPECT_EQ(d.at("MS_WEIGHT_RING"), static_cast<int>(WeightStream::kSmemRing));
  EXPECT_EQ(d.at("MS_UNROLL"), 8);
  c.smem.pages = 4;
  c.smem.inflight_pages = 3;
  EXPECT_EQ(kernel_knob_defines(c).at("MS_RING_INFLIGHT"), 3);
  // The kernel group holds only kernel build knobs; the one build knob outside it is the weight
  // ring's cap on its pages in flight, kept with the ring's pages (smem.*) it must stay below.
  std::set<std::string> outside;
  for (const KnobSpec& spec : knob_specs()) {
    if (spec.path.rfind("kernel.", 0) == 0)
      EXPECT_FALSE(spec.define.empty()) << spec.path << ": a kernel knob is a build knob";
    else if (!spec.define.empty())
      outside.insert(spec.path);
  }
  EXPECT_EQ(outside, std::set<std::string>{"smem.inflight_pages"});
}

TEST(ScheduleConfigKnobs, SetAndGetByPathAndChangedKnobs) {
  ScheduleConfig c;
  std::string error;
  ASSERT_TRUE(set_knob(&c, "tiling.attn_kv_partitions", 4, &error)) << error;
  EXPECT_EQ(c.tiling.attn_kv_partitions, 4);
  EXPECT_EQ(get_knob(c, "tiling.attn_kv_partitions"), 4);
  EXPECT_FALSE(set_knob(&c, "tiling.attn_kv_partitions", 3, &error));
  EXPECT_FALSE(set_knob(&c, "tiling.nope", 3, &error));
  EXPECT_EQ(changed_knobs(ScheduleConfig{}, c),
            std::vector<std::string>{"tiling.attn_kv_partitions"});
  EXPECT_EQ(complexity(c), 1);
}

TEST(ScheduleConfigSearchSpace, FiltersChoicesThatDoNotFitTheShape) {
  ModelShape shape;
  shape.name = "t";
  shape.hidden = 64;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 16;
  shape.ffn = 128;
  auto space = search_space_json(shape);
  for (const auto& k : space["knobs"]) {
    if (k["path"] == "tiling.attn_q_heads_per_task") {
      EXPECT_EQ(k["choices"], nlohmann::json({0, 1, 2}));
    }
    if (k["path"] == "tiling.gemv_k_split") {
      EXPECT_EQ(k["choices"], nlohmann::json({1, 2, 4, 8}));  // 64 columns split into >= 8
    }
  }
  shape.hidden = 48;  // 48 columns: only k_split 1 and 2 keep chunks multiples of 8
  for (const auto& k : search_space_json(shape)["knobs"]) {
    if (k["path"] == "tiling.gemv_k_split") {
      EXPECT_EQ(k["choices"], nlohmann::json({1, 2}));
    }
  }
}

TEST(ScheduleConfigHash, IsStableAndSensitive) {
  EXPECT_EQ(hash_hex(""), "cbf29ce484222325");
  EXPECT_NE(hash_hex("a"), hash_hex("b"));
  EXPECT_EQ(hash_hex("abc").size(), 16u);
}

TEST(ScheduleConfigNearest, SuggestsOnlyCloseNames) {
  EXPECT_EQ(nearest("evalute", {"evaluate", "propose"}), "evaluate");
  EXPECT_EQ(nearest("zzzzzzzz", {"evaluate", "propose"}), "");
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
}

TEST(ScheduleConfigParse, ARepeatedKeyIsAnErrorNotASilentlyDroppedGroup) {
  std::string error;
  // nlohmann keeps the last "kernel": unroll 4 would be dropped without a word.
  EXPECT_FALSE(
      parse_config_text(R"({"kernel": {"unroll": 4}, "kernel": {"vector_bytes": 8}})", &error));
  EXPECT_NE(error.find("key 'kernel' appears twice in one object"), std::string::npos) << error;
  EXPECT_FALSE(parse_config_text(R"({"kernel": {"unroll": 4, "unroll": 8}})", &error));
  EXPECT_NE(error.find("key 'kernel.unroll' appears twice"), std::string::npos) << error;
  // The same key in two objects is no repeat.
  EXPECT_TRUE(
      parse_json_text(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})", &error))
      << error;
}

TEST(ScheduleConfigParse, AHugeOrDeepValueIsEchoedByItsHeadOnly) {
  std::string error;
  const std::string deep =
      "{\"kernel\": {\"unroll\": " + std::string(60000, '[') + std::string(60000, ']') + "}}";
  EXPECT_FALSE(parse_config_text(deep, &error));  // no stack overflow building the message
  EXPECT_NE(error.find("has value [[[[[[[[[[..."), std::string::npos) << error.substr(0, 300);
  EXPECT_LT(error.size(), 300u);
  const std::string big = "{\"kernel\": {\"unroll\": \"" + std::string(10 << 20, 'x') + "\"}}";
  EXPECT_FALSE(parse_config_text(big, &error));
  EXPECT_NE(error.find("\"xxxxxxxxxx"), std::string::npos);
  EXPECT_NE(error.find("..."), std::string::npos);
  EXPECT_LT(error.size(), 300u);
  const std::string key = "{\"tiling\": {\"" + std::string(10 << 20, 'k') + "\": 1}}";
  EXPECT_FALSE(parse_config_text(key, &error));
  EXPECT_LT(error.size(), 400u);
  EXPECT_FALSE(parse_config_text("{\"kernel\": {\"unroll\": \"" + std::string(1000, 'y'), &error));
  EXPECT_LT(error.size(), 400u) << "the parser's own message echoes input too";
}

TEST(ScheduleConfigExcerpt, CutsWithAnEllipsisAndKeepsShortValuesWhole) {
  EXPECT_EQ(json_excerpt(nlohmann::json{{"a", 1}}), R"({"a":1})");
  EXPECT_EQ(json_excerpt(nlohmann::json::array({1, 2, 3}), 4), "[1,2...");
  EXPECT_EQ(json_excerpt(std::string(100, 'z'), 5), "\"zzzz...");
  EXPECT_EQ(text_excerpt("abcdef", 3), "abc...");
  EXPECT_EQ(text_excerpt("abc", 3), "abc");
}

}  // namespace
}  // namespace megasched::schedule
