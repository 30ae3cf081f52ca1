// `megasched mcp` driven through a pipe as an agent host drives it: the lifecycle, the tools on
// the `toy` model (the same JSON as the CLI), progress, cancellation, crashing trials, resources,
// and the JSON-RPC errors after which the server stays up. The server runs in the test process
// (tests/harness/mcp_client.h) with the real megasched binary, or a fake worker, for its trials;
// the last test drives the binary itself.
#include "harness/mcp_server.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "eval/device.h"
#include "flywheel/corpus.h"
#include "flywheel/results.h"
#include "harness/json_rpc.h"
#include "schedule/lower.h"
#include "schedule/model.h"
#include "schedule/target.h"
#include "search/child_process.h"
#include "tests/harness/mcp_client.h"
#include "tests/harness/run_cli.h"
#include "vm/nvrtc_build.h"

namespace megasched::harness {
namespace {

using nlohmann::json;
using search::ChildProcess;
using test::McpPipeClient;

// A `megasched worker` stand-in (the server runs `<executable> worker ...`): kernel.unroll picks
// the behaviour: 1 crashes (SIGSEGV), 8 hangs, anything else answers a schema-valid verdict of
// 100 / unroll us. With HANG_AFTER_FIRST present beside it, every evaluate after the first hangs.
// Each start appends its pid to pids.txt; a hang first touches hanging.txt.
const char* kFakeWorker = R"PY(#!/usr/bin/env python3
import hashlib, json, os, signal, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "pids.txt"), "a") as f:
    f.write("%d\n" % os.getpid())
print(json.dumps({"ready": True, "identity": {"model": "toy", "target": "h100", "device": "cpu"}}), flush=True)
evaluations = 0
def sid(cfg):
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]
def hang():
    open(os.path.join(here, "hanging.txt"), "w").close()
    time.sleep(600)
for line in sys.stdin:
    msg = json.loads(line)
    cfg = msg.get("config", {})
    unroll = cfg.get("kernel", {}).get("unroll", 2)
    if msg.get("op") == "schedule_id":
        print(json.dumps({"schedule_id": sid(cfg)}), flush=True)
        continue
    evaluations += 1
    if unroll == 8 or (evaluations > 1 and os.path.exists(os.path.join(here, "HANG_AFTER_FIRST"))):
        hang()
    if unroll == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    v = {"valid": True, "rejected_reason": "", "diagnostics": [], "correct": True,
         "max_abs_err": 0.0, "rel_err": 0.0, "argmax_match": True, "positions_checked": [0],
         "latency_us": 100.0 / unroll, "latency_kind": "predicted", "latency_p90_us": 0.0,
         "latency_spread_us": 0.0, "samples_us": [], "timed_position": 0, "floor_us": 1.0,
         "floor_datasheet_us": 1.0, "pct_of_floor": unroll, "pct_of_datasheet": unroll,
         "speedup_vs_baseline": None, "baseline_kind": "", "baseline_us": None,
         "schedule_id": sid(cfg), "tasks": 13, "weight_bytes": 1,
         "bytes_min": 1, "target": "h100", "model": "toy", "device": "cpu", "status": "ok",
         "notes": [], "kernel": {}}
    print(json.dumps({"verdict": v}), flush=True)
)PY";

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Whether a process is gone (or a zombie waiting for init to reap it).
bool gone(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

bool eventually(const std::function<bool()>& condition, double seconds = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

class McpServer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ms_mcp_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    options_.executable = MS_BINARY_PATH;
    options_.results_path = (dir_ / "results.tsv").string();
    options_.corpus_path = (dir_ / "corpus.jsonl").string();
    options_.report_path = (dir_ / "report.html").string();
    options_.profile_path = (dir_ / "profile.json").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Points the server's trials at the fake worker.
  void use_fake_worker(bool hang_after_first = false) {
    const auto script = dir_ / "fake_megasched.py";
    std::ofstream(script) << kFakeWorker;
    ::chmod(script.c_str(), 0755);
    if (hang_after_first) std::ofstream(dir_ / "HANG_AFTER_FIRST") << "";
    options_.executable = script.string();
  }
  std::vector<int> fake_pids() {
    std::vector<int> pids;
    std::ifstream in(dir_ / "pids.txt");
    for (int pid; in >> pid;) pids.push_back(pid);
    return pids;
  }
  static int error_code(const json& response) {
    return response.contains("error") ? response["error"].value("code", 0) : 0;
  }
  static json progress_of(const std::vector<json>& notifications, const json& token) {
    json values = json::array();
    for (const json& n : notifications)
      if (n["method"] == "notifications/progress" && n["params"]["progressToken"] == token)
        values.push_back(n["params"]["progress"]);
    return values;
  }

  std::filesystem::path dir_;
  McpOptions options_;
};

TEST_F(McpServer, InitializeAnswersTheClientsVersionWhenSupportedElseTheLatest) {
  for (const std::string asked : {"2025-06-18", "2025-03-26", "2024-11-05", "2099-01-01"}) {
    McpPipeClient client(options_);
    const json r = client.initialize(asked);
    ASSERT_TRUE(r.contains("result")) << r.dump();
    EXPECT_EQ(r["result"]["protocolVersion"], asked == "2099-01-01" ? "2025-06-18" : asked);
    EXPECT_TRUE(r["result"]["capabilities"].contains("tools"));
    EXPECT_TRUE(r["result"]["capabilities"].contains("resources"));
    EXPECT_EQ(r["result"]["serverInfo"]["name"], "megasched");
    EXPECT_EQ(client.close_input(), 0);
  }
}

TEST_F(McpServer, OnlyPingComesBeforeInitializeAndInitializeComesOnce) {
  McpPipeClient client(options_);
  EXPECT_TRUE(client.request("ping").contains("result"));
  EXPECT_EQ(error_code(client.request("tools/list")), kInvalidRequest);
  EXPECT_EQ(error_code(client.request("initialize", {{"capabilities", json::object()}})),
            kInvalidParams);
  EXPECT_TRUE(client.initialize().contains("result"));
  EXPECT_EQ(error_code(client.initialize()), kInvalidRequest);
  EXPECT_TRUE(client.request("tools/list").contains("result"));
}

TEST_F(McpServer, ToolsListGivesEveryToolWithItsSchemas) {
  McpPipeClient client(options_);
  client.initialize();
  const json tools = client.request("tools/list")["result"]["tools"];
  std::vector<std::string> names;
  for (const json& t : tools) {
    names.push_back(t["name"]);
    EXPECT_EQ(t["inputSchema"]["type"], "object") << t["name"];
    EXPECT_FALSE(t.value("description", "").empty()) << t["name"];
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"propose", "evaluate", "validate", "loop", "report",
                                      "profile", "promote", "registry_list", "registry_show"}));
  EXPECT_EQ(tools[1]["outputSchema"]["title"], "Verdict");
  EXPECT_EQ(tools[3]["inputSchema"]["required"], json::array({"budget"}));
}

TEST_F(McpServer, ProposeAndEvaluateOnToyGiveTheSameJsonAsTheCli) {
  McpPipeClient client(options_);
  client.initialize();
  const json proposed = client.call("propose", {{"model", "toy"}, {"gpu", "h100"}});
  ASSERT_FALSE(proposed.value("isError", true)) << proposed.dump();
  const auto cli_propose = test::run_megasched("propose --model toy --gpu h100", false);
  ASSERT_EQ(cli_propose.exit_code, 0);
  EXPECT_EQ(proposed["structuredContent"], json::parse(cli_propose.out));
  EXPECT_EQ(json::parse(proposed["content"][0]["text"].get<std::string>()),
            proposed["structuredContent"]);
  EXPECT_EQ(proposed["_meta"]["dev.megasched/exit_code"], 0);

  json config = proposed["structuredContent"]["incumbent"];
  config["kernel"]["unroll"] = 4;
  const json evaluated = client.call("evaluate", {{"model", "toy"}, {"config", config}});
  ASSERT_FALSE(evaluated.value("isError", true)) << evaluated.dump();
  const json verdict = evaluated["structuredContent"];
  EXPECT_TRUE(verdict["valid"]);
  EXPECT_TRUE(verdict["correct"]);
  EXPECT_EQ(verdict["status"], "ok");
  EXPECT_EQ(verdict["latency_kind"], "predicted");
  const std::string cfg = (dir_ / "cfg.json").string();
  std::ofstream(cfg) << config.dump();
  const auto cli_evaluate =
      test::run_megasched("evaluate --model toy --gpu h100 --device cpu --config " + cfg, false);
  ASSERT_EQ(cli_evaluate.exit_code, 0);
  // Equal but for wall times (breakdown_ms, where the verdict has it) and the reference's origin
  // (reference: its load time, and whether the disk cache held it, differ from run to run).
  json cli_verdict = json::parse(cli_evaluate.out), mcp_verdict = verdict;
  for (json* v : {&cli_verdict, &mcp_verdict}) {
    v->erase("breakdown_ms");
    v->erase("reference");
  }
  EXPECT_EQ(mcp_verdict, cli_verdict);
  EXPECT_NE(evaluated["content"][1]["text"].get<std::string>().find("valid and correct"),
            std::string::npos);
  // A second call reuses the worker: a named config, and the same verdict for the same config.
  json again = client.call("evaluate", {{"config", config}})["structuredContent"];
  again.erase("breakdown_ms");
  again.erase("reference");
  EXPECT_EQ(again, mcp_verdict);
  EXPECT_TRUE(client.call("evaluate", {{"config", "default"}})["structuredContent"]["correct"]);
}

TEST_F(McpServer, ValidateAndReportReturnTheCliDocuments) {
  McpPipeClient client(options_);
  client.initialize();
  const json safe = client.call("validate", {{"config", {{"kernel", {{"unroll", 8}}}}}});
  EXPECT_TRUE(safe["structuredContent"]["ok"]) << safe.dump();
  EXPECT_EQ(safe["structuredContent"]["model"], "toy");
  const json random = client.call("validate", {{"random_configs", 3}});
  EXPECT_EQ(random["structuredContent"]["configs"], 3);
  const json both = client.call("validate", {{"random_configs", 3}, {"config", "default"}});
  EXPECT_EQ(error_code(both), kInvalidParams) << both.dump();
  // kernel: the CLI's --kernel, the build's resources in the document and the summary.
  if (vm::nvrtc_available()) {
    const json built = client.call("validate", {{"config", "default"}, {"kernel", true}});
    EXPECT_TRUE(built["structuredContent"]["kernel"]["ok"]) << built.dump();
    EXPECT_GT(built["structuredContent"]["kernel"]["registers"].get<int>(), 0);
    EXPECT_NE(built["content"][1]["text"].get<std::string>().find("; kernel: "), std::string::npos)
        << built.dump();
  }
  const json no_kernel = client.call("validate", {{"random_configs", 3}, {"kernel", true}});
  EXPECT_EQ(no_kernel["_meta"]["dev.megasched/exit_code"], 2) << no_kernel.dump();
  // No results yet: the report is a tool error, as `megasched report` exits 3.
  const json empty = client.call("report", json::object());
  EXPECT_TRUE(empty["isError"]) << empty.dump();
  EXPECT_EQ(empty["_meta"]["dev.megasched/exit_code"], 3);
}

// promote on the CPU (a child megasched promote), then registry_list and registry_show on the
// registry it appended to ($MEGASCHED_REGISTRY, read by the server and its child alike).
TEST_F(McpServer, PromoteOnTheCpuThenRegistryListAndShow) {
  const std::string registry = (dir_ / "verified.jsonl").string();
  ::setenv("MEGASCHED_REGISTRY", registry.c_str(), 1);
  McpPipeClient client(options_);
  client.initialize();
  // The position-0 record's config: a file path, as an agent would name it.
  const std::string candidate =
      std::string(MS_SOURCE_DIR) + "/bench/configs/stream_r2u4_pairs_am.json";
  const json promoted = client.call(
      "promote", {{"model", "toy"}, {"device", "cpu"}, {"config", candidate}, {"tokens", 8}});
  const json& doc = promoted["structuredContent"];
  EXPECT_TRUE(doc.value("promoted", false)) << promoted.dump();
  const std::string id = doc["entry"].value("id", "");
  EXPECT_EQ(doc["entry"]["latency_kind"], "predicted");
  EXPECT_TRUE(std::filesystem::exists(dir_ / "runs" / doc.value("run_id", "x") / "promotion.json"));
  const json again = client.call(
      "promote", {{"model", "toy"}, {"device", "cpu"}, {"config", candidate}, {"tokens", 8}});
  EXPECT_EQ(again["_meta"]["dev.megasched/exit_code"], 1) << again.dump();
  EXPECT_EQ(again["structuredContent"]["failed_gate"], "benchmark");
  const json list = client.call("registry_list", json::object());
  ASSERT_EQ(list["structuredContent"]["entries"].size(), 1u) << list.dump();
  EXPECT_EQ(list["structuredContent"]["entries"][0]["id"], id);
  const json show = client.call("registry_show", {{"id", id}});
  EXPECT_EQ(show["structuredContent"]["config"], doc["entry"]["config"]) << show.dump();
  const json unknown = client.call("registry_show", {{"id", id + "x"}});
  EXPECT_TRUE(unknown["isError"]) << unknown.dump();
  EXPECT_EQ(unknown["_meta"]["dev.megasched/exit_code"], 2);
  ::unsetenv("MEGASCHED_REGISTRY");
}

// The validate tool checks a program against its model as `megasched validate --program` does:
// small's program is refused for toy, and judged against small when no model is given.
TEST_F(McpServer, ValidateChecksAProgramAgainstItsModel) {
  std::string error;
  const auto program =
      schedule::lower(*schedule::find_preset("small"), *schedule::find_target("h100"),
                      schedule::ScheduleConfig{}, &error);
  ASSERT_TRUE(program) << error;
  McpPipeClient client(options_);
  client.initialize();
  const json p = schedule::to_json(*program);
  const json wrong = client.call("validate", {{"program", p}, {"model", "toy"}});
  EXPECT_TRUE(wrong["isError"]) << wrong.dump();
  EXPECT_EQ(wrong["_meta"]["dev.megasched/exit_code"], 2);
  EXPECT_NE(wrong["content"][0]["text"].get<std::string>().find("does not fit model toy"),
            std::string::npos)
      << wrong.dump();
  const json own = client.call("validate", {{"program", p}});
  EXPECT_TRUE(own["structuredContent"]["ok"]) << own.dump();
  EXPECT_EQ(own["structuredContent"]["model"], "small");
}

TEST_F(McpServer, ArgumentsThatFailTheSchemaAreInvalidParamsNamingThePath) {
  McpPipeClient client(options_);
  client.initialize();
  struct Case {
    std::string tool;
    json arguments;
    std::string path;
  };
  const std::vector<Case> cases = {
      {"evaluate", {{"config", {{"kernel", {{"unroll", 3}}}}}}, "/config/kernel/unroll"},
      {"evaluate", {{"config", {{"kernal", json::object()}}}}, "/config/kernal"},
      {"evaluate", {{"device", "tpu"}}, "/device"},
      {"evaluate", {{"positions", json::array()}}, "/positions"},
      {"loop", json::object(), "/budget"},
      {"loop", {{"budget", 0}}, "/budget"},
      {"loop", {{"budget", 2}, {"strategy", "proposer"}}, "/strategy"},
      {"loop", {{"budget", 2}, {"budgett", 3}}, "/budgett"},
      {"propose", {{"model", 7}}, "/model"},
  };
  for (const Case& c : cases) {
    const json r = client.call(c.tool, c.arguments);
    ASSERT_EQ(error_code(r), kInvalidParams) << c.arguments.dump() << ": " << r.dump();
    EXPECT_EQ(r["error"]["data"]["errors"][0]["path"], c.path) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find(c.path), std::string::npos);
  }
  EXPECT_EQ(error_code(client.request("tools/call", {{"name", "propose"}, {"arguments", 3}})),
            kInvalidParams);
  EXPECT_TRUE(client.request("ping").contains("result"));
}

TEST_F(McpServer, UnknownMethodsAndToolsAreErrorsAndTheServerStaysUp) {
  McpPipeClient client(options_);
  client.initialize();
  const json method = client.request("tools/lisst");
  EXPECT_EQ(error_code(method), kMethodNotFound);
  EXPECT_NE(method["error"]["message"].get<std::string>().find("did you mean tools/list"),
            std::string::npos);
  EXPECT_EQ(error_code(client.request("prompts/list")), kMethodNotFound);
  const json tool = client.call("evaluat", json::object());
  EXPECT_EQ(error_code(tool), kInvalidParams);
  EXPECT_NE(tool["error"]["message"].get<std::string>().find("Unknown tool: evaluat"),
            std::string::npos);
  client.send({{"jsonrpc", "2.0"}, {"method", "notifications/whatever"}});  // no answer
  EXPECT_TRUE(client.request("ping").contains("result"));
  EXPECT_TRUE(client.others.empty());
}

TEST_F(McpServer, MalformedInputIsAnsweredAndTheServerStaysUp) {
  options_.max_message_bytes = 4096;
  McpPipeClient client(options_);
  client.initialize();
  const std::vector<std::pair<std::string, int>> cases = {
      {"{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": \"ping\"", kParseError},
      {"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":{\"x\":\"\xc3\x28\"}}",
       kParseError},
      {R"([{"jsonrpc":"2.0","id":9,"method":"ping"}])", kInvalidRequest},
      {R"({"jsonrpc":"1.0","id":9,"method":"ping"})", kInvalidRequest},
      {R"({"jsonrpc":"2.0","id":null,"method":"ping"})", kInvalidRequest},
      {R"({"jsonrpc":"2.0","id":9,"method":"ping","params":[]})", kInvalidParams},
      {"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"pad\":\"" + std::string(10000, 'x') +
           "\"}",
       kInvalidRequest},
  };
  for (const auto& [line, code] : cases) {
    client.send_line(line);
    const json r = client.next(30);
    ASSERT_FALSE(r.is_null()) << line.substr(0, 80);
    EXPECT_EQ(error_code(r), code) << line.substr(0, 80) << " -> " << r.dump();
  }
  client.send_line("");  // blank lines are skipped
  EXPECT_TRUE(client.request("ping").contains("result"));
}

TEST_F(McpServer, ToolFailuresAreResultsWithIsError) {
  McpPipeClient client(options_);
  client.initialize();
  const json model = client.call("evaluate", {{"model", "no-such-model"}});
  EXPECT_TRUE(model["isError"]) << model.dump();
  EXPECT_EQ(model["_meta"]["dev.megasched/exit_code"], 2);
  EXPECT_NE(model["content"][0]["text"].get<std::string>().find("no-such-model"),
            std::string::npos);
  EXPECT_FALSE(model.contains("structuredContent"));
  const json stdin_config = client.call("evaluate", {{"config", "-"}});
  EXPECT_TRUE(stdin_config["isError"]);
  for (const char* tool : {"evaluate", "loop"}) {
    json args = {{"model", "toy"}, {"device", "cpu"}, {"baselines", "cublas,cudnn"}};
    if (std::string(tool) == "loop") args["budget"] = 1;
    const json baselines = client.call(tool, args);
    EXPECT_TRUE(baselines["isError"]) << tool << " " << baselines.dump();
    EXPECT_EQ(baselines["_meta"]["dev.megasched/exit_code"], 2) << tool;
    EXPECT_NE(baselines["content"][0]["text"].get<std::string>().find(
                  "baselines 'cublas,cudnn': unknown baseline kind 'cudnn'"),
              std::string::npos)
        << baselines.dump();
  }
  const json missing = client.call("propose", {{"config", (dir_ / "nope.json").string()}});
  EXPECT_TRUE(missing["isError"]);
  std::string why;
  if (!eval::gpu_available(&why)) {
    const json profile = client.call("profile", {{"model", "toy"}});
    EXPECT_TRUE(profile["isError"]) << profile.dump();
    EXPECT_EQ(profile["_meta"]["dev.megasched/exit_code"], 3);
    EXPECT_NE(profile["content"][0]["text"].get<std::string>().find("CUDA device"),
              std::string::npos)
        << profile.dump();
  }
  EXPECT_TRUE(client.request("ping").contains("result"));
}

TEST_F(McpServer, ACrashingTrialIsAVerdictAndTheServerStaysUp) {
  use_fake_worker();
  McpPipeClient client(options_);
  client.initialize();
  const json crashed = client.call("evaluate", {{"config", {{"kernel", {{"unroll", 1}}}}}});
  ASSERT_FALSE(crashed.value("isError", true)) << crashed.dump();
  EXPECT_EQ(crashed["structuredContent"]["status"], "crash");
  EXPECT_NE(crashed["structuredContent"]["notes"][0].get<std::string>().find("signal 11"),
            std::string::npos);
  EXPECT_EQ(crashed["_meta"]["dev.megasched/exit_code"], 1);
  const json after = client.call("evaluate", {{"config", {{"kernel", {{"unroll", 4}}}}}});
  EXPECT_EQ(after["structuredContent"]["status"], "ok") << after.dump();
  EXPECT_EQ(fake_pids().size(), 2u);  // a fresh worker after the crash
}

TEST_F(McpServer, CancelStopsTheEvaluateInFlightWithNoResponse) {
  use_fake_worker();
  McpPipeClient client(options_);
  client.initialize();
  client.send({{"jsonrpc", "2.0"},
               {"id", "slow"},
               {"method", "tools/call"},
               {"params",
                {{"name", "evaluate"},
                 {"arguments", {{"config", {{"kernel", {{"unroll", 8}}}}}}},
                 {"_meta", {{"progressToken", 42}}}}}});
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir_ / "hanging.txt"); }));
  // The server still reads and answers while the trial runs.
  EXPECT_TRUE(client.request("ping").contains("result"));
  client.send({{"jsonrpc", "2.0"},
               {"method", "notifications/cancelled"},
               {"params", {{"requestId", "slow"}, {"reason", "the test is done waiting"}}}});
  ASSERT_EQ(fake_pids().size(), 1u);
  EXPECT_TRUE(eventually([&] { return gone(fake_pids()[0]); }));
  EXPECT_EQ(progress_of(client.notifications, 42), json::array({0.0, 1.0}));
  EXPECT_TRUE(client.request("ping").contains("result"));
  const json next = client.call("evaluate", {{"config", {{"kernel", {{"unroll", 4}}}}}});
  EXPECT_EQ(next["structuredContent"]["status"], "ok") << next.dump();
  // Nothing ever answered the cancelled request.
  for (const json& m : client.others) EXPECT_NE(m["id"], "slow") << m.dump();
  EXPECT_TRUE(client.next(0.3).is_null());
}

TEST_F(McpServer, LoopSendsOneProgressNotificationPerTrialAndLogsEveryTrial) {
  McpPipeClient client(options_);
  client.initialize();
  const json r =
      client.call("loop", {{"model", "toy"}, {"device", "cpu"}, {"budget", 3}}, "loop-1");
  ASSERT_FALSE(r.value("isError", true)) << r.dump();
  EXPECT_EQ(r["structuredContent"]["trials"], 3);
  EXPECT_EQ(r["structuredContent"]["stop_reason"], "budget");
  EXPECT_EQ(r["structuredContent"]["results"], options_.results_path);
  EXPECT_EQ(progress_of(client.notifications, "loop-1"), json::array({0.0, 1.0, 2.0, 3.0}));
  const json last = client.notifications.back()["params"];
  EXPECT_EQ(last["total"], 3.0);
  EXPECT_EQ(last["message"].get<std::string>().rfind("trial   2/3", 0), 0u) << last.dump();
  EXPECT_EQ(flywheel::read_results(options_.results_path).rows.size(), 3u);
  EXPECT_EQ(flywheel::read_corpus(options_.corpus_path).records.size(), 3u);
  // Its run directory, as the CLI's loop writes one (once the tool wrote none).
  const std::string run_id = r["structuredContent"]["run_id"].get<std::string>();
  const std::filesystem::path run = dir_ / "runs" / run_id;
  for (const char* file :
       {"command.txt", "summary.json", "config.json", "verdict.json", "run.json"})
    EXPECT_TRUE(std::filesystem::exists(run / file)) << run / file;
  // The report tool and the workspace resources see the run.
  const json report = client.call("report", json::object());
  ASSERT_FALSE(report.value("isError", true)) << report.dump();
  EXPECT_EQ(report["structuredContent"]["groups"][0]["trials"], 3);
  EXPECT_TRUE(std::filesystem::exists(options_.report_path));
  const json read =
      client.request("resources/read", {{"uri", "megasched://workspace/results.tsv"}});
  EXPECT_EQ(read["result"]["contents"][0]["text"], slurp(options_.results_path));
  const json html =
      client.request("resources/read", {{"uri", "megasched://workspace/report.html"}});
  EXPECT_EQ(html["result"]["contents"][0]["mimeType"], "text/html");
}

TEST_F(McpServer, LoopSearchesAPlanWithPlanBuckets) {
  McpPipeClient client(options_);
  client.initialize();
  const json r = client.call(
      "loop", {{"model", "toy"}, {"device", "cpu"}, {"budget", 4}, {"plan_buckets", {0, 64}}});
  ASSERT_FALSE(r.value("isError", true)) << r.dump();
  const json doc = r["structuredContent"];
  ASSERT_EQ(doc["buckets"].size(), 2u);
  EXPECT_EQ(doc["buckets"][0]["timed_position"], 31);
  EXPECT_EQ(doc["buckets"][1]["timed_position"], 95);
  EXPECT_FALSE(doc["plan"].is_null());
  EXPECT_TRUE(std::filesystem::exists(doc["plan_file"].get<std::string>())) << doc.dump();
  EXPECT_NE(r["content"].back()["text"].get<std::string>().find("plan search of 2 buckets"),
            std::string::npos)
      << r.dump();
  const json bad = client.call(
      "loop", {{"model", "toy"}, {"device", "cpu"}, {"budget", 2}, {"plan_buckets", {0, 64, 32}}});
  EXPECT_TRUE(bad.value("isError", false)) << bad.dump();
  EXPECT_EQ(bad["_meta"]["dev.megasched/exit_code"], 2) << bad.dump();
  EXPECT_NE(bad["content"][0]["text"].get<std::string>().find("strictly ascending"),
            std::string::npos)
      << bad.dump();
}

TEST_F(McpServer, EvaluateAndLoopTakeAnObjectiveInTheCliSyntax) {
  McpPipeClient client(options_);
  client.initialize();
  const json evaluated = client.call("evaluate", {{"model", "toy"}, {"objective", "60:2,0"}});
  ASSERT_FALSE(evaluated.value("isError", true)) << evaluated.dump();
  json verdict = evaluated["structuredContent"];
  const auto cli = test::run_megasched(
      "evaluate --model toy --gpu h100 --device cpu --no-run-dir --objective 0:1,60:2", false);
  ASSERT_EQ(cli.exit_code, 0) << cli.out;
  json cli_verdict = json::parse(cli.out);
  for (json* v : {&cli_verdict, &verdict}) {
    v->erase("breakdown_ms");
    v->erase("reference");
  }
  EXPECT_EQ(verdict, cli_verdict);
  ASSERT_EQ(verdict["objective"].size(), 2u);
  // Bad objectives are tool errors (exit 2) naming the argument.
  for (const auto& [arguments, says] : std::vector<std::pair<json, std::string>>{
           {{{"objective", "0:0"}}, "objective: the weight of position 0 is 0"},
           {{{"objective", "0,x"}}, "position 'x' is not an integer"},
           {{{"objective", "0,4096"}}, "position 4096 is beyond model toy's max_seq 128"},
           {{{"objective", "0,60"}, {"timed_position", 60}}, "use one or the other"}}) {
    const json r = client.call("evaluate", arguments);
    EXPECT_TRUE(r.value("isError", false)) << r.dump();
    EXPECT_EQ(r["_meta"]["dev.megasched/exit_code"], 2) << r.dump();
    EXPECT_NE(r["content"][0]["text"].get<std::string>().find(says), std::string::npos) << r.dump();
  }
  const json looped = client.call(
      "loop", {{"model", "toy"}, {"device", "cpu"}, {"budget", 2}, {"objective", "0:1,60:2"}});
  ASSERT_FALSE(looped.value("isError", true)) << looped.dump();
  const auto records = flywheel::read_corpus(options_.corpus_path).records;
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].schedule_id, cli_verdict["schedule_id"].get<std::string>());
  EXPECT_EQ(records[0].verdict.objective.size(), 2u);
  const json bad_loop = client.call(
      "loop", {{"model", "toy"}, {"device", "cpu"}, {"budget", 2}, {"objective", "0:1,0:2"}});
  EXPECT_TRUE(bad_loop.value("isError", false)) << bad_loop.dump();
  EXPECT_NE(bad_loop["content"][0]["text"].get<std::string>().find("position 0 is given twice"),
            std::string::npos)
      << bad_loop.dump();
}

TEST_F(McpServer, CancelStopsTheLoopsTrialInFlightAndTheLogsStayWhole) {
  use_fake_worker(/*hang_after_first=*/true);
  McpPipeClient client(options_);
  client.initialize();
  client.send({{"jsonrpc", "2.0"},
               {"id", 77},
               {"method", "tools/call"},
               {"params",
                {{"name", "loop"},
                 {"arguments", {{"model", "toy"}, {"device", "cpu"}, {"budget", 5}}},
                 {"_meta", {{"progressToken", "p"}}}}}});
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir_ / "hanging.txt"); }, 30));
  client.send(
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 77}}}});
  EXPECT_TRUE(eventually([&] { return gone(fake_pids().at(0)); }));
  EXPECT_TRUE(client.request("ping").contains("result"));
  EXPECT_EQ(progress_of(client.notifications, "p"), json::array({0.0, 1.0}));
  for (const json& m : client.others) EXPECT_NE(m["id"], 77) << m.dump();
  // Trial 0 is logged whole; trial 1, in flight, is not logged at all.
  const flywheel::ResultsRead results = flywheel::read_results(options_.results_path);
  const flywheel::CorpusRead corpus = flywheel::read_corpus(options_.corpus_path);
  EXPECT_TRUE(results.problems.empty());
  EXPECT_TRUE(corpus.problems.empty());
  ASSERT_EQ(results.rows.size(), 1u);
  ASSERT_EQ(corpus.records.size(), 1u);
  EXPECT_EQ(results.rows[0].trial, 0);
  EXPECT_EQ(results.rows[0].schedule_id, corpus.records[0].schedule_id);
}

TEST_F(McpServer, ResourcesAreTheContractTheSchemasAndTheWorkspace) {
  McpPipeClient client(options_);
  client.initialize();
  const json list = client.request("resources/list")["result"]["resources"];
  std::vector<std::string> uris;
  for (const json& r : list) uris.push_back(r["uri"]);
  for (const char* uri :
       {"megasched://docs/HARNESS.md", "megasched://schemas/verdict.schema.json",
        "megasched://schemas/schedule_config.schema.json", "megasched://workspace/results.tsv",
        "megasched://workspace/report.json", "megasched://workspace/report.html"})
    EXPECT_NE(std::find(uris.begin(), uris.end(), uri), uris.end()) << uri;
  const json harness = client.request("resources/read", {{"uri", "megasched://docs/HARNESS.md"}});
  EXPECT_EQ(harness["result"]["contents"][0]["text"],
            slurp(std::string(MS_SOURCE_DIR) + "/HARNESS.md"));
  EXPECT_EQ(harness["result"]["contents"][0]["mimeType"], "text/markdown");
  const json schema =
      client.request("resources/read", {{"uri", "megasched://schemas/verdict.schema.json"}});
  EXPECT_EQ(json::parse(schema["result"]["contents"][0]["text"].get<std::string>())["title"],
            "Verdict");
  // Not written yet, or not there at all: resource not found, with the URI.
  for (const char* uri : {"megasched://workspace/results.tsv", "megasched://workspace/report.json",
                          "megasched://nothing", "megasched://docs/schemas/verdict.schema.json"}) {
    const json r = client.request("resources/read", {{"uri", uri}});
    EXPECT_EQ(error_code(r), kResourceNotFound) << uri;
    EXPECT_EQ(r["error"]["data"]["uri"], uri);
  }
  EXPECT_EQ(error_code(client.request("resources/read", json::object())), kInvalidParams);
  EXPECT_EQ(client.request("resources/templates/list")["result"]["resourceTemplates"],
            json::array());
}

TEST_F(McpServer, EndOfInputCancelsWhatStillRunsAndEndsTheServer) {
  use_fake_worker();
  McpPipeClient client(options_);
  client.initialize();
  client.send(
      {{"jsonrpc", "2.0"},
       {"id", 5},
       {"method", "tools/call"},
       {"params",
        {{"name", "evaluate"}, {"arguments", {{"config", {{"kernel", {{"unroll", 8}}}}}}}}}});
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir_ / "hanging.txt"); }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(client.close_input(), 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, kEndOfInputGrace_s + 5.0);
  EXPECT_TRUE(eventually([&] { return gone(fake_pids().at(0)); }));
}

// The binary: every line on its stdout is a JSON-RPC message, a bad line changes nothing, and a
// closed stdin is exit 0.
TEST_F(McpServer, TheBinaryWritesOnlyProtocolMessagesAndExitsZeroAtEndOfInput) {
  search::ChildProcess server;
  std::string error;
  ASSERT_TRUE(server.start(std::string(MS_BINARY_PATH) + " mcp --results " + options_.results_path +
                               " --corpus " + options_.corpus_path,
                           &error))
      << error;
  const std::vector<std::string> lines = {
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"gtest","version":"1"}}})",
      R"({"jsonrpc":"2.0","method":"notifications/initialized"})",
      "not json",
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"validate","arguments":{}}})",
      R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"evaluate","arguments":{"config":{"kernel":{"unroll":4}}}}})",
      R"({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"loop","arguments":{"device":"cpu","budget":2}}})",
  };
  for (const std::string& line : lines) ASSERT_TRUE(server.write_line(line));
  std::set<int> answered;
  std::string line;
  while (answered.size() < 4 &&
         server.read_line(120, &line) == search::ChildProcess::ReadStatus::kLine) {
    const json m = json::parse(line);  // throws, failing the test, on anything else
    EXPECT_EQ(m["jsonrpc"], "2.0") << line;
    const json id = m.value("id", json());
    if (id.is_number()) answered.insert(id.get<int>());
    if (id == 3) {
      EXPECT_TRUE(m["result"]["structuredContent"]["correct"]) << line;
    }
    if (id == 4) {
      EXPECT_EQ(m["result"]["structuredContent"]["trials"], 2) << line;
    }
  }
  EXPECT_EQ(answered, (std::set<int>{1, 2, 3, 4}));
  server.close_stdin();
  std::string rest;
  EXPECT_EQ(server.read_all(30, &rest), search::ChildProcess::ReadStatus::kEof);
  EXPECT_EQ(rest, "");
  EXPECT_EQ(server.finish(30), "exit 0");
  EXPECT_NE(server.stderr_tail().find("megasched mcp:"), std::string::npos);
}

}  // namespace
}  // namespace megasched::harness
