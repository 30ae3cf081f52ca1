#include "eval/objective.h"

#include <gtest/gtest.h>

namespace megasched::eval {
namespace {

/// The message parse_objective gives `text` ("" when it parses).
std::string refusal(const std::string& text) {
  std::string error;
  return parse_objective(text, &error) ? "" : error;
}

TEST(Objective, ParsesWeightsAndBarePositionsIntoAscendingTerms) {
  std::string error;
  const auto o = parse_objective("4096:2, 0 ,1024:0.5", &error);
  ASSERT_TRUE(o) << error;
  ASSERT_EQ(o->size(), 3u);
  EXPECT_EQ((*o)[0].position, 0);
  EXPECT_EQ((*o)[0].weight, 1.0);
  EXPECT_EQ((*o)[1].position, 1024);
  EXPECT_EQ((*o)[1].weight, 0.5);
  EXPECT_EQ((*o)[2].position, 4096);
  EXPECT_EQ((*o)[2].weight, 2.0);
  EXPECT_EQ(objective_text(*o), "0:1,1024:0.5,4096:2");
  EXPECT_EQ(objective_positions(*o), (std::vector<int>{0, 1024, 4096}));
}

TEST(Objective, CanonicalTextIsOneSpellingPerObjective) {
  std::string error;
  const auto a = parse_objective("1024:1,0:1.0,4096:2e0", &error);
  const auto b = parse_objective("0,1024,4096:2", &error);
  ASSERT_TRUE(a && b) << error;
  EXPECT_EQ(objective_text(*a), objective_text(*b));
  EXPECT_EQ(objective_text(*a), "0:1,1024:1,4096:2");
  // The weight that runs is the one the text (and so the schedule id) names.
  const auto c = parse_objective("0:0.333333333333", &error);
  ASSERT_TRUE(c) << error;
  EXPECT_EQ(objective_text(*c), "0:0.333333");
  EXPECT_EQ((*c)[0].weight, 0.333333);
  EXPECT_EQ(objective_text({}), "");
}

TEST(Objective, RefusesBadTextWithTheFaultAndTheSyntax) {
  EXPECT_NE(refusal("").find("--objective is empty"), std::string::npos);
  EXPECT_NE(refusal("0:1,x:2").find("position 'x' is not an integer"), std::string::npos);
  EXPECT_NE(refusal("0:1,,4").find("entry '' is empty"), std::string::npos);
  EXPECT_NE(refusal("0:").find("weight '' is not a number"), std::string::npos);
  EXPECT_NE(refusal("0:1:2").find("weight '1:2' is not a number"), std::string::npos);
  EXPECT_NE(refusal("1.5:1").find("position '1.5' is not an integer"), std::string::npos);
  EXPECT_NE(refusal("0:1,x:2").find("POS:WEIGHT,POS:WEIGHT"), std::string::npos);
  EXPECT_NE(refusal("99999999999").find("is too large"), std::string::npos);
  EXPECT_NE(refusal("0:1,-5:1").find("position -5 is negative"), std::string::npos);
  EXPECT_NE(
      refusal("0:0").find("the weight of position 0 is 0; a weight is a finite number above 0"),
      std::string::npos);
  EXPECT_NE(refusal("7:-1").find("the weight of position 7 is -1"), std::string::npos);
  EXPECT_NE(refusal("7:nan").find("a weight is a finite number above 0"), std::string::npos);
  EXPECT_NE(refusal("7:inf").find("a weight is a finite number above 0"), std::string::npos);
  EXPECT_NE(refusal("7:1,0:1,7:2").find("position 7 is given twice"), std::string::npos);
  EXPECT_EQ(refusal("0:1,7:2"), "");
  // The MCP tools name their argument.
  std::string error;
  EXPECT_FALSE(parse_objective("0:0", &error, "objective"));
  EXPECT_EQ(error.rfind("objective: ", 0), 0u) << error;
}

TEST(Objective, RangeErrorNamesThePositionAndTheModelsMaxSeq) {
  EXPECT_EQ(objective_range_error({{0, 1}, {127, 1}}, "toy", 128), "");
  const std::string e = objective_range_error({{0, 1}, {128, 1}}, "toy", 128);
  EXPECT_NE(e.find("position 128 is beyond model toy's max_seq 128"), std::string::npos) << e;
  EXPECT_NE(e.find("[0, 127]"), std::string::npos) << e;
}

TEST(Objective, WeightedMeanWeighsEachTerm) {
  const Objective o = {{0, 1}, {1024, 1}, {4096, 2}};
  EXPECT_DOUBLE_EQ(weighted_mean(o, {10, 20, 40}), (10 + 20 + 80) / 4.0);
  EXPECT_DOUBLE_EQ(weighted_mean({{5, 3}}, {7}), 7);
}

TEST(Objective, ReadsBackFromVerdictEntries) {
  const nlohmann::json entries = {{{"position", 0}, {"weight", 1}, {"latency_us", 3.0}},
                                  {{"position", 60}, {"weight", 2.5}, {"latency_us", nullptr}}};
  EXPECT_EQ(objective_text(objective_of_entries(entries)), "0:1,60:2.5");
  EXPECT_TRUE(objective_of_entries(nullptr).empty());
  EXPECT_TRUE(objective_of_entries(nlohmann::json::array({{{"position", "x"}}})).empty());
}

// What warm start adopts and the prior trains on: a verdict judged as the loop judges.
TEST(Objective, JudgedAlikeIsTheSameObjectiveOrWithoutOneTheSamePosition) {
  const nlohmann::json entries = {{{"position", 0}, {"weight", 1}, {"latency_us", 3.0}},
                                  {{"position", 4096}, {"weight", 1}, {"latency_us", 5.0}}};
  std::string error;
  const Objective both = *parse_objective("0:1,4096:1", &error);
  const Objective heavier = *parse_objective("0:1,4096:2", &error);
  EXPECT_TRUE(judged_alike(0, nullptr, 0, {}));
  EXPECT_FALSE(judged_alike(4096, nullptr, 0, {}));  // another timed position
  EXPECT_FALSE(judged_alike(0, entries, 0, {}));     // a weighted mean, not a position-0 latency
  EXPECT_FALSE(judged_alike(0, nullptr, 0, both));   // a single position, not the mean
  EXPECT_TRUE(judged_alike(0, entries, 0, both));
  EXPECT_TRUE(judged_alike(0, entries, 1024, both));   // the objective decides, not the position
  EXPECT_FALSE(judged_alike(0, entries, 0, heavier));  // other weights
}

}  // namespace
}  // namespace megasched::eval
