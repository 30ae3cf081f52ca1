// The verified registry (flywheel/registry.h): deterministic ids, the append-only lock under two
// concurrent promotes, a corrupt line reported without losing the others, best: resolution.
#include "flywheel/registry.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "flywheel/locked_file.h"
#include "harness/json_schema.h"
#include "schedule/config.h"
#include "schedule/named_configs.h"
#include "schedule/plan.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;

class Registry : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ms_registry_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    path_ = (dir_ / "registry" / "verified.jsonl").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static RegistryEntry entry(const std::string& model, const json& config_patch, double us) {
    RegistryEntry e;
    e.model = model;
    e.gpu = "h100";
    e.dtype = "f32";
    std::string error;
    e.config = schedule::to_json(*schedule::parse_config(config_patch, &error));
    e.fields = {{"candidate_median_us", us},
                {"incumbent_median_us", us * 1.2},
                {"incumbent", "default"},
                {"speedup", 1.2},
                {"rounds", 3},
                {"run_id", "r20261123T000000Z-abcd"},
                {"timestamp", "2026-11-23T00:00:00Z"}};
    return e;
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(Registry, IdsAreDeterministicAndCountVersionsPerConfig) {
  const json config = schedule::to_json(schedule::ScheduleConfig{});
  const std::string hash = config_hash8(config);
  EXPECT_EQ(hash, config_hash8(schedule::to_json(schedule::ScheduleConfig{})));
  EXPECT_EQ(hash.size(), 8u);
  EXPECT_EQ(registry_id("toy", "h100", "f32", hash, 1), "toy_h100_f32_" + hash + "_v1");
  EXPECT_EQ(registry_id("/data/ckpt/My Model/", "h100", "bf16", hash, 2),
            "My-Model_h100_bf16_" + hash + "_v2");
  auto first =
      append_registry_entry(path_, entry("toy", {{"kernel", {{"unroll", 4}}}}, 10), nullptr);
  auto other =
      append_registry_entry(path_, entry("toy", {{"kernel", {{"unroll", 8}}}}, 9), nullptr);
  auto again =
      append_registry_entry(path_, entry("toy", {{"kernel", {{"unroll", 4}}}}, 8), nullptr);
  ASSERT_TRUE(first && other && again);
  EXPECT_EQ(first->version, 1);
  EXPECT_EQ(other->version, 1);
  EXPECT_EQ(again->version, 2);
  EXPECT_EQ(again->id, registry_id("toy", "h100", "f32", first->config_hash8, 2));
  EXPECT_NE(first->config_hash8, other->config_hash8);
}

TEST_F(Registry, AOneBucketPlanHasItsConfigsIdAndAPlanRoundTrips) {
  schedule::ScheduleConfig lo;
  lo.kernel.unroll = 4;
  schedule::ScheduleConfig hi;
  hi.tiling.attn_kv_partitions = 8;
  // The one-bucket plan of a config is stored as the config: same hash, same id.
  RegistryEntry one = entry("llama-1b", json::object(), 10);
  one.config = schedule::to_json(schedule::single_config_plan(lo));
  auto as_plan = append_registry_entry(path_, one, nullptr);
  ASSERT_TRUE(as_plan);
  EXPECT_EQ(as_plan->config_hash8, config_hash8(schedule::to_json(lo)));
  EXPECT_EQ(as_plan->id,
            registry_id("llama-1b", "h100", "f32", config_hash8(schedule::to_json(lo)), 1));
  // A plan of two buckets: its own deterministic id, read back and resolved by best: as written.
  schedule::Plan plan;
  plan.buckets = {{0, 1024, lo}, {1024, schedule::kPlanEndOfModel, hi}};
  RegistryEntry two = entry("llama-1b", json::object(), 9);
  two.config = schedule::to_json(plan);
  auto stored = append_registry_entry(path_, two, nullptr);
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->id,
            registry_id("llama-1b", "h100", "f32", config_hash8(schedule::to_json(plan)), 1));
  EXPECT_NE(stored->config_hash8, as_plan->config_hash8);
  const RegistryRead read = read_registry(path_);
  ASSERT_TRUE(read.problems.empty());
  ASSERT_EQ(read.entries.size(), 2u);
  EXPECT_EQ(read.entries[1].id, stored->id);
  std::string error;
  auto resolved = resolve_best_name("best:llama-1b:h100", path_, &error);
  ASSERT_TRUE(resolved) << error;
  EXPECT_EQ(resolved->detail, stored->id);
  auto back = schedule::parse_plan(resolved->config, &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(schedule::to_json(*back), schedule::to_json(plan));
  EXPECT_EQ(schedule::plan_config_for(*back, 1023), lo);
  EXPECT_EQ(schedule::plan_config_for(*back, 1024), hi);
}

TEST_F(Registry, EntriesMatchTheirSchema) {
  auto e = append_registry_entry(path_, entry("toy", json::object(), 10), nullptr);
  ASSERT_TRUE(e);
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/schemas/registry_entry.schema.json");
  const json schema = json::parse(in);
  EXPECT_TRUE(harness::unsupported_keywords(schema).empty());
  for (const auto& error : harness::check_against_schema(schema, to_json(*e)))
    ADD_FAILURE() << harness::describe(error);
}

TEST_F(Registry, TwoConcurrentPromotesTakeDistinctVersionsAndLoseNothing) {
  constexpr int kEach = 40;
  pid_t children[2];
  for (int p = 0; p < 2; ++p) {
    children[p] = ::fork();
    ASSERT_GE(children[p], 0);
    if (children[p] == 0) {
      for (int i = 0; i < kEach; ++i)
        if (!append_registry_entry(path_, entry("toy", {{"kernel", {{"unroll", 4}}}}, 10 + p),
                                   nullptr))
          ::_exit(1);
      ::_exit(0);
    }
  }
  for (pid_t child : children) {
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const RegistryRead read = read_registry(path_);
  EXPECT_TRUE(read.problems.empty());
  ASSERT_EQ(read.entries.size(), 2u * kEach);
  std::set<int> versions;
  for (const RegistryEntry& e : read.entries) versions.insert(e.version);
  EXPECT_EQ(versions.size(), 2u * kEach);  // 1 .. 80, none taken twice
  EXPECT_EQ(*versions.begin(), 1);
  EXPECT_EQ(*versions.rbegin(), 2 * kEach);
  for (size_t i = 0; i < read.entries.size(); ++i)  // file order is version order
    EXPECT_EQ(read.entries[i].version, static_cast<int>(i) + 1);
}

TEST_F(Registry, CorruptLinesAreReportedAndTheOtherEntriesKept) {
  ASSERT_TRUE(append_registry_entry(path_, entry("toy", json::object(), 10), nullptr));
  {
    std::ofstream out(path_, std::ios::app);
    out << "{\"record\": \"verified\", \"id\": \"x\n";  // a corrupt line, cut in the middle
    json edited = to_json(entry("toy", json::object(), 9));
    edited["id"] = "toy_h100_f32_deadbeef_v1";
    edited["config_hash8"] = "deadbeef";  // a config edited after promotion
    edited["version"] = 1;
    out << edited.dump() << "\n";
  }
  ASSERT_TRUE(
      append_registry_entry(path_, entry("toy", {{"kernel", {{"unroll", 8}}}}, 8), nullptr));
  const RegistryRead read = read_registry(path_);
  ASSERT_EQ(read.entries.size(), 2u);
  ASSERT_EQ(read.problems.size(), 2u);
  EXPECT_NE(read.problems[0].find(":2: not JSON"), std::string::npos) << read.problems[0];
  EXPECT_NE(read.problems[1].find(":3: config_hash8 deadbeef is not the config's hash"),
            std::string::npos)
      << read.problems[1];
  EXPECT_EQ(read.entries[1].config["kernel"]["unroll"], 8);
}

TEST_F(Registry, BestNameResolvesTheNewestEntryThenThePreset) {
  std::string error;
  // No registry: the built-in preset.
  auto preset = resolve_best_name("best:llama-1b:h100", path_, &error);
  ASSERT_TRUE(preset) << error;
  EXPECT_EQ(preset->source, "preset");
  EXPECT_EQ(preset->config, schedule::find_named_config("best:llama-1b:h100", nullptr)->config);
  // Two entries for llama-1b on h100: the newest (last appended) wins over the preset.
  ASSERT_TRUE(
      append_registry_entry(path_, entry("llama-1b", {{"kernel", {{"unroll", 4}}}}, 10), nullptr));
  auto newest =
      append_registry_entry(path_, entry("llama-1b", {{"kernel", {{"unroll", 8}}}}, 9), nullptr);
  ASSERT_TRUE(
      append_registry_entry(path_, entry("toy", {{"kernel", {{"unroll", 1}}}}, 9), nullptr));
  auto resolved = resolve_best_name("best:llama-1b:h100", path_, &error);
  ASSERT_TRUE(resolved) << error;
  EXPECT_EQ(resolved->source, "registry");
  EXPECT_EQ(resolved->detail, newest->id);
  EXPECT_EQ(resolved->config["kernel"]["unroll"], 8);
  // A newer entry whose gate compared predictions (promote --device cpu) does not shadow a
  // measured one; it is taken only where no measured entry exists.
  auto predicted_entry = [&](const std::string& model, int unroll) {
    RegistryEntry e = entry(model, {{"kernel", {{"unroll", unroll}}}}, 5);
    e.fields["latency_kind"] = "predicted";
    return e;
  };
  ASSERT_TRUE(append_registry_entry(path_, predicted_entry("llama-1b", 2), nullptr));
  resolved = resolve_best_name("best:llama-1b:h100", path_, &error);
  ASSERT_TRUE(resolved) << error;
  EXPECT_EQ(resolved->detail, newest->id);
  auto predicted_small = append_registry_entry(path_, predicted_entry("small", 2), nullptr);
  ASSERT_TRUE(predicted_small);
  resolved = resolve_best_name("best:small:h100", path_, &error);
  ASSERT_TRUE(resolved) << error;
  EXPECT_EQ(resolved->detail, predicted_small->id);
  EXPECT_FALSE(is_measured(*predicted_small));
  EXPECT_TRUE(is_measured(*newest));
  // A pair with neither: the message names both places.
  EXPECT_FALSE(resolve_best_name("best:small:a100", path_, &error));
  EXPECT_NE(error.find("no entry for small on a100"), std::string::npos) << error;
  EXPECT_NE(error.find("best:llama-1b:h100"), std::string::npos) << error;
  EXPECT_FALSE(resolve_best_name("best:toy", path_, &error));
  EXPECT_NE(error.find("best:<model>:<gpu>"), std::string::npos) << error;
}

TEST_F(Registry, TheLockedReadThenAppendFsyncsAndAppendsNothingWhenAsked) {
  auto none = [](const std::vector<std::string>&,
                 std::string* error) -> std::optional<std::vector<std::string>> {
    *error = "nothing to add";
    return std::nullopt;
  };
  std::string error;
  EXPECT_FALSE(append_lines_locked_after_read(path_, none, &error));
  EXPECT_EQ(error, "nothing to add");
  EXPECT_EQ(std::filesystem::file_size(path_), 0u);
}

}  // namespace
}  // namespace megasched::flywheel
