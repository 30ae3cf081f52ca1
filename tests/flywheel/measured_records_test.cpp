// The records of GPU measurements outside a loop (flywheel/measured_records.h): `bench` rows.
#include "flywheel/measured_records.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "eval/evaluate.h"
#include "flywheel/shared_corpus.h"
#include "vm/nvrtc_build.h"

namespace megasched::flywheel {
namespace {

eval::BenchRow row(const std::string& name, const std::string& kind, int position,
                   const std::string& status, std::optional<double> median) {
  eval::BenchRow r;
  r.name = name;
  r.kind = kind;
  r.position = position;
  r.status = status;
  r.median_us = median;
  r.p90_us = median ? std::optional<double>(*median + 1) : std::nullopt;
  if (status != "ok") r.message = "why";
  return r;
}

TEST(BenchCorpusRecords, EachConfigRowIsARecordOfTheBenchedConfigAtItsPosition) {
  const schedule::ModelShape shape = *schedule::find_preset("toy");
  schedule::ScheduleConfig other;
  other.launch.blocks_per_sm = 2;
  const std::vector<std::pair<std::string, schedule::ScheduleConfig>> configs = {
      {"default", schedule::ScheduleConfig{}}, {"other", other}};
  eval::BenchResult result;
  result.model = "toy";
  result.device = "NVIDIA H100 80GB HBM3";
  result.rows = {row("floor", "floor", 0, "ok", 5.0), row("default", "config", 0, "ok", 50.0),
                 row("other", "config", 0, "incorrect", std::nullopt),
                 row("cublas-graph", "baseline", 0, "ok", 60.0),
                 row("default", "config", 64, "ok", 55.0)};
  const auto records = bench_records(result, configs, shape, 7, "r-bench", 1.8e9);
  ASSERT_EQ(records.size(), 3u);  // the config rows only
  const CorpusRecord& first = records[0];
  EXPECT_EQ(first.strategy, "bench");
  EXPECT_EQ(first.status, "discarded");
  EXPECT_EQ(first.device, "gpu");
  EXPECT_EQ(first.target, "NVIDIA H100 80GB HBM3");
  EXPECT_DOUBLE_EQ(*first.verdict.latency_us, 50.0);
  EXPECT_EQ(first.verdict.latency_kind, "measured-gpu");
  EXPECT_EQ(first.versions["build"], vm::build_identity());
  // The schedule id a loop on that GPU gives the same trial, so rows of both dedupe together.
  EXPECT_EQ(first.schedule_id, eval::trial_schedule_id(schedule::ScheduleConfig{}, "toy", 7,
                                                       "NVIDIA H100 80GB HBM3", "gpu", 0));
  EXPECT_EQ(records[1].status, "incorrect");
  EXPECT_EQ(records[1].config, schedule::to_json(other));
  EXPECT_FALSE(records[1].verdict.latency_us);
  EXPECT_EQ(records[2].verdict.timed_position, 64);
  EXPECT_NE(records[2].schedule_id, first.schedule_id);
  EXPECT_EQ(records[2].trial, 2);

  const std::string dir =
      (std::filesystem::temp_directory_path() / ("ms_bench_shared_" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  std::string error;
  EXPECT_EQ(append_shared_all(dir, records, kSourceBench, &error), 3) << error;
  SharedCorpusFilter filter;
  filter.target = "h100";
  filter.build = vm::build_identity();
  const SharedCorpusRead read = read_shared(dir, filter);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(read.records.size(), 3u);
  EXPECT_EQ(read.records[0].source, "bench");
}

}  // namespace
}  // namespace megasched::flywheel
