#include "eval/profile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "schedule/lower.h"
#include "schedule/validate.h"

namespace megasched::eval {
namespace {

using nlohmann::json;
using schedule::Program;

// Four tasks on two blocks (and a third block that runs nothing): A and B each add 1 to c0; C
// (after A on block 0) waits for c0 >= c_threshold, D (after B on block 1) for c0 >= d_threshold.
Program four_task_program(uint32_t c_threshold, uint32_t d_threshold) {
  Program p;
  auto task = [&](uint32_t op, uint32_t signal_counter, uint32_t wait_count) {
    ms_abi::Instr in{};
    in.opcode = ms_abi::kGemv;
    in.op_id = op;
    in.signal_counter = signal_counter;
    in.signal_increment = 1;
    in.wait_begin = static_cast<uint32_t>(p.waits.size()) - wait_count;
    in.wait_count = wait_count;
    p.tasks.push_back(in);
  };
  task(0, 0, 0);  // A
  task(1, 0, 0);  // B
  p.waits.push_back({0, c_threshold});
  task(2, 1, 1);  // C
  p.waits.push_back({0, d_threshold});
  task(3, 1, 1);  // D
  p.counter_totals = {2, 2};
  p.counter_names = {"c0", "c1"};
  p.queues = {{0, 2}, {1, 3}, {}};
  p.ops = {{"A", schedule::OpKind::kQkv, 0},
           {"B", schedule::OpKind::kQkv, 0},
           {"C", schedule::OpKind::kO, 0},
           {"D", schedule::OpKind::kO, 0}};
  p.launch.grid_blocks = 3;
  return p;
}

vm::TaskStamp stamp(int32_t task, int32_t block, int32_t order, uint64_t start, uint64_t ready,
                    uint64_t done, uint64_t signal) {
  return {task, block, order, start, ready, done, signal};
}

// A signals at 110, B at 310; C and D start right after their block's first task.
std::vector<vm::TaskStamp> b_late_stamps(uint64_t c_signal, uint64_t d_signal) {
  return {stamp(0, 0, 0, 0, 0, 100, 110), stamp(1, 1, 0, 5, 5, 300, 310),
          stamp(2, 0, 1, 120, 320, c_signal - 10, c_signal),
          stamp(3, 1, 1, 330, 340, d_signal - 10, d_signal)};
}

std::vector<std::string> path_ops(const json& analysis) {
  std::vector<std::string> ops;
  for (const json& h : analysis["critical_path"]["path"])
    ops.push_back(h["op"].get<std::string>() + ":" + h["via"].get<std::string>());
  return ops;
}

TEST(Profile, CriticalPathFollowsTheSignalThatReachedTheThreshold) {
  // C needs both signals: B's (the later) released it, so the path is B -> C by dependency.
  const Program p = four_task_program(2, 1);
  const json a = analyze_profile(p, b_late_stamps(410, 400), 1.0);
  EXPECT_EQ(path_ops(a), (std::vector<std::string>{"B:start", "C:dependency"}));
  const json& cp = a["critical_path"];
  EXPECT_EQ(cp["stages"], 1);
  EXPECT_EQ(cp["tasks"], 2);
  EXPECT_EQ(cp["path"][1]["counter"], "c0");
  // B from its start (5) to C's signal (410): B runs 295 + signals 10; C is released at 310,
  // becomes ready at 320 (wait 10), runs 80, signals 10.
  EXPECT_DOUBLE_EQ(cp["span_us"].get<double>(), 0.405);
  EXPECT_DOUBLE_EQ(cp["exec_us"].get<double>(), 0.375);
  EXPECT_DOUBLE_EQ(cp["wait_us"].get<double>(), 0.010);
  EXPECT_DOUBLE_EQ(cp["signal_us"].get<double>(), 0.020);
  EXPECT_DOUBLE_EQ(cp["gap_us"].get<double>(), 0.0);

  // With threshold 1 the first signal (A's) releases C, and A is also C's queue predecessor.
  const json a1 = analyze_profile(four_task_program(1, 1), b_late_stamps(410, 400), 1.0);
  EXPECT_EQ(path_ops(a1), (std::vector<std::string>{"A:start", "C:dependency"}));
}

TEST(Profile, CriticalPathTakesTheQueueWhenTheBlockWasBusyLonger) {
  // D finishes last; A released it (threshold 1, at 110) but D's block was busy with B until 310.
  const json a = analyze_profile(four_task_program(2, 1), b_late_stamps(410, 500), 1.0);
  EXPECT_EQ(path_ops(a), (std::vector<std::string>{"B:start", "D:queue"}));
  EXPECT_EQ(a["critical_path"]["stages"], 0);
  EXPECT_FALSE(a["critical_path"]["path"][1].contains("counter"));
  // D: from B's signal (310) to its start (330) is a gap.
  EXPECT_DOUBLE_EQ(a["critical_path"]["gap_us"].get<double>(), 0.020);
  EXPECT_DOUBLE_EQ(a["critical_path"]["span_us"].get<double>(), 0.495);
}

TEST(Profile, ReleaserIsTheSignalThatReachedTheThresholdNotTheLatest) {
  // A signals late (310) and B early (110): threshold 1 is reached by B, threshold 2 by A.
  std::vector<vm::TaskStamp> s = {
      stamp(0, 0, 0, 0, 0, 300, 310), stamp(1, 1, 0, 0, 0, 100, 110),
      stamp(2, 0, 1, 315, 320, 390, 400),   // C (threshold 2): released by A, its queue pred too
      stamp(3, 1, 1, 120, 130, 490, 500)};  // D (threshold 1): released by B
  const json a = analyze_profile(four_task_program(2, 1), s, 1.0);
  EXPECT_EQ(path_ops(a), (std::vector<std::string>{"B:start", "D:dependency"}));
  s[3] = stamp(3, 1, 1, 120, 130, 190, 200);
  const json c = analyze_profile(four_task_program(2, 1), s, 1.0);
  EXPECT_EQ(path_ops(c), (std::vector<std::string>{"A:start", "C:dependency"}));
}

TEST(Profile, ReadyLagIsFromWhenTheTaskCouldGoOnToWhenItWasReady) {
  // C (threshold 2) is released by B's signal at 310 after starting at 120: ready at 320, lag 10.
  // D (threshold 1) is released by A at 110 but starts at 330: ready at 390, lag 60 from its start.
  std::vector<vm::TaskStamp> s = b_late_stamps(410, 500);
  s[3] = stamp(3, 1, 1, 330, 390, 490, 500);
  const json a = analyze_profile(four_task_program(2, 1), s, 1.0);
  auto op = [&](const std::string& name) {
    for (const json& o : a["per_op"])
      if (o["op"] == name) return o["ready_lag_us"];
    return json();
  };
  EXPECT_EQ(op("A")["tasks"], 0);  // no waits: no lag
  EXPECT_DOUBLE_EQ(op("A")["max"].get<double>(), 0.0);
  EXPECT_EQ(op("C")["tasks"], 1);
  EXPECT_DOUBLE_EQ(op("C")["median"].get<double>(), 0.010);
  EXPECT_DOUBLE_EQ(op("D")["max"].get<double>(), 0.060);
  // Per kind: C and D are both O tasks; the median of an even count is the lower middle.
  bool found = false;
  for (const json& k : a["per_kind"]) {
    if (k["kind"] != schedule::op_kind_name(schedule::OpKind::kO)) continue;
    found = true;
    EXPECT_EQ(k["ready_lag_us"]["tasks"], 2);
    EXPECT_DOUBLE_EQ(k["ready_lag_us"]["median"].get<double>(), 0.010);
    EXPECT_DOUBLE_EQ(k["ready_lag_us"]["max"].get<double>(), 0.060);
  }
  EXPECT_TRUE(found);
  // A wait nobody released (threshold 3 of a counter that reaches 2) gives no lag.
  const json u = analyze_profile(four_task_program(3, 1), s, 1.0);
  for (const json& o : u["per_op"]) {
    if (o["op"] == "C") {
      EXPECT_EQ(o["ready_lag_us"]["tasks"], 0);
    }
  }
  // The text report carries the lag columns.
  EXPECT_NE(format_profile(a, 4).find("lag_max"), std::string::npos);
}

TEST(Profile, BlockAndTotalPhasesAddUpToTheSpan) {
  const json a = analyze_profile(four_task_program(2, 1), b_late_stamps(410, 500), 2.5);
  const json& t = a["totals"];
  EXPECT_DOUBLE_EQ(t["span_us"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(t["wall_us"].get<double>(), 2.5);
  EXPECT_EQ(t["blocks"], 3);
  ASSERT_EQ(a["per_block"].size(), 3u);
  const json& b0 = a["per_block"][0];  // A 0-110, C 120-410, idle 410-500
  EXPECT_EQ(b0["tasks"], 2);
  EXPECT_DOUBLE_EQ(b0["exec_us"].get<double>(), 0.180);
  EXPECT_DOUBLE_EQ(b0["wait_us"].get<double>(), 0.200);
  EXPECT_DOUBLE_EQ(b0["gap_us"].get<double>(), 0.010);
  EXPECT_DOUBLE_EQ(b0["idle_us"].get<double>(), 0.090);
  const json& b2 = a["per_block"][2];  // ran nothing: idle all step
  EXPECT_EQ(b2["tasks"], 0);
  EXPECT_DOUBLE_EQ(b2["idle_fraction"].get<double>(), 1.0);
  // Over blocks x span (1500 ns): idle 90 + 0 + 500, exec 180 + 445 (fractions rounded to 1e-4).
  EXPECT_DOUBLE_EQ(t["idle_us"].get<double>(), 0.590);
  EXPECT_DOUBLE_EQ(t["idle_fraction"].get<double>(), 0.3933);
  EXPECT_DOUBLE_EQ(t["exec_fraction"].get<double>(), 0.4167);
  const json& b1 = a["per_block"][1];  // B 5-310, D 330-500: gaps 5 + 20, never idle
  EXPECT_DOUBLE_EQ(b1["gap_us"].get<double>(), 0.025);
  EXPECT_DOUBLE_EQ(b1["idle_us"].get<double>(), 0.0);
}

// A list scheduler over the program's queues that honours the waits: each block takes its next
// task `gap` ns after its previous signal; a wait holds `poll` ns after the signal that makes its
// counter reach the threshold (poll == gap, so what delayed a task is whichever ended last, as the
// analysis assumes). Tasks are committed in order of their ready time, so every signal a wait
// could see is known when the wait is resolved. *binding gets, per task, the task that delayed it
// (-1 when nothing did).
std::vector<vm::TaskStamp> simulate(const Program& p, const std::function<uint64_t(uint32_t)>& exec,
                                    std::vector<int64_t>* binding) {
  constexpr uint64_t kGap = 40, kSignal = 20;
  const size_t nb = p.queues.size();
  std::vector<size_t> head(nb, 0);
  std::vector<uint64_t> free_at(nb, 0);
  std::vector<int64_t> last_task(nb, -1);
  std::vector<std::vector<std::pair<uint64_t, uint32_t>>> signals(p.num_counters());  // (at, task)
  std::vector<vm::TaskStamp> stamps(p.tasks.size());
  binding->assign(p.tasks.size(), -1);
  for (size_t done = 0; done < p.tasks.size(); ++done) {
    int64_t best_block = -1, best_pred = -1;
    uint64_t best_start = 0, best_ready = 0;
    for (size_t b = 0; b < nb; ++b) {
      if (head[b] >= p.queues[b].size()) continue;
      const ms_abi::Instr& in = p.tasks[p.queues[b][head[b]]];
      const uint64_t start = free_at[b] + kGap;
      uint64_t release = 0;
      int64_t releaser = -1;
      bool ok = true;
      for (uint32_t w = in.wait_begin; w < in.wait_begin + in.wait_count; ++w) {
        auto list = signals[p.waits[w].counter];
        std::sort(list.begin(), list.end());
        uint64_t sum = 0;
        bool reached = p.waits[w].threshold == 0;
        for (const auto& [at, task] : list) {
          if (reached) break;
          sum += p.tasks[task].signal_increment;
          if (sum >= p.waits[w].threshold) {
            reached = true;
            if (releaser < 0 || at > release) {  // the first wait wins a tie, as in the analysis
              release = at;
              releaser = task;
            }
          }
        }
        ok = ok && reached;
      }
      if (!ok) continue;
      // Ties go to the dependency, as in the analysis.
      const bool dep = releaser >= 0 && (last_task[b] < 0 || release >= free_at[b]);
      const uint64_t ready = dep ? std::max(start, release + kGap) : start;
      if (best_block < 0 || ready < best_ready) {
        best_block = static_cast<int64_t>(b);
        best_ready = ready;
        best_start = start;
        best_pred = dep ? releaser : last_task[b];
      }
    }
    EXPECT_GE(best_block, 0) << "the simulation deadlocked";
    if (best_block < 0) return stamps;
    const size_t b = static_cast<size_t>(best_block);
    const uint32_t t = p.queues[b][head[b]];
    const uint64_t finish = best_ready + exec(t);
    stamps[t] = {static_cast<int32_t>(t),
                 static_cast<int32_t>(b),
                 static_cast<int32_t>(head[b]),
                 best_start,
                 best_ready,
                 finish,
                 finish + kSignal};
    (*binding)[t] = best_pred;
    if (p.tasks[t].signal_increment > 0)
      signals[p.tasks[t].signal_counter].push_back({finish + kSignal, t});
    free_at[b] = finish + kSignal;
    last_task[b] = t;
    ++head[b];
  }
  return stamps;
}

// The toy preset on an H100 cut down to 3 SMs, with 32-row GEMV tiles: 3 blocks run 8-9 tasks
// each, so a critical path has both kinds of hops.
Program toy_program() {
  schedule::GpuTarget target = *schedule::find_target("h100");
  target.num_sms = 3;
  schedule::ScheduleConfig config;
  config.tiling.gemv_rows_per_task = 32;
  std::string error;
  auto p = schedule::lower(*schedule::find_preset("toy"), target, config, &error);
  EXPECT_TRUE(p) << error;
  EXPECT_TRUE(schedule::validate(*p, target).ok());
  EXPECT_FALSE(p->launch.dynamic_queue);
  return *p;
}

TEST(Profile, CriticalPathOfASimulatedStepIsTheChainOfWhatDelayedEachTask) {
  const Program p = toy_program();
  int queue_hops = 0;
  for (uint32_t slow : {0u, 3u, static_cast<uint32_t>(p.tasks.size() / 2)}) {
    std::vector<int64_t> binding;
    const auto stamps = simulate(
        p, [&](uint32_t t) { return t == slow ? 50000u : 1000u + 37u * t; }, &binding);
    const json a = analyze_profile(p, stamps, 100.0);
    // The expected chain: back from the last signal through what delayed each task.
    uint32_t last = 0;
    for (uint32_t t = 0; t < stamps.size(); ++t)
      if (stamps[t].signal_ns > stamps[last].signal_ns) last = t;
    std::vector<int64_t> chain;
    for (int64_t t = last; t >= 0; t = binding[static_cast<size_t>(t)]) chain.push_back(t);
    std::reverse(chain.begin(), chain.end());
    const json& path = a["critical_path"]["path"];
    ASSERT_EQ(path.size(), chain.size()) << path.dump();
    int dependencies = 0;
    for (size_t i = 0; i < chain.size(); ++i) {
      EXPECT_EQ(path[i]["task"], chain[i]) << "hop " << i << " of " << path.dump();
      if (i == 0) continue;
      const bool same_block = stamps[static_cast<size_t>(chain[i])].block ==
                                  stamps[static_cast<size_t>(chain[i - 1])].block &&
                              stamps[static_cast<size_t>(chain[i])].order ==
                                  stamps[static_cast<size_t>(chain[i - 1])].order + 1;
      if (path[i]["via"] == "dependency") ++dependencies;
      if (path[i]["via"] == "queue") {
        ++queue_hops;
        EXPECT_TRUE(same_block) << path[i].dump();
      }
    }
    EXPECT_EQ(a["critical_path"]["stages"], dependencies);
    // The slow task dominates the step, so it is on the path.
    EXPECT_NE(std::find(chain.begin(), chain.end(), slow), chain.end()) << "slow task " << slow;
    // The path's parts add up to its span, which runs from its first start to the last signal.
    const json& cp = a["critical_path"];
    EXPECT_NEAR(cp["gap_us"].get<double>() + cp["wait_us"].get<double>() +
                    cp["exec_us"].get<double>() + cp["signal_us"].get<double>(),
                cp["span_us"].get<double>(), 1e-9);
    EXPECT_DOUBLE_EQ(
        cp["span_us"].get<double>(),
        (stamps[last].signal_ns - stamps[static_cast<size_t>(chain[0])].start_ns) / 1000.0);
  }
  EXPECT_GT(queue_hops, 0) << "the simulated paths should take both kinds of hops";
}

TEST(Profile, PerOpSumsAddUpToTheTimelineAndBlockFractionsToOne) {
  const Program p = toy_program();
  std::vector<int64_t> binding;
  const auto stamps = simulate(
      p, [](uint32_t t) { return 900u + 53u * (t % 7); }, &binding);
  const json a = analyze_profile(p, stamps, 100.0);
  ASSERT_EQ(a["tasks"].size(), p.tasks.size());
  double exec = 0, wait = 0, sig = 0;
  for (const json& t : a["tasks"]) {
    const auto& s = stamps[t["task"].get<size_t>()];
    EXPECT_DOUBLE_EQ(t["start_us"].get<double>(), s.start_ns / 1000.0);
    EXPECT_EQ(t["op"], p.ops[p.tasks[t["task"].get<size_t>()].op_id].name);
    exec += t["done_us"].get<double>() - t["ready_us"].get<double>();
    wait += t["ready_us"].get<double>() - t["start_us"].get<double>();
    sig += t["signal_us"].get<double>() - t["done_us"].get<double>();
  }
  ASSERT_GT(exec, 0.0);
  ASSERT_GT(wait, 0.0);
  double op_exec = 0, op_wait = 0, op_sig = 0, kind_exec = 0;
  size_t op_tasks = 0;
  for (const json& op : a["per_op"]) {
    op_exec += op["exec_us"]["sum"].get<double>();
    op_wait += op["wait_us"]["sum"].get<double>();
    op_sig += op["signal_us"]["sum"].get<double>();
    op_tasks += op["tasks"].get<size_t>();
    EXPECT_LE(op["exec_us"]["max"].get<double>(), op["exec_us"]["sum"].get<double>());
    EXPECT_GE(op["span_us"].get<double>(), op["exec_us"]["max"].get<double>());
  }
  for (const json& k : a["per_kind"]) kind_exec += k["exec_us"]["sum"].get<double>();
  EXPECT_EQ(op_tasks, p.tasks.size());
  EXPECT_EQ(a["per_op"].size(), p.ops.size());
  EXPECT_NEAR(op_exec, exec, 1e-6);
  EXPECT_NEAR(op_wait, wait, 1e-6);
  EXPECT_NEAR(op_sig, sig, 1e-6);
  EXPECT_NEAR(kind_exec, exec, 1e-6);
  EXPECT_NEAR(a["totals"]["exec_us"].get<double>(), exec, 1e-6);

  ASSERT_EQ(a["per_block"].size(), static_cast<size_t>(p.launch.grid_blocks));
  for (const json& b : a["per_block"]) {
    const double sum = b["wait_fraction"].get<double>() + b["exec_fraction"].get<double>() +
                       b["signal_fraction"].get<double>() + b["gap_fraction"].get<double>() +
                       b["idle_fraction"].get<double>();
    EXPECT_NEAR(sum, 1.0, 1e-3) << b.dump();
    EXPECT_NEAR(b["wait_us"].get<double>() + b["exec_us"].get<double>() +
                    b["signal_us"].get<double>() + b["gap_us"].get<double>() +
                    b["idle_us"].get<double>(),
                a["totals"]["span_us"].get<double>(), 1e-9)
        << b.dump();
  }
  const json& t = a["totals"];
  EXPECT_NEAR(t["wait_fraction"].get<double>() + t["exec_fraction"].get<double>() +
                  t["signal_fraction"].get<double>() + t["gap_fraction"].get<double>() +
                  t["idle_fraction"].get<double>(),
              1.0, 1e-3);
  EXPECT_EQ(t["tasks_run"], p.tasks.size());
  EXPECT_EQ(t["tasks_not_run"], 0);

  const std::string text = format_profile(a, 3);
  EXPECT_NE(text.find("critical path: "), std::string::npos) << text;
  EXPECT_NE(text.find("(" + std::to_string(p.ops.size() - 3) + " more ops)"), std::string::npos)
      << text;
}

TEST(Profile, TasksThatDidNotRunAreCountedAndLeftOutOfTheTimeline) {
  auto s = b_late_stamps(410, 500);
  s[3] = vm::TaskStamp{3};  // D never ran (a hang)
  const json a = analyze_profile(four_task_program(2, 1), s, 1.0);
  EXPECT_EQ(a["tasks"].size(), 3u);
  EXPECT_EQ(a["totals"]["tasks_not_run"], 1);
  EXPECT_DOUBLE_EQ(a["totals"]["span_us"].get<double>(), 0.410);
  EXPECT_EQ(path_ops(a), (std::vector<std::string>{"B:start", "C:dependency"}));
}

TEST(Profile, RefusesStampsThatDoNotMatchTheProgram) {
  const Program p = four_task_program(2, 1);
  auto s = b_late_stamps(410, 500);
  s.pop_back();
  try {
    analyze_profile(p, s, 1.0);
    FAIL() << "a missing stamp was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("3 stamps for a program of 4 tasks"), std::string::npos)
        << e.what();
  }
  s = b_late_stamps(410, 500);
  s[2].task = 3;
  EXPECT_THROW(analyze_profile(p, s, 1.0), std::invalid_argument);
}

TEST(Profile, AStreamedGemvsExecSplitsIntoStagingStreamAndEpilogue) {
  // A (QKV) and C (O) carry a streamed GEMV's staged and streamed stamps; B and D do not. C's
  // staged stamp is before its ready one (a tick off): it is clamped to ready, so its staging is 0.
  std::vector<vm::TaskStamp> s = b_late_stamps(410, 500);
  s[0].staged_ns = 20, s[0].streamed_ns = 90;    // A: ready 0, done 100
  s[2].staged_ns = 310, s[2].streamed_ns = 380;  // C: ready 320, done 400
  const json a = analyze_profile(four_task_program(2, 1), s, 1.0);
  auto op = [&](const std::string& name) {
    for (const json& o : a["per_op"])
      if (o["op"] == name) return o["exec_parts"];
    return json();
  };
  EXPECT_EQ(op("A")["tasks"], 1);
  EXPECT_DOUBLE_EQ(op("A")["staging_us"]["sum"].get<double>(), 0.020);
  EXPECT_DOUBLE_EQ(op("A")["stream_us"]["sum"].get<double>(), 0.070);
  EXPECT_DOUBLE_EQ(op("A")["epilogue_us"]["sum"].get<double>(), 0.010);
  EXPECT_EQ(op("B")["tasks"], 0);  // no stamps: not a streamed GEMV
  EXPECT_DOUBLE_EQ(op("B")["stream_us"]["sum"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(op("C")["staging_us"]["sum"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(op("C")["stream_us"]["sum"].get<double>(), 0.060);
  EXPECT_DOUBLE_EQ(op("C")["epilogue_us"]["sum"].get<double>(), 0.020);
  // The parts add up to the exec of the tasks that have them.
  for (const json& o : a["per_op"]) {
    const json& x = o["exec_parts"];
    if (x["tasks"] != o["tasks"]) continue;
    EXPECT_NEAR(x["staging_us"]["sum"].get<double>() + x["stream_us"]["sum"].get<double>() +
                    x["epilogue_us"]["sum"].get<double>(),
                o["exec_us"]["sum"].get<double>(), 1e-9)
        << o["op"];
  }
  // Per kind: the QKV kind holds A's parts only (B has none), the O kind C's.
  for (const json& k : a["per_kind"]) {
    EXPECT_EQ(k["exec_parts"]["tasks"], 1) << k["kind"];
    if (k["kind"] == "qkv") {
      EXPECT_DOUBLE_EQ(k["exec_parts"]["stream_us"]["max"].get<double>(), 0.070);
    }
  }
  // The timeline carries the two stamps where they exist (C's staged clamped to its ready).
  for (const json& t : a["tasks"]) {
    if (t["op"] == "A") {
      EXPECT_DOUBLE_EQ(t["streamed_us"].get<double>(), 0.090);
    } else if (t["op"] == "C") {
      EXPECT_DOUBLE_EQ(t["staged_us"].get<double>(), 0.320);
    } else if (t["op"] == "B") {
      EXPECT_FALSE(t.contains("staged_us"));
    }
  }
  const std::string text = format_profile(a, 4);
  EXPECT_NE(text.find("streamed GEMV exec"), std::string::npos) << text;
  // Without such stamps the table is left out.
  const std::string plain =
      format_profile(analyze_profile(four_task_program(2, 1), b_late_stamps(410, 500), 1.0), 4);
  EXPECT_EQ(plain.find("streamed GEMV exec"), std::string::npos) << plain;
}

}  // namespace
}  // namespace megasched::eval
