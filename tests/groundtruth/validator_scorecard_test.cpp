// The scorecard figures dev/validator_notes.md states ("Scorecard"), reproduced at the size CI
// runs: `megasched fuzz-validator --n 2000 --seed 1` scores the same programs (the bases and
// recording of groundtruth/scorecard_setup.h). A change to the validator, the ground truth, the
// fuzzer or the lowerings that moves a count fails here; update the document and these numbers
// together, after explaining every new rejected-safe program (the scorecard's explainer,
// groundtruth/program_fuzz.cpp).
#include <gtest/gtest.h>

#include "groundtruth/program_fuzz.h"
#include "groundtruth/scorecard_setup.h"

namespace megasched::groundtruth {
namespace {

TEST(ValidatorScorecard, ReproducesTheDocumentedFiguresAtN2000Seed1) {
  const ScorecardBases bases = scorecard_bases(1);
  ASSERT_EQ(bases.programs.size(), 24u) << "12 lowerings each of toy and toy-2L";
  const Scorecard card = run_scorecard(scorecard_options(bases, 2000, 1));
  const ScorecardRow& t = card.total;
  const std::string table = format_scorecard(card);
  EXPECT_EQ(t.generated, 2000u) << table;
  EXPECT_EQ(t.inconclusive, 0u) << table;
  EXPECT_EQ(t.accepted_unsafe, 0u) << table;
  EXPECT_EQ(t.rejected_safe_unexplained, 0u)
      << "every rejected-safe program must be explained; hint: run `megasched fuzz-validator "
         "--n 2000 --seed 1 --dump-rejected-safe DIR` and read dev/validator_notes.md\n"
      << table;
  // dev/validator_notes.md, "Scorecard": the figures of the CI-sized command.
  EXPECT_EQ(t.unsafe, 1434u) << table;
  EXPECT_EQ(t.rejected_safe, 70u) << table;
  EXPECT_EQ(t.rejected_safe_occupancy, 6u) << table;
  EXPECT_EQ(t.rejected_safe_documented, 64u) << table;
  int mutant_rows = 0;
  for (const ScorecardRow& r : card.rows) mutant_rows += r.name.rfind("mutant/", 0) == 0;
  EXPECT_EQ(mutant_rows, static_cast<int>(MutationClass::kCount)) << table;
}

}  // namespace
}  // namespace megasched::groundtruth
