#include "schedule/validate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "abi/ring.h"
#include "groundtruth/device_model.h"
#include "groundtruth/ground_truth.h"
#include "groundtruth/program_fuzz.h"
#include "schedule/footprint.h"
#include "schedule/lower.h"
#include "schedule/search.h"

namespace megasched::schedule {
namespace {

using groundtruth::fuzz_target;
using groundtruth::ProgramBuilder;
using groundtruth::random_safe_dag_program;

// The ground truth's verdict (kinds of hazard over every position that matters; empty: safe), to
// show that a rejection below is of an unsafe program.
std::set<std::string> truth_kinds(const Program& p, const GpuTarget& t = fuzz_target(4)) {
  static const Weights weights = generate_weights(*find_preset("toy"), 1, 1);
  std::set<std::string> kinds;
  for (int32_t position : groundtruth::ground_truth_positions(p)) {
    groundtruth::TaskAccesses acc;
    std::string error;
    EXPECT_TRUE(groundtruth::record_accesses(p, weights, position, &acc, &error)) << error;
    const groundtruth::GroundTruth g = groundtruth::explore_ground_truth(p, t, acc);
    EXPECT_TRUE(g.complete);
    kinds.insert(g.kinds.begin(), g.kinds.end());
  }
  return kinds;
}

// The default toy lowering (on the 4-SM fuzz target), with the weight ring when `ring`.
Program toy_program(bool ring) {
  ScheduleConfig cfg;
  if (ring) cfg.kernel.weight_stream = WeightStream::kSmemRing;
  std::string error;
  std::optional<Program> p = lower(*find_preset("toy"), fuzz_target(4), cfg, &error);
  EXPECT_TRUE(p) << error;
  return *p;
}

// The toy lowering of `cfg` on the 4-SM fuzz target, which the validator and the ground truth must
// both accept (nullopt when it does not lower).
std::optional<Program> proved_toy_program(const ScheduleConfig& cfg) {
  std::string error;
  std::optional<Program> p = lower(*find_preset("toy"), fuzz_target(4), cfg, &error);
  EXPECT_TRUE(p) << error;
  if (!p) return std::nullopt;
  const ValidationReport ok = validate(*p, fuzz_target(4));
  EXPECT_TRUE(ok.ok()) << to_json(ok).dump(1);
  EXPECT_TRUE(truth_kinds(*p).empty());
  return p;
}

// Hand-built programs: every task is act[out + r] = act[in + r] + act[in2 + r]; act[0:128) is
// input (the rope table).
constexpr uint32_t kIn = 0;   // an input slice
constexpr uint32_t kA = 256;  // tile outputs
constexpr uint32_t kB = 264;
constexpr uint32_t kC = 272;
constexpr uint32_t kD = 280;

bool has_rule(const ValidationReport& r, const std::string& rule) {
  for (const Diagnostic& d : r.diagnostics)
    if (d.rule == rule) return true;
  return false;
}

std::string first_message(const ValidationReport& r, const std::string& rule) {
  for (const Diagnostic& d : r.diagnostics)
    if (d.rule == rule) return d.message;
  return "";
}

TEST(ScheduleValidator, AcceptsProducerConsumerAcrossQueues) {
  ProgramBuilder b(fuzz_target());
  const uint32_t op = b.op("x"), c = b.counter("x.done");
  b.add(0, op, kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, b.op("y"), kA, kIn, kB, 8, {{c, 1}});
  const ValidationReport r = validate(b.finish(), fuzz_target());
  EXPECT_TRUE(r.ok()) << to_json(r).dump(1);
}

TEST(ScheduleValidator, RejectsReadBeforeWrite) {
  // Same queue, consumer first: queue order makes the read happen before the write.
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), y = b.op("y");
  b.add(0, y, kA, kIn, kB, 8);
  b.add(0, x, kIn, kIn, kA, 8);
  const ValidationReport r = validate(b.finish(), fuzz_target());
  ASSERT_TRUE(has_rule(r, "race"));
  EXPECT_EQ(first_message(r, "race"),
            "task 0 (add y tile 0) reads act[256:264] written by task 1 (add x tile 0), but it "
            "runs before that writer");
}

TEST(ScheduleValidator, RejectsMissingWaitAcrossQueues) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), y = b.op("y"), c = b.counter("x.done");
  b.add(0, x, kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, y, kA, kIn, kB, 8);
  const ValidationReport r = validate(b.finish(), fuzz_target());
  ASSERT_EQ(r.rules(), "race");
  EXPECT_NE(first_message(r, "race").find(
                "task 1 (add y tile 0) reads act[256:264] written by task 0 (add x tile 0) "
                "with no ordering between them"),
            std::string::npos)
      << first_message(r, "race");
  EXPECT_EQ(r.diagnostics[0].tasks, (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(r.diagnostics[0].buffers, (std::vector<std::string>{"act[256:264]"}));
}

TEST(ScheduleValidator, RejectsCycleAcrossQueues) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), c0 = b.counter("c0"), c1 = b.counter("c1");
  b.add(0, x, kIn, kIn, kA, 8, {{c1, 1}}, c0, 1);
  b.add(1, x, kIn, kIn, kB, 8, {{c0, 1}}, c1, 1);
  const ValidationReport r = validate(b.finish(), fuzz_target());
  EXPECT_EQ(r.rules(), "deadlock");
  ASSERT_EQ(r.diagnostics.size(), 2u);
  EXPECT_NE(r.diagnostics[0].message.find(
                "queue 0 is stuck at task 0 (add x tile 0), which waits for counter 1 (c1) >= 1 "
                "but the counter stops at 0 of 1: its producers task 1 (add x tile 1) never run"),
            std::string::npos)
      << r.diagnostics[0].message;
}

TEST(ScheduleValidator, RejectsThresholdAboveTotal) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), c = b.counter("c");
  b.add(0, x, kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, x, kA, kIn, kB, 8, {{c, 2}});
  const ValidationReport r = validate(b.finish(), fuzz_target());
  EXPECT_TRUE(has_rule(r, "reachability"));
  EXPECT_TRUE(has_rule(r, "deadlock"));
  EXPECT_EQ(
      first_message(r, "reachability"),
      "task 1 (add x tile 1) waits for counter 0 (c) >= 2, but its producers add only 1 per step");
}

TEST(ScheduleValidator, RejectsDeclaredTotalThatProducersDoNotAdd) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), c = b.counter("c", 3);
  b.add(0, x, kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, x, kA, kIn, kB, 8, {{c, 1}});
  const ValidationReport r = validate(b.finish(), fuzz_target());
  EXPECT_EQ(r.rules(), "reachability");
}

TEST(ScheduleValidator, RejectsPartialWaitOnMultiProducerCounter) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), y = b.op("y"), c = b.counter("x.done");
  b.add(0, x, kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, x, kIn, kIn, kB, 8, {}, c, 1);
  b.add(2, y, kA, kB, kC, 8, {{c, 1}});
  const ValidationReport r = validate(b.finish(), fuzz_target());
  EXPECT_EQ(r.rules(), "race");
}

TEST(ScheduleValidator, AcceptsDisjointTilesUnderOneCounter) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), y = b.op("y"), c = b.counter("x.done");
  b.add(0, x, kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, x, kIn, kIn, kB, 8, {}, c, 1);
  b.add(2, y, kA, kB, kC, 8, {{c, 2}});
  EXPECT_TRUE(validate(b.finish(), fuzz_target()).ok());
}

TEST(ScheduleValidator, AcceptsPartialWaitWhenALargeIncrementIsCertain) {
  // Producer A adds 2, B adds 1: counter >= 2 cannot happen without A.
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), y = b.op("y"), c = b.counter("x.done");
  b.add(0, x, kIn, kIn, kA, 8, {}, c, 2);
  b.add(1, x, kIn, kIn, kB, 8, {}, c, 1);
  b.add(2, y, kA, kIn, kC, 8, {{c, 2}});
  EXPECT_TRUE(validate(b.finish(), fuzz_target()).ok());
  ProgramBuilder b2(fuzz_target());
  b2.op("x");
  b2.op("y");
  b2.counter("x.done");
  b2.add(0, x, kIn, kIn, kA, 8, {}, c, 2);
  b2.add(1, x, kIn, kIn, kB, 8, {}, c, 1);
  b2.add(2, y, kB, kIn, kC, 8, {{c, 2}});  // reads B, which the wait does not imply
  EXPECT_EQ(validate(b2.finish(), fuzz_target()).rules(), "race");
}

TEST(ScheduleValidator, AcceptsPartialWaitWhenQueueOrderMakesTheProducerCertain) {
  // A and B share a queue (A first): counter >= 1 means A has signalled, whoever B is.
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), y = b.op("y"), c = b.counter("x.done");
  b.add(0, x, kIn, kIn, kA, 8, {}, c, 1);
  b.add(0, x, kIn, kIn, kB, 8, {}, c, 1);
  b.add(1, y, kA, kIn, kC, 8, {{c, 1}});
  EXPECT_TRUE(validate(b.finish(), fuzz_target()).ok());
}

TEST(ScheduleValidator, RejectsOverlappingTileOutputs) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), c = b.counter("x.done");
  b.add(0, x, kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, x, kIn, kIn, kA + 4, 8, {}, c, 1);
  EXPECT_EQ(validate(b.finish(), fuzz_target()).rules(), "race");
  ProgramBuilder ordered(fuzz_target());
  ordered.op("x");
  ordered.add(0, x, kIn, kIn, kA, 8);
  ordered.add(0, x, kIn, kIn, kA + 4, 8);
  const ValidationReport r = validate(ordered.finish(), fuzz_target());
  EXPECT_EQ(r.rules(), "coverage");
  EXPECT_NE(first_message(r, "coverage").find("act[260:264] is written by both task 0"),
            std::string::npos);
}

TEST(ScheduleValidator, RejectsReadOfElementsNothingWrites) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), 600, kIn, kA, 8);
  const ValidationReport r = validate(b.finish(), fuzz_target());
  EXPECT_EQ(r.rules(), "coverage");
  EXPECT_NE(first_message(r, "coverage").find("reads act[600:608], which no task writes"),
            std::string::npos);
}

TEST(ScheduleValidator, RejectsTaskThatReadsItsOwnOutput) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), kIn, kA - 4, kA, 8);
  EXPECT_TRUE(has_rule(validate(b.finish(), fuzz_target()), "race"));
}

TEST(ScheduleValidator, RejectsTaskQueuedTwiceOrNever) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x");
  b.add(0, x, kIn, kIn, kA, 8);
  b.add(1, x, kIn, kIn, kB, 8);
  Program p = b.finish();
  p.queues[1] = {0};
  const ValidationReport r = validate(p, fuzz_target());
  EXPECT_EQ(r.rules(), "structure");
  EXPECT_EQ(r.diagnostics.size(), 2u);  // task 0 twice, task 1 never
}

TEST(ScheduleValidator, RejectsOperandsOutOfBounds) {
  ProgramBuilder b(fuzz_target(), 512);
  b.add(0, b.op("x"), kIn, kIn, 510, 8);
  const ValidationReport r = validate(b.finish(), fuzz_target());
  EXPECT_EQ(r.rules(), "structure");
  EXPECT_NE(
      first_message(r, "structure").find("writes act[510:518], beyond the buffer's 512 elements"),
      std::string::npos);
}

TEST(ScheduleValidator, DynamicQueueOrderGivesNoOrdering) {
  ProgramBuilder b(fuzz_target());
  b.set_dynamic(true);
  const uint32_t x = b.op("x"), y = b.op("y");
  b.add(0, x, kIn, kIn, kA, 8);
  b.add(0, y, kA, kIn, kB, 8);
  EXPECT_EQ(validate(b.finish(), fuzz_target()).rules(), "race");
}

TEST(ScheduleValidator, RejectsDynamicQueueWhoseWorkersAllWait) {
  // Four waiters are claimed first and hold all four workers; their producer is never claimed.
  auto build = [](int sms) {
    ProgramBuilder b(fuzz_target(sms));
    b.set_dynamic(true);
    const uint32_t x = b.op("x"), c = b.counter("p.done");
    for (uint32_t i = 0; i < 4; ++i) b.add(0, x, kA, kIn, kB + 8 * i, 8, {{c, 1}});
    b.add(0, b.op("p"), kIn, kIn, kA, 8, {}, c, 1);
    return b.finish();
  };
  EXPECT_EQ(validate(build(4), fuzz_target(4)).rules(), "deadlock");
  EXPECT_TRUE(validate(build(5), fuzz_target(5)).ok()) << "a fifth worker claims the producer";
}

TEST(ScheduleValidator, RejectsGridNotCoResident) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), kIn, kIn, kA, 8);
  Program p = b.finish();
  p.launch.grid_blocks = 5;
  const ValidationReport r = validate(p, fuzz_target());
  EXPECT_EQ(r.rules(), "launch");
  EXPECT_NE(first_message(r, "launch").find("not co-resident"), std::string::npos);
}

TEST(ScheduleValidator, RejectsLaunchShapesBeyondTheTarget) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), kIn, kIn, kA, 8);
  const Program base = b.finish();
  const GpuTarget t = fuzz_target();
  Program p = base;
  p.launch.threads_per_block = 200;
  EXPECT_EQ(validate(p, t).rules(), "launch") << "not a multiple of 32";
  p = base;
  p.launch.threads_per_block = 1024;
  p.launch.blocks_per_sm = 3;
  p.launch.grid_blocks = 12;
  EXPECT_EQ(validate(p, t).rules(), "launch") << "3 x 1024 threads per SM";
  p = base;
  p.launch.smem_bytes = t.smem_per_block_optin + 1;
  EXPECT_EQ(validate(p, t).rules(), "launch") << "over the opt-in cap";
  p = base;
  p.launch.smem_bytes = 120 * 1024;
  p.launch.blocks_per_sm = 2;
  p.launch.grid_blocks = 8;
  EXPECT_EQ(validate(p, t).rules(), "launch") << "2 x (120 KiB + 1 KiB) > 228 KiB per SM";
  p = base;
  p.launch.blocks_per_sm = 2;
  p.launch.grid_blocks = 8;
  EXPECT_TRUE(validate(p, t).ok());
}

TEST(ScheduleValidator, RejectsWeightRingLaunchesItCannotServe) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), kIn, kIn, kA, 8);
  Program base = b.finish();
  base.launch.smem_pages = 2;
  base.launch.smem_page_bytes = 4096;
  base.build.knobs["MS_WEIGHT_RING"] = 1;
  base.build.x_floats = 256;
  base.launch.smem_bytes = 2 * 4096 + 256 * 4 + 2 * 16;
  const GpuTarget t = fuzz_target();
  EXPECT_TRUE(validate(base, t).ok()) << validate(base, t).rules();
  Program p = base;
  p.launch.dynamic_queue = true;
  EXPECT_EQ(validate(p, t).rules(), "launch") << "the loader walks a static queue";
  EXPECT_NE(first_message(validate(p, t), "launch").find("static queues"), std::string::npos);
  p = base;
  p.launch.smem_bytes -= 16;
  EXPECT_EQ(validate(p, t).rules(), "launch") << "no room for the mbarriers";
  p = base;
  p.launch.smem_page_bytes = 4100;
  EXPECT_EQ(validate(p, t).rules(), "launch") << "ring pages of whole 16-byte units";
}

// ---- Holes found by the fuzzer: each program below was accepted before, and is unsafe. ----

// Counters are 32-bit: a per-step total past 2^31 makes the wrap-safe comparison pass a wait
// whose producer has not run (here at step 0 already: 0 - (2^31 + 1) reads as a positive distance).
TEST(ScheduleValidator, RejectsCounterTotalsBeyondWhatThe32BitComparisonTells) {
  auto build = [](uint32_t increment) {
    ProgramBuilder b(fuzz_target());
    const uint32_t c = b.counter("x.done");
    b.add(0, b.op("x"), kIn, kIn, kA, 8, {}, c, increment);
    b.add(1, b.op("y"), kA, kIn, kB, 8, {{c, increment}});
    return b.finish();
  };
  const Program p = build(0x80000001u);
  const ValidationReport r = validate(p, fuzz_target());
  EXPECT_EQ(r.rules(), "reachability");
  const std::string m = first_message(r, "reachability");
  EXPECT_NE(
      m.find("counter 0 (x.done) receives 2147483649 increments per step, more than 2^31 - 1"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("hint: signal smaller increments"), std::string::npos) << m;
  EXPECT_TRUE(ms_abi::counter_reached(0u, ms_abi::wait_target(0, 0x80000001u, 0x80000001u)))
      << "the device would pass the wait before x ran";
  EXPECT_EQ(truth_kinds(p), (std::set<std::string>{"race"}));
  const Program largest = build(0x7fffffffu);
  EXPECT_TRUE(validate(largest, fuzz_target()).ok());
  EXPECT_TRUE(truth_kinds(largest).empty());
}

// The ring stages a tile's columns in blocks of 32 x 4 floats (fp32, 16-byte vectors): 64 columns
// reach float 112, past a 64-float staging area, into ring page 0.
TEST(ScheduleValidator, RejectsRingStagingThatIsNotAWholeNumberOfBlocks) {
  Program p = toy_program(true);
  ASSERT_TRUE(validate(p, fuzz_target(4)).ok());
  p.build.x_floats = 64;
  p.launch.smem_bytes = static_cast<int>(
      ring_smem_bytes(p.launch.smem_pages, p.launch.smem_page_bytes, p.build.x_floats));
  const ValidationReport r = validate(p, fuzz_target(4));
  EXPECT_EQ(r.rules(), "launch");
  const std::string m = first_message(r, "launch");
  EXPECT_NE(m.find("streams through the weight ring and stages its 64 input columns in blocks of "
                   "128 floats up to float 112, past the 64 staging floats"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("hint: x_floats must be a whole number of 128-float blocks"), std::string::npos);
  EXPECT_EQ(truth_kinds(p).count("smem_overflow"), 1u);
}

// A ring page smaller than one row piece: the loader's row step is zero and the kernel never ends.
TEST(ScheduleValidator, RejectsRingPagesSmallerThanOneRowPiece) {
  Program p = toy_program(true);
  p.launch.smem_page_bytes = 16;
  p.launch.smem_bytes = static_cast<int>(
      ring_smem_bytes(p.launch.smem_pages, p.launch.smem_page_bytes, p.build.x_floats));
  const ValidationReport r = validate(p, fuzz_target(4));
  EXPECT_EQ(r.rules(), "launch");
  const std::string m = first_message(r, "launch");
  EXPECT_NE(m.find("through ring pages of 4: no piece fits a page, so the loader's row step is "
                   "zero and the kernel never ends; hint: pages of at least 512 bytes"),
            std::string::npos)
      << m;
  EXPECT_EQ(truth_kinds(p).count("hang"), 1u);
}

// The ring loader's cap on its pages in flight (smem.inflight_pages, MS_RING_INFLIGHT) builds only
// below the ring's pages (a static_assert of vm/device/common.cuh): a program that sets it at the
// ring's pages is refused, below them accepted, and in a registers build (no loader) it is inert.
TEST(ScheduleValidator, RejectsAnInflightCapAtOrAboveTheRingsPages) {
  Program p = toy_program(true);
  ASSERT_EQ(p.launch.smem_pages, 2);
  p.build.knobs["MS_RING_INFLIGHT"] = 1;
  EXPECT_TRUE(validate(p, fuzz_target(4)).ok()) << validate(p, fuzz_target(4)).rules();
  EXPECT_TRUE(truth_kinds(p).empty());
  p.build.knobs["MS_RING_INFLIGHT"] = 2;
  const ValidationReport r = validate(p, fuzz_target(4));
  EXPECT_EQ(r.rules(), "launch");
  const std::string m = first_message(r, "launch");
  EXPECT_NE(m.find("sets MS_RING_INFLIGHT=2 with a weight ring of 2 pages"), std::string::npos)
      << m;
  EXPECT_NE(m.find("hint: smem.inflight_pages below smem.pages"), std::string::npos) << m;
  EXPECT_EQ(truth_kinds(p), (std::set<std::string>{"build"}));
  Program registers = toy_program(false);
  registers.build.knobs["MS_RING_INFLIGHT"] = 4;
  EXPECT_TRUE(validate(registers, fuzz_target(4)).ok());
  EXPECT_TRUE(truth_kinds(registers).empty());
}

// Every build field the device code divides by, indexes with or loops on is range-checked.
TEST(ScheduleValidator, RejectsKernelBuildsTheDeviceCannotRun) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), kIn, kIn, kA, 8);
  const Program base = b.finish();
  ASSERT_TRUE(validate(base, fuzz_target()).ok());
  Program p = base;
  p.build.knobs["MS_UNROLL"] = 3;
  EXPECT_NE(first_message(validate(p, fuzz_target()), "launch")
                .find("sets MS_UNROLL=3, not one of 1, 2, 4, 8 (kernel.unroll)"),
            std::string::npos);
  p = base;
  p.build.knobs["MS_STREAM_DEPTH"] = 5;
  EXPECT_NE(first_message(validate(p, fuzz_target()), "launch")
                .find("sets MS_STREAM_DEPTH=5, not one of 2, 3, 4 (kernel.stream_depth)"),
            std::string::npos);
  p = base;
  p.build.knobs.erase("MS_VECTOR_BYTES");
  EXPECT_NE(
      first_message(validate(p, fuzz_target()), "launch").find("does not set MS_VECTOR_BYTES"),
      std::string::npos);
  p = base;
  p.build.knobs["MS_X_FLOATS"] = 12;
  EXPECT_NE(first_message(validate(p, fuzz_target()), "launch").find("which is no kernel knob"),
            std::string::npos);
  p = base;
  p.model.head_dim = 512;
  EXPECT_NE(first_message(validate(p, fuzz_target()), "launch")
                .find("head_dim 512 is not an even number in [2, 256]"),
            std::string::npos);
  EXPECT_EQ(truth_kinds(p), (std::set<std::string>{"build"}));
}

// The ring stages act * gamma over the whole row, so a norm-prologue tile of half a row reads the
// gamma's second half too: here past the end of the weights, where its own columns end.
TEST(ScheduleValidator, RejectsNormGammaTheRingReadsBeyondTheWeights) {
  for (const bool ring : {true, false}) {
    Program p = toy_program(ring);
    bool moved = false;
    for (ms_abi::Instr& in : p.tasks) {
      if (in.opcode != ms_abi::kGemv || !(in.flags & ms_abi::kFlagNormPrologue) || moved) continue;
      ASSERT_EQ(in.col_end, 64u);
      in.col_end = 32;
      in.weight2 = p.buffer_elements[ms_abi::kBufWeights] - 32;
      moved = true;
    }
    ASSERT_TRUE(moved);
    const ValidationReport r = validate(p, fuzz_target(4));
    if (!ring) {  // the register path reads the task's 32 gamma values: in bounds
      EXPECT_TRUE(r.ok()) << to_json(r).dump(1);
      EXPECT_TRUE(truth_kinds(p).empty());
      continue;
    }
    // The task has no footprint then, so its outputs also count as unwritten (coverage).
    EXPECT_EQ(r.rules().rfind("structure", 0), 0u) << r.rules();
    const uint64_t w = p.buffer_elements[ms_abi::kBufWeights];
    EXPECT_NE(first_message(r, "structure")
                  .find("reads weights[" + std::to_string(w - 32) + ":" + std::to_string(w + 32) +
                        "], beyond the buffer's " + std::to_string(w) + " elements"),
              std::string::npos)
        << first_message(r, "structure");
    EXPECT_EQ(truth_kinds(p).count("out_of_bounds"), 1u);
  }
}

// The QKV tile that appends K and V of both KV heads drops its last V head: attention of KV head
// 1 reads a V cache nothing ever writes.
TEST(ScheduleValidator, RejectsAttentionReadingAKvHeadNoTaskAppends) {
  Program p = toy_program(false);
  const uint32_t hd = p.model.head_dim, v_end = (p.model.heads + 2 * p.model.kv_heads) * hd;
  bool dropped = false;
  for (ms_abi::Instr& in : p.tasks)
    if ((in.flags & ms_abi::kFlagRopeKv) && in.row_end == v_end) {
      in.row_end -= hd;
      dropped = true;
    }
  ASSERT_TRUE(dropped);
  const ValidationReport r = validate(p, fuzz_target(4));
  EXPECT_EQ(r.rules(), "coverage");
  const std::string m = first_message(r, "coverage");
  EXPECT_NE(m.find("(in kv.L0.v.h1), which no task appends: the KV history a step reads was "
                   "written by this program's own K/V appends"),
            std::string::npos)
      << m;
  EXPECT_EQ(truth_kinds(p), (std::set<std::string>{"uninitialized_read"}));
}

// What counts as an input comes from the model: marking a region `input: true` does not make it
// initialised.
TEST(ScheduleValidator, RejectsReadsOfARegionTheProgramMarksInput) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), 600, kIn, kA, 8);
  Program p = b.finish();
  p.regions.push_back(Region{"mine", ms_abi::kBufActivations, 600, 608, true});
  const ValidationReport r = validate(p, fuzz_target());
  EXPECT_EQ(r.rules(), "coverage");
  EXPECT_NE(first_message(r, "coverage")
                .find("reads act[600:608] (in mine), which no task writes and which is not an "
                      "input (the activation inputs are the rope table act[0:128]"),
            std::string::npos)
      << first_message(r, "coverage");
  EXPECT_NE(first_message(r, "coverage").find("a region the program marks input does not count"),
            std::string::npos);
  EXPECT_EQ(truth_kinds(p, fuzz_target()), (std::set<std::string>{"uninitialized_read"}));
}

// Five blocks per SM whose shared memory fits 228 KiB byte for byte, but not in the 128-byte
// units the SM hands it out in (233472 / 5 = 46694.4; a block of 46593 bytes takes 46720).
TEST(ScheduleValidator, RejectsSharedMemoryThatFitsOnlyWithoutTheAllocationUnit) {
  ProgramBuilder b(fuzz_target());
  b.add(0, b.op("x"), kIn, kIn, kA, 8);
  Program p = b.finish();
  p.launch.threads_per_block = 128;
  p.launch.blocks_per_sm = 5;
  p.launch.grid_blocks = 20;
  const int64_t exact = groundtruth::device_static_smem_bytes(groundtruth::device_build(p));
  const int64_t bound = kernel_static_smem_bound(128, static_cast<int>(p.model.head_dim));
  const int64_t per_sm = fuzz_target().smem_per_sm;
  p.launch.smem_bytes = static_cast<int>(46593 - exact - kReservedSmemPerBlock);
  ASSERT_LE(5 * (p.launch.smem_bytes + bound + kReservedSmemPerBlock), per_sm)
      << "the old rule (no allocation unit) accepted it";
  const ValidationReport r = validate(p, fuzz_target());
  EXPECT_EQ(r.rules(), "launch");
  EXPECT_NE(first_message(r, "launch")
                .find("5 blocks of 46720 bytes of shared memory (" +
                      std::to_string(p.launch.smem_bytes) + " dynamic + " + std::to_string(bound) +
                      " static + 1024 reserved, rounded up to whole 128-byte allocation units) "
                      "exceed 233472 bytes per SM"),
            std::string::npos)
      << first_message(r, "launch");
  EXPECT_EQ(truth_kinds(p, fuzz_target()), (std::set<std::string>{"launch"}));
}

// Two layers' attention signal one counter; each layer's O projection waits for its own share.
// Safe by induction over the execution (layer 1's attention runs after layer 0's O projection,
// which needs the counter at 1 before anything of layer 1 can add to it), which the validator does
// not attempt: it rejects, and says why (dev/validator_notes.md, "Counters shared by dependent
// ops"). Lowering gives each op its own counter.
TEST(ScheduleValidator, RejectsTwoLayersAttentionSharingACounterAndSaysWhy) {
  auto build = [](bool shared) {
    ProgramBuilder b(fuzz_target());
    const uint32_t c0 = b.counter("L0.attn"), o0 = b.counter("L0.o");
    const uint32_t c1 = shared ? c0 : b.counter("L1.attn");
    b.add(0, b.op("L0.attn"), kIn, kIn, kA, 8, {}, c0, 1);
    b.add(1, b.op("L0.o"), kA, kIn, kB, 8, {{c0, 1}}, o0, 1);
    b.add(2, b.op("L1.attn"), kB, kIn, kC, 8, {{o0, 1}}, c1, 1);
    b.add(3, b.op("L1.o"), kC, kIn, kD, 8, {{c1, shared ? 2u : 1u}});
    return b.finish();
  };
  EXPECT_TRUE(validate(build(false), fuzz_target()).ok());
  const Program p = build(true);
  EXPECT_TRUE(truth_kinds(p, fuzz_target()).empty()) << "safe: the documented false reject";
  const ValidationReport r = validate(p, fuzz_target());
  EXPECT_EQ(r.rules(), "race");
  EXPECT_NE(first_message(r, "race").find(
                "task 1 (add L0.o tile 0) reads act[256:264] written by task 0 (add L0.attn "
                "tile 0) with no ordering between them: its wait for counter 0 (L0.attn) "
                ">= 1 of 2 does not prove that writer ran, because ops L0.attn, L1.attn "
                "share that counter"),
            std::string::npos)
      << first_message(r, "race");
  EXPECT_NE(first_message(r, "race").find("hint: give each op its own counter"), std::string::npos);
}

TEST(ScheduleValidator, NeverThrowsOnGarbagePrograms) {
  std::mt19937_64 rng(7);
  const GpuTarget t = fuzz_target();
  for (int i = 0; i < 3000; ++i) {
    Program p = random_safe_dag_program(t, rng);
    // Scramble a few random bytes of random tasks, waits and queues.
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
      auto& in = p.tasks[rng() % p.tasks.size()];
      auto* bytes = reinterpret_cast<uint8_t*>(&in);
      bytes[rng() % sizeof(in)] = static_cast<uint8_t>(rng());
    }
    if (rng() % 3 == 0 && !p.waits.empty())
      p.waits[rng() % p.waits.size()].counter = static_cast<uint32_t>(rng());
    if (rng() % 3 == 0) p.queues[0].push_back(static_cast<uint32_t>(rng()));
    if (rng() % 5 == 0) p.counter_totals.clear();
    if (rng() % 7 == 0) p.buffer_elements = {};
    const ValidationReport r = validate(p, t);
    for (const Diagnostic& d : r.diagnostics) EXPECT_FALSE(d.message.empty());
  }
}

TEST(ScheduleValidator, ReportsJsonWithRulesAndDiagnostics) {
  ProgramBuilder b(fuzz_target());
  const uint32_t x = b.op("x"), c = b.counter("c");
  b.add(0, x, kIn, kIn, kA, 8, {}, c, 1);
  b.add(1, x, kA, kIn, kB, 8, {{c, 2}});
  const nlohmann::json j = to_json(validate(b.finish(), fuzz_target()));
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["rules"], "reachability,deadlock");
  EXPECT_EQ(j["diagnostics"][0]["counters"], nlohmann::json::array({0}));
}

TEST(ScheduleFootprint, WidensKvAccessesToWholeHeads) {
  std::string error;
  const ModelShape shape = *find_preset("toy");
  const GpuTarget target = fuzz_target();
  ScheduleConfig cfg;
  const std::optional<Program> p = lower(shape, target, cfg, &error);
  ASSERT_TRUE(p) << error;
  const uint64_t row = static_cast<uint64_t>(shape.max_seq) * shape.head_dim;
  bool saw_attention = false;
  for (uint32_t t = 0; t < p->tasks.size(); ++t) {
    if (p->tasks[t].opcode != ms_abi::kAttnPartial) continue;
    std::vector<Access> fp;
    ASSERT_TRUE(task_footprint(*p, t, &fp, &error)) << error;
    int kv_reads = 0;
    for (const Access& a : fp)
      if (a.buffer == ms_abi::kBufKv) {
        EXPECT_EQ(a.end - a.begin, row);
        ++kv_reads;
      }
    EXPECT_EQ(kv_reads, 2);
    saw_attention = true;
  }
  EXPECT_TRUE(saw_attention);
}

// Tiles of RoPE pairs split a head between tasks: each appends some dims of the head's K or V row,
// so the footprint names those dims (dimension-major, widened over positions) and two tiles of one
// head are disjoint, while a tile that also takes its neighbour's first pair races with it, and
// attention still needs every tile of its heads.
TEST(ScheduleFootprint, RopePairTilesAppendDisjointDimsOfOneHead) {
  const ModelShape shape = *find_preset("toy");  // head_dim 16: 8 pairs per head
  ScheduleConfig cfg;
  cfg.tiling.qkv_rope_pairs = true;
  cfg.tiling.gemv_rows_per_task = 8;  // 4 pairs per tile: two tiles per head
  const std::optional<Program> p = proved_toy_program(cfg);
  ASSERT_TRUE(p);
  std::string error;
  const uint64_t max_seq = static_cast<uint64_t>(shape.max_seq);
  int k_tiles = 0;
  uint32_t first_pair_tile = UINT32_MAX;
  for (uint32_t t = 0; t < p->tasks.size(); ++t) {
    const ms_abi::Instr& in = p->tasks[t];
    if (!(in.flags & ms_abi::kFlagRopePairs)) continue;
    if (first_pair_tile == UINT32_MAX) first_pair_tile = t;
    ASSERT_EQ(in.row_end - in.row_begin, 4u);
    if (in.row_begin < 4 * 8 || in.row_begin >= 6 * 8) continue;  // K heads: pairs [32, 48)
    ++k_tiles;
    std::vector<Access> fp;
    ASSERT_TRUE(task_footprint(*p, t, &fp, &error)) << error;
    std::vector<Access> kv;
    for (const Access& a : fp)
      if (a.buffer == ms_abi::kBufKv) kv.push_back(a);
    // Dims [d0, d0 + 4) and [d0 + 8, d0 + 12) of K head g, every position.
    const uint64_t g = (in.row_begin - 32) / 8, d0 = in.row_begin % 8;
    const uint64_t head = g * max_seq * 16;
    ASSERT_EQ(kv.size(), 2u);
    EXPECT_EQ(kv[0].begin, head + d0 * max_seq);
    EXPECT_EQ(kv[0].end, head + (d0 + 4) * max_seq);
    EXPECT_EQ(kv[1].begin, head + (d0 + 8) * max_seq);
    EXPECT_EQ(kv[1].end, head + (d0 + 12) * max_seq);
  }
  EXPECT_EQ(k_tiles, 4);  // 2 K heads x 2 tiles
  Program overlap = *p;
  overlap.tasks[first_pair_tile].row_end += 1;  // also pair 4, which the next tile produces
  EXPECT_TRUE(has_rule(validate(overlap, fuzz_target(4)), "race"));
  EXPECT_TRUE(truth_kinds(overlap).count("double_write"));
}

// fusion.argmax_into_lm_head: each LM-head tile writes its own record beside the logits and the
// argmax reads them all after the LM head's all-join. Two tiles writing one record race (the
// ground truth sees a double write); an argmax that no longer waits for the LM head reads records
// before they are written; a record after a residual epilogue is a malformed task.
TEST(ScheduleValidator, ArgmaxRecordsAreProvedLikeAnyOtherTileOutput) {
  ScheduleConfig cfg;
  cfg.fusion.argmax_into_lm_head = true;
  cfg.tiling.lm_head_rows_per_task = 64;  // toy's 256 rows: 4 tiles
  const std::optional<Program> p = proved_toy_program(cfg);
  ASSERT_TRUE(p);
  std::string error;
  std::vector<uint32_t> tiles;
  uint32_t argmax = UINT32_MAX;
  for (uint32_t t = 0; t < p->tasks.size(); ++t) {
    const ms_abi::Instr& in = p->tasks[t];
    if (in.opcode == ms_abi::kArgmax) argmax = t;
    if (in.opcode == ms_abi::kGemv && (in.flags & ms_abi::kFlagArgmaxPartial)) tiles.push_back(t);
  }
  ASSERT_EQ(tiles.size(), 4u);
  ASSERT_NE(argmax, UINT32_MAX);
  std::vector<Access> fp;
  ASSERT_TRUE(task_footprint(*p, tiles[1], &fp, &error)) << error;
  const ms_abi::Instr& second = p->tasks[tiles[1]];
  EXPECT_TRUE(std::any_of(fp.begin(), fp.end(), [&](const Access& a) {
    return a.write && a.buffer == ms_abi::kBufActivations && a.begin == second.aux &&
           a.end == second.aux + 2;
  }));

  Program shared = *p;
  shared.tasks[tiles[1]].aux = shared.tasks[tiles[0]].aux;  // two tiles, one record
  EXPECT_TRUE(has_rule(validate(shared, fuzz_target(4)), "race"));
  EXPECT_TRUE(truth_kinds(shared).count("double_write"));

  Program early = *p;
  early.tasks[argmax].wait_count = 0;  // reads the records whenever it runs
  EXPECT_FALSE(validate(early, fuzz_target(4)).ok());
  EXPECT_FALSE(truth_kinds(early).empty());

  Program residual = *p;
  residual.tasks[tiles[0]].flags |= ms_abi::kFlagResidual;
  const ValidationReport bad = validate(residual, fuzz_target(4));
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(to_json(bad).dump().find("argmax record"), std::string::npos) << to_json(bad).dump();
}

// fusion.reduce_by_last_arriver: the combine of each head chunk is chained by the chunk's KV
// partitions, the argmax by the LM-head tiles (abi/abi.h, Last arrivers); neither sits in a queue.
// Proved safe as lowered; each way of breaking a chain is refused by the validator and found unsafe
// by the ground truth.
TEST(ScheduleValidator, LastArriverChainsAreProvedAndEveryBrokenChainRefused) {
  ScheduleConfig cfg;
  cfg.fusion.reduce_by_last_arriver = true;
  cfg.tiling.attn_kv_partitions = 2;
  cfg.tiling.attn_q_heads_per_task = 1;  // toy: 4 heads, 2 KV groups -> 4 chunks x 2 partitions
  const std::optional<Program> p = proved_toy_program(cfg);
  ASSERT_TRUE(p);
  std::vector<uint32_t> combines, chainers;
  for (uint32_t t = 0; t < p->tasks.size(); ++t) {
    if (p->tasks[t].opcode == ms_abi::kAttnCombine) combines.push_back(t);
    if (p->tasks[t].chain != 0 && p->tasks[t].opcode == ms_abi::kAttnPartial) chainers.push_back(t);
  }
  ASSERT_EQ(combines.size(), 4u);
  ASSERT_EQ(chainers.size(), 8u);
  const uint32_t k = combines[1];
  std::vector<uint32_t> mine;
  for (uint32_t t : chainers)
    if (p->tasks[t].chain == k + 1) mine.push_back(t);
  ASSERT_EQ(mine.size(), 2u);
  auto refused = [&](const Program& bad, const std::string& words) {
    const ValidationReport r = validate(bad, fuzz_target(4));
    EXPECT_FALSE(r.ok());
    EXPECT_NE(to_json(r).dump().find(words), std::string::npos) << to_json(r).dump(1);
    EXPECT_FALSE(truth_kinds(bad).empty()) << words;
  };

  Program queued = *p;  // chained and queued: it would run twice
  queued.queues[0].push_back(k);
  refused(queued, "runs twice");

  Program unchained = *p;  // one partition forgets the chain: if it arrives last, no one combines
  unchained.tasks[mine[1]].chain = 0;
  refused(unchained, "does not chain it");

  Program zero = *p;  // a target met before any signal: no arrival crosses it
  zero.waits[zero.tasks[k].wait_begin].threshold = 0;
  refused(zero, "crossed by no arriver");

  Program elsewhere = *p;  // the partitions chain a combine that waits on another chunk's counter
  elsewhere.tasks[mine[0]].chain = combines[2] + 1;
  elsewhere.tasks[mine[1]].chain = combines[2] + 1;
  refused(elsewhere, "does not wait on the counter this task signals");

  Program nested = *p;  // a chained task that chains again: the kernel runs one level
  nested.tasks[k].chain = combines[0] + 1;
  refused(nested, "one level");

  Program gemv = *p;  // an opcode the kernel does not run chained
  gemv.tasks[k].opcode = ms_abi::kAdd;
  refused(gemv, "not one the kernel runs chained");

  Program out_of_range = *p;
  out_of_range.tasks[mine[0]].chain = static_cast<uint32_t>(p->tasks.size()) + 5;
  EXPECT_FALSE(validate(out_of_range, fuzz_target(4)).ok());
}

// A task of RoPE pairs runs only on the registers build's streamed GEMV: the rule "launch" names
// one whose input does not fit the dynamic shared memory (the device would run it on a path that
// reads contiguous rows).
TEST(ScheduleValidator, RejectsRopePairTasksTheStreamedGemvCannotRun) {
  ScheduleConfig cfg;
  cfg.tiling.qkv_rope_pairs = true;
  cfg.smem.pages = 1;
  cfg.smem.page_bytes = 4096;
  std::string error;
  const ModelShape shape = *find_preset("small");
  std::optional<Program> p = lower(shape, *find_target("h100"), cfg, &error);
  ASSERT_TRUE(p) << error;
  const ValidationReport r = validate(*p, *find_target("h100"));
  EXPECT_EQ(r.rules(), "launch");
  const std::string m = first_message(r, "launch");
  EXPECT_NE(m.find("is a task of RoPE pairs whose " + std::to_string(shape.hidden) +
                   " input floats do not fit the 4096 bytes"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("hint: smem.pages x smem.page_bytes >= " + std::to_string(4 * shape.hidden)),
            std::string::npos)
      << m;
  std::string why;
  EXPECT_FALSE(config_fits(cfg, shape, *find_target("h100"), &why));
  EXPECT_NE(why.find("tiling.qkv_rope_pairs"), std::string::npos) << why;
}

// fusion.combine_into_o: an O tile that combines the partitions runs only on the streamed GEMV,
// which stages its input, the partition weights and one partition's records of every head in the
// dynamic shared memory (small, 16 partitions: (2048 + 16 x 17 + 16 x 130) floats = 17600 bytes);
// with one 16 KiB page the rule "launch" names every such tile, and the search never proposes it.
TEST(ScheduleValidator, RejectsCombineTilesTheStreamedGemvCannotStage) {
  ScheduleConfig cfg;
  cfg.tiling.attn_kv_partitions = 16;
  cfg.fusion.combine_into_o = true;
  cfg.smem.pages = 1;
  cfg.smem.page_bytes = 16384;
  std::string error;
  const ModelShape shape = *find_preset("small");
  std::optional<Program> p = lower(shape, *find_target("h100"), cfg, &error);
  ASSERT_TRUE(p) << error;
  const ValidationReport r = validate(*p, *find_target("h100"));
  EXPECT_EQ(r.rules(), "launch");
  const std::string m = first_message(r, "launch");
  EXPECT_NE(m.find("with the attention combine in its input load whose input, partition weights "
                   "and one partition's records of every head do not fit the 16384 bytes"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("hint: smem.pages x smem.page_bytes >= 17600"), std::string::npos) << m;
  std::string why;
  EXPECT_FALSE(config_fits(cfg, shape, *find_target("h100"), &why));
  EXPECT_NE(why.find("fusion.combine_into_o"), std::string::npos) << why;
  EXPECT_NE(why.find(">= 17600"), std::string::npos) << why;
  cfg.smem.pages = 2;
  EXPECT_TRUE(config_fits(cfg, shape, *find_target("h100"), &why)) << why;
  p = lower(shape, *find_target("h100"), cfg, &error);
  ASSERT_TRUE(p) << error;
  EXPECT_TRUE(validate(*p, *find_target("h100")).ok());
}

// fusion.attention_into_o: an O tile that attends every head runs only on the streamed GEMV, which
// stages the attention's output (small: 16 heads x 128 dims = 8192 bytes) in the dynamic shared
// memory; with one 4 KiB page the rule "launch" names every such tile, and the search never
// proposes it.
TEST(ScheduleValidator, RejectsAttentionTilesTheStreamedGemvCannotStage) {
  ScheduleConfig cfg;
  cfg.fusion.attention_into_o = true;
  cfg.smem.pages = 1;
  cfg.smem.page_bytes = 4096;
  std::string error;
  const ModelShape shape = *find_preset("small");
  std::optional<Program> p = lower(shape, *find_target("h100"), cfg, &error);
  ASSERT_TRUE(p) << error;
  const ValidationReport r = validate(*p, *find_target("h100"));
  EXPECT_EQ(r.rules(), "launch");
  const std::string m = first_message(r, "launch");
  EXPECT_NE(m.find("with the attention in its input load whose 2048 input floats do not fit the "
                   "4096 bytes"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("hint: smem.pages x smem.page_bytes >= 8192"), std::string::npos) << m;
  std::string why;
  EXPECT_FALSE(config_fits(cfg, shape, *find_target("h100"), &why));
  EXPECT_NE(why.find("fusion.attention_into_o"), std::string::npos) << why;
  EXPECT_NE(why.find(">= 4 x q_dim = 8192"), std::string::npos) << why;
  cfg.smem.pages = 2;
  EXPECT_TRUE(config_fits(cfg, shape, *find_target("h100"), &why)) << why;
  p = lower(shape, *find_target("h100"), cfg, &error);
  ASSERT_TRUE(p) << error;
  EXPECT_TRUE(validate(*p, *find_target("h100")).ok());
}

// pipeline.tagged_inputs: a task that reads tagged words must find every element it reads written
// as tagged words; the rule "race" names the reader and the untagged writer, and a tag flag on a
// task whose path cannot carry it is malformed.
TEST(ScheduleValidator, RejectsTaggedReadsOfUntaggedWrites) {
  ScheduleConfig cfg;
  cfg.pipeline.tagged_inputs = true;
  std::string error;
  const ModelShape shape = *find_preset("toy");
  const std::optional<Program> lowered = lower(shape, *find_target("h100"), cfg, &error);
  ASSERT_TRUE(lowered) << error;
  ASSERT_TRUE(validate(*lowered, *find_target("h100")).ok());
  // An O tile that forgets its tagged words: the next gate/up tiles would read stale words.
  Program p = *lowered;
  uint32_t o_tile = UINT32_MAX;
  for (uint32_t t = 0; t < p.tasks.size() && o_tile == UINT32_MAX; ++t)
    if (p.ops[p.tasks[t].op_id].name == "L0.o") o_tile = t;
  ASSERT_NE(o_tile, UINT32_MAX);
  p.tasks[o_tile].flags &= static_cast<uint16_t>(~ms_abi::kFlagTagOut);
  ValidationReport r = validate(p, *find_target("h100"));
  EXPECT_EQ(r.rules(), "race");
  std::string m = first_message(r, "race");
  EXPECT_NE(m.find("as tagged words, before it acquires its waits"), std::string::npos) << m;
  EXPECT_NE(m.find("L0.o"), std::string::npos) << m;
  EXPECT_NE(m.find("hint: lower with pipeline.tagged_inputs"), std::string::npos) << m;
  // Layer 0's QKV reads the embedding's x, which no tagged writer writes.
  p = *lowered;
  for (ms_abi::Instr& t : p.tasks)
    if (p.ops[t.op_id].name == "L0.qkv") t.flags |= ms_abi::kFlagTagIn;
  r = validate(p, *find_target("h100"));
  EXPECT_EQ(r.rules(), "race");
  EXPECT_NE(first_message(r, "race").find("embed"), std::string::npos) << first_message(r, "race");
  // Tagged words with the QKV epilogue (RoPE and the KV append) are not a path the device has.
  p = *lowered;
  for (ms_abi::Instr& t : p.tasks)
    if (p.ops[t.op_id].name == "L0.qkv") t.flags |= ms_abi::kFlagTagOut;
  r = validate(p, *find_target("h100"));
  EXPECT_EQ(r.rules().rfind("structure", 0), 0u) << r.rules();  // and what it then cannot prove
  EXPECT_NE(first_message(r, "structure").find("writing tagged words with an epilogue other than"),
            std::string::npos)
      << first_message(r, "structure");
}

// Every config of a random search over the real search space lowers to a program the validator
// accepts. 500 configs on toy here; small and llama-1b lower slowly, so the unit test samples fewer
// and `megasched validate --model M --random-configs 500` runs the full 500
// (dev/validator_notes.md).
struct RealSearch {
  const char* model;
  int configs;
};
class ValidatorOnRealLowerings : public ::testing::TestWithParam<RealSearch> {};

TEST_P(ValidatorOnRealLowerings, AcceptsEveryRandomConfig) {
  const ModelShape shape = *find_preset(GetParam().model);
  const GpuTarget target = *find_target("h100");
  std::mt19937_64 rng(20261122);
  for (int i = 0; i < GetParam().configs; ++i) {
    const ScheduleConfig cfg = random_config(shape, target, rng);
    std::string error;
    const std::optional<Program> p = lower(shape, target, cfg, &error);
    ASSERT_TRUE(p) << error << "\n" << canonical_string(cfg);
    const ValidationReport r = validate(*p, target);
    ASSERT_TRUE(r.ok()) << canonical_string(cfg) << "\n" << to_json(r).dump(1).substr(0, 4000);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ValidatorOnRealLowerings,
                         ::testing::Values(RealSearch{"toy", 500}, RealSearch{"small", 40},
                                           RealSearch{"llama-1b", 6}),
                         [](const auto& info) {
                           std::string name = info.param.model;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace megasched::schedule
