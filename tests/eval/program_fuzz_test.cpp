#include "eval/program_fuzz.h"

#include <gtest/gtest.h>

#include "eval/ground_truth.h"
#include "schedule/lower.h"
#include "schedule/validate.h"

namespace megasched::eval {
namespace {

using namespace schedule;

const Weights& toy_weights() {
  static const Weights w = generate_weights(*find_preset("toy"), 1, 1);
  return w;
}

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
}  // namespace megasched::eval
