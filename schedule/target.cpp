#include "schedule/target.h"

#include <cctype>

namespace megasched::schedule {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;
constexpr int64_t kGiB = 1024 * kMiB;

struct Entry {
  GpuTarget target;
  std::vector<std::string> aliases;  // normalised (see normalise)
};

GpuTarget make(const char* name, int sm_arch, int num_sms, int smem_per_sm, int smem_optin,
               int max_threads_per_sm, int max_blocks_per_sm, int64_t l2_bytes, int64_t hbm_bytes,
               double bw_gbs) {
  GpuTarget t;
  t.name = name;
  t.sm_arch = sm_arch;
  t.num_sms = num_sms;
  t.smem_per_sm = smem_per_sm;
  t.smem_per_block_optin = smem_optin;
  t.regs_per_sm = 65536;
  t.max_threads_per_sm = max_threads_per_sm;
  t.max_blocks_per_sm = max_blocks_per_sm;
  t.l2_bytes = l2_bytes;
  t.hbm_bytes = hbm_bytes;
  t.datasheet_bw_gbs = bw_gbs;
  t.source = "registry";
  return t;
}

// Figures from NVIDIA datasheets and the CUDA programming guide's per-compute-capability tables
// (shared memory per SM / per block opt-in, resident threads and blocks). Memory capacities are
// the datasheet's "GB" read as GiB, as cudaGetDeviceProperties reports about that much. L2 sizes
// are those the driver reports (H200: 60 MiB as PyTorch measures it; B200: 126 MiB).
const std::vector<Entry>& entries() {
  static const std::vector<Entry> all = {
      // Hopper GH100: 228 KiB shared per SM, 227 KiB per block.
      {make("h100", 90, 132, 233472, 232448, 2048, 32, 50 * kMiB, 80 * kGiB, 3350.0),
       {"h100", "h100sxm", "h100sxm5", "h100sxm80gb", "h10080gbhbm3"}},
      {make("h200", 90, 132, 233472, 232448, 2048, 32, 60 * kMiB, 141 * kGiB, 4800.0),
       {"h200", "h200sxm", "h200141gb", "h200sxm141gb"}},
      // Ampere GA100: 164 KiB shared per SM, 163 KiB per block.
      {make("a100", 80, 108, 167936, 166912, 2048, 32, 40 * kMiB, 80 * kGiB, 2039.0),
       {"a100", "a100sxm", "a100sxm4", "a100sxm480gb", "a10080gb"}},
      // Ada AD10x (sm_89): 100 KiB shared per SM, 99 KiB per block, 1536 threads, 24 blocks.
      {make("l4", 89, 58, 102400, 101376, 1536, 24, 48 * kMiB, 24 * kGiB, 300.0), {"l4"}},
      {make("l40s", 89, 142, 102400, 101376, 1536, 24, 96 * kMiB, 48 * kGiB, 864.0), {"l40s"}},
      {make("rtx4090", 89, 128, 102400, 101376, 1536, 24, 72 * kMiB, 24 * kGiB, 1008.0),
       {"rtx4090", "4090", "geforcertx4090"}},
      // Blackwell GB202 (sm_120): 100 KiB shared per SM, 99 KiB per block, 1536 threads.
      {make("rtx5090", 120, 170, 102400, 101376, 1536, 32, 96 * kMiB, 32 * kGiB, 1792.0),
       {"rtx5090", "5090", "geforcertx5090"}},
      // Blackwell B200 (sm_100): Hopper's shared-memory limits, 148 SMs, HBM3e.
      {make("b200", 100, 148, 233472, 232448, 2048, 32, 126 * kMiB, 180 * kGiB, 8000.0),
       {"b200", "b200sxm"}},
  };
  return all;
}

/// Lower case without spaces, '-', '_' and a leading "nvidia", so "NVIDIA H100-SXM" == "h100sxm".
std::string normalise(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    if (c == ' ' || c == '-' || c == '_') continue;
    out.push_back(static_cast<char>(std::tolower(c)));
  }
  if (out.rfind("nvidia", 0) == 0) out.erase(0, 6);
  return out;
}

}  // namespace

const std::vector<GpuTarget>& target_registry() {
  static const std::vector<GpuTarget> all = [] {
    std::vector<GpuTarget> list;
    for (const Entry& e : entries()) list.push_back(e.target);
    return list;
  }();
  return all;
}

std::optional<GpuTarget> find_target(const std::string& name) {
  const std::string key = normalise(name);
  for (const Entry& e : entries()) {
    for (const std::string& alias : e.aliases) {
      if (alias == key) return e.target;
    }
  }
  return std::nullopt;
}

nlohmann::json to_json(const GpuTarget& target) {
  return nlohmann::json{
      {"name", target.name},
      {"sm_arch", target.sm_arch},
      {"num_sms", target.num_sms},
      {"smem_per_sm", target.smem_per_sm},
      {"smem_per_block_optin", target.smem_per_block_optin},
      {"regs_per_sm", target.regs_per_sm},
      {"max_threads_per_sm", target.max_threads_per_sm},
      {"max_blocks_per_sm", target.max_blocks_per_sm},
      {"l2_bytes", target.l2_bytes},
      {"hbm_bytes", target.hbm_bytes},
      {"datasheet_bw_gbs", target.datasheet_bw_gbs},
      {"measured_bw_gbs", target.measured_bw_gbs},
      {"floor_bw_gbs", target.floor_bw_gbs()},
      {"source", target.source},
  };
}

}  // namespace megasched::schedule
