// The scorecard figures dev/validator_notes.md states ("Scorecard"), reproduced at the size CI
// runs: `megasched fuzz-validator --n 2000 --seed 1` scores the same programs (the bases and
// recording of groundtruth/scorecard_setup.h). A change to the validator, the ground truth, the
// fuzzer or the lowerings that moves a count fails here; update the document and these numbers
// together, after explaining every new rejected-safe program (the scorecard's explainer,
// groundtruth/program_fuzz.cpp).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "groundtruth/program_fuzz.h"
#include "groundtruth/scorecard.h"
#include "groundtruth/scorecard_setup.h"

namespace megasched::groundtruth {
namespace {

// dev/validator_notes.md, "Scorecard": the figures of `fuzz-validator --n 2000 --seed 1`.
// kDraws slots; kPrograms generated (every slot found a base with a site for its mutation).
constexpr uint64_t kDraws = 2000, kPrograms = 2000, kUnsafe = 1441, kRejectedSafe = 65,
                   kOccupancy = 6, kDocumented = 59;

TEST(ValidatorScorecard, ReproducesTheDocumentedFiguresAtN2000Seed1) {
  const ScorecardBases bases = scorecard_bases(1);
  ASSERT_EQ(bases.programs.size(), 24u) << "12 lowerings each of toy and toy-2L";
  const Scorecard card = run_scorecard(scorecard_options(bases, kDraws, 1));
  const ScorecardRow& t = card.total;
  const std::string table = format_scorecard(card);
  EXPECT_EQ(t.generated, kPrograms) << table;
  EXPECT_EQ(t.inconclusive, 0u) << table;
  EXPECT_EQ(t.accepted_unsafe, 0u) << table;
  EXPECT_EQ(t.rejected_safe_unexplained, 0u)
      << "every rejected-safe program must be explained; hint: run `megasched fuzz-validator "
         "--n 2000 --seed 1 --dump-rejected-safe DIR` and read dev/validator_notes.md\n"
      << table;
  EXPECT_EQ(t.unsafe, kUnsafe) << table;
  EXPECT_EQ(t.rejected_safe, kRejectedSafe) << table;
  EXPECT_EQ(t.rejected_safe_occupancy, kOccupancy) << table;
  EXPECT_EQ(t.rejected_safe_documented, kDocumented) << table;
  int mutant_rows = 0;
  for (const ScorecardRow& r : card.rows) mutant_rows += r.name.rfind("mutant/", 0) == 0;
  EXPECT_EQ(mutant_rows, static_cast<int>(MutationClass::kCount)) << table;
}

TEST(ValidatorScorecard, TheNotesStateTheFiguresThisTestAsserts) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/dev/validator_notes.md");
  ASSERT_TRUE(in) << "dev/validator_notes.md not found";
  std::stringstream text;
  text << in.rdbuf();
  const std::string notes = text.str();
  const auto n = [](uint64_t v) { return std::to_string(v); };
  for (const std::string& s : std::vector<std::string>{
           "`megasched fuzz-validator --n " + n(kDraws) + " --seed 1`",
           n(kPrograms) + " programs, " + n(kUnsafe) + " unsafe", "**0 accepted-unsafe**",
           n(kRejectedSafe) + " rejected-safe", "**0 unexplained**",
           n(kOccupancy) + " are ordered only by", n(kDocumented) + " by a documented rule"})
    EXPECT_NE(notes.find(s), std::string::npos)
        << "dev/validator_notes.md does not say '" << s
        << "'; hint: the notes and this test state one scorecard, update them together";
}

}  // namespace
}  // namespace megasched::groundtruth
