// The whole-generation comparison (eval/generate_bench.h): its cases, the statistics of a row,
// the token comparison against the reference row, the peer's document and the rendering on any
// machine; and on a GPU (GenerateBenchGpu, skipped without a device) a toy run of a
// two-bucket plan, the default config and the cuBLAS baseline.
#include "eval/generate_bench.h"

#include <gtest/gtest.h>

#include "eval/device.h"
#include "eval/evaluate.h"
#include "schedule/model.h"

namespace megasched::eval {
namespace {

using nlohmann::json;

GenerateBenchRow row_of(const std::string& name, const std::string& kind, GenerateCase c,
                        std::vector<int32_t> tokens) {
  GenerateBenchRow r;
  r.name = name;
  r.kind = kind;
  r.gen = c;
  r.tokens = std::move(tokens);
  r.token_p50_us = 10.0;
  r.token_p90_us = 12.0;
  return r;
}

TEST(GenerateBench, ParsesRepeatedAndCommaSeparatedCases) {
  std::string error;
  const auto cases = parse_generate_cases({"128:4096,4096:512", "1:1"}, &error);
  ASSERT_TRUE(cases) << error;
  ASSERT_EQ(cases->size(), 3u);
  EXPECT_EQ((*cases)[0].prompt_len, 128);
  EXPECT_EQ((*cases)[0].new_tokens, 4096);
  EXPECT_EQ((*cases)[1].prompt_len, 4096);
  EXPECT_EQ((*cases)[1].new_tokens, 512);
  EXPECT_EQ((*cases)[2].prompt_len, 1);
}

TEST(GenerateBench, RefusesCasesThatAreNotTwoPositiveCounts) {
  for (const char* bad : {"128", "0:4", "4:0", "-1:4", "a:b", "1:2:3", ""}) {
    SCOPED_TRACE(bad);
    std::string error;
    EXPECT_FALSE(parse_generate_cases({bad}, &error));
    EXPECT_NE(error.find("--generate"), std::string::npos) << error;
  }
}

TEST(GenerateBench, ACaseBeyondTheModelsPositionsNamesTheSumAndTheLimit) {
  const schedule::ModelShape toy = *schedule::find_preset("toy");  // 128 positions
  EXPECT_EQ(generate_case_error(toy, {100, 28}), "");
  EXPECT_EQ(generate_case_error(toy, {100, 29}),
            "--generate 100:29: PROMPT_LEN + NEW_TOKENS = 129 exceeds the 128 positions of model "
            "toy (hint: keep PROMPT_LEN + NEW_TOKENS <= 128)");
}

TEST(GenerateBench, ThePromptIsTheTrialsTokenIds) {
  const schedule::ModelShape toy = *schedule::find_preset("toy");
  EXPECT_EQ(generate_case_prompt(toy, {9, 1}, 5), trial_tokens(toy.vocab, 9, 5));
  EXPECT_NE(generate_case_prompt(toy, {9, 1}, 5), generate_case_prompt(toy, {9, 1}, 6));
}

TEST(GenerateBench, SummarySeparatesThePromptStepsFromTheGeneratingOnes) {
  // Prompt of 3 tokens: 2 prompt steps (100, 200 us), then 4 generating steps.
  GenerateBenchRow r;
  summarize_generation({100, 200, 10, 20, 30, 40}, 3, &r);
  EXPECT_DOUBLE_EQ(r.prompt_ms, 0.3);
  EXPECT_DOUBLE_EQ(r.total_ms, 0.4);
  ASSERT_TRUE(r.token_p50_us && r.token_p90_us);
  EXPECT_DOUBLE_EQ(*r.token_p50_us, 25.0);
  EXPECT_DOUBLE_EQ(*r.token_p90_us, 37.0);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 4 / 100e-6);
}

TEST(GenerateBench, FirstTokenDifference) {
  EXPECT_EQ(first_token_difference({1, 2, 3}, {1, 2, 3}), -1);
  EXPECT_EQ(first_token_difference({1, 2, 3}, {1, 5, 3}), 1);
  EXPECT_EQ(first_token_difference({1, 2, 3}, {1, 2}), 2);
}

TEST(GenerateBench, EveryRowIsComparedWithTheFirstMegaschedRowOfItsCase) {
  GenerateBenchResult r;
  r.cases = {{2, 3}, {4, 3}};
  r.rows = {row_of("cublas", "baseline", {2, 3}, {7, 8, 1}),
            row_of("plan", "plan", {2, 3}, {7, 8, 9}),
            row_of("best", "config", {2, 3}, {7, 8, 9}),
            row_of("pytorch", "peer", {2, 3}, {7, 3, 9}),
            row_of("plan", "plan", {4, 3}, {1, 1, 1}),
            row_of("cublas", "baseline", {4, 3}, {1, 1, 1})};
  r.rows[3].detail["tokens_not_compared"] = "random weights";
  compare_generation_tokens(&r);
  EXPECT_EQ(r.reference, "plan");
  EXPECT_EQ(r.rows[0].first_mismatch, 2);
  EXPECT_EQ(r.rows[1].first_mismatch, -1);
  EXPECT_EQ(r.rows[2].first_mismatch, -1);
  EXPECT_FALSE(r.rows[3].first_mismatch);  // another model's tokens
  EXPECT_EQ(r.rows[5].first_mismatch, -1);
  const std::string table = generate_bench_table(r);
  EXPECT_NE(table.find("| 2:3 | cublas | baseline | 10.0 | 12.0 |"), std::string::npos) << table;
  EXPECT_NE(table.find("| no (first at 2) |"), std::string::npos) << table;
  const json j = generate_bench_to_json(r);
  EXPECT_EQ(j["rows"][0]["first_mismatch"], 2);
  EXPECT_EQ(j["rows"][1]["tokens_match"], true);
  EXPECT_TRUE(j["rows"][3]["tokens_match"].is_null());
}

TEST(GenerateBench, ReadsThePeersRowsAndNamesABadField) {
  const json doc = {{"peer", "pytorch"},
                    {"generate_rows",
                     {{{"name", "cuda graph, eager ops"},
                       {"prompt_len", 4},
                       {"new_tokens", 2},
                       {"status", "ok"},
                       {"token_p50_us", 900.0},
                       {"token_p90_us", 950.0},
                       {"tokens_per_s", 1100.0},
                       {"prompt_ms", 2.7},
                       {"total_ms", 4.5},
                       {"tokens", {3, 4}}},
                      {{"name", "cuda graph, torch.compile"},
                       {"prompt_len", 4},
                       {"new_tokens", 2},
                       {"status", "error"},
                       {"message", "RuntimeError: no"}}}}};
  std::string error;
  const auto rows = generate_peer_rows(doc, &error);
  ASSERT_TRUE(rows) << error;
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].name, "pytorch cuda graph, eager ops");
  EXPECT_EQ((*rows)[0].kind, "peer");
  EXPECT_EQ((*rows)[0].tokens, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ((*rows)[0].token_p50_us, 900.0);
  EXPECT_EQ((*rows)[1].status, "error");
  EXPECT_FALSE((*rows)[1].token_p50_us);
  json bad = doc;
  bad["generate_rows"][0].erase("tokens_per_s");
  EXPECT_FALSE(generate_peer_rows(bad, &error));
  EXPECT_NE(error.find("generate_rows[0]"), std::string::npos) << error;
  EXPECT_FALSE(generate_peer_rows(json{{"rows", json::array()}}, &error));
  EXPECT_NE(error.find("generate_rows"), std::string::npos) << error;
}

TEST(GenerateBenchGpu, APlanAConfigAndTheBaselineGenerateOnToy) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  auto target = live_target(&why);
  ASSERT_TRUE(target) << why;
  const schedule::Weights w = schedule::generate_weights(*schedule::find_preset("toy"), 3, 1);
  schedule::ScheduleConfig partitioned;
  partitioned.tiling.attn_kv_partitions = 4;
  schedule::Plan plan;
  plan.buckets = {schedule::PlanBucket{0, 9, {}},
                  schedule::PlanBucket{9, schedule::kPlanEndOfModel, partitioned}};
  GenerateBenchOptions o;
  o.cases = {{5, 12}, {1, 3}};
  o.plans = {{"plan", plan}, {"plan again", plan}, {"default", schedule::single_config_plan({})}};
  o.baselines = {"cublas"};
  const auto r = run_generate_bench(w, *target, o, &why);
  ASSERT_TRUE(r) << why;
  ASSERT_EQ(r->rows.size(), 8u);  // 2 cases x (3 megasched rows + 1 baseline)
  EXPECT_EQ(r->reference, "plan");
  for (const GenerateBenchRow& row : r->rows) {
    SCOPED_TRACE(row.name + " " + std::to_string(row.gen.prompt_len));
    ASSERT_EQ(row.status, "ok") << row.message;
    EXPECT_EQ(row.tokens.size(), static_cast<size_t>(row.gen.new_tokens));
    ASSERT_TRUE(row.token_p50_us && row.first_mismatch);
    EXPECT_GT(*row.token_p50_us, 0.0);
    EXPECT_GT(row.total_ms, 0.0);
  }
  EXPECT_EQ(r->rows[0].kind, "plan");
  EXPECT_EQ(r->rows[0].detail["switch_positions"], json::array({9}));
  ASSERT_EQ(r->rows[0].detail["switch_step_us"].size(), 1u);
  EXPECT_GT(r->rows[0].detail["switch_step_us"][0].get<double>(), 0.0);
  EXPECT_EQ(r->rows[1].first_mismatch, -1);  // the same plan, the same tokens
  EXPECT_EQ(r->rows[2].kind, "config");
}

}  // namespace
}  // namespace megasched::eval
