// The closures (groundtruth/closure.h) held to the explorer: on random DAGs, dynamic-queue DAGs and
// one-defect mutants of them and of toy lowerings, every program the explorer completes gets the
// same verdict from the closures alone (a schedule hazard or none, and safe or not), and a
// program past a small state limit is decided by the closures as the explorer decides it with room.
#include "groundtruth/closure.h"

#include <gtest/gtest.h>

#include <random>

#include "groundtruth/ground_truth.h"
#include "groundtruth/program_fuzz.h"
#include "schedule/lower.h"
#include "schedule/search.h"
#include "tests/toy_weights.h"

namespace megasched::groundtruth {
namespace {

using namespace schedule;

using testing_support::toy_weights;

GroundTruth truth_of(const Program& p, const GpuTarget& t, const GroundTruthOptions& o) {
  GroundTruth all;
  for (int32_t position : ground_truth_positions(p)) {
    TaskAccesses acc;
    std::string error;
    if (!record_accesses(p, toy_weights(), position, &acc, &error)) {
      all.kinds.insert("malformed");
      return all;
    }
    const GroundTruth g = explore_ground_truth(p, t, acc, o);
    all.complete = all.complete && g.complete;
    all.by_closure = all.by_closure || g.by_closure;
    all.states += g.states;
    all.kinds.insert(g.kinds.begin(), g.kinds.end());
    if (!g.safe()) break;
  }
  return all;
}

bool schedule_hazard(const GroundTruth& g) {
  return g.kinds.count("deadlock") + g.kinds.count("race") + g.kinds.count("stale_read") > 0;
}

TEST(Closure, DecidesEveryProgramTheExplorerCompletesAlike) {
  const GpuTarget target = fuzz_target(4);
  std::mt19937_64 rng(21);
  std::vector<Program> programs;
  for (int i = 0; i < 400; ++i) {
    std::string label;
    programs.push_back(random_dag_program(target, rng, &label));
  }
  for (int i = 0; i < 300; ++i) {
    const Program safe = random_safe_dag_program(target, rng);
    const auto c = static_cast<MutationClass>(rng() % static_cast<uint64_t>(MutationClass::kCount));
    if (auto m = mutate(safe, target, c, rng)) programs.push_back(*m);
  }
  const size_t dags = programs.size();
  for (int i = 0; i < 40 && programs.size() < dags + 60; ++i) {
    std::string error;
    const auto base =
        lower(*find_preset("toy"), target, random_config(*find_preset("toy"), target, rng), &error);
    if (!base || base->tasks.size() > 48) continue;
    programs.push_back(*base);
    for (int j = 0; j < 8; ++j) {
      const auto c =
          static_cast<MutationClass>(rng() % static_cast<uint64_t>(MutationClass::kCount));
      if (auto m = mutate(*base, target, c, rng)) programs.push_back(*m);
    }
  }
  GroundTruthOptions exhaustive;
  exhaustive.closure_at_limit = false;
  GroundTruthOptions closures;
  closures.closure_only = true;
  int compared = 0, hazards = 0, undecided = 0;
  for (size_t i = 0; i < programs.size(); ++i) {
    const GroundTruth e = truth_of(programs[i], target, exhaustive);
    if (!e.complete) continue;
    const GroundTruth c = truth_of(programs[i], target, closures);
    if (!c.complete) {  // not persistent: a counter that crosses its int32 boundary
      ++undecided;
      continue;
    }
    ++compared;
    hazards += schedule_hazard(e);
    EXPECT_EQ(schedule_hazard(e), schedule_hazard(c)) << "program " << i;
    EXPECT_EQ(e.safe(), c.safe()) << "program " << i;
    EXPECT_EQ(c.states, 0u);
  }
  EXPECT_GT(programs.size(), dags + 30);  // lowerings and their mutants
  EXPECT_GT(compared, 600);
  EXPECT_GT(hazards, 200);
  EXPECT_GT(compared - hazards, 200);
  EXPECT_LT(undecided, compared / 20);
}

// A dynamic queue of many independent tasks and few workers has more interleavings than a small
// limit: past it the closures decide, as the explorer does with room; a dropped wait is found.
TEST(Closure, DecidesAProgramPastTheStateLimitAsTheExplorerDoesWithRoom) {
  const GpuTarget target = fuzz_target(4);
  ProgramBuilder b(target);
  b.set_dynamic(true);
  const uint32_t op = b.op("x"), done = b.counter("x done");
  std::vector<uint32_t> outs;
  for (uint32_t i = 0; i < 14; ++i) b.add(0, op, 0, 8, 256 + 8 * i, 8, {}, done, 1);
  b.add(0, b.op("sum"), 256, 264, 512, 8, {{done, 14}});
  const Program safe = b.finish();
  GroundTruthOptions small;
  small.max_states = 50;
  GroundTruthOptions room;
  room.closure_at_limit = false;
  const GroundTruth limited = truth_of(safe, target, small);
  EXPECT_TRUE(limited.by_closure);
  EXPECT_TRUE(limited.safe());
  const GroundTruth full = truth_of(safe, target, room);
  EXPECT_TRUE(full.complete);
  EXPECT_FALSE(full.by_closure);
  EXPECT_TRUE(full.safe());
  Program dropped = safe;
  dropped.tasks.back().wait_count = 0;  // the sum no longer waits for its inputs
  const GroundTruth unsafe_limited = truth_of(dropped, target, small);
  EXPECT_TRUE(unsafe_limited.complete);
  EXPECT_TRUE(schedule_hazard(unsafe_limited));
  EXPECT_TRUE(schedule_hazard(truth_of(dropped, target, room)));
  // Without the closures the limit leaves it undecided.
  small.closure_at_limit = false;
  EXPECT_FALSE(truth_of(safe, target, small).complete);
}

}  // namespace
}  // namespace megasched::groundtruth
