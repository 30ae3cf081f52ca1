// What a prior or guided loop trains on (harness::loop_training): its own corpus and the shared
// corpus's rows of its target and model, of the current kernel build unless asked otherwise.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "flywheel/shared_corpus.h"
#include "harness/verbs.h"
#include "schedule/config.h"
#include "vm/nvrtc_build.h"

namespace megasched::harness {
namespace {

namespace fs = std::filesystem;

flywheel::CorpusRecord record(const std::string& id, const std::string& run,
                              const std::string& build) {
  flywheel::CorpusRecord r;
  r.run_id = run;
  r.schedule_id = id;
  r.status = flywheel::kStatusDiscarded;
  r.config = schedule::to_json(schedule::ScheduleConfig{});
  r.verdict.correct = r.verdict.valid = true;
  r.verdict.device = "gpu";
  r.verdict.latency_us = 80.0;
  r.verdict.latency_kind = "measured-gpu";
  r.model = "llama-1b";
  r.target = "NVIDIA H100 80GB HBM3";
  r.device = "gpu";
  r.versions = {{"abi", 1}, {"ir", 1}, {"build", build}};
  return r;
}

TEST(PriorTraining, TakesTheLoopsRecordsAndSharedRowsOfTheCurrentBuildOnly) {
  const fs::path dir =
      fs::temp_directory_path() / ("ms_prior_training_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  LoopCommand command;
  command.loop.corpus_path = (dir / "corpus.jsonl").string();
  command.flywheel_dir = (dir / "flywheel").string();
  ASSERT_TRUE(flywheel::append_corpus(command.loop.corpus_path,
                                      record("own", "r-own", vm::build_identity()), nullptr));
  std::string error;
  ASSERT_EQ(flywheel::append_shared_all(command.flywheel_dir,
                                        {record("own", "r-own", vm::build_identity()),  // a copy
                                         record("current", "r-a", vm::build_identity()),
                                         record("stale", "r-b", "kernel-sources-older")},
                                        flywheel::kSourceLoop, &error),
            3)
      << error;
  flywheel::TrainingRequest request;
  request.target = "NVIDIA H100 80GB HBM3";
  request.model = "llama-1b";
  request.device = "gpu";
  std::string note;
  auto training = loop_training(command, request, &note);
  ASSERT_EQ(training.size(), 2u) << note;
  EXPECT_EQ(training[0].schedule_id, "own");
  EXPECT_EQ(training[1].schedule_id, "current");
  EXPECT_NE(note.find("1 of the shared corpus"), std::string::npos) << note;
  EXPECT_NE(note.find("1 stale rows of other kernel builds left out"), std::string::npos) << note;

  command.corpus_stale = true;  // --corpus-stale include
  EXPECT_EQ(loop_training(command, request, &note).size(), 3u) << note;
  command.flywheel_dir = "none";
  EXPECT_EQ(loop_training(command, request, &note).size(), 1u) << note;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace megasched::harness
