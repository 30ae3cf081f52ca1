#include "schedule/target.h"

#include <gtest/gtest.h>

#include <set>

namespace megasched::schedule {
namespace {

TEST(TargetRegistry, H100SxmHasDatasheetFigures) {
  const auto h100 = find_target("h100");
  ASSERT_TRUE(h100.has_value());
  EXPECT_EQ(h100->name, "h100");
  EXPECT_EQ(h100->sm_arch, 90);
  EXPECT_EQ(h100->num_sms, 132);
  EXPECT_EQ(h100->smem_per_sm, 233472);
  EXPECT_EQ(h100->smem_per_block_optin, 232448);
  EXPECT_EQ(h100->regs_per_sm, 65536);
  EXPECT_EQ(h100->max_threads_per_sm, 2048);
  EXPECT_EQ(h100->l2_bytes, 50LL * 1024 * 1024);
  EXPECT_EQ(h100->hbm_bytes, 80LL * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(h100->datasheet_bw_gbs, 3350.0);
  EXPECT_EQ(h100->source, "registry");
}

TEST(TargetRegistry, H200IsTheH100ChipWithMoreL2AndFasterMemory) {
  const GpuTarget h100 = *find_target("h100");
  const GpuTarget h200 = *find_target("H200");
  EXPECT_EQ(h200.sm_arch, h100.sm_arch);
  EXPECT_EQ(h200.num_sms, h100.num_sms);
  EXPECT_EQ(h200.smem_per_block_optin, h100.smem_per_block_optin);
  EXPECT_EQ(h200.l2_bytes, 60LL * 1024 * 1024);
  EXPECT_EQ(h200.hbm_bytes, 141LL * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(h200.datasheet_bw_gbs, 4800.0);
}

TEST(TargetRegistry, HoldsEightGpusWithSaneFigures) {
  const auto& all = target_registry();
  ASSERT_EQ(all.size(), 8u);
  std::set<std::string> names;
  for (const GpuTarget& t : all) {
    names.insert(t.name);
    EXPECT_GE(t.sm_arch, 80) << t.name;
    EXPECT_GT(t.num_sms, 0) << t.name;
    EXPECT_LE(t.smem_per_block_optin, t.smem_per_sm) << t.name;
    EXPECT_GT(t.l2_bytes, 0) << t.name;
    EXPECT_GT(t.hbm_bytes, t.l2_bytes) << t.name;
    EXPECT_GT(t.datasheet_bw_gbs, 0) << t.name;
    EXPECT_EQ(find_target(t.name)->name, t.name);
  }
  EXPECT_EQ(names, (std::set<std::string>{"h100", "h200", "a100", "l4", "l40s", "rtx4090",
                                          "rtx5090", "b200"}));
  EXPECT_EQ(find_target("a100")->num_sms, 108);
  EXPECT_EQ(find_target("l4")->max_threads_per_sm, 1536);
  EXPECT_EQ(find_target("b200")->sm_arch, 100);
  EXPECT_EQ(find_target("rtx5090")->sm_arch, 120);
}

TEST(TargetRegistry, LookupIgnoresCaseSeparatorsAndTakesAliases) {
  EXPECT_EQ(find_target("H100-SXM")->name, "h100");
  EXPECT_EQ(find_target("h100_sxm")->name, "h100");
  EXPECT_EQ(find_target("NVIDIA H100 80GB HBM3")->name, "h100");
  EXPECT_EQ(find_target("4090")->name, "rtx4090");
  EXPECT_EQ(find_target("RTX 5090")->name, "rtx5090");
  EXPECT_EQ(find_target("5090")->name, "rtx5090");
  EXPECT_EQ(find_target("L40S")->name, "l40s");
  EXPECT_EQ(find_target("A100-SXM4-80GB")->name, "a100");
  EXPECT_FALSE(find_target("v100").has_value());
  EXPECT_FALSE(find_target("").has_value());
}

TEST(TargetRegistry, FloorBandwidthPrefersTheMeasuredFigure) {
  GpuTarget t = *find_target("h100");
  EXPECT_DOUBLE_EQ(t.floor_bw_gbs(), 3350.0);
  t.measured_bw_gbs = 3000.0;
  EXPECT_DOUBLE_EQ(t.floor_bw_gbs(), 3000.0);
}

TEST(TargetRegistry, ToJsonCarriesEveryField) {
  GpuTarget t = *find_target("l4");
  t.measured_bw_gbs = 250.0;
  const nlohmann::json j = to_json(t);
  EXPECT_EQ(j.at("name"), "l4");
  EXPECT_EQ(j.at("sm_arch"), 89);
  EXPECT_EQ(j.at("num_sms"), 58);
  EXPECT_EQ(j.at("smem_per_sm"), 102400);
  EXPECT_EQ(j.at("smem_per_block_optin"), 101376);
  EXPECT_EQ(j.at("regs_per_sm"), 65536);
  EXPECT_EQ(j.at("max_threads_per_sm"), 1536);
  EXPECT_EQ(j.at("max_blocks_per_sm"), 24);
  EXPECT_EQ(j.at("l2_bytes"), 48LL * 1024 * 1024);
  EXPECT_EQ(j.at("hbm_bytes"), 24LL * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(j.at("datasheet_bw_gbs").get<double>(), 300.0);
  EXPECT_DOUBLE_EQ(j.at("measured_bw_gbs").get<double>(), 250.0);
  EXPECT_DOUBLE_EQ(j.at("floor_bw_gbs").get<double>(), 250.0);
  EXPECT_EQ(j.at("source"), "registry");
}

}  // namespace
}  // namespace megasched::schedule
