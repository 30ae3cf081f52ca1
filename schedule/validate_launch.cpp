// The validator's launch rule (schedule/validate_rules.h): the launch shape against the target,
// the co-residency check the search shares (launch_misfits, schedule/launch_fit.h) and every
// kernel-build field the device divides by, indexes with or loops on (build_misfits,
// schedule/build_fit.h).
#include <string>

#include "schedule/build_fit.h"
#include "schedule/launch_fit.h"
#include "schedule/validate_rules.h"

namespace megasched::schedule::validate_rules {

void check_launch(Context& cx) {
  const LaunchShape& l = cx.p.launch;
  const int64_t threads = l.threads_per_block, bps = l.blocks_per_sm, smem = l.smem_bytes;
  auto fail = [&](const std::string& m) { cx.add("launch", m); };
  if (cx.target.num_sms <= 0 || cx.target.max_threads_per_sm <= 0 ||
      cx.target.max_blocks_per_sm <= 0 || cx.target.smem_per_sm <= 0 ||
      cx.target.regs_per_sm <= 0) {
    fail("target '" + cx.target.name +
         "' has no SM count, thread, block, shared-memory or register limits, so no launch can "
         "be proven co-resident");
    return;
  }
  if (threads < 32 || threads > 1024 || threads % 32 != 0)
    fail("threads_per_block " + std::to_string(threads) + " is not a multiple of 32 in [32, 1024]");
  if (bps < 1) fail("blocks_per_sm " + std::to_string(bps) + " is below 1");
  if (l.smem_pages < 0 || l.smem_page_bytes < 0 || smem < 0 ||
      smem < static_cast<int64_t>(l.smem_pages) * l.smem_page_bytes)
    fail("smem_bytes " + std::to_string(smem) + " does not hold " + std::to_string(l.smem_pages) +
         " pages of " + std::to_string(l.smem_page_bytes) + " bytes");
  const KernelBuild& b = cx.p.build;
  if (b.weight_ring()) {
    // The ring build keeps its pages, the input staging area and two mbarriers a page in
    // smem_bytes (schedule/target.h ring_smem_bytes).
    if (l.smem_pages < 1 || l.smem_page_bytes < 16 || l.smem_page_bytes % 16 != 0)
      fail("the weight ring needs at least one page of whole 16-byte units, not " +
           std::to_string(l.smem_pages) + " pages of " + std::to_string(l.smem_page_bytes) +
           " bytes");
    const int64_t need = ring_smem_bytes(l.smem_pages, l.smem_page_bytes, b.x_floats);
    if (smem < need)
      fail("smem_bytes " + std::to_string(smem) + " does not hold the weight ring's pages, " +
           std::to_string(b.x_floats) + " staged input floats and its mbarriers (" +
           std::to_string(need) + " bytes)");
  }
  if (l.prefetch_depth < 0)
    fail("prefetch_depth " + std::to_string(l.prefetch_depth) + " is negative");
  // Whether the blocks fit their SMs: the check the search shares (schedule/launch_fit.h).
  const LaunchRequest request{
      l.threads_per_block, l.blocks_per_sm, smem, static_cast<int>(cx.p.model.head_dim),
      b.weight_ring(),     l.dynamic_queue};
  for (const std::string& misfit : launch_misfits(request, cx.target)) fail(misfit);
  // The kernel build: every field the device divides by, indexes with or loops on.
  size_t more_tasks = 0;
  for (BuildMisfit& misfit : build_misfits(cx.p, kMaxDiagnosticsPerRule, &more_tasks)) {
    if (misfit.task == UINT32_MAX)
      fail(misfit.message);
    else
      cx.add("launch", cx.label.task(misfit.task) + " " + misfit.message, {misfit.task});
  }
  cx.counts["launch"] += more_tasks;
  if (bps < 1) return;
  const int64_t resident = static_cast<int64_t>(cx.target.num_sms) * bps;
  if (l.grid_blocks != resident)
    fail("grid_blocks " + std::to_string(l.grid_blocks) +
         " is not num_sms x blocks_per_sm = " + std::to_string(resident) +
         (l.grid_blocks > resident
              ? ": a persistent grid larger than that is not co-resident and deadlocks"
              : ": the persistent grid must fill the co-resident slots exactly"));
}

}  // namespace megasched::schedule::validate_rules
