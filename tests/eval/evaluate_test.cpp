#include "eval/evaluate.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "schedule/checkpoint.h"
#include "schedule/cost_model.h"
#include "schedule/lookup.h"
#include "schedule/lower.h"

namespace megasched::eval {
namespace {

std::unique_ptr<TrialEvaluator> toy_evaluator(const std::string& model = "toy") {
  EvaluatorOptions o;
  o.model = model;
  o.gpu = "h100";
  o.device = "cpu";
  o.positions = {0, 3, 7};
  std::string error;
  auto ev = TrialEvaluator::create(o, &error);
  EXPECT_TRUE(ev) << error;
  return ev;
}

// A named --gpu on a machine with another GPU times that machine's GPU: every verdict says so.
TEST(TrialEvaluator, ANamedTargetOtherThanTheLiveGpuIsNamedInANote) {
  std::string error;
  const auto h100 = schedule::find_target_named("h100", &error);
  ASSERT_TRUE(h100) << error;
  const std::string note = gpu_target_mismatch("NVIDIA H200", *h100);
  EXPECT_NE(note.find("--gpu h100 names another GPU than this machine's NVIDIA H200 (h200)"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("hint: --gpu auto or --gpu h200"), std::string::npos) << note;
  EXPECT_EQ(gpu_target_mismatch("NVIDIA H100 80GB HBM3", *h100), "");
  EXPECT_EQ(gpu_target_mismatch("a GPU the registry does not know", *h100), "");
}

TEST(TrialEvaluator, DefaultToyIsCorrectAndPredictedAboveTheFloor) {
  auto ev = toy_evaluator();
  const Verdict v = ev->evaluate(schedule::ScheduleConfig{});
  EXPECT_TRUE(v.valid) << v.rejected_reason;
  EXPECT_TRUE(v.correct);
  EXPECT_EQ(v.status, "ok");
  EXPECT_EQ(v.latency_kind, "predicted");
  ASSERT_TRUE(v.latency_us.has_value());
  EXPECT_GE(*v.latency_us, v.floor_us);
  EXPECT_NEAR(*v.pct_of_floor, 100.0 * v.floor_us / *v.latency_us, 1e-9);
  EXPECT_EQ(v.positions_checked, (std::vector<int>{0, 3, 7}));
  EXPECT_TRUE(v.argmax_match);
  EXPECT_LT(v.rel_err, 1e-4);
  EXPECT_GT(v.tasks, 0u);
}

// The verdict says where a trial's time went: every phase that ran, and a total that covers them.
TEST(TrialEvaluator, VerdictBreaksTheTrialTimeIntoItsPhases) {
  auto ev = toy_evaluator();
  const Verdict v = ev->evaluate(schedule::ScheduleConfig{});
  ASSERT_EQ(v.status, "ok");
  double sum = 0.0;
  for (const char* phase : {"lower", "validate", "reference_check", "predict"}) {
    ASSERT_TRUE(v.breakdown_ms.contains(phase)) << phase << " in " << v.breakdown_ms.dump();
    EXPECT_GE(v.breakdown_ms[phase].get<double>(), 0.0) << phase;
    sum += v.breakdown_ms[phase].get<double>();
  }
  EXPECT_GT(v.breakdown_ms["reference_check"].get<double>(), 0.0);  // toy steps take time
  EXPECT_FALSE(v.breakdown_ms.contains("gpu_check"));               // no GPU phase on a CPU
  ASSERT_TRUE(v.breakdown_ms.contains("total"));
  EXPECT_GE(v.breakdown_ms["total"].get<double>(), sum * 0.999);
  EXPECT_EQ(verdict_from_json(to_json(v)).breakdown_ms, v.breakdown_ms);

  // A config that does not lower has only the phases it reached.
  schedule::ScheduleConfig bad;
  bad.tiling.gemv_k_split = 0;  // lower() refuses it
  const Verdict r = ev->evaluate(bad);
  ASSERT_EQ(r.rejected_reason, "lowering");
  EXPECT_TRUE(r.breakdown_ms.contains("lower"));
  EXPECT_FALSE(r.breakdown_ms.contains("validate"));
  EXPECT_FALSE(r.breakdown_ms.contains("reference_check"));
  EXPECT_TRUE(r.breakdown_ms.contains("total"));
}

TEST(TrialEvaluator, ScheduleIdDependsOnConfigAndTarget) {
  auto ev = toy_evaluator();
  schedule::ScheduleConfig other;
  other.tiling.gemv_rows_per_task = 32;
  EXPECT_NE(ev->schedule_id(schedule::ScheduleConfig{}), ev->schedule_id(other));
  EXPECT_EQ(ev->schedule_id(other), ev->schedule_id(other));
  EvaluatorOptions o;
  o.gpu = "a100";
  std::string error;
  auto ev2 = TrialEvaluator::create(o, &error);
  ASSERT_TRUE(ev2) << error;
  EXPECT_NE(ev->schedule_id(other), ev2->schedule_id(other));
}

TEST(TrialEvaluator, TimedPositionIsPartOfTheTrial) {
  auto at0 = toy_evaluator();
  EvaluatorOptions o;
  o.model = "toy";
  o.gpu = "h100";
  o.device = "cpu";
  o.positions = {0, 3, 7};
  o.timed_position = 40;
  std::string error;
  auto at40 = TrialEvaluator::create(o, &error);
  ASSERT_TRUE(at40) << error;
  const schedule::ScheduleConfig c;
  EXPECT_NE(at0->schedule_id(c), at40->schedule_id(c)) << "a trial at 40 is not the one at 0";
  const Verdict v0 = at0->evaluate(c), v40 = at40->evaluate(c);
  EXPECT_EQ(v0.timed_position, 0);
  EXPECT_EQ(v40.timed_position, 40);
  EXPECT_GT(v40.floor_us, v0.floor_us) << "the KV history of 40 positions is in the floor";
  EXPECT_EQ(verdict_from_json(to_json(v40)).timed_position, 40);
}

/// The checks a verdict lists on `path`, as (position, window_start) pairs.
std::vector<std::pair<int, int>> checks_on(const Verdict& v, const std::string& path) {
  std::vector<std::pair<int, int>> out;
  for (const auto& c : v.checks)
    if (c["path"] == path) {
      EXPECT_TRUE(c["pass"].get<bool>()) << c.dump();
      out.emplace_back(c["position"].get<int>(), c["window_start"].get<int>());
    }
  return out;
}

TEST(TrialEvaluator, TimedPositionIsAlwaysCheckedWithConsecutiveSteps) {
  EvaluatorOptions o;
  o.positions = {0, 3};
  o.timed_position = 20;
  o.check_steps = 3;
  std::string error;
  auto ev = TrialEvaluator::create(o, &error);
  ASSERT_TRUE(ev) << error;
  const Verdict v = ev->evaluate(schedule::ScheduleConfig{});
  ASSERT_TRUE(v.correct) << to_json(v).dump();
  EXPECT_EQ(v.positions_checked, (std::vector<int>{0, 3, 20}));
  EXPECT_EQ(v.reference["reference_vm"], "walk");
  // Toy: the ReferenceVm walks from 0 and is compared at every window position.
  const std::vector<std::pair<int, int>> want = {{0, 0}, {1, 0},  {2, 0},  {3, 0}, {4, 0},
                                                 {5, 0}, {20, 0}, {21, 0}, {22, 0}};
  EXPECT_EQ(checks_on(v, "reference_vm"), want);
  EXPECT_TRUE(checks_on(v, "gpu").empty());
  ASSERT_EQ(v.reference["windows"].size(), 3u);
  EXPECT_EQ(verdict_from_json(to_json(v)).checks, v.checks);
}

TEST(TrialEvaluator, LargeModelsSampleTheReferenceVmAtTheTimedPositionFromTheReferenceKv) {
  EvaluatorOptions o;
  o.positions = {0, 3};
  o.timed_position = 60;
  o.reference_vm_walk_elements = 0;  // toy stands in for a large model
  std::string error;
  auto ev = TrialEvaluator::create(o, &error);
  ASSERT_TRUE(ev) << error;
  const Verdict v = ev->evaluate(schedule::ScheduleConfig{});
  ASSERT_TRUE(v.correct) << to_json(v).dump();
  EXPECT_EQ(v.reference["reference_vm"], "sampled");
  EXPECT_EQ(checks_on(v, "reference_vm"), (std::vector<std::pair<int, int>>{{60, 60}}));
  EXPECT_EQ(v.positions_checked, (std::vector<int>{0, 3, 60}));
}

// Checked positions closer than a window's steps make overlapping windows ([0, 2, 3, 4] with three
// steps each: the window at 0 holds 2 too). The sampled check at 2 starts from the KV cache before
// 2, not from the one before 0 (which failed every config of a plan's bucket [0, 5) on an H200,
// 2026-11-29: the ReferenceVm stepped position 2 with an empty cache). The timed position gets a
// window of its own when it is not a checked one, and that window is the one taken.
TEST(TrialEvaluator, TheSampledCheckStartsFromTheCacheOfTheWindowNearestBeforeIt) {
  for (const bool timed_is_checked : {true, false}) {
    EvaluatorOptions o;
    o.positions = timed_is_checked ? std::vector<int>{0, 2, 3, 4} : std::vector<int>{0, 3, 4};
    o.timed_position = timed_is_checked ? 2 : 1;
    o.check_steps = 3;
    o.reference_vm_walk_elements = 0;
    std::string error;
    auto ev = TrialEvaluator::create(o, &error);
    ASSERT_TRUE(ev) << error;
    const Verdict v = ev->evaluate(schedule::ScheduleConfig{});
    EXPECT_TRUE(v.correct) << to_json(v).dump();
    const std::vector<std::pair<int, int>> want = {timed_is_checked ? std::pair<int, int>{2, 2}
                                                                    : std::pair<int, int>{1, 1}};
    EXPECT_EQ(checks_on(v, "reference_vm"), want);
  }
}

// The sampled check runs its step in waves on reference_vm_threads threads (auto: the hardware's,
// at most kReferenceVmAutoThreads) and finds what one thread finds: the same logits, bit for bit.
TEST(TrialEvaluator, TheSampledCheckOnManyThreadsFindsWhatOneThreadFinds) {
  std::vector<nlohmann::json> checks;
  for (const int threads : {1, 4, 0}) {
    EvaluatorOptions o;
    o.positions = {0};
    o.timed_position = 40;
    o.reference_vm_walk_elements = 0;
    o.reference_vm_threads = threads;
    std::string error;
    auto ev = TrialEvaluator::create(o, &error);
    ASSERT_TRUE(ev) << error;
    schedule::ScheduleConfig config;
    config.tiling.attn_kv_partitions = 4;
    config.fusion.reduce_by_last_arriver = true;
    const Verdict v = ev->evaluate(config);
    ASSERT_TRUE(v.correct) << to_json(v).dump();
    const int want = threads > 0 ? threads
                                 : std::clamp(static_cast<int>(std::thread::hardware_concurrency()),
                                              1, kReferenceVmAutoThreads);
    EXPECT_EQ(v.reference["reference_vm_threads"], want);
    ASSERT_EQ(checks_on(v, "reference_vm"), (std::vector<std::pair<int, int>>{{40, 40}}));
    for (const nlohmann::json& c : v.checks)
      if (c["path"] == "reference_vm") checks.push_back(c);
  }
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_EQ(checks[1], checks[0]);  // rel_err, max_abs_err, worst logit: bit-identical logits
  EXPECT_EQ(checks[2], checks[0]);
}

TEST(TrialEvaluator, UnsafeProgramIsRejectedWithRuleNamesAndNoLatency) {
  auto ev = toy_evaluator();
  std::string error;
  auto program = schedule::lower(ev->shape(), ev->target(), schedule::ScheduleConfig{}, &error);
  ASSERT_TRUE(program) << error;
  // Drop every wait: consumers now race their producers.
  for (auto& t : program->tasks) t.wait_count = 0;
  const Verdict v = ev->evaluate_program(*program, "deadbeefdeadbeef");
  EXPECT_FALSE(v.valid);
  EXPECT_EQ(v.status, "rejected");
  EXPECT_NE(v.rejected_reason.find("race"), std::string::npos) << v.rejected_reason;
  EXPECT_FALSE(v.latency_us.has_value());
  EXPECT_FALSE(v.diagnostics.empty());
}

TEST(TrialEvaluator, WrongProgramIsIncorrectAndGetsNoLatency) {
  auto ev = toy_evaluator();
  std::string error;
  auto program = schedule::lower(ev->shape(), ev->target(), schedule::ScheduleConfig{}, &error);
  ASSERT_TRUE(program) << error;
  // Point the LM head at the embedding table (same shape, toy is untied): in bounds, aligned and
  // race-free, so the validator accepts it, but the logits are wrong.
  const auto layout = schedule::layout_for(ev->shape());
  ASSERT_NE(layout.lm_head, layout.embed);
  bool changed = false;
  for (auto& t : program->tasks)
    if (t.opcode == ms_abi::kGemv && program->ops[t.op_id].kind == schedule::OpKind::kLmHead) {
      t.weight =
          t.weight - static_cast<uint64_t>(layout.lm_head) + static_cast<uint64_t>(layout.embed);
      changed = true;
    }
  ASSERT_TRUE(changed);
  const Verdict v = ev->evaluate_program(*program, "0123456789abcdef");
  EXPECT_TRUE(v.valid);
  EXPECT_FALSE(v.correct);
  EXPECT_EQ(v.status, "incorrect");
  EXPECT_FALSE(v.latency_us.has_value());
  EXPECT_GT(v.rel_err, 1e-3);
  // The sampled check (from the reference KV at the timed position) catches it too, and says where.
  EvaluatorOptions o;
  o.timed_position = 50;
  o.reference_vm_walk_elements = 0;
  auto sampled = TrialEvaluator::create(o, &error);
  ASSERT_TRUE(sampled) << error;
  const Verdict s = sampled->evaluate_program(*program, "0123456789abcdef");
  EXPECT_EQ(s.status, "incorrect");
  ASSERT_EQ(s.checks.size(), 1u);
  EXPECT_EQ(s.checks[0]["position"], 50);
  EXPECT_FALSE(s.checks[0]["pass"].get<bool>());
}

TEST(TrialEvaluator, BadInputsAreErrorsWithHints) {
  EvaluatorOptions o;
  std::string error;
  o.model = "tiny";
  EXPECT_FALSE(TrialEvaluator::create(o, &error));
  EXPECT_NE(error.find("unknown model 'tiny'"), std::string::npos) << error;
  o = EvaluatorOptions{};
  o.stop_slower = 1.0;  // would cut short trials as fast as the fastest within the noise
  EXPECT_FALSE(TrialEvaluator::create(o, &error));
  EXPECT_NE(error.find("stop_slower must be 0 (off) or a finite number >= 1.05"), std::string::npos)
      << error;
  o = EvaluatorOptions{};
  o.gpu = "h1000";
  EXPECT_FALSE(TrialEvaluator::create(o, &error));
  EXPECT_NE(error.find("did you mean 'h100'"), std::string::npos) << error;
  o = EvaluatorOptions{};
  o.positions = {0, 100000};
  EXPECT_FALSE(TrialEvaluator::create(o, &error));
  EXPECT_NE(error.find("positions must lie in"), std::string::npos) << error;
}

TEST(CostModel, NeverPredictsBelowTheFloorAndRespondsToKnobs) {
  auto ev = toy_evaluator();
  std::string error;
  const double floor = 1000.0;  // a floor far above the toy's makespan: the prediction sits on it
  auto program = schedule::lower(ev->shape(), ev->target(), schedule::ScheduleConfig{}, &error);
  ASSERT_TRUE(program) << error;
  auto est = schedule::predict(*program, ev->shape(), ev->target(), 0, floor);
  EXPECT_TRUE(est.completed);
  EXPECT_GE(est.latency_us, floor);
  auto base = schedule::predict(*program, ev->shape(), ev->target(), 0, 0.0);
  schedule::ScheduleConfig narrow;
  narrow.kernel.vector_bytes = 4;
  auto p2 = schedule::lower(ev->shape(), ev->target(), narrow, &error);
  ASSERT_TRUE(p2) << error;
  auto est2 = schedule::predict(*p2, ev->shape(), ev->target(), 0, 0.0);
  EXPECT_GT(est2.makespan_us, base.makespan_us);
  EXPECT_GT(base.critical_path_stages, 3.0);
}

TEST(CostModel, DeadlockedProgramDoesNotComplete) {
  auto ev = toy_evaluator();
  std::string error;
  auto program = schedule::lower(ev->shape(), ev->target(), schedule::ScheduleConfig{}, &error);
  ASSERT_TRUE(program) << error;
  // Make the first task wait for a threshold no producer can reach.
  ms_abi::Wait w{0, 1000000};
  program->waits.push_back(w);
  program->tasks[program->queues[0][0]].wait_begin =
      static_cast<uint32_t>(program->waits.size() - 1);
  program->tasks[program->queues[0][0]].wait_count = 1;
  auto est = schedule::predict(*program, ev->shape(), ev->target(), 0, 0.0);
  EXPECT_FALSE(est.completed);
}

TEST(TrialEvaluator, AProgramOfAnotherModelIsRejectedWithoutRunning) {
  auto ev = toy_evaluator();
  std::string error;
  auto small = schedule::lower(*schedule::find_preset("small"), ev->target(),
                               schedule::ScheduleConfig{}, &error);
  ASSERT_TRUE(small) << error;
  EXPECT_FALSE(ev->check_program(*small, &error));
  EXPECT_NE(error.find("lowered for model 'small', not 'toy'"), std::string::npos) << error;
  const Verdict v = ev->evaluate_program(*small, "0123456789abcdef");  // once a segfault
  EXPECT_EQ(v.status, "rejected");
  EXPECT_EQ(v.rejected_reason, "program");
  EXPECT_FALSE(v.latency_us.has_value());
  auto huge = schedule::lower(ev->shape(), ev->target(), schedule::ScheduleConfig{}, &error);
  huge->buffer_elements[ms_abi::kBufActivations] = uint64_t{1} << 40;  // once bad_alloc
  EXPECT_EQ(ev->evaluate_program(*huge, "0123456789abcdef").rejected_reason, "program");
}

TEST(TrialEvaluator, AModelWhoseOwnForwardIsNotFiniteIsRefusedNotBlamedOnSchedules) {
  const std::string dir = testing::TempDir() + "ms_nan_model_" + std::to_string(::getpid());
  schedule::Weights w = schedule::generate_weights(*schedule::find_preset("toy"), 0);
  w.f32[static_cast<size_t>(w.layout.final_norm)] = NAN;
  std::string error;
  ASSERT_TRUE(schedule::save_checkpoint(w, dir, &error)) << error;
  EvaluatorOptions o;
  o.model = dir;
  bool environment = true;
  EXPECT_FALSE(TrialEvaluator::create(o, &error, &environment));
  EXPECT_FALSE(environment);
  EXPECT_NE(error.find("eager forward gives non-finite logits at position 0"), std::string::npos)
      << error;
  std::filesystem::remove_all(dir);
}

// ---- a weighted objective over positions (eval/objective.h) -------------------------------

/// A toy CPU evaluator timed at `timed_position`, or over `objective` when it is not empty.
std::unique_ptr<TrialEvaluator> toy_at(int timed_position, const Objective& objective = {},
                                       int64_t walk_elements = kReferenceVmWalkElements) {
  EvaluatorOptions o;
  o.positions = {0, 3, 7};
  o.timed_position = timed_position;
  o.objective = objective;
  o.reference_vm_walk_elements = walk_elements;
  std::string error;
  auto ev = TrialEvaluator::create(o, &error);
  EXPECT_TRUE(ev) << error;
  return ev;
}

TEST(TrialEvaluator, ObjectiveLatencyIsTheWeightedMeanOfItsPositionsLatencies) {
  const Objective objective = {{60, 2.0}, {0, 1.0}, {20, 0.5}};  // any order
  auto over = toy_at(0, objective);
  ASSERT_TRUE(over);
  schedule::ScheduleConfig narrow;
  narrow.tiling.gemv_rows_per_task = 16;
  for (const schedule::ScheduleConfig& c : {schedule::ScheduleConfig{}, narrow}) {
    const Verdict v = over->evaluate(c);
    ASSERT_EQ(v.status, "ok") << to_json(v).dump();
    ASSERT_TRUE(v.latency_us.has_value());
    EXPECT_EQ(v.latency_kind, "predicted");
    EXPECT_EQ(v.timed_position, 0) << "the first objective position";
    EXPECT_EQ(v.positions_checked, (std::vector<int>{0, 3, 7, 20, 60}));
    // Each position alone, as --timed-position P evaluates it.
    double latency = 0, floor = 0, datasheet = 0, weights = 0;
    ASSERT_TRUE(v.objective.is_array());
    ASSERT_EQ(v.objective.size(), 3u);
    const std::vector<std::pair<int, double>> terms = {{0, 1.0}, {20, 0.5}, {60, 2.0}};
    for (size_t i = 0; i < terms.size(); ++i) {
      const auto [p, w] = terms[i];
      const Verdict alone = toy_at(p)->evaluate(c);
      ASSERT_TRUE(alone.latency_us.has_value()) << p;
      const nlohmann::json& e = v.objective[i];
      EXPECT_EQ(e["position"], p);
      EXPECT_EQ(e["weight"].get<double>(), w);
      EXPECT_DOUBLE_EQ(e["latency_us"].get<double>(), *alone.latency_us) << p;
      EXPECT_DOUBLE_EQ(e["floor_us"].get<double>(), alone.floor_us) << p;
      EXPECT_EQ(e["bytes_min"].get<uint64_t>(), alone.bytes_min) << p;
      latency += w * *alone.latency_us;
      floor += w * alone.floor_us;
      datasheet += w * alone.floor_datasheet_us;
      weights += w;
    }
    EXPECT_NEAR(*v.latency_us, latency / weights, 1e-9 * latency / weights);
    EXPECT_NEAR(v.floor_us, floor / weights, 1e-9 * floor / weights);
    EXPECT_NEAR(v.floor_datasheet_us, datasheet / weights, 1e-9 * datasheet / weights);
    EXPECT_NEAR(*v.pct_of_floor, 100.0 * v.floor_us / *v.latency_us, 1e-9);
    // The positions differ, so the mean is none of them.
    EXPECT_GT(v.objective[2]["floor_us"].get<double>(), v.objective[0]["floor_us"].get<double>());
    const Verdict back = verdict_from_json(to_json(v));
    EXPECT_EQ(back.objective, v.objective);
  }
}

TEST(TrialEvaluator, ObjectiveIsAnotherTrialWithAStableId) {
  const schedule::ScheduleConfig c;
  auto at0 = toy_at(0);
  const Objective objective = {{0, 1.0}, {20, 1.0}, {60, 2.0}};
  auto over = toy_at(0, objective);
  auto again = toy_at(0, {{60, 2.0}, {20, 1.0}, {0, 1.0}});
  auto heavier = toy_at(0, {{0, 1.0}, {20, 1.0}, {60, 3.0}});
  ASSERT_TRUE(at0 && over && again && heavier);
  const std::string id = over->schedule_id(c);
  EXPECT_NE(id, at0->schedule_id(c)) << "a trial over an objective is not the one at 0";
  EXPECT_EQ(id, again->schedule_id(c)) << "one objective, two spellings";
  EXPECT_NE(id, heavier->schedule_id(c)) << "the weights are part of the trial";
  EXPECT_EQ(id, trial_schedule_id(c, "toy", 0, "h100", "cpu", 0, objective));
  EXPECT_EQ(over->evaluate(c).schedule_id, id);
  // Without an objective the id is the one of old.
  EXPECT_EQ(at0->schedule_id(c), trial_schedule_id(c, "toy", 0, "h100", "cpu", 0));
  EXPECT_EQ(at0->schedule_id(c), trial_schedule_id(c, "toy", 0, "h100", "cpu", 0, {}));
  // A verdict of one timed position has no objective field at all.
  const Verdict single = at0->evaluate(c);
  EXPECT_TRUE(single.objective.is_null());
  EXPECT_FALSE(to_json(single).contains("objective"));
  EXPECT_TRUE(to_json(over->evaluate(c)).contains("objective"));
}

TEST(TrialEvaluator, AnObjectiveOfOnePositionTimesLikeTheTimedPosition) {
  const schedule::ScheduleConfig c;
  auto timed = toy_at(40);
  auto over = toy_at(0, {{40, 1.0}});
  ASSERT_TRUE(timed && over);
  const Verdict a = timed->evaluate(c), b = over->evaluate(c);
  ASSERT_TRUE(a.latency_us && b.latency_us) << to_json(b).dump();
  EXPECT_DOUBLE_EQ(*b.latency_us, *a.latency_us);
  EXPECT_DOUBLE_EQ(b.floor_us, a.floor_us);
  EXPECT_EQ(b.bytes_min, a.bytes_min);
  EXPECT_EQ(b.timed_position, 40);
  EXPECT_EQ(b.positions_checked, a.positions_checked);
  EXPECT_NE(b.schedule_id, a.schedule_id);
}

TEST(TrialEvaluator, LargeModelsSampleTheReferenceVmAtEveryObjectivePosition) {
  auto ev = toy_at(0, {{20, 1.0}, {60, 1.0}}, /*walk_elements=*/0);
  ASSERT_TRUE(ev);
  const Verdict v = ev->evaluate(schedule::ScheduleConfig{});
  ASSERT_TRUE(v.correct) << to_json(v).dump();
  EXPECT_EQ(v.reference["reference_vm"], "sampled");
  EXPECT_EQ(checks_on(v, "reference_vm"), (std::vector<std::pair<int, int>>{{20, 20}, {60, 60}}));
}

TEST(TrialEvaluator, AnIncorrectProgramGetsNoObjectiveLatency) {
  auto ev = toy_at(0, {{0, 1.0}, {60, 1.0}});
  ASSERT_TRUE(ev);
  std::string error;
  auto program = schedule::lower(ev->shape(), ev->target(), schedule::ScheduleConfig{}, &error);
  ASSERT_TRUE(program) << error;
  const auto layout = schedule::layout_for(ev->shape());
  for (auto& t : program->tasks)
    if (t.opcode == ms_abi::kGemv && program->ops[t.op_id].kind == schedule::OpKind::kLmHead)
      t.weight =
          t.weight - static_cast<uint64_t>(layout.lm_head) + static_cast<uint64_t>(layout.embed);
  const Verdict v = ev->evaluate_program(*program, "0123456789abcdef");
  EXPECT_EQ(v.status, "incorrect");
  EXPECT_FALSE(v.latency_us.has_value());
  ASSERT_EQ(v.objective.size(), 2u);
  for (const auto& e : v.objective) EXPECT_TRUE(e["latency_us"].is_null()) << e.dump();
}

TEST(TrialEvaluator, BadObjectivesAreErrorsWithHints) {
  EvaluatorOptions o;
  std::string error;
  o.objective = {{0, 1.0}, {40, 1.0}};
  o.timed_position = 40;
  EXPECT_FALSE(TrialEvaluator::create(o, &error));
  EXPECT_NE(error.find("use one or the other"), std::string::npos) << error;
  o.timed_position = 0;
  o.objective = {{0, 1.0}, {0, 2.0}};
  EXPECT_FALSE(TrialEvaluator::create(o, &error));
  EXPECT_NE(error.find("position 0 is given twice"), std::string::npos) << error;
  o.objective = {{0, 0.0}};
  EXPECT_FALSE(TrialEvaluator::create(o, &error));
  EXPECT_NE(error.find("a weight is a finite number above 0"), std::string::npos) << error;
  o.objective = {{-1, 1.0}};
  EXPECT_FALSE(TrialEvaluator::create(o, &error));
  EXPECT_NE(error.find("is negative"), std::string::npos) << error;
  o.objective = {{0, 1.0}, {128, 1.0}};
  EXPECT_FALSE(TrialEvaluator::create(o, &error));
  EXPECT_NE(error.find("position 128 is beyond model toy's max_seq 128"), std::string::npos)
      << error;
  o.objective = {{0, 1.0}, {127, 1.0}};
  EXPECT_TRUE(TrialEvaluator::create(o, &error)) << error;
}

// ---- the floor guard (HARNESS.md, "Honesty rules"), through the timing seam -----------------

/// A toy CPU evaluator whose timing step reports `*injected` (when set) at every position in
/// `at_positions` (all positions when empty) instead of the cost model's prediction.
std::unique_ptr<TrialEvaluator> toy_with_injected_time(const std::optional<double>* injected,
                                                       const Objective& objective = {},
                                                       std::vector<int> at_positions = {}) {
  EvaluatorOptions o;
  o.positions = {0, 3, 7};
  o.objective = objective;
  o.latency_for_testing = [injected, at_positions](int position, double predicted) {
    const bool here = at_positions.empty() || std::find(at_positions.begin(), at_positions.end(),
                                                        position) != at_positions.end();
    return *injected && here ? **injected : predicted;
  };
  std::string error;
  auto ev = TrialEvaluator::create(o, &error);
  EXPECT_TRUE(ev) << error;
  return ev;
}

bool has_note(const Verdict& v, const std::string& part) {
  for (const std::string& n : v.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

TEST(FloorGuard, ALatencyBelowTheFloorIsWithheldWithANote) {
  std::optional<double> injected;
  auto ev = toy_with_injected_time(&injected);
  ASSERT_TRUE(ev);
  const double floor_us = floor_for(ev->shape(), ev->target(), 0).floor_us;
  injected = 0.5 * floor_us;
  const Verdict v = ev->evaluate(schedule::ScheduleConfig{});
  EXPECT_EQ(v.status, "ok") << "correct, only the latency is withheld";
  EXPECT_TRUE(v.correct);
  EXPECT_DOUBLE_EQ(v.floor_us, floor_us);
  EXPECT_FALSE(v.latency_us.has_value()) << *v.latency_us;
  EXPECT_EQ(v.latency_kind, "");
  EXPECT_FALSE(v.pct_of_floor.has_value());
  EXPECT_TRUE(has_note(v, "is below the floor")) << to_json(v)["notes"].dump();
  EXPECT_TRUE(has_note(v, "withheld")) << to_json(v)["notes"].dump();
  // Just under the floor is under it.
  injected = floor_us * (1.0 - 1e-9);
  EXPECT_FALSE(ev->evaluate(schedule::ScheduleConfig{}).latency_us.has_value());
}

TEST(FloorGuard, ALatencyAtOrAboveTheFloorIsReported) {
  std::optional<double> injected;
  auto ev = toy_with_injected_time(&injected);
  ASSERT_TRUE(ev);
  const double floor_us = floor_for(ev->shape(), ev->target(), 0).floor_us;
  for (const double latency : {floor_us, 2.0 * floor_us}) {
    injected = latency;
    const Verdict v = ev->evaluate(schedule::ScheduleConfig{});
    EXPECT_EQ(v.status, "ok");
    ASSERT_TRUE(v.latency_us.has_value()) << latency;
    EXPECT_EQ(*v.latency_us, latency);
    EXPECT_EQ(v.latency_kind, "predicted");
    ASSERT_TRUE(v.pct_of_floor.has_value());
    EXPECT_NEAR(*v.pct_of_floor, 100.0 * floor_us / latency, 1e-9);
    EXPECT_FALSE(has_note(v, "below"));
  }
}

TEST(FloorGuard, OnePositionBelowItsFloorWithholdsTheObjectiveLatency) {
  // Position 60 timed at half its floor while position 0 keeps the cost model's time, hundreds of
  // times its floor: the mean latency is far above the mean floor, yet nothing may be reported.
  std::optional<double> injected;
  auto ev = toy_with_injected_time(&injected, {{0, 1.0}, {60, 1.0}}, {60});
  ASSERT_TRUE(ev);
  const double floor0 = floor_for(ev->shape(), ev->target(), 0).floor_us;
  const double floor60 = floor_for(ev->shape(), ev->target(), 60).floor_us;
  injected = 0.5 * floor60;
  const Verdict v = ev->evaluate(schedule::ScheduleConfig{});
  EXPECT_EQ(v.status, "ok");
  EXPECT_FALSE(v.latency_us.has_value()) << *v.latency_us;
  EXPECT_EQ(v.latency_kind, "");
  ASSERT_EQ(v.objective.size(), 2u);
  EXPECT_TRUE(v.objective[0]["latency_us"].is_number()) << v.objective.dump();
  EXPECT_GT(v.objective[0]["latency_us"].get<double>(), 3.0 * floor0);
  EXPECT_TRUE(v.objective[1]["latency_us"].is_null()) << v.objective.dump();
  EXPECT_TRUE(has_note(v, "at position 60 is below its floor")) << to_json(v)["notes"].dump();
  // At its floor, position 60 passes and the mean is reported.
  injected = floor60;
  const Verdict at = ev->evaluate(schedule::ScheduleConfig{});
  ASSERT_TRUE(at.latency_us.has_value()) << to_json(at)["notes"].dump();
  EXPECT_DOUBLE_EQ(at.objective[1]["latency_us"].get<double>(), floor60);
  EXPECT_NEAR(*at.latency_us, (at.objective[0]["latency_us"].get<double>() + floor60) / 2, 1e-9);
}

}  // namespace
}  // namespace megasched::eval
