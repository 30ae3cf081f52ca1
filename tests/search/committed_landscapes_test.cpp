// The strategy benchmark on every committed landscape (search/landscapes/, recorded on GPUs):
// the default strategy must stay ahead of random search on each, and on a measured position-0
// landscape reach within 2% of the optimum in a median of at most 60 trials (20 seeds), so a
// strategy change that loses what the measured landscapes reward fails CI. A few seconds per file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "search/landscape.h"
#include "search/replay.h"
#include "search/strategy.h"

namespace megasched::search {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> committed_landscapes() {
  std::vector<std::string> out;
  const fs::path dir = fs::path(MS_SOURCE_DIR) / "search" / "landscapes";
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::string suffix = ".landscape.jsonl";
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix)
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

const json& strategy_entry(const json& doc, const std::string& name) {
  for (const json& s : doc["strategies"])
    if (s["name"] == name) return s;
  ADD_FAILURE() << "no strategy " << name << " in the document";
  static const json none = json::object();
  return none;
}

double score_at(const json& strategy, int budget) {
  for (const json& b : strategy["budgets"])
    if (b["budget"] == budget) return b["score_median"].get<double>();
  ADD_FAILURE() << "no budget " << budget;
  return 0.0;
}

TEST(CommittedLandscapes, TheDefaultStrategyBeatsRandomSearchOnEach) {
  const std::vector<std::string> files = committed_landscapes();
  ASSERT_FALSE(files.empty()) << "search/landscapes/ holds no landscape";
  const std::string strategy = StrategyOptions{}.name;
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    std::string error;
    const auto land = read_landscape(path, &error);
    ASSERT_TRUE(land) << error;
    ASSERT_NE(land->optimum(), nullptr);
    BenchOptions options;
    options.strategies = {"random", strategy};
    options.budgets = {25, 50, 100};
    options.seeds = 20;
    options.jobs = 2;
    const auto doc = run_search_bench(*land, options, &error);
    ASSERT_TRUE(doc) << error;
    const json& mine = strategy_entry(*doc, strategy);
    const json& random = strategy_entry(*doc, "random");
    for (int budget : options.budgets)
      EXPECT_GE(score_at(mine, budget), score_at(random, budget) - 0.02)
          << strategy << " against random search at " << budget << " trials";
    if (land->header.latency_kind == "measured-gpu" && land->header.position == 0 &&
        land->header.objective.is_null()) {
      const json& t = mine["trials_to_within"];
      ASSERT_FALSE(t["median"].is_null())
          << strategy << " never came within 2% of the optimum in most of the 20 seeds";
      EXPECT_LE(t["median"].get<double>(), 60.0) << "median trials to within 2% of the optimum";
    }
  }
}

}  // namespace
}  // namespace megasched::search
