// Golden programs: lowering must not change by accident. For every preset model, the h100 and h200
// targets, and a fixed list of configs (the default, every named config, the config files listed in
// tests/data/golden_configs.txt, every one-knob variant of the default on the small presets, and a
// few seeded random configs), tests/data/golden_programs.tsv records two figures of what lower()
// makes:
//   program    hash_hex of the program's canonical JSON (schedule::to_json) without its "build"
//              object: the tasks, waits, counters, queues, ops, regions, buffers and launch shape;
//   options    hash_hex of the whole NVRTC option list of its megakernel (newline-joined): the
//              kernel build, in the form the compiler sees it (the "build" object is only its
//              source, so this pins it however the Program holds it).
// A config that does not lower records "error" and the hash of the message.
//
// The validator's verdict on each lowered program is pinned apart, in
// tests/data/golden_verdicts.tsv: the cases whose validate() does not pass, with the rules it
// names; every other lowered case must pass. So regenerating the program hashes cannot accept a
// verdict change by the way.
//
// The config column is the config as a patch over the defaults (parse_config reads it), so the
// file pins the inputs as well as the outputs. A refactor must leave every line as it is. A change
// that means to change lowering regenerates the file and commits it with the change:
//   MEGASCHED_UPDATE_GOLDEN=1 build/megasched_tests --gtest_filter='*GoldenPrograms*'
// (GoldenPrograms.RegeneratesTheFileWhenAsked rewrites the file in the source tree from the case
// list below; the hash checks skip while the variable is set, the verdict checks do not). A change
// that means to change what the validator says regenerates the verdicts, on their own:
//   MEGASCHED_UPDATE_VERDICTS=1 build/megasched_tests --gtest_filter='*GoldenVerdicts*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "schedule/config.h"
#include "schedule/lower.h"
#include "schedule/model.h"
#include "schedule/named_configs.h"
#include "schedule/plan.h"
#include "schedule/search.h"
#include "schedule/target.h"
#include "schedule/validate.h"
#include "vm/nvrtc_build.h"

namespace megasched::schedule {
namespace {

const std::string kGoldenPath = std::string(MS_SOURCE_DIR) + "/tests/data/golden_programs.tsv";
const std::string kVerdictsPath = std::string(MS_SOURCE_DIR) + "/tests/data/golden_verdicts.tsv";
const std::string kConfigListPath = std::string(MS_SOURCE_DIR) + "/tests/data/golden_configs.txt";

struct Case {
  std::string model;
  std::string target;
  std::string config;  // patch over the defaults, compact JSON
};

struct Figures {
  std::string program;
  std::string options;
  std::string verdict;
};

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& line : lines) s += line + "\n";
  return s;
}

/// The config as the keys that differ from the default (an empty object for the default).
std::string patch_of(const ScheduleConfig& config) {
  const nlohmann::json full = to_json(config);
  nlohmann::json patch = nlohmann::json::object();
  for (const std::string& path : changed_knobs(config, ScheduleConfig{})) {
    const auto dot = path.find('.');
    const std::string group = path.substr(0, dot), key = path.substr(dot + 1);
    patch[group][key] = full[group][key];
  }
  return patch.dump();
}

/// The config files of tests/data/golden_configs.txt, paths from the repository root, in its order.
std::vector<std::string> listed_config_paths() {
  std::ifstream in(kConfigListPath);
  std::vector<std::string> paths;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') paths.push_back(line);
  return paths;
}

/// The listed config files, parsed (a missing or unreadable file is reported by
/// GoldenPrograms.TheConfigListNamesCommittedConfigs and skipped here).
std::vector<nlohmann::json> listed_configs() {
  std::vector<nlohmann::json> out;
  for (const std::string& path : listed_config_paths()) {
    std::ifstream in(std::string(MS_SOURCE_DIR) + "/" + path);
    if (!in.good()) continue;
    out.push_back(nlohmann::json::parse(in, nullptr, false));
  }
  return out;
}

/// The configs every model and target is lowered with: the default, the named configs, the listed
/// config files.
std::vector<std::string> required_configs() {
  std::vector<std::string> out = {nlohmann::json::object().dump()};
  for (const NamedConfig& named : named_configs()) {
    const std::optional<Plan> plan = parse_plan(named.config, nullptr);  // a config or a plan
    if (!plan) continue;  // SearchMoves.CommittedBenchConfigsAndNamedConfigsParseAndFit says why
    for (const PlanBucket& bucket : plan->buckets) {
      const std::string patch = patch_of(bucket.config);
      if (std::find(out.begin(), out.end(), patch) == out.end()) out.push_back(patch);
    }
  }
  for (const nlohmann::json& j : listed_configs())
    if (const std::optional<ScheduleConfig> c = parse_config(j, nullptr))
      out.push_back(patch_of(*c));
  return out;
}

/// The case list the file is generated from.
std::vector<Case> generate_cases() {
  std::vector<Case> cases;
  for (const ModelShape& shape : presets()) {
    const bool small_model = shape.name == "toy" || shape.name == "toy-2L" || shape.name == "small";
    for (const std::string target_name : {"h100", "h200"}) {
      std::vector<std::string> configs = required_configs();
      if (small_model) {
        for (const KnobSpec& spec : knob_specs()) {
          for (const nlohmann::json& choice : spec.choices) {
            if (choice == spec.default_value) continue;
            ScheduleConfig c;
            set_knob(&c, spec.path, choice, nullptr);
            configs.push_back(patch_of(c));
          }
        }
        const GpuTarget target = *find_target(target_name);
        std::mt19937_64 rng(0x5eed + shape.layers);
        for (int i = 0; i < 6; ++i) configs.push_back(patch_of(random_config(shape, target, rng)));
      }
      for (const std::string& config : configs) cases.push_back({shape.name, target_name, config});
    }
  }
  return cases;
}

Figures compute_figures(const Case& c) {
  const ModelShape shape = *find_preset(c.model);
  const GpuTarget target = *find_target(c.target);
  std::string error;
  const std::optional<ScheduleConfig> config = parse_config_text(c.config, &error);
  if (!config) return {"bad-config", hash_hex(error), ""};
  const std::optional<Program> program = lower(shape, target, *config, &error);
  if (!program) return {"error", hash_hex(error), ""};
  nlohmann::json j = to_json(*program);
  j.erase("build");
  const ValidationReport report = validate(*program, target);
  return {hash_hex(j.dump()), hash_hex(join(vm::kernel_defines(*program))),
          report.ok() ? "ok" : report.rules()};
}

std::string key_of(const Case& c) { return c.model + "\t" + c.target + "\t" + c.config; }

/// compute_figures, once per case in this process: the hash and the verdict checks share it.
const Figures& figures_of(const Case& c) {
  static std::map<std::string, Figures> memo;
  const std::string key = key_of(c);
  auto it = memo.find(key);
  if (it == memo.end()) it = memo.emplace(key, compute_figures(c)).first;
  return it->second;
}

bool lowered(const Figures& f) { return f.program != "error" && f.program != "bad-config"; }

std::string line_of(const Case& c, const Figures& f) {
  return key_of(c) + "\t" + f.program + "\t" + f.options;
}

std::string verdict_line_of(const Case& c, const Figures& f) {
  return key_of(c) + "\t" + f.verdict;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string field;
  while (std::getline(in, field, '\t')) out.push_back(field);
  if (!line.empty() && line.back() == '\t') out.push_back("");
  return out;
}

/// The non-comment lines of a golden file.
std::vector<std::string> data_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  return lines;
}

bool env_is_1(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && std::string(env) == "1";
}

bool updating() { return env_is_1("MEGASCHED_UPDATE_GOLDEN"); }
bool updating_verdicts() { return env_is_1("MEGASCHED_UPDATE_VERDICTS"); }

TEST(GoldenPrograms, RegeneratesTheFileWhenAsked) {
  if (!updating()) GTEST_SKIP() << "set MEGASCHED_UPDATE_GOLDEN=1 to rewrite " << kGoldenPath;
  std::ofstream out(kGoldenPath);
  out << "# model\ttarget\tconfig\tprogram\toptions (tests/schedule/golden_programs_test.cpp)\n";
  for (const Case& c : generate_cases()) out << line_of(c, figures_of(c)) << "\n";
  ASSERT_TRUE(out.good()) << kGoldenPath;
}

TEST(GoldenVerdicts, RegeneratesTheFileWhenAsked) {
  if (!updating_verdicts())
    GTEST_SKIP() << "set MEGASCHED_UPDATE_VERDICTS=1 to rewrite " << kVerdictsPath;
  std::ofstream out(kVerdictsPath);
  out << "# model\ttarget\tconfig\tverdict: the lowered cases of golden_programs.tsv whose "
         "validate() does not pass; every other one passes (tests/schedule/"
         "golden_programs_test.cpp)\n";
  for (const Case& c : generate_cases()) {
    const Figures& f = figures_of(c);
    if (lowered(f) && f.verdict != "ok") out << verdict_line_of(c, f) << "\n";
  }
  ASSERT_TRUE(out.good()) << kVerdictsPath;
}

// One test per preset, so the large models run beside the small ones.
class GoldenProgramsOf : public testing::TestWithParam<std::string> {};

TEST_P(GoldenProgramsOf, LoweringMatchesTheCommittedHashes) {
  if (updating()) GTEST_SKIP();
  ASSERT_TRUE(std::ifstream(kGoldenPath).good())
      << kGoldenPath << " is missing; see the header of this test";
  size_t checked = 0;
  for (const std::string& line : data_lines(kGoldenPath)) {
    const std::vector<std::string> f = split_tabs(line);
    ASSERT_EQ(f.size(), 5u) << line;
    if (f[0] != GetParam()) continue;
    const Case c{f[0], f[1], f[2]};
    EXPECT_EQ(line_of(c, figures_of(c)), line) << "lowering changed for this case";
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

class GoldenVerdictsOf : public testing::TestWithParam<std::string> {};

TEST_P(GoldenVerdictsOf, ValidatorVerdictsMatchTheCommittedOnes) {
  if (updating_verdicts()) GTEST_SKIP();
  std::map<std::string, std::string> expected;  // key_of -> verdict; absent: "ok"
  for (const std::string& line : data_lines(kVerdictsPath)) {
    const std::vector<std::string> f = split_tabs(line);
    ASSERT_EQ(f.size(), 4u) << line;
    expected[f[0] + "\t" + f[1] + "\t" + f[2]] = f[3];
  }
  size_t checked = 0;
  for (const std::string& line : data_lines(kGoldenPath)) {
    const std::vector<std::string> f = split_tabs(line);
    if (f.size() < 3 || f[0] != GetParam()) continue;
    const Case c{f[0], f[1], f[2]};
    const Figures& got = figures_of(c);
    if (!lowered(got)) continue;
    const auto it = expected.find(key_of(c));
    EXPECT_EQ(got.verdict, it == expected.end() ? "ok" : it->second)
        << key_of(c) << ": the validator's verdict changed (see the header of this test)";
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const ModelShape& shape : presets()) names.push_back(shape.name);
  return names;
}

std::string test_name(const testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Presets, GoldenProgramsOf, testing::ValuesIn(preset_names()), test_name);
INSTANTIATE_TEST_SUITE_P(Presets, GoldenVerdictsOf, testing::ValuesIn(preset_names()), test_name);

TEST(GoldenVerdicts, EveryPinnedVerdictIsAGoldenCaseThatFails) {
  std::vector<std::string> cases;
  for (const std::string& line : data_lines(kGoldenPath)) {
    const std::vector<std::string> f = split_tabs(line);
    if (f.size() >= 3) cases.push_back(f[0] + "\t" + f[1] + "\t" + f[2]);
  }
  for (const std::string& line : data_lines(kVerdictsPath)) {
    const std::vector<std::string> f = split_tabs(line);
    ASSERT_EQ(f.size(), 4u) << line;
    EXPECT_NE(f[3], "ok") << line << ": only failing verdicts are listed";
    EXPECT_NE(std::find(cases.begin(), cases.end(), f[0] + "\t" + f[1] + "\t" + f[2]), cases.end())
        << line << ": not a case of " << kGoldenPath;
  }
}

TEST(GoldenPrograms, TheConfigListNamesCommittedConfigs) {
  const std::vector<std::string> paths = listed_config_paths();
  ASSERT_FALSE(paths.empty()) << kConfigListPath;
  for (const std::string& path : paths) {
    std::ifstream in(std::string(MS_SOURCE_DIR) + "/" + path);
    ASSERT_TRUE(in.good()) << path << " (listed in " << kConfigListPath << ") does not exist";
    std::stringstream text;
    text << in.rdbuf();
    std::string why;
    EXPECT_TRUE(parse_config_text(text.str(), &why)) << path << ": " << why;
  }
  // Every named config file is lowered: a config added to bench/configs/ joins the list.
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(MS_SOURCE_DIR) + "/bench/configs")) {
    if (e.path().extension() != ".json") continue;
    const std::string path = "bench/configs/" + e.path().filename().string();
    EXPECT_NE(std::find(paths.begin(), paths.end(), path), paths.end())
        << path << " is not in " << kConfigListPath;
  }
}

TEST(GoldenPrograms, EveryModelTargetAndNamedConfigIsCovered) {
  if (updating()) GTEST_SKIP();
  ASSERT_TRUE(std::ifstream(kGoldenPath).good()) << kGoldenPath;
  std::vector<std::string> have;
  for (const std::string& line : data_lines(kGoldenPath)) {
    const std::vector<std::string> f = split_tabs(line);
    if (f.size() >= 3) have.push_back(f[0] + "\t" + f[1] + "\t" + f[2]);
  }
  for (const ModelShape& shape : presets())
    for (const std::string target : {"h100", "h200"})
      for (const std::string& config : required_configs())
        EXPECT_NE(std::find(have.begin(), have.end(), shape.name + "\t" + target + "\t" + config),
                  have.end())
            << shape.name << " " << target << " " << config
            << " has no golden line; regenerate (see the header of this test)";
}

}  // namespace
}  // namespace megasched::schedule
