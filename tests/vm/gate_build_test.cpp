// The gate kernel (vm/device/gate.cuh, timed by bench/gate_bench.cpp) on the CPU: every ring
// geometry the bench runs compiles with NVRTC for sm_90a (and sm_90: it needs no 90a-only
// instruction) with every consumer design, without spills and within the launch bound's register
// cap; and the layout formulas the host packer and the device share hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "tests/vm/nvrtc_log.h"
#include "vm/device/gate.cuh"
#include "vm/embedded_sources.h"
#include "vm/nvrtc_build.h"

namespace megasched::vm {
namespace {

struct Geometry {
  unsigned page_bytes, pages;
};
// The geometries bench/gate_bench.cpp registers.
const Geometry kGeometries[] = {{16384, 4}, {16384, 8}, {32768, 4}, {32768, 6}};

const char* const kKernels[] = {"ms_gate_copy_k2048",   "ms_gate_copy_k8192", "ms_gate_c_k2048",
                                "ms_gate_c_k8192",      "ms_gate_m_k2048",    "ms_gate_m_k8192",
                                "ms_gate_c_k2048_relay"};

/// NVRTC's log of gate.cuh built for `arch` and a geometry ("" and *ok false when it fails, with
/// the log in the failure message).
std::string build_log(const std::string& arch, const Geometry& g, bool* ok) {
  return nvrtc_log("vm/device/gate.cuh",
                   {"--std=c++17", "-arch=" + arch, "--ptxas-options=-v", "-default-device",
                    "-DMS_GATE_PAGE_BYTES=" + std::to_string(g.page_bytes),
                    "-DMS_GATE_PAGES=" + std::to_string(g.pages)},
                   ok);
}

void expect_kernels_fit(const std::string& arch, const Geometry& g) {
  bool ok = false;
  const std::string log = build_log(arch, g, &ok);
  const std::string what =
      arch + " " + std::to_string(g.page_bytes) + " B x " + std::to_string(g.pages) + " pages";
  ASSERT_TRUE(ok) << what << ":\n" << log;
  const std::vector<KernelResources> ks = parse_ptxas_log(log);
  // __launch_bounds__(kThreads, 1): 65536 / 288 registers, rounded down to ptxas' unit of 8.
  const int cap = (65536 / static_cast<int>(ms_gate::kThreads)) / 8 * 8;
  for (const char* name : kKernels) {
    const KernelResources* k = nullptr;
    for (const KernelResources& r : ks)
      if (r.name == name) k = &r;
    ASSERT_NE(k, nullptr) << what << ": no ptxas lines for " << name << "\n" << log;
    EXPECT_EQ(k->spill_store_bytes, 0) << what << " " << name;
    EXPECT_EQ(k->spill_load_bytes, 0) << what << " " << name;
    EXPECT_EQ(k->stack_bytes, 0) << what << " " << name;
    EXPECT_GT(k->registers, 0) << what << " " << name;
    EXPECT_LE(k->registers, cap) << what << " " << name;
    std::printf("%s %s: %d registers\n", what.c_str(), name, k->registers);
  }
}

TEST(GateBuild, EveryGeometryAndDesignCompilesForSm90aWithoutSpills) {
  if (!have_nvrtc()) GTEST_SKIP() << "NVRTC unavailable";
  for (const Geometry& g : kGeometries) expect_kernels_fit("sm_90a", g);
}

TEST(GateBuild, CompilesForPlainSm90Too) {
  if (!have_nvrtc()) GTEST_SKIP() << "NVRTC unavailable";
  expect_kernels_fit("sm_90", kGeometries[2]);
}

// Every geometry's shared memory fits the Hopper opt-in (232,448 B per block).
TEST(GateBuild, RingSharedMemoryFitsTheOptIn) {
  for (const Geometry& g : kGeometries)
    EXPECT_LE(ms_gate::smem_bytes(g.pages, g.page_bytes), 232448u);
  EXPECT_EQ(ms_gate::smem_bytes(4, 16384), 4u * 16384 + 2 * 128 * 8 * 4 + 64);
}

// mma_packed_index is a permutation of the matrix, and lane L's 8 elements of a tile are the A
// fragment of mma.m16n8k16: (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1), then the same at
// columns + 8, with g = L / 4, t = L % 4.
TEST(GateBuild, MmaPackingIsAPermutationInFragmentOrder) {
  const unsigned rows = 32, cols = 64;
  std::set<unsigned long long> seen;
  for (unsigned r = 0; r < rows; ++r)
    for (unsigned k = 0; k < cols; ++k) {
      const unsigned long long i = ms_gate::mma_packed_index(cols, r, k);
      EXPECT_LT(i, 1ull * rows * cols);
      seen.insert(i);
    }
  EXPECT_EQ(seen.size(), 1ull * rows * cols);
  // Tile (group 1, column tile 2): lane 5 (g 1, t 1) holds rows 17 and 25, columns 34, 35, 42, 43.
  const unsigned long long lane_base = ((1ull * (cols / 16) + 2) * 32 + 5) * 8;
  EXPECT_EQ(ms_gate::mma_packed_index(cols, 17, 34), lane_base + 0);
  EXPECT_EQ(ms_gate::mma_packed_index(cols, 17, 35), lane_base + 1);
  EXPECT_EQ(ms_gate::mma_packed_index(cols, 25, 34), lane_base + 2);
  EXPECT_EQ(ms_gate::mma_packed_index(cols, 25, 35), lane_base + 3);
  EXPECT_EQ(ms_gate::mma_packed_index(cols, 17, 42), lane_base + 4);
  EXPECT_EQ(ms_gate::mma_packed_index(cols, 25, 43), lane_base + 7);
}

// The row-granular split gives every block of the chip work on each llama-1b shape (rows for C,
// 16-row groups for M) and covers the units once.
TEST(GateBuild, PartitionsCoverTheRowsOnce) {
  for (unsigned long long units : {16384ull, 2048ull, 3072ull, 128256ull, 128ull, 192ull}) {
    for (unsigned long long blocks : {1ull, 66ull, 130ull, 132ull}) {
      unsigned long long covered = 0, smallest = units;
      for (unsigned long long p = 0; p < blocks; ++p) {
        const unsigned long long n =
            ms_gate::part_begin(units, p + 1, blocks) - ms_gate::part_begin(units, p, blocks);
        covered += n;
        smallest = std::min(smallest, n);
      }
      EXPECT_EQ(covered, units) << units << " over " << blocks;
      if (units >= blocks) {
        EXPECT_GE(smallest, units / blocks) << units << " over " << blocks;
      }
    }
  }
}

}  // namespace
}  // namespace megasched::vm
