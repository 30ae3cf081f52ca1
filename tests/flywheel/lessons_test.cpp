// LESSONS.md (flywheel/lessons.h) on a fixture corpus with known effects: the pair estimate and
// its interval, the regression for a knob without pairs, failures grouped by rule and position,
// bottleneck classes over time, and `megasched report --lessons` writing the file.
#include "flywheel/lessons.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "schedule/config.h"
#include "tests/harness/run_cli.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;

CorpusRecord trial(int n, const json& patch, std::optional<double> latency_us,
                   const std::string& status = "discarded") {
  CorpusRecord r;
  r.trial = n;
  r.run_id = "r20261123T000000Z-abcd";
  r.model = "toy", r.target = "h100", r.device = "cpu";
  r.status = status;
  std::string error;
  auto config = schedule::parse_config(patch, &error);
  EXPECT_TRUE(config) << error;
  r.config = schedule::to_json(*config);
  r.schedule_id = "s" + std::to_string(n);
  r.verdict.valid = status != "rejected";
  r.verdict.correct = latency_us.has_value();
  r.verdict.latency_us = latency_us;
  r.verdict.latency_kind = latency_us ? "predicted" : "";
  r.verdict.status = latency_us ? "ok" : status;
  if (latency_us)
    r.verdict.bottleneck = {{"class", *latency_us > 95 ? "compute" : "latency-sync"},
                            {"source", "verdict"},
                            {"reason", "fixture"}};
  return r;
}

/// unroll 2 -> 4 makes every config 10% faster (three pairs on three bases, with +-1% noise);
/// prefetch_depth changes once with no pair partner of its own.
std::vector<CorpusRecord> fixture() {
  std::vector<CorpusRecord> c;
  c.push_back(trial(0, json::object(), 100.0));
  c.push_back(trial(1, {{"kernel", {{"unroll", 4}}}}, 90.0));
  c.push_back(trial(2, {{"launch", {{"threads_per_block", 384}}}}, 120.0));
  c.push_back(trial(3, {{"launch", {{"threads_per_block", 384}}}, {"kernel", {{"unroll", 4}}}},
                    109.2));  // -9%
  c.push_back(trial(4, {{"smem", {{"pages", 4}}}}, 80.0));
  c.push_back(trial(5, {{"smem", {{"pages", 4}}}, {"kernel", {{"unroll", 4}}}}, 71.2));  // -11%
  c.push_back(trial(6,
                    {{"pipeline", {{"prefetch_depth", 4}}},
                     {"smem", {{"pages", 4}}},
                     {"launch", {{"threads_per_block", 384}}}},
                    60.0));
  CorpusRecord rejected = trial(7, {{"launch", {{"blocks_per_sm", 4}}}}, std::nullopt, "rejected");
  rejected.verdict.rejected_reason = "launch, race";
  c.push_back(rejected);
  CorpusRecord incorrect = trial(8, {{"kernel", {{"unroll", 8}}}}, std::nullopt, "incorrect");
  incorrect.verdict.notes = {"ReferenceVm differs from eager at position 3: rel_err 0.5"};
  c.push_back(incorrect);
  c.push_back(trial(9, {{"kernel", {{"unroll", 1}}}}, std::nullopt, "crash"));
  c.push_back(trial(10, {{"kernel", {{"rows_per_warp", 4}}}}, 100.0));  // a duplicate latency
  return c;
}

const json* find_effect(const json& group, const std::string& knob, const std::string& method) {
  for (const json& e : group["effects"])
    if (e["knob"] == knob && e["method"] == method) return &e;
  return nullptr;
}

TEST(Lessons, PairsGiveTheKnobEffectWithAnInterval) {
  const json lessons = build_lessons(fixture());
  ASSERT_EQ(lessons["groups"].size(), 1u);
  const json& g = lessons["groups"][0];
  EXPECT_EQ(g["trials"], 11);
  EXPECT_EQ(g["correct"], 8);
  const json* unroll = find_effect(g, "kernel.unroll", "pairs");
  ASSERT_NE(unroll, nullptr) << g["effects"].dump();
  EXPECT_EQ((*unroll)["from"], 2);
  EXPECT_EQ((*unroll)["to"], 4);
  EXPECT_EQ((*unroll)["n"], 3);
  EXPECT_NEAR((*unroll)["effect_pct"].get<double>(), -10.0, 1e-9);
  // sd 1% over 3 pairs: half-width t(2) x 1 / sqrt(3) = 2.484.
  EXPECT_NEAR((*unroll)["ci_low_pct"].get<double>(), -10.0 - 4.303 / std::sqrt(3.0), 1e-6);
  EXPECT_NEAR((*unroll)["ci_high_pct"].get<double>(), -10.0 + 4.303 / std::sqrt(3.0), 1e-6);
}

TEST(Lessons, TrialsOverAnObjectiveAreAGroupOfTheirOwn) {
  std::vector<CorpusRecord> c = fixture();
  CorpusRecord over = trial(11, {{"kernel", {{"unroll", 4}}}}, 50.0);
  over.verdict.objective = json::array({{{"position", 0}, {"weight", 1}, {"latency_us", 40.0}},
                                        {{"position", 60}, {"weight", 1}, {"latency_us", 60.0}}});
  c.push_back(over);
  const json lessons = build_lessons(c);
  ASSERT_EQ(lessons["groups"].size(), 2u) << "timed_position is 0 in both, the objective is not";
  EXPECT_EQ(lessons["groups"][0]["trials"], 11);
  EXPECT_FALSE(lessons["groups"][0].contains("objective"));
  EXPECT_EQ(lessons["groups"][1]["trials"], 1);
  EXPECT_EQ(lessons["groups"][1]["objective"], "0:1,60:1");
  EXPECT_NE(lessons_markdown(lessons, "corpus.jsonl").find("(cpu, predicted, objective 0:1,60:1)"),
            std::string::npos);
}

TEST(Lessons, AKnobWithoutPairsGetsTheRegression) {
  const json lessons = build_lessons(fixture());  // g refers into it: keep it alive
  const json& g = lessons["groups"][0];
  EXPECT_EQ(find_effect(g, "pipeline.prefetch_depth", "pairs"), nullptr);
  const json* prefetch = find_effect(g, "pipeline.prefetch_depth", "regression");
  ASSERT_NE(prefetch, nullptr) << g["effects"].dump();
  EXPECT_EQ((*prefetch)["to"], 4);
  EXPECT_EQ((*prefetch)["n"], 8);
  // The pairs speak for unroll; the regression does not repeat it.
  EXPECT_EQ(find_effect(g, "kernel.unroll", "regression"), nullptr);
}

TEST(Lessons, FailuresAreGroupedByRuleAndFailingPosition) {
  const json lessons = build_lessons(fixture());  // g refers into it: keep it alive
  const json& g = lessons["groups"][0];
  std::map<std::string, int> why;
  for (const json& f : g["failures"])
    why[f["status"].get<std::string>() + ": " + f["why"].get<std::string>()] = f["count"];
  EXPECT_EQ(why["rejected: rule launch"], 1);
  EXPECT_EQ(why["rejected: rule race"], 1);
  EXPECT_EQ(why["incorrect: position 3 (reference_vm)"], 1);
  EXPECT_EQ(why["crash: crash"], 1);
  EXPECT_EQ(why.size(), 4u);
}

TEST(Lessons, BottleneckClassesAreCountedPerWindowOfTrials) {
  LessonsOptions options;
  options.window = 5;
  const json lessons = build_lessons(fixture(), options);
  const json& g = lessons["groups"][0];
  ASSERT_EQ(g["bottlenecks"].size(), 3u);
  EXPECT_EQ(g["bottlenecks"][0]["trials"], "0-4");
  EXPECT_EQ(g["bottlenecks"][0]["compute"], 3);       // 100, 120, 109.2
  EXPECT_EQ(g["bottlenecks"][0]["latency-sync"], 2);  // 90, 80
  EXPECT_EQ(g["bottlenecks"][1]["none"], 3);          // rejected, incorrect, crash
  EXPECT_EQ(g["bottlenecks"][2]["trials"], "10-10");
}

TEST(Lessons, ReportWritesLessonsMd) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ms_lessons_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream corpus(dir / "corpus.jsonl");
    for (const CorpusRecord& r : fixture()) corpus << to_json(r).dump() << "\n";
  }
  std::ofstream(dir / "results.tsv") << "trial\tstatus\tschedule_id\n";
  const auto r =
      test::run_megasched("report --lessons --results " + (dir / "results.tsv").string() +
                              " --corpus " + (dir / "corpus.jsonl").string() + " --out ''",
                          true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(dir / "LESSONS.md");
  std::stringstream md;
  md << in.rdbuf();
  EXPECT_NE(md.str().find("| kernel.unroll | 2 | 4 | pairs | 3 | -10.00 |"), std::string::npos)
      << md.str();
  EXPECT_NE(md.str().find("| rejected | rule race | 1 |"), std::string::npos);
  EXPECT_NE(md.str().find("### Bottleneck classes over time"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace megasched::flywheel
