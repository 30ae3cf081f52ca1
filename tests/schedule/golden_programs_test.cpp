// Golden programs: lowering must not change by accident. For every preset model, the h100 and h200
// targets, and a fixed list of configs (the default, every named config, every file in
// bench/configs/, every one-knob variant of the default on the small presets, and a few seeded
// random configs), tests/data/golden_programs.tsv records three figures of what lower() makes:
//   program    hash_hex of the program's canonical JSON (schedule::to_json) without its "build"
//              object: the tasks, waits, counters, queues, ops, regions, buffers and launch shape;
//   options    hash_hex of the whole NVRTC option list of its megakernel (newline-joined): the
//              kernel build, in the form the compiler sees it (the "build" object is only its
//              source, so this pins it however the Program holds it);
//   verdict    validate()'s rules ("ok" when it passes).
// A config that does not lower records "error" and the hash of the message.
//
// The config column is the config as a patch over the defaults (parse_config reads it), so the
// file pins the inputs as well as the outputs. A refactor must leave every line as it is. A change
// that means to change lowering regenerates the file and commits it with the change:
//   MEGASCHED_UPDATE_GOLDEN=1 build/megasched_tests --gtest_filter='*GoldenPrograms*'
// (GoldenPrograms.RegeneratesTheFileWhenAsked rewrites the file in the source tree from the case
// list below; the checks skip while the variable is set).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "schedule/config.h"
#include "schedule/lower.h"
#include "schedule/model.h"
#include "schedule/named_configs.h"
#include "schedule/search.h"
#include "schedule/target.h"
#include "schedule/validate.h"
#include "vm/nvrtc_build.h"

namespace megasched::schedule {
namespace {

const std::string kGoldenPath = std::string(MS_SOURCE_DIR) + "/tests/data/golden_programs.tsv";

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

std::vector<nlohmann::json> bench_configs() {
  std::vector<std::filesystem::path> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(MS_SOURCE_DIR) + "/bench/configs"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<nlohmann::json> out;
  for (const auto& f : files) {
    std::ifstream in(f);
    out.push_back(nlohmann::json::parse(in));
  }
  return out;
}

/// The configs every model and target is lowered with: the default, the named configs, the bench
/// configs.
std::vector<std::string> required_configs() {
  std::vector<std::string> out = {nlohmann::json::object().dump()};
  for (const NamedConfig& named : named_configs())
    out.push_back(patch_of(*parse_config(named.config, nullptr)));
  for (const nlohmann::json& j : bench_configs())
    out.push_back(patch_of(*parse_config(j, nullptr)));
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

Figures figures_of(const Case& c) {
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

std::string line_of(const Case& c, const Figures& f) {
  return c.model + "\t" + c.target + "\t" + c.config + "\t" + f.program + "\t" + f.options + "\t" +
         f.verdict;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string field;
  while (std::getline(in, field, '\t')) out.push_back(field);
  if (!line.empty() && line.back() == '\t') out.push_back("");
  return out;
}

bool updating() {
  const char* env = std::getenv("MEGASCHED_UPDATE_GOLDEN");
  return env != nullptr && std::string(env) == "1";
}

TEST(GoldenPrograms, RegeneratesTheFileWhenAsked) {
  if (!updating()) GTEST_SKIP() << "set MEGASCHED_UPDATE_GOLDEN=1 to rewrite " << kGoldenPath;
  std::ofstream out(kGoldenPath);
  out << "# model\ttarget\tconfig\tprogram\toptions\tverdict (tests/schedule/"
         "golden_programs_test.cpp)\n";
  for (const Case& c : generate_cases()) out << line_of(c, figures_of(c)) << "\n";
  ASSERT_TRUE(out.good()) << kGoldenPath;
}

// One test per preset, so the large models run beside the small ones.
class GoldenProgramsOf : public testing::TestWithParam<std::string> {};

TEST_P(GoldenProgramsOf, LoweringMatchesTheCommittedHashes) {
  if (updating()) GTEST_SKIP();
  std::ifstream in(kGoldenPath);
  ASSERT_TRUE(in.good()) << kGoldenPath << " is missing; see the header of this test";
  std::string line;
  size_t checked = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = split_tabs(line);
    ASSERT_EQ(f.size(), 6u) << line;
    if (f[0] != GetParam()) continue;
    const Case c{f[0], f[1], f[2]};
    EXPECT_EQ(line_of(c, figures_of(c)), line) << "lowering changed for this case";
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const ModelShape& shape : presets()) names.push_back(shape.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Presets, GoldenProgramsOf, testing::ValuesIn(preset_names()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST(GoldenPrograms, EveryModelTargetAndNamedConfigIsCovered) {
  if (updating()) GTEST_SKIP();
  std::ifstream in(kGoldenPath);
  ASSERT_TRUE(in.good()) << kGoldenPath;
  std::vector<std::string> have;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
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
