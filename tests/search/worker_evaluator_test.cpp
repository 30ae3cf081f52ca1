// The WorkerEvaluator against a tiny fake worker (python3) that answers, crashes or hangs on
// request, and serve_worker (the worker's side) against a fake evaluator.
#include "search/worker_evaluator.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "schedule/config.h"

namespace megasched::search {
namespace {

using schedule::ScheduleConfig;

// kernel.unroll picks the behaviour: 1 crashes (SIGSEGV), 8 hangs, 4 answers garbage, anything
// else answers a verdict of 100 / unroll us. Each start appends the worker's pid to a file.
const char* kFakeWorker = R"PY(import json, os, signal, sys, time
with open(sys.argv[1], "a") as f:
    f.write("%d\n" % os.getpid())
print(json.dumps({"ready": True, "identity": {"model": "toy", "target": "h100", "device": "gpu"}}), flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    cfg = msg.get("config", {})
    unroll = cfg.get("kernel", {}).get("unroll", 2)
    if msg["op"] == "schedule_id":
        print(json.dumps({"schedule_id": "id-%d" % unroll}), flush=True)
        continue
    if unroll == 1:
        sys.stderr.write("CUDA error: an illegal memory access was encountered\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    if unroll == 8:
        time.sleep(60)
    if unroll == 4:
        print("Traceback (most recent call last):", flush=True)
        continue
    print(json.dumps({"verdict": {"valid": True, "correct": True, "status": "ok", "latency_us": 100.0 / unroll,
                                  "latency_kind": "measured-gpu", "schedule_id": "id-%d" % unroll}}), flush=True)
)PY";

class WorkerEvaluatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ms_worker_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "worker.py") << kFakeWorker;
    options_.command =
        "python3 " + (dir_ / "worker.py").string() + " " + (dir_ / "pids.txt").string();
    options_.trial_timeout_s = 1.0;
    options_.start_timeout_s = 20.0;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  int starts() {
    std::ifstream in(dir_ / "pids.txt");
    int n = 0;
    std::string line;
    while (std::getline(in, line)) ++n;
    return n;
  }
  static ScheduleConfig unroll(int u) {
    ScheduleConfig c;
    c.kernel.unroll = u;
    return c;
  }
  std::filesystem::path dir_;
  WorkerOptions options_;
};

TEST_F(WorkerEvaluatorTest, AnswersVerdictsOverJsonLinesFromOneWorker) {
  WorkerEvaluator ev(options_);
  std::string error;
  ASSERT_TRUE(ev.start(&error)) << error;
  EXPECT_EQ(ev.identity()["device"], "gpu");
  eval::Verdict a = ev.evaluate(unroll(2));
  eval::Verdict b = ev.evaluate(unroll(2));
  EXPECT_EQ(a.status, "ok");
  EXPECT_DOUBLE_EQ(*a.latency_us, 50.0);
  EXPECT_EQ(a.latency_kind, "measured-gpu");
  EXPECT_EQ(b.schedule_id, "id-2");
  EXPECT_EQ(starts(), 1);
  EXPECT_EQ(ev.restarts(), 0);
}

TEST_F(WorkerEvaluatorTest, CrashBecomesACrashVerdictAndTheNextTrialGetsAFreshWorker) {
  WorkerEvaluator ev(options_);
  ASSERT_TRUE(ev.start(nullptr));
  EXPECT_EQ(ev.schedule_id(unroll(1)), "id-1");
  eval::Verdict crashed = ev.evaluate(unroll(1));
  EXPECT_EQ(crashed.status, "crash");
  EXPECT_FALSE(crashed.correct);
  EXPECT_FALSE(crashed.latency_us.has_value());
  EXPECT_EQ(crashed.schedule_id, "id-1");
  ASSERT_FALSE(crashed.notes.empty());
  EXPECT_NE(crashed.notes[0].find("signal 11"), std::string::npos) << crashed.notes[0];
  EXPECT_NE(crashed.notes[0].find("illegal memory access"), std::string::npos) << crashed.notes[0];
  eval::Verdict after = ev.evaluate(unroll(2));
  EXPECT_EQ(after.status, "ok");
  EXPECT_EQ(starts(), 2);
  EXPECT_EQ(ev.restarts(), 1);
}

TEST_F(WorkerEvaluatorTest, HangBecomesATimeoutVerdictAtTheDeadline) {
  WorkerEvaluator ev(options_);
  ASSERT_TRUE(ev.start(nullptr));
  const auto t0 = std::chrono::steady_clock::now();
  eval::Verdict hung = ev.evaluate(unroll(8));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(hung.status, "timeout");
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 10.0);
  EXPECT_EQ(ev.evaluate(unroll(2)).status, "ok");
  EXPECT_EQ(ev.restarts(), 1);
}

TEST_F(WorkerEvaluatorTest, CancelAbandonsTheTrialInFlightAtOnceAndKillsTheWorker) {
  std::atomic<bool> cancel{false};
  options_.trial_timeout_s = 60.0;
  options_.cancel = &cancel;
  WorkerEvaluator ev(options_);
  ASSERT_TRUE(ev.start(nullptr));
  std::thread canceller([&cancel] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  eval::Verdict abandoned = ev.evaluate(unroll(8));  // hangs for 60 s unless cancelled
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  canceller.join();
  EXPECT_LT(waited, 5.0);
  ASSERT_FALSE(abandoned.notes.empty());
  EXPECT_NE(abandoned.notes[0].find("cancelled"), std::string::npos) << abandoned.notes[0];
  // The next call (cancel cleared) gets a fresh worker.
  cancel = false;
  EXPECT_EQ(ev.evaluate(unroll(2)).status, "ok");
  EXPECT_EQ(starts(), 2);
}

TEST_F(WorkerEvaluatorTest, GarbageAnswerIsAHarnessFailureNotTheSchedulesAndRestartsTheWorker) {
  WorkerEvaluator ev(options_);
  ASSERT_TRUE(ev.start(nullptr));
  eval::Verdict bad = ev.evaluate(unroll(4));
  EXPECT_EQ(bad.status, "crash");
  EXPECT_NE(bad.notes[0].find("Traceback"), std::string::npos);
  EXPECT_NE(ev.harness_failure().find("not a JSON object"), std::string::npos)
      << ev.harness_failure();
  EXPECT_EQ(ev.evaluate(unroll(2)).status, "ok");
  EXPECT_TRUE(ev.harness_failure().empty());
  EXPECT_EQ(starts(), 2);
}

TEST_F(WorkerEvaluatorTest, ACrashOrHangDuringTheTrialIsTheSchedulesNotTheHarnesss) {
  WorkerEvaluator ev(options_);
  ASSERT_TRUE(ev.start(nullptr));
  EXPECT_EQ(ev.evaluate(unroll(1)).status, "crash");
  EXPECT_TRUE(ev.harness_failure().empty()) << ev.harness_failure();
  EXPECT_EQ(ev.evaluate(unroll(8)).status, "timeout");
  EXPECT_TRUE(ev.harness_failure().empty()) << ev.harness_failure();
}

TEST_F(WorkerEvaluatorTest, WorkerThatCannotStartIsAnErrorWithItsStderr) {
  options_.command = "echo 'no CUDA device' >&2; exit 3";
  WorkerEvaluator ev(options_);
  std::string error;
  EXPECT_FALSE(ev.start(&error));
  EXPECT_NE(error.find("exit 3"), std::string::npos) << error;
  EXPECT_NE(error.find("no CUDA device"), std::string::npos) << error;
  // Its verdict is no verdict on the schedule: the loop must not log it as one.
  EXPECT_EQ(ev.evaluate(unroll(2)).status, "crash");
  EXPECT_NE(ev.harness_failure().find("no CUDA device"), std::string::npos) << ev.harness_failure();
}

// The worker's side, in process.
class CountingEvaluator : public eval::Evaluator {
 public:
  eval::Verdict evaluate(const ScheduleConfig& c) override {
    eval::Verdict v;
    v.status = "ok";
    v.valid = v.correct = true;
    v.latency_us = 10.0 * c.kernel.unroll;
    v.schedule_id = schedule_id(c);
    ++calls;
    return v;
  }
  nlohmann::json identity() const override { return {{"model", "toy"}, {"device", "cpu"}}; }
  std::string schedule_id(const ScheduleConfig& c) const override {
    return "sid" + std::to_string(c.kernel.unroll);
  }
  int calls = 0;
};

TEST(ServeWorker, AnswersEachRequestLineWithOneReplyLine) {
  CountingEvaluator ev;
  std::istringstream in(
      "{\"op\":\"evaluate\",\"config\":{\"kernel\":{\"unroll\":4}}}\n"
      "{\"op\":\"schedule_id\",\"config\":{\"kernel\":{\"unroll\":8}}}\n"
      "{\"kernel\":{\"unroll\":1}}\n"
      "{\"op\":\"evaluate\",\"config\":{\"kernel\":{\"unrol\":4}}}\n"
      "not json\n"
      "{\"op\":\"identity\"}\n");
  std::ostringstream out;
  EXPECT_EQ(serve_worker(ev, in, out), 6);
  std::istringstream replies(out.str());
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(replies, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[0]["ready"], true);
  EXPECT_EQ(lines[0]["identity"]["model"], "toy");
  EXPECT_DOUBLE_EQ(lines[1]["verdict"]["latency_us"].get<double>(), 40.0);
  EXPECT_EQ(lines[2]["schedule_id"], "sid8");
  EXPECT_DOUBLE_EQ(lines[3]["latency_us"].get<double>(), 10.0);  // a bare config: a bare verdict
  EXPECT_NE(lines[4]["error"].get<std::string>().find("unrol"), std::string::npos);
  EXPECT_TRUE(lines[5].contains("error"));
  EXPECT_EQ(lines[6]["identity"]["device"], "cpu");
  EXPECT_EQ(ev.calls, 2);
}

TEST(ServeWorker, ARequestItCannotReadGetsAnErrorAndTheWorkerGoesOn) {
  CountingEvaluator ev;
  const std::string deep = std::string(60000, '[') + std::string(60000, ']');
  std::istringstream in(
      "{\"op\": 5}\n"  // once an uncaught type error: the worker aborted
      "\n"             // once no answer at all
      "{\"op\": \"evaluate\", \"config\": 7}\n"
      "{\"op\": null, \"config\": {}}\n"
      "{\"kernel\": {\"unroll\": 4}, \"kernel\": {\"unroll\": 8}}\n"
      "{\"kernel\": {\"unroll\": " +
      deep +
      "}}\n"
      "[1, 2]\n"
      "{\"op\": \"evaluate\", \"config\": {\"kernel\": {\"unroll\": 2}}}\n");
  std::ostringstream out;
  EXPECT_EQ(serve_worker(ev, in, out), 8);
  std::istringstream replies(out.str());
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(replies, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 9u);
  const char* says[] = {
      "\"op\" must be a string", "empty request line", "config must be a JSON object",
      "\"op\" must be a string", "appears twice",      "has value [[[[",
      "not a JSON object"};
  for (int i = 0; i < 7; ++i)
    EXPECT_NE(lines[1 + i].value("error", "").find(says[i]), std::string::npos) << lines[1 + i];
  EXPECT_LT(lines[6].dump().size(), 400u);
  EXPECT_DOUBLE_EQ(lines[8]["verdict"]["latency_us"].get<double>(), 20.0);
  EXPECT_EQ(ev.calls, 1);
}

}  // namespace
}  // namespace megasched::search
