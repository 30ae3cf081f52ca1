// The MLP gate's kernels (vm/device/mlp_gate.cuh, timed by bench/mlp_bench.cpp) on the CPU: every
// design compiles with NVRTC for sm_90a within the launch bound's register cap and without spills,
// and the tiles cover each op of a llama-1b MLP block exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/vm/nvrtc_log.h"
#include "vm/device/mlp_gate.cuh"
#include "vm/embedded_sources.h"
#include "vm/nvrtc_build.h"

namespace megasched::vm {
namespace {

/// NVRTC's log of mlp_gate.cuh for sm_90a (*ok false when it fails).
std::string build_log(bool* ok) {
  return nvrtc_log("vm/device/mlp_gate.cuh",
                   {"--std=c++17", "-arch=sm_90a", "--ptxas-options=-v", "-default-device"}, ok);
}

TEST(MlpGateBuild, EveryKernelCompilesForSm90aWithoutSpills) {
  if (!have_nvrtc()) GTEST_SKIP() << "NVRTC unavailable";
  bool ok = false;
  const std::string log = build_log(&ok);
  ASSERT_TRUE(ok) << log;
  const std::vector<KernelResources> ks = parse_ptxas_log(log);
  const int cap = (65536 / static_cast<int>(ms_mlp::kThreads)) / 8 * 8;  // 255 at 256 threads
  for (const char* name : {"ms_mlp_split", "ms_mlp_fused", "ms_mlp_fused_b8"}) {
    const KernelResources* k = nullptr;
    for (const KernelResources& r : ks)
      if (r.name == name) k = &r;
    ASSERT_NE(k, nullptr) << "no ptxas lines for " << name << "\n" << log;
    EXPECT_EQ(k->spill_store_bytes, 0) << name;
    EXPECT_EQ(k->spill_load_bytes, 0) << name;
    EXPECT_GT(k->registers, 0) << name;
    EXPECT_LE(k->registers, std::min(cap, 255)) << name;
    std::printf("%s: %d registers\n", name, k->registers);
  }
}

// kTasks tiles of each op cover it: gate/up pairs, split down rows; the fused down part's loads
// cover every row of a warp's share, four rows a load.
TEST(MlpGateBuild, TilesCoverEachOpOfTheBlock) {
  EXPECT_EQ(ms_mlp::kPairs * ms_mlp::kTasks, ms_mlp::kFfn);
  EXPECT_EQ(ms_mlp::kDownRows * ms_mlp::kTasks, ms_mlp::kHidden);
  EXPECT_EQ(ms_mlp::kHidden % (4 * ms_mlp::kWarps), 0u);
  EXPECT_EQ(ms_mlp::kPairs, 64u) << "the fused design's h slice is eight 16-byte vectors a row";
}

TEST(MlpGateBuild, TheMlpGateIsBenchOnly) {
  EXPECT_TRUE(bench_only_source("vm/device/mlp_gate.cuh"));
  bool embedded = false;
  for (const EmbeddedSource& s : embedded_sources())
    embedded = embedded || std::string(s.path) == "vm/device/mlp_gate.cuh";
  EXPECT_TRUE(embedded) << "bench/mlp_bench.cpp compiles the embedded MLP gate";
}

}  // namespace
}  // namespace megasched::vm
