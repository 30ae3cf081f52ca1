#include "groundtruth/program_fuzz.h"
#include "groundtruth/scorecard.h"

#include <gtest/gtest.h>

#include "groundtruth/ground_truth.h"
#include "schedule/lower.h"
#include "schedule/validate.h"
#include "tests/toy_weights.h"

namespace megasched::groundtruth {
namespace {

using namespace schedule;

using testing_support::toy_weights;

Program toy_base() {
  std::string error;
  std::optional<Program> p = lower(*find_preset("toy"), fuzz_target(4), ScheduleConfig{}, &error);
  EXPECT_TRUE(p) << error;
  return *p;
}

TEST(ProgramFuzz, RandomSafeDagsAreSafeAndAccepted) {
  std::mt19937_64 rng(5);
  const GpuTarget t = fuzz_target();
  for (int i = 0; i < 200; ++i) {
    const Program p = random_safe_dag_program(t, rng);
    TaskAccesses acc;
    std::string error;
    ASSERT_TRUE(record_accesses(p, toy_weights(), 0, &acc, &error)) << error;
    const GroundTruth g = explore_ground_truth(p, t, acc);
    ASSERT_TRUE(g.safe()) << g.findings[0];
    const ValidationReport r = validate(p, t);
    ASSERT_TRUE(r.ok()) << to_json(r).dump(1);
  }
}

TEST(ProgramFuzz, EveryMutationClassChangesARealLowering) {
  const Program base = toy_base();
  const GpuTarget t = fuzz_target(4);
  ASSERT_TRUE(validate(base, t).ok());
  std::mt19937_64 rng(9);
  for (int c = 0; c < static_cast<int>(MutationClass::kCount); ++c) {
    const auto cls = static_cast<MutationClass>(c);
    const std::optional<Program> m = mutate(base, t, cls, rng);
    ASSERT_TRUE(m) << mutation_class_name(cls) << " found no site in the toy lowering";
    EXPECT_NE(to_json(*m), to_json(base)) << mutation_class_name(cls);
  }
}

TEST(ProgramFuzz, LaunchAndCycleMutantsAreRejectedWithTheirRule) {
  const Program base = toy_base();
  const GpuTarget t = fuzz_target(4);
  std::mt19937_64 rng(2);
  EXPECT_EQ(validate(*mutate(base, t, MutationClass::kSmemOverCap, rng), t).rules(), "launch");
  EXPECT_EQ(validate(*mutate(base, t, MutationClass::kGridNotCoResident, rng), t).rules(),
            "launch");
  EXPECT_EQ(validate(*mutate(base, t, MutationClass::kTooManyThreads, rng), t).rules(), "launch");
  EXPECT_EQ(validate(*mutate(base, t, MutationClass::kCrossQueueCycle, rng), t).rules(),
            "deadlock");
  const ValidationReport raised =
      validate(*mutate(base, t, MutationClass::kRaiseThreshold, rng), t);
  EXPECT_EQ(raised.rules(), "reachability,deadlock");
}

// The classes beyond the dependency graph, on the default toy lowering: the validator rejects
// each mutant with the rule of its hole, and the ground truth finds the hazard the device has
// (a counter past 2^31 and the allocation unit are unsafe for most mutants, not all; the shared
// counter has its own test, ScheduleValidator.RejectsTwoLayersAttentionSharingACounterAndSaysWhy).
TEST(ProgramFuzz, MutantsBeyondTheGraphAreRejectedAndJudged) {
  const Program base = toy_base();
  const GpuTarget t = fuzz_target(4);
  struct Expect {
    MutationClass c;
    const char* rule;        // validate()'s first rule
    const char* truth_kind;  // a kind the ground truth must find ("" : it may be safe)
  };
  const std::vector<Expect> cases = {
      {MutationClass::kCounterTotalWrap, "reachability", ""},
      {MutationClass::kRingPageBelowPiece, "launch", "hang"},
      {MutationClass::kNormGammaBeyondTile, "structure", "out_of_bounds"},
      {MutationClass::kKvNeverAppended, "coverage", "uninitialized_read"},
      {MutationClass::kProgramMarkedInput, "coverage", "uninitialized_read"},
      {MutationClass::kSmemAllocationUnit, "launch", ""}};
  std::mt19937_64 rng(21);
  for (const Expect& e : cases) {
    for (int i = 0; i < 5; ++i) {
      const std::optional<Program> m = mutate(base, t, e.c, rng);
      ASSERT_TRUE(m) << mutation_class_name(e.c);
      const ValidationReport r = validate(*m, t);
      ASSERT_FALSE(r.ok()) << mutation_class_name(e.c);
      EXPECT_EQ(r.diagnostics[0].rule, e.rule)
          << mutation_class_name(e.c) << ": " << r.diagnostics[0].message;
      if (std::string(e.truth_kind).empty()) continue;
      GroundTruth all;
      for (int32_t position : ground_truth_positions(*m)) {
        TaskAccesses acc;
        std::string error;
        ASSERT_TRUE(record_accesses(*m, toy_weights(), position, &acc, &error)) << error;
        const GroundTruth g = explore_ground_truth(*m, t, acc);
        all.kinds.insert(g.kinds.begin(), g.kinds.end());
      }
      EXPECT_EQ(all.kinds.count(e.truth_kind), 1u) << mutation_class_name(e.c);
    }
  }
}

TEST(ProgramFuzz, ScorecardAcceptsNothingUnsafe) {
  ScorecardOptions opt;
  opt.n = 400;
  opt.seed = 1;
  opt.bases = {toy_base()};
  opt.record = [](const Program& p, int32_t position, std::vector<std::vector<uint64_t>>* reads,
                  std::vector<std::vector<uint64_t>>* writes) {
    TaskAccesses acc;
    std::string error;
    if (!record_accesses(p, toy_weights(), position, &acc, &error)) return false;
    *reads = std::move(acc.reads);
    *writes = std::move(acc.writes);
    return true;
  };
  const Scorecard card = run_scorecard(opt);
  EXPECT_EQ(card.total.accepted_unsafe, 0u) << format_scorecard(card);
  EXPECT_EQ(card.total.inconclusive, 0u);
  EXPECT_GE(card.total.unsafe * 10, card.total.generated * 4) << "at least 40% unsafe";
  int mutant_rows = 0;
  for (const ScorecardRow& r : card.rows)
    mutant_rows += r.name.rfind("mutant/", 0) == 0 && r.generated > 0;
  EXPECT_EQ(mutant_rows, static_cast<int>(MutationClass::kCount));
  const nlohmann::json j = to_json(card);
  EXPECT_EQ(j["total"]["generated"], card.total.generated);
}

}  // namespace
}  // namespace megasched::groundtruth
