// `report --plan` through the binary (HARNESS.md "Plan over positions"): a plan search on toy
// (--device cpu) followed by `report --plan <its plan.json>` plots its bucket configs over the
// positions it timed, in the JSON, the HTML and LESSONS.md (with the plot beside it); without
// --plan the newest plan run beside --results is found; a bad plan exits 2 with a hint; no plan
// at all is a clear line.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/harness/run_cli.h"

namespace megasched {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class ReportPlanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ms_report_plan_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string logs() const {
    return " --results " + (dir_ / "results.tsv").string() + " --corpus " +
           (dir_ / "corpus.jsonl").string();
  }
  /// A plan search of toy over three buckets; its plan.json.
  std::string plan_search() {
    const auto r = test::run_megasched(
        "loop --model toy --gpu h100 --device cpu --strategy hillclimb --seed 3 --budget 6 "
        "--plan-buckets 0,32,64" +
            logs() + " --runs-dir " + (dir_ / "runs").string(),
        false);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return json::parse(r.out).value("plan_file", "");
  }
  fs::path dir_;
};

TEST_F(ReportPlanCli, PlotsAPlanSearchsBucketsOverThePositionsItTimed) {
  const std::string plan = plan_search();
  ASSERT_FALSE(plan.empty());
  const auto r = test::run_megasched("report --format json --lessons --plan " + plan + logs() +
                                         " --out " + (dir_ / "report.html").string(),
                                     false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json doc = json::parse(r.out);
  const json& section = doc["plan"];
  EXPECT_EQ(section["source"], plan);
  ASSERT_EQ(section["groups"].size(), 1u) << section.dump(1);
  const json& g = section["groups"][0];
  EXPECT_EQ(g["latency_kind"], "predicted");
  EXPECT_EQ(g["max_seq"], 128);
  ASSERT_FALSE(g["series"].empty());
  // The bucket loops time at each bucket's midpoint: 15, 47 and 95 each have a fastest config.
  std::vector<int> positions;
  for (const json& p : g["best_per_position"]) positions.push_back(p["position"].get<int>());
  EXPECT_EQ(positions, (std::vector<int>{15, 47, 95}));
  for (const json& p : g["best_per_position"]) EXPECT_TRUE(p["plan_us"].is_number()) << p.dump();
  const std::string html = slurp(dir_ / "report.html");
  EXPECT_NE(html.find("<h2>Plan over positions</h2>"), std::string::npos);
  EXPECT_NE(html.find("aria-label=\"latency versus position per bucket config\""),
            std::string::npos);
  const std::string lessons = slurp(dir_ / "LESSONS.md");
  EXPECT_NE(lessons.find("## Plan over positions"), std::string::npos) << lessons;
  EXPECT_NE(lessons.find("](plan_toy_h100_cpu_predicted.svg)"), std::string::npos) << lessons;
  EXPECT_NE(slurp(dir_ / "plan_toy_h100_cpu_predicted.svg").find("<svg"), std::string::npos);
  // Without --plan: the newest plan run beside --results.
  const auto found = test::run_megasched("report --format json --out ''" + logs(), false);
  ASSERT_EQ(found.exit_code, 0) << found.out;
  EXPECT_EQ(json::parse(found.out)["plan"]["source"], plan);
}

TEST_F(ReportPlanCli, ABadPlanExits2WithAHintAndNoPlanIsAClearLine) {
  std::ofstream(dir_ / "results.tsv") << "";
  std::ofstream(dir_ / "gap.json") << R"({"buckets": [{"begin": 8, "end": "max", "config": {}}]})";
  auto r =
      test::run_megasched("report --out '' --plan " + (dir_ / "gap.json").string() + logs(), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--plan " + (dir_ / "gap.json").string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hint"), std::string::npos) << r.out;
  r = test::run_megasched("report --out '' --plan best:nomodel:h100" + logs(), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = test::run_megasched("report --out '' --plan " + (dir_ / "absent.json").string() + logs(),
                          true);
  EXPECT_EQ(r.exit_code, 3) << r.out;
  r = test::run_megasched("report --out ''" + logs(), true);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("plan over positions: no plan (hint: pass --plan"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace megasched
