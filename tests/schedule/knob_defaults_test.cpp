// Each kernel knob's default is stated once, in the knob table (schedule/config.cpp). The device
// code's fallback for an unset macro (vm/device/common.cuh, `#ifndef MS_X / #define MS_X v`) and
// the ground truth's model of the kernel (groundtruth/device_model.h, `int x = v;  // MS_X`) repeat
// it because NVRTC and the independent model cannot include the table; this test pins both to it.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "schedule/config.h"

namespace megasched::schedule {
namespace {

std::string read_source(const std::string& relative) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// `#ifndef MS_X` followed by `#define MS_X <integer>`: macro -> value.
std::map<std::string, int> device_fallbacks(const std::string& text) {
  std::map<std::string, int> out;
  const std::regex pattern(R"re(#ifndef (MS_[A-Z0-9_]+)\s*\n#define \1 (\d+))re");
  for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it)
    out[(*it)[1]] = std::stoi((*it)[2]);
  return out;
}

/// `<type> name = <value>;  // MS_X` members: macro -> value (true 1, false 0).
std::map<std::string, int> model_defaults(const std::string& text) {
  std::map<std::string, int> out;
  const std::regex pattern(R"re(= (true|false|\d+);\s*// (MS_[A-Z0-9_]+))re");
  for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it) {
    const std::string v = (*it)[1];
    out[(*it)[2]] = v == "true" ? 1 : v == "false" ? 0 : std::stoi(v);
  }
  return out;
}

TEST(KnobDefaults, TheDeviceFallbacksAndTheDeviceModelRepeatTheKnobTable) {
  const std::map<std::string, int> table = kernel_knob_defines(ScheduleConfig());
  const std::map<std::string, int> device = device_fallbacks(read_source("vm/device/common.cuh"));
  const std::map<std::string, int> model =
      model_defaults(read_source("groundtruth/device_model.h"));
  ASSERT_FALSE(table.empty());
  ASSERT_TRUE(device.count("MS_UNROLL")) << "the fallback scan found nothing in common.cuh";
  ASSERT_TRUE(model.count("MS_UNROLL")) << "the default scan found nothing in device_model.h";
  int compared = 0;
  for (const auto& [macro, value] : table) {
    if (auto it = device.find(macro); it != device.end()) {
      EXPECT_EQ(it->second, value) << macro << ": vm/device/common.cuh's fallback differs from "
                                   << "the knob table's default";
      ++compared;
    }
    if (auto it = model.find(macro); it != model.end()) {
      EXPECT_EQ(it->second, value) << macro << ": groundtruth/device_model.h's default differs "
                                   << "from the knob table's default";
      ++compared;
    }
  }
  EXPECT_GE(compared, 6);
}

TEST(KnobDefaults, TheScansReadBothForms) {
  EXPECT_EQ(
      device_fallbacks("#ifndef MS_UNROLL\n#define MS_UNROLL 4  // x\n#endif\n").at("MS_UNROLL"),
      4);
  EXPECT_EQ(model_defaults("  bool weight_ring = true;  // MS_WEIGHT_RING\n").at("MS_WEIGHT_RING"),
            1);
}

}  // namespace
}  // namespace megasched::schedule
