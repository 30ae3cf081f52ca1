// The comparison's rendering (eval/bench.h) on synthetic timings, peers' JSON, and the choice of
// the strongest baseline (eval/baselines/baseline.h): host code, no GPU.
#include "eval/bench.h"

#include <cmath>

#include <gtest/gtest.h>

#include "eval/baselines/baseline.h"
#include "eval/device.h"
#include "eval/timing.h"
#include "eval/trial_timing.h"
#include "schedule/model.h"

namespace megasched::eval {
namespace {

using json = nlohmann::json;

BenchRow row(const std::string& name, const std::string& kind, int position,
             std::optional<double> median) {
  BenchRow r;
  r.name = name;
  r.kind = kind;
  r.position = position;
  r.median_us = median;
  if (median) {
    r.p10_us = *median * 0.99;
    r.p90_us = *median * 1.02;
  } else {
    r.status = "incorrect";
    r.message = "logits differ";
  }
  return r;
}

BenchResult synthetic() {
  BenchResult r;
  r.model = "llama-1b";
  r.device = "h100";
  r.bandwidth_gbs = 3000.0;
  r.measured_bandwidth = true;
  r.positions = {0, 4096};
  r.floor_us = {800.0, 850.0};
  r.rows = {
      row("floor", "floor", 0, 800.0),         row("default", "config", 0, 1000.0),
      row("cublas", "baseline", 0, 1500.0),    row("graph-pdl", "baseline", 0, 1050.0),
      row("floor", "floor", 4096, 850.0),      row("default", "config", 4096, 1100.0),
      row("cublas", "baseline", 4096, 8000.0), row("graph-pdl", "baseline", 4096, std::nullopt)};
  return r;
}

TEST(Bench, JsonCarriesPercentOfBandwidthAndRatiosToEachBaseline) {
  const json j = bench_to_json(synthetic());
  EXPECT_EQ(j["baselines"], json::array({"cublas", "graph-pdl"}));
  EXPECT_EQ(j["bandwidth"], "measured");
  const json& d0 = j["rows"][1];
  EXPECT_EQ(d0["name"], "default");
  EXPECT_DOUBLE_EQ(d0["pct_of_bandwidth"].get<double>(), 80.0);
  EXPECT_DOUBLE_EQ(d0["x_vs_cublas"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(d0["x_vs_graph-pdl"].get<double>(), 1.05);
  EXPECT_DOUBLE_EQ(d0["p90_us"].get<double>(), 1020.0);
  // At 4096 the graph-pdl row failed: no ratio to it, its status and message kept.
  const json& d4 = j["rows"][5];
  EXPECT_DOUBLE_EQ(d4["x_vs_cublas"].get<double>(), 8000.0 / 1100.0);
  EXPECT_TRUE(d4["x_vs_graph-pdl"].is_null());
  EXPECT_EQ(j["rows"][7]["status"], "incorrect");
  EXPECT_EQ(j["rows"][7]["message"], "logits differ");
  EXPECT_TRUE(j["rows"][7]["median_us"].is_null());
}

TEST(Bench, JsonReadsBackAsTheResultItWasWrittenFrom) {
  BenchResult r = synthetic();
  r.rows[1].detail = {{"config", {{"kernel", {{"unroll", 4}}}}}};
  const auto back = bench_from_json(bench_to_json(r), nullptr);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->model, r.model);
  EXPECT_EQ(back->device, r.device);
  EXPECT_EQ(back->positions, r.positions);
  EXPECT_EQ(back->floor_us, r.floor_us);
  EXPECT_TRUE(back->measured_bandwidth);
  ASSERT_EQ(back->rows.size(), r.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    EXPECT_EQ(back->rows[i].name, r.rows[i].name);
    EXPECT_EQ(back->rows[i].status, r.rows[i].status);
    EXPECT_EQ(back->rows[i].median_us, r.rows[i].median_us) << i;
    EXPECT_EQ(back->rows[i].detail, r.rows[i].detail) << i;
  }
  std::string error;
  EXPECT_FALSE(bench_from_json(json::array(), &error));
  EXPECT_NE(error.find("not a JSON object"), std::string::npos) << error;
  json no_rows = bench_to_json(r);
  no_rows.erase("rows");
  EXPECT_FALSE(bench_from_json(no_rows, &error));
  EXPECT_NE(error.find("no \"rows\" field"), std::string::npos) << error;
  json bad = bench_to_json(r);
  bad["rows"][0]["position"] = "zero";
  EXPECT_FALSE(bench_from_json(bad, &error));
  EXPECT_NE(error.find("wrong type"), std::string::npos) << error;
}

TEST(Bench, TableHasOneLinePerRowAndSaysWhatIsComputed) {
  const std::string t = bench_table(synthetic());
  EXPECT_NE(t.find("| position | row | kind | median us | p10 us | p90 us | % of bandwidth | x vs "
                   "cublas | x vs graph-pdl |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| 0 | default | config | 1000.0 | 990.0 | 1020.0 | 80.0 | 1.50 | 1.05 |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| 4096 | graph-pdl | baseline | incorrect | - | - | - | - | - |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("the floor row is computed"), std::string::npos);
  BenchResult unmeasured = synthetic();
  unmeasured.measured_bandwidth = false;
  EXPECT_NE(bench_table(unmeasured).find("datasheet, not measured"), std::string::npos);
}

TEST(Bench, SvgHasABarPerRowScaledToTheSlowest) {
  const std::string svg = bench_svg(synthetic());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t bars = 0;
  for (size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1))
    ++bars;
  EXPECT_EQ(bars, synthetic().rows.size());
  EXPECT_NE(svg.find("width=\"520.0\""), std::string::npos) << "the slowest row spans the plot";
  EXPECT_NE(svg.find("url(#hatch)"), std::string::npos) << "the computed floor is hatched";
}

// A config row is checked where it is timed: the reference has a window at every measured
// position, and at 0, which every row is checked at too.
TEST(Bench, TheReferenceHasAWindowAtEveryMeasuredPositionAndAtZero) {
  EXPECT_EQ(bench_check_positions({1024, 0, 4096, 1024}), (std::vector<int>{0, 1024, 4096}));
  EXPECT_EQ(bench_check_positions({48}), (std::vector<int>{0, 48}));
  EXPECT_EQ(bench_check_positions({0}), (std::vector<int>{0}));
  EXPECT_GE(kBenchCheckSteps, 2) << "the step after the timed one reads the KV row it wrote";
}

// Rows measured in interleaved rounds: one row, its statistics over every round's samples, each
// round's median in its detail; a round without a latency makes the row that round's.
TEST(Bench, RoundsPoolEveryRoundsSamplesAndAFailedRoundFailsTheRow) {
  BenchRow a;
  a.name = "default";
  a.kind = "config";
  a.median_us = 101.0;
  a.p10_us = 100.0;
  a.p90_us = 102.0;
  a.detail = {{"kernel", "k"}};
  BenchRow b = a;
  b.median_us = 111.0;
  const std::vector<double> sa = {100.0, 101.0, 102.0}, sb = {110.0, 111.0, 112.0};
  const BenchRow one = pool_rounds({a}, {sa});
  EXPECT_EQ(*one.median_us, 101.0);
  EXPECT_FALSE(one.detail.contains("round_medians_us")) << "one round is the row as measured";
  const BenchRow two = pool_rounds({a, b}, {sa, sb});
  ASSERT_TRUE(two.median_us);
  const SampleStats want = sample_stats({100.0, 101.0, 102.0, 110.0, 111.0, 112.0});
  EXPECT_DOUBLE_EQ(*two.median_us, want.median);
  EXPECT_DOUBLE_EQ(*two.p10_us, want.p10);
  EXPECT_DOUBLE_EQ(*two.p90_us, want.p90);
  EXPECT_GT(*two.median_us, 101.0);
  EXPECT_LT(*two.median_us, 111.0);
  EXPECT_EQ(two.detail.at("round_medians_us"), json::array({101.0, 111.0}));
  EXPECT_EQ(two.detail.at("kernel"), "k") << "the first round's detail stays";
  BenchRow failed = a;
  failed.status = "incorrect";
  failed.message = "logits differ at position 40";
  failed.median_us.reset();
  const BenchRow bad = pool_rounds({a, failed, b}, {sa, {}, sb});
  EXPECT_EQ(bad.status, "incorrect");
  EXPECT_EQ(bad.message, "logits differ at position 40");
  EXPECT_FALSE(bad.median_us);
}

// On a GPU (skipped without one): a toy bench's config rows are checked at 0 and where they are
// timed (two steps each from the reference KV cache), then timed, and say which positions; in two
// rounds, every config and baseline row has both rounds' medians.
TEST(BenchGpu, EveryConfigRowIsCheckedAtZeroAndWhereItIsTimed) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  const auto target = live_target(&why);
  ASSERT_TRUE(target) << why;
  const schedule::Weights w = schedule::generate_weights(*schedule::find_preset("toy"), 3);
  BenchOptions o;
  o.positions = {0, 40};
  o.configs = {{"default", schedule::ScheduleConfig{}}};
  o.baselines = {"cublas"};
  o.warmup = 1;
  o.iterations = 5;
  o.rounds = 2;
  const auto r = run_bench(w, *target, o, &why);
  ASSERT_TRUE(r) << why;
  int config_rows = 0, baseline_rows = 0;
  for (const BenchRow& row : r->rows) {
    if (row.kind == "baseline") {
      ++baseline_rows;
      EXPECT_EQ(row.detail.value("round_medians_us", json::array()).size(), 2u) << row.position;
    }
    if (row.kind != "config") continue;
    ++config_rows;
    EXPECT_EQ(row.detail.value("round_medians_us", json::array()).size(), 2u) << row.position;
    EXPECT_EQ(row.status, "ok") << row.position << ": " << row.message;
    EXPECT_TRUE(row.median_us.has_value()) << row.position;
    std::vector<int> checked = row.detail.value("checked_positions", std::vector<int>{});
    const std::vector<int> want =
        row.position == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 40, 41};
    EXPECT_EQ(checked, want) << row.position;
  }
  EXPECT_EQ(config_rows, 2);
  EXPECT_EQ(baseline_rows, 2);
}

TEST(Bench, ReadsPeerRowsAndRejectsMalformedOnes) {
  const json peers = {{"peer", "pytorch"},
                      {"rows",
                       {{{"name", "cuda graph, eager"},
                         {"position", 0},
                         {"median_us", 2789.0},
                         {"p10_us", 2780.0},
                         {"p90_us", 2800.0}},
                        {{"name", "generate"},
                         {"position", 0},
                         {"status", "error"},
                         {"message", "no transformers"}}}}};
  std::string err;
  const auto rows = peer_rows(json::array({peers}), &err);
  ASSERT_TRUE(rows) << err;
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].name, "pytorch: cuda graph, eager");
  EXPECT_EQ((*rows)[0].kind, "peer");
  EXPECT_DOUBLE_EQ(*(*rows)[0].median_us, 2789.0);
  EXPECT_EQ((*rows)[1].status, "error");
  EXPECT_FALSE((*rows)[1].median_us);
  EXPECT_FALSE(peer_rows(json{{"rows", {{{"name", "x"}}}}}, &err));
  EXPECT_NE(err.find("position"), std::string::npos) << err;
  EXPECT_FALSE(peer_rows(json{{"peer", "x"}}, &err));
  EXPECT_NE(err.find("rows"), std::string::npos) << err;
}

TEST(StrongestBaseline, IsTheFastestMeasuredKind) {
  EXPECT_FALSE(strongest_baseline({}));
  const auto best = strongest_baseline({{"cublas", 1500.0}, {"graph-pdl", 1050.0}});
  ASSERT_TRUE(best);
  EXPECT_EQ(best->kind, "graph-pdl");
  EXPECT_DOUBLE_EQ(best->median_us, 1050.0);
  // A kind that gave no samples (median 0) never wins; on a tie the earlier kind stays.
  EXPECT_EQ(strongest_baseline({{"cublas", 1500.0}, {"graph-pdl", 0.0}})->kind, "cublas");
  EXPECT_EQ(strongest_baseline({{"cublas", 900.0}, {"graph-pdl", 900.0}})->kind, "cublas");
}

TEST(GraphPdlMisfit, NamesTheDimensionTheKernelsCannotServe) {
  for (const char* preset : {"toy", "toy-2L", "small", "llama-1b", "llama-8b"})
    EXPECT_EQ(graph_pdl_misfit(*schedule::find_preset(preset)), "") << preset;
  // An odd row count is served (the last task holds one row); rows must be whole vectors.
  schedule::ModelShape odd = *schedule::find_preset("small");
  odd.vocab = 32001;
  EXPECT_EQ(graph_pdl_misfit(odd), "");
  schedule::ModelShape wide = *schedule::find_preset("small");
  wide.ffn = 60000;
  EXPECT_NE(graph_pdl_misfit(wide).find("ffn 60000 floats exceed"), std::string::npos);
  schedule::ModelShape narrow = *schedule::find_preset("small");
  narrow.ffn = 5636;
  EXPECT_NE(graph_pdl_misfit(narrow).find("ffn 5636"), std::string::npos);
}

TEST(BaselineSelection, ParsesKindsAndTheNamedSelections) {
  std::string err;
  EXPECT_EQ(*parse_baseline_selection("all", &err), baseline_kinds());
  EXPECT_TRUE(parse_baseline_selection("none", &err)->empty());
  EXPECT_EQ(*parse_baseline_selection("auto", &err), std::vector<std::string>{"auto"});
  EXPECT_EQ(*parse_baseline_selection("graph-pdl,cublas", &err),
            (std::vector<std::string>{"graph-pdl", "cublas"}));
  for (const char* bad : {"", "cudnn", "cublas,", ",cublas", "cublas,cublas", "auto,cublas"}) {
    EXPECT_FALSE(parse_baseline_selection(bad, &err)) << bad;
    EXPECT_NE(err.find("choices: all, none, auto, cublas, graph-pdl"), std::string::npos) << err;
  }
  // The text round-trips (what the loop hands its workers).
  for (const char* text : {"none", "auto", "cublas", "graph-pdl,cublas"})
    EXPECT_EQ(baseline_selection_text(*parse_baseline_selection(text, &err)), text);
  EXPECT_EQ(*parse_baseline_selection(baseline_selection_text(baseline_kinds()), &err),
            baseline_kinds());
}

TEST(BaselineSelection, AutoIsGraphPdlWhereItRunsTheShapeAndCublasElsewhere) {
  const schedule::ModelShape llama = *schedule::find_preset("llama-1b");
  EXPECT_EQ(baselines_for({"auto"}, llama), std::vector<std::string>{"graph-pdl"});
  schedule::ModelShape wide = *schedule::find_preset("small");
  wide.ffn = 60000;  // graph_pdl_misfit: the down input exceeds its shared memory
  ASSERT_NE(graph_pdl_misfit(wide), "");
  EXPECT_EQ(baselines_for({"auto"}, wide), std::vector<std::string>{"cublas"});
  EXPECT_EQ(baselines_for({"cublas", "auto"}, wide), std::vector<std::string>{"cublas"});
  EXPECT_EQ(baselines_for({"cublas", "graph-pdl"}, wide),
            (std::vector<std::string>{"cublas", "graph-pdl"}));  // named kinds stay as named
  EXPECT_TRUE(baselines_for({}, llama).empty());
}

TEST(StopBound, IsTheFactorTimesTheFastestAtThatPositionOnceOneIsKnown) {
  const std::map<int, double> fastest = {{0, 1000.0}, {4096, 1200.0}};
  EXPECT_EQ(stop_bound_us(2.0, fastest, 0), 2000.0);
  EXPECT_EQ(stop_bound_us(1.5, fastest, 4096), 1800.0);
  EXPECT_EQ(stop_bound_us(2.0, fastest, 1024), 0.0);  // nothing measured there yet: time it all
  EXPECT_EQ(stop_bound_us(0.0, fastest, 0), 0.0);     // off
  EXPECT_EQ(stop_bound_us(2.0, {}, 0), 0.0);
}

TEST(StopBound, AFactorIsZeroOrAtLeastTheMinimum) {
  for (const double ok : {0.0, kStopSlowerMin, 2.0, 100.0}) EXPECT_EQ(stop_slower_error(ok), "");
  for (const double bad : {1.0, 1.04, -2.0, std::nan(""), HUGE_VAL})
    EXPECT_NE(stop_slower_error(bad).find("must be 0 (off) or a finite number >= 1.05"),
              std::string::npos)
        << bad;
}

TEST(BaselineKinds, UnknownKindNamesTheKnownOnes) {
  std::string err;
  const schedule::Weights w = schedule::generate_weights(*schedule::find_preset("toy"), 0);
  EXPECT_FALSE(create_baseline("cudnn", w, &err));
  EXPECT_NE(err.find("cublas, graph-pdl"), std::string::npos) << err;
}

}  // namespace
}  // namespace megasched::eval
