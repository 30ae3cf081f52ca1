// bench/device_check.sh's `tests` stage runs the GPU tests on a GPU machine; on this machine they
// skip. Its default filter (GPU_TESTS) must name every test that needs or branches on a device, or
// on NVRTC, or that test never runs anywhere. A test counts as one when its body calls
// eval::gpu_available or checks for NVRTC, or its file defines MS_REQUIRE_GPU (all of that file's
// tests then). And what the script returns: at most 8 files (bundle.tgz beyond), and a landscape's
// rows so far when the call is killed at its limit; and that stage "ab"'s base trees build while
// the build stage runs, not after it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// gtest's filter glob: '*' any run of characters, '?' one character.
bool glob_match(const std::string& pattern, const std::string& name) {
  size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

/// The positive patterns of the default GPU_TESTS of bench/device_check.sh.
std::vector<std::string> default_gpu_filter() {
  const std::string script = slurp(std::string(MS_SOURCE_DIR) + "/bench/device_check.sh");
  std::smatch m;
  if (!std::regex_search(script, m, std::regex(R"(GPU_TESTS=\$\{GPU_TESTS:-([^}]*)\})"))) return {};
  std::vector<std::string> patterns;
  std::stringstream in(m[1].str());
  std::string p;
  while (std::getline(in, p, ':'))
    if (!p.empty()) patterns.push_back(p);
  return patterns;
}

/// "Suite.Name" of every test that needs a GPU or NVRTC, by the rule in the header.
std::vector<std::string> gpu_tests() {
  const std::regex test_macro(R"(\nTEST(?:_F|_P)?\((\w+),\s*(\w+)\))");
  const std::regex gpu_mark(R"(gpu_available\(|have_nvrtc\(\)|nvrtc_version\(\) == "none")");
  std::vector<std::string> out;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(std::string(MS_SOURCE_DIR) + "/tests")) {
    const std::string file = e.path().filename().string();
    if (file.size() < 9 || file.substr(file.size() - 9) != "_test.cpp") continue;
    const std::string text = slurp(e.path());
    const bool whole_file = text.find("\n#define MS_REQUIRE_GPU") != std::string::npos;
    std::vector<std::smatch> tests;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), test_macro);
         it != std::sregex_iterator(); ++it)
      tests.push_back(*it);
    for (size_t i = 0; i < tests.size(); ++i) {
      const size_t begin = tests[i].position(0);
      const size_t end = i + 1 < tests.size() ? tests[i + 1].position(0) : text.size();
      const std::string body = text.substr(begin, end - begin);
      if (whole_file || std::regex_search(body, gpu_mark))
        out.push_back(tests[i][1].str() + "." + tests[i][2].str());
    }
  }
  return out;
}

TEST(DeviceCheck, TheDefaultGpuTestFilterRunsEveryGpuTest) {
  const std::vector<std::string> filter = default_gpu_filter();
  ASSERT_FALSE(filter.empty()) << "no GPU_TESTS=${GPU_TESTS:-...} default in bench/device_check.sh";
  const std::vector<std::string> tests = gpu_tests();
  EXPECT_GT(tests.size(), 20u) << "the GPU tests were not found under tests/";
  for (const std::string& test : tests) {
    bool covered = false;
    for (const std::string& p : filter) covered = covered || glob_match(p, test);
    EXPECT_TRUE(covered) << test << " needs a GPU or NVRTC but bench/device_check.sh's default "
                         << "GPU_TESTS does not run it: add its suite there";
  }
}

TEST(DeviceCheck, TheFilterGlobMatchesAsGtestDoes) {
  EXPECT_TRUE(glob_match("GpuVm.*", "GpuVm.WeightRingMatchesEager"));
  EXPECT_TRUE(glob_match("PromoteCli.Gpu*", "PromoteCli.GpuGates"));
  EXPECT_FALSE(glob_match("PromoteCli.Gpu*", "PromoteCli.WithoutAGpu"));
  EXPECT_FALSE(glob_match("GpuVm.*", "GpuVmX.A"));
  EXPECT_TRUE(glob_match("A?c.*", "Abc.d"));
}

std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

int count_files(const std::filesystem::path& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

// Stand-ins for a GPU machine under `dir`: bin/nvidia-smi says H200, build/megasched logs its
// arguments to `dir`/calls, then runs `body` (bash, with the arguments in "$@"; a --fit-plan
// FILE is written as {}). Returns the calls file.
std::string write_stand_ins(const std::filesystem::path& dir, const std::string& body) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "bin");
  std::filesystem::create_directories(dir / "build");
  const std::string calls = (dir / "calls").string();
  {
    std::ofstream smi(dir / "bin" / "nvidia-smi");
    smi << "#!/bin/bash\necho 'NVIDIA H200'\n";
    std::ofstream fake(dir / "build" / "megasched");
    fake << "#!/bin/bash\necho \"$*\" >> " << shell_quote(calls)
         << "\nfor ((i = 1; i < $#; ++i)); do\n"
            "  [ \"${!i}\" = --fit-plan ] && j=$((i + 1)) && mkdir -p \"$(dirname \"${!j}\")\" && "
            "echo '{}' > \"${!j}\"\n"
            "done\n"
         << body;
  }
  for (const char* f : {"bin/nvidia-smi", "build/megasched"})
    std::filesystem::permissions(dir / f, std::filesystem::perms::owner_all);
  return calls;
}

// The command line of bench/device_check.sh OUT on the stand-ins under `dir`, with `env`
// (NAME=VALUE words) before it.
std::string device_check_on_stand_ins(const std::filesystem::path& dir, const std::string& env,
                                      const std::string& out) {
  return "PATH=" + shell_quote((dir / "bin").string()) +
         ":\"$PATH\" BUILD=" + shell_quote((dir / "build").string()) +
         " MEGASCHED_FLYWHEEL_DIR=none " + env + " bash " +
         shell_quote(std::string(MS_SOURCE_DIR) + "/bench/device_check.sh") + " " +
         shell_quote(out) + " > /dev/null 2>&1";
}

TEST(DeviceCheckScript, PacksMoreThanEightFilesIntoOneBundle) {
  const std::filesystem::path out = std::filesystem::path(testing::TempDir()) / "dc_bundle";
  std::filesystem::remove_all(out);
  std::filesystem::create_directories(out / "sub");
  for (int i = 0; i < 9; ++i) std::ofstream(out / "sub" / ("f" + std::to_string(i))) << i;
  const std::string cmd = "STAGES=none MEGASCHED_FLYWHEEL_DIR=none bash " +
                          shell_quote(std::string(MS_SOURCE_DIR) + "/bench/device_check.sh") + " " +
                          shell_quote(out.string()) + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_TRUE(std::filesystem::exists(out / "check.log"));
  EXPECT_TRUE(std::filesystem::exists(out / "bundle.tgz"));
  EXPECT_EQ(count_files(out), 2);
  std::filesystem::remove_all(out);
}

// A stand-in recorder writes a row a second; the call is stopped (TERM to its process group, as
// `timeout` does) long before the stage's own time: the rows copied so far are under OUT.
TEST(DeviceCheckScript, AKilledLandscapeStageLeavesItsRowsSoFar) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "dc_kill";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "build");
  {
    std::ofstream fake(dir / "build" / "megasched");
    fake << "#!/bin/bash\nout=\"\"; while [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; "
            "done\ntrap 'exit 130' INT TERM\nwhile true; do echo row >> \"$out\"; sleep 0.2; "
            "done\n";
  }
  std::filesystem::permissions(dir / "build" / "megasched", std::filesystem::perms::owner_all);
  const std::string cmd =
      "BUILD=" + shell_quote((dir / "build").string()) +
      " MEGASCHED_WORKSPACE=" + shell_quote((dir / "ws").string()) +
      " MEGASCHED_FLYWHEEL_DIR=none STAGES=landscape COPY_EVERY=1 LANDSCAPE_SECONDS=6 "
      "LANDSCAPES=" +
      shell_quote((dir / "new.landscape.jsonl").string() + "@0@default") + " timeout 3 bash " +
      shell_quote(std::string(MS_SOURCE_DIR) + "/bench/device_check.sh") + " " +
      shell_quote((dir / "out").string()) + " > /dev/null 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);  // stopped
  const std::string rows = slurp(dir / "out" / "landscapes" / "new.landscape.jsonl");
  EXPECT_GE(std::count(rows.begin(), rows.end(), '\n'), 5) << "rows copied back: " << rows.size();
  EXPECT_NE(slurp(dir / "out" / "check.log").find("stopped by a signal"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Stage "ab" starts its base tree's build at the call's start, beside the build stage. A stand-in
// cmake: the base tree's configure leaves a marker, and the tree's own build (the build stage)
// waits up to 5 s for it. Were the base built only when the ab stage comes, after the build stage,
// the marker would not exist yet while the tree builds.
TEST(DeviceCheckScript, TheAbStagesBaseBuildsBesideTheBuildStage) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "dc_ab";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "bin");
  std::filesystem::create_directories(dir / "base");
  std::ofstream(dir / "base" / "CMakeLists.txt") << "# a base tree\n";
  const std::string marker = (dir / "base_configured").string();
  const std::string seen = (dir / "seen").string();
  {
    std::ofstream fake(dir / "bin" / "cmake");
    fake << "#!/bin/bash\n"
            "case \"$*\" in\n"
            "  *\"-S "
         << (dir / "base").string() << " \"*) touch " << shell_quote(marker)
         << " ;;\n"
            "  *\"--build "
         << (dir / "build").string()
         << " \"*)\n"
            "    for i in $(seq 50); do [ -e "
         << shell_quote(marker)
         << " ] && break; sleep 0.1; done\n"
            "    if [ -e "
         << shell_quote(marker) << " ]; then echo yes; else echo no; fi >> " << shell_quote(seen)
         << " ;;\n"
            "esac\n"
            "exit 0\n";
  }
  std::filesystem::permissions(dir / "bin" / "cmake", std::filesystem::perms::owner_all);
  const std::string cmd = "PATH=" + shell_quote((dir / "bin").string()) +
                          ":\"$PATH\" BUILD=" + shell_quote((dir / "build").string()) +
                          " MEGASCHED_FLYWHEEL_DIR=none STAGES='build ab' AB_BASE=" +
                          shell_quote((dir / "base").string()) + " bash " +
                          shell_quote(std::string(MS_SOURCE_DIR) + "/bench/device_check.sh") + " " +
                          shell_quote((dir / "out").string()) + " > /dev/null 2>&1";
  std::system(cmd.c_str());  // the stand-in builds nothing, so the ab stage's benches fail
  const std::string lines = slurp(seen);
  ASSERT_FALSE(lines.empty()) << "the build stage never built the tree";
  EXPECT_EQ(lines.substr(0, 4), "yes\n") << "the tree built before the base tree was configured";
  EXPECT_NE(slurp(dir / "out" / "check.log").find("in the background"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Beside write_stand_ins' under `dir`: a base source tree `dir`/base for AB_BASE, this tree's build
// already configured, a cmake that does nothing, and the base's CLI build-ab-base/megasched, which
// logs "base ARGS" to `calls`, then runs `body` (bash, the arguments in "$@").
void write_ab_base(const std::filesystem::path& dir, const std::string& calls,
                   const std::string& body) {
  std::filesystem::create_directories(dir / "base");
  std::ofstream(dir / "base" / "CMakeLists.txt") << "# a base tree\n";
  std::ofstream(dir / "build" / "CMakeCache.txt") << "\n";
  std::filesystem::create_directories(dir / "build-ab-base");
  {
    std::ofstream(dir / "bin" / "cmake") << "#!/bin/bash\nexit 0\n";
    std::ofstream(dir / "build-ab-base" / "megasched")
        << "#!/bin/bash\necho \"base $*\" >> " << shell_quote(calls) << "\n"
        << body;
  }
  for (const char* f : {"bin/cmake", "build-ab-base/megasched"})
    std::filesystem::permissions(dir / f, std::filesystem::perms::owner_all);
}

// Stage "ab" times each model of AB_MODELS from both builds and summarises each model apart (a
// stand-in CLI per side prints one config row: the tree's 100 us, the base's 110).
TEST(DeviceCheckScript, TheAbStageComparesTheSidesForEachModel) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "dc_ab_models";
  const std::string calls = write_stand_ins(dir, "echo '| 0 | cfg | config | 100.0 |'\n");
  write_ab_base(dir, calls, "echo '| 0 | cfg | config | 110.0 |'\n");
  const std::string out = (dir / "out").string();
  const std::string cmd =
      device_check_on_stand_ins(dir,
                                "STAGES=ab AB_ROUNDS=1 AB_MODELS='llama-1b llama-8b' AB_BASE=" +
                                    shell_quote((dir / "base").string()),
                                out);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(dir / "out" / "check.log");
  const std::string lines = slurp(calls);
  for (const char* m : {"llama-1b", "llama-8b"}) {
    EXPECT_NE(lines.find(std::string("base bench --model ") + m), std::string::npos) << lines;
    EXPECT_NE(lines.find(std::string("\nbench --model ") + m), std::string::npos) << lines;
  }
  const std::string ab = slurp(dir / "out" / "ab.md");
  for (const char* m : {"llama-1b", "llama-8b"})
    EXPECT_NE(ab.find(std::string("summary: ") + m +
                      ", position 0, cfg: base 110.0 us, tree 100.0 us (mean of 1 / 1 rounds): "
                      "-10.0 us, -9.09%"),
              std::string::npos)
        << ab;
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "ab_tree_llama-8b_1.md"));
  std::filesystem::remove_all(dir);
}

// A stand-in CLI's body that answers `profile ... --out FILE` with a profile of two layers' down
// ops whose tasks stage for `staging` us, and `bench` with one config row of `us`.
std::string profile_stand_in(double staging, double us) {
  std::ostringstream json;
  json << R"({"model": "llama-8b", "position": 0, "per_op": [)"
       << R"({"kind": "down", "layer": 0, "last_signal_us": )" << 10 + staging << "}, "
       << R"({"kind": "down", "layer": 1, "last_signal_us": )" << 2 * (10 + staging) << "}], "
       << R"("per_kind": [{"kind": "down", "tasks": 2, "exec_us": {"sum": )" << 2 * (8 + staging)
       << R"(}, "wait_us": {"sum": 2}, "signal_us": {"sum": 1}, )"
       << R"("exec_parts": {"tasks": 2, "staging_us": {"sum": )" << 2 * staging
       << R"(}, "stream_us": {"sum": 16}, "epilogue_us": {"sum": 0}}}]})";
  return "if [ \"$1\" = profile ]; then\n"
         "  for ((i = 1; i < $#; ++i)); do j=$((i + 1));"
         " [ \"${!i}\" = --out ] && echo '" +
         json.str() +
         "' > \"${!j}\"; done\n"
         "  true\n"
         "else echo '| 0 | cfg | config | " +
         std::to_string(us) + " |'; fi\n";
}

// AB_PROFILES: each side's `megasched profile` of the step, then the base against the tree by op
// kind (bench/profile_compare.py) in ab.md: here the tree's down tasks stage in 2 us, the base's
// in 6, so each down op ends 4 us sooner.
TEST(DeviceCheckScript, TheAbStageProfilesBothSidesAndComparesThemByOpKind) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "dc_ab_profiles";
  const std::string calls = write_stand_ins(dir, profile_stand_in(2, 100));
  write_ab_base(dir, calls, profile_stand_in(6, 110));
  const std::string out = (dir / "out").string();
  const std::string cmd =
      device_check_on_stand_ins(dir,
                                "STAGES=ab AB_ROUNDS=1 AB_PROFILES='llama-8b@0@cfg.json' AB_BASE=" +
                                    shell_quote((dir / "base").string()),
                                out);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(dir / "out" / "check.log");
  const std::string lines = slurp(calls);
  const std::string profile =
      "profile --model llama-8b --gpu auto --position 0 --config cfg.json --out " + out;
  EXPECT_NE(lines.find("base " + profile + "/profile_ab_base_1.json --no-run-dir"),
            std::string::npos)
      << lines;
  EXPECT_NE(lines.find("\n" + profile + "/profile_ab_tree_1.json --no-run-dir"), std::string::npos)
      << lines;
  const std::string ab = slurp(dir / "out" / "ab.md");
  EXPECT_NE(ab.find("profile 1 (llama-8b@0@cfg.json):\nprofile_compare: llama-8b at position 0, "
                    "base -> tree; span 32.0 -> 24.0 us (-8.0)"),
            std::string::npos)
      << ab;
  // Two down ops of 16 us each against 12: 32 -> 24 us of the step; a task's staging 6 -> 2.
  EXPECT_NE(ab.find("32.0->24.0 (-8.0)"), std::string::npos) << ab;
  EXPECT_NE(ab.find("16.0->12.0 (-4.0)"), std::string::npos) << ab;
  EXPECT_NE(ab.find("6.00->2.00"), std::string::npos) << ab;
  std::filesystem::remove_all(dir);
}

// Stages kprof then profile of one model and position: the profile's op kinds are set beside
// graph-pdl's kernels in check.log (bench/profile_compare.py --graph). The stand-in's down ops take
// 18 us each (two layers), graph-pdl's down kernel 12.5 a launch. KPROF_POSITIONS is a comma list,
// as every other list of positions the script takes (a space-separated one works too).
TEST(DeviceCheckScript, TheProfileStageSetsTheStepBesideGraphPdlsKernels) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "dc_profile_graph";
  const std::string timeline =
      R"({"model": "llama-8b", "position": 0, "timeline": {"step_us": 25, "by_kernel": )"
      R"({"ms_pdl_down_residual": {"launches": 2, "critical_us": 25.0, "released_us": 1.0, )"
      R"("after_wait_us": 24.0}}}})";
  write_stand_ins(dir, "if [ \"$1\" = baseline ]; then echo '" + timeline + "'; exit 0; fi\n" +
                           profile_stand_in(8, 100));
  const std::string out = (dir / "out").string();
  const std::string cmd = device_check_on_stand_ins(
      dir,
      "STAGES='kprof profile' KPROF_MODEL=llama-8b KPROF_POSITIONS=0,4096 "
      "PROFILES=llama-8b@0@default",
      out);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(dir / "out" / "check.log");
  const std::string log = slurp(dir / "out" / "check.log");
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "kprof_timeline_0.json")) << log;
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "kprof_timeline_4096.json")) << log;
  EXPECT_EQ(log.find("FAILED"), std::string::npos) << log;
  EXPECT_NE(log.find("profile_compare: profile 1 beside graph-pdl: span 36.0 us, graph-pdl's step "
                     "25.0 in place (+11.0)"),
            std::string::npos)
      << log;
  std::string squeezed;  // the row, without its column padding
  for (char c : log)
    if (c != ' ') squeezed += c;
  EXPECT_NE(squeezed.find("ms_pdl_down_residualdown36.025.0+11.018.0012.50+5.50"),
            std::string::npos)
      << log;
  std::filesystem::remove_all(dir);
}

// The autoresearch cycle without a person choosing: PLANFIT_CONFIGS="record search" fits the
// GPU's record with the search's best (kept in SEARCH_DIR by an earlier call), and
// PROMOTE_CONFIG=planfit promotes the plan this call fitted. A stand-in megasched logs its
// arguments (and writes the plan --fit-plan names); a stand-in nvidia-smi says H200.
TEST(DeviceCheckScript, PlanfitAndPromoteTakeTheRecordTheSearchsBestAndTheFittedPlan) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "dc_cycle";
  const std::string calls = write_stand_ins(dir, "echo '{}'\n");
  std::filesystem::create_directories(dir / "search");
  std::ofstream(dir / "search" / "best.json") << "{}\n";
  const std::string out = (dir / "out").string();
  const std::string cmd = device_check_on_stand_ins(
      dir,
      "SEARCH_DIR=" + shell_quote((dir / "search").string()) +
          " STAGES='planfit promote' PLANFIT_CONFIGS='record search' PROMOTE_CONFIG=planfit",
      out);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(dir / "out" / "check.log");
  const std::string lines = slurp(calls);
  const std::string fit = "--config best:llama-1b:h200 --config " + (dir / "search").string() +
                          "/best.json --baseline graph-pdl";
  EXPECT_NE(lines.find("bench --model llama-1b " + fit), std::string::npos) << lines;
  EXPECT_NE(lines.find("--fit-plan " + out + "/planfit/plan.json"), std::string::npos) << lines;
  EXPECT_NE(lines.find("promote --model llama-1b --gpu h200 --device gpu --config " + out +
                       "/planfit/plan.json"),
            std::string::npos)
      << lines;
  // By default the stage refits this GPU's record at about every doubling of the position.
  std::filesystem::remove(calls);
  EXPECT_EQ(std::system(device_check_on_stand_ins(dir, "STAGES=planfit", out).c_str()), 0);
  EXPECT_NE(slurp(calls).find("bench --model llama-1b --config best:llama-1b:h200 --baseline "
                              "graph-pdl --iterations 100 --rounds 2 --positions "
                              "0,4,8,16,32,48,64,128,256,512,1024,2048,4096 --fit-plan"),
            std::string::npos)
      << slurp(calls);
  std::filesystem::remove_all(dir);
}

// Stage "plansearch": `loop --plan` of this GPU's record, each bucket searched at its midpoint; its
// plan benched beside the record at every bucket's timed position, kept as
// PLANSEARCH_DIR/plan.json, which the words "plansearch" in PLANFIT_CONFIGS and as PROMOTE_CONFIG
// name. A stand-in megasched logs its arguments; as `loop` it writes a plan under --runs-dir and
// prints the summary that names it; a stand-in nvidia-smi says H200.
TEST(DeviceCheckScript, PlansearchSearchesTheRecordsBucketsAndHandsItsPlanOn) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "dc_plansearch";
  const std::string calls = write_stand_ins(
      dir,
      "runs=\nfor ((i = 1; i < $#; ++i)); do\n"
      "  [ \"${!i}\" = --runs-dir ] && j=$((i + 1)) && runs=${!j}\n"
      "done\n"
      "if [ \"$1\" = loop ]; then\n"
      "  mkdir -p \"$runs/r1\" && echo '{\"buckets\": []}' > \"$runs/r1/plan.json\"\n"
      "  echo \"{\\\"plan_file\\\": \\\"$runs/r1/plan.json\\\", \\\"buckets\\\": "
      "[{\\\"timed_position\\\": 2}, {\\\"timed_position\\\": 201}]}\"\n"
      "else echo '{}'; fi\n");
  const std::string out = (dir / "out").string();
  const std::string ps = (dir / "ps").string();
  const std::string cmd = device_check_on_stand_ins(
      dir,
      "PLANSEARCH_DIR=" + shell_quote(ps) +
          " STAGES='plansearch planfit promote' PLANSEARCH_MINUTES=2 "
          "PLANSEARCH_FLAGS='--gpus all' PLANFIT_CONFIGS='record plansearch' "
          "PROMOTE_CONFIG=plansearch",
      out);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(dir / "out" / "check.log");
  const std::string lines = slurp(calls);
  EXPECT_NE(lines.find("loop --model llama-1b --gpu auto --device gpu --budget 1000000 --minutes 2 "
                       "--plan best:llama-1b:h200 --results " +
                       ps + "/results.tsv"),
            std::string::npos)
      << lines;
  // The caller's flags, and no keep rule of the stage's own: the GPU loop's default is the plan
  // search's (harness/verbs.h kGpuMinGain).
  EXPECT_NE(lines.find("/runs --gpus all\n"), std::string::npos) << lines;
  EXPECT_EQ(lines.find("--min-gain"), std::string::npos) << lines;
  EXPECT_TRUE(std::filesystem::exists(dir / "ps" / "plan.json"));
  EXPECT_NE(lines.find("bench --model llama-1b --positions 2,201 --config " + out +
                       "/plansearch_plan.json --config best:llama-1b:h200 --baseline graph-pdl"),
            std::string::npos)
      << lines;
  EXPECT_NE(lines.find("report --results " + ps + "/results.tsv --plan " + ps + "/plan.json"),
            std::string::npos)
      << lines;
  EXPECT_NE(
      lines.find("--config best:llama-1b:h200 --config " + ps + "/plan.json --baseline graph-pdl"),
      std::string::npos)
      << lines;
  EXPECT_NE(
      lines.find("promote --model llama-1b --gpu h200 --device gpu --config " + ps + "/plan.json"),
      std::string::npos)
      << lines;
  // A loop that ends without a plan fails the stage and benches nothing.
  const std::string failing_calls =
      write_stand_ins(dir, "echo 'no bucket has a correct trial' >&2\nexit 1\n");
  EXPECT_NE(std::system(device_check_on_stand_ins(
                            dir, "PLANSEARCH_DIR=" + shell_quote(ps) + " STAGES=plansearch", out)
                            .c_str()),
            0);
  EXPECT_EQ(slurp(failing_calls).find("bench "), std::string::npos) << slurp(failing_calls);
  EXPECT_NE(slurp(dir / "out" / "check.log").find("no plan"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Stage "search" on another model (SEARCH_MODEL): the loop and the bench of its best run that
// model, and the bench leaves out best:llama-1b:<gpu>, a record of another model; llama-1b's
// search benches its best beside that record. SEARCH_BESIDE adds configs to that bench.
TEST(DeviceCheckScript, TheSearchStageSearchesAndBenchesSearchModel) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "dc_search_model";
  const std::string calls = write_stand_ins(
      dir,
      "if [ \"$1\" = loop ]; then echo '{\"trials\": 3, \"best\": {\"latency_us\": 5000, "
      "\"config\": {}}}'; else echo '| table |'; fi\n");
  const std::string out = (dir / "out").string();
  const std::string search = (dir / "search").string();
  const std::string env =
      "SEARCH_DIR=" + shell_quote(search) + " STAGES=search SEARCH_MINUTES=0.01";
  EXPECT_EQ(std::system(device_check_on_stand_ins(
                            dir, env + " SEARCH_MODEL=llama-8b SEARCH_BESIDE='a.json b.json'", out)
                            .c_str()),
            0)
      << slurp(dir / "out" / "check.log");
  std::string lines = slurp(calls);
  EXPECT_NE(lines.find("loop --model llama-8b --gpu auto --device gpu"), std::string::npos)
      << lines;
  EXPECT_NE(lines.find("bench --model llama-8b --positions 0 --config " + out +
                       "/search_best.json --config a.json --config b.json --baseline graph-pdl"),
            std::string::npos)
      << lines;
  EXPECT_EQ(lines.find("best:llama-1b"), std::string::npos) << lines;
  std::filesystem::remove(calls);
  std::filesystem::remove_all(search);
  EXPECT_EQ(std::system(device_check_on_stand_ins(dir, env, out).c_str()), 0);
  lines = slurp(calls);
  EXPECT_NE(lines.find("bench --model llama-1b --positions 0 --config " + out +
                       "/search_best.json --config best:llama-1b:h200 --baseline graph-pdl"),
            std::string::npos)
      << lines;
  std::filesystem::remove_all(dir);
}

// Stage "searchab": two loops that differ only in their flags (A none, B the confirm rounds by
// default), each with its own logs, on GPU 0 and GPU 1 at once; then both bests benched beside the
// record on GPU 0. On a machine of one GPU both run on GPU 0, one after the other. A loop that
// leaves no best fails the stage.
TEST(DeviceCheckScript, TheSearchAbStageRunsTwoLoopsSideBySideAndBenchesBothBests) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "dc_searchab";
  // Each call also logs one line "gpu=<CUDA_VISIBLE_DEVICES> <its arguments>" (the two loops run
  // at once, so a line of its own per call).
  const std::string body =
      "echo \"gpu=$CUDA_VISIBLE_DEVICES $*\" >> " + shell_quote((dir / "calls").string()) +
      "\nif [ \"$1\" = loop ]; then echo '{\"trials\": 3, \"best\": {\"latency_us\": 900, "
      "\"config\": {}}}'; else echo '| table |'; fi\n";
  const std::string calls = write_stand_ins(dir, body);
  const std::string out = (dir / "out").string();
  const std::string ab = (dir / "ab").string();
  const std::string env =
      "SEARCHAB_DIR=" + shell_quote(ab) + " STAGES=searchab SEARCHAB_MINUTES=0.01";
  const auto gpus = [&](int n) {
    std::ofstream smi(dir / "bin" / "nvidia-smi");
    smi << "#!/bin/bash\n";
    for (int i = 0; i < n; ++i) smi << "echo 'NVIDIA H200'\n";
  };
  const std::string loop =
      "loop --model llama-1b --gpu auto --device gpu --budget 1000000 --minutes 0.01 --results ";
  gpus(2);
  ASSERT_EQ(std::system(device_check_on_stand_ins(dir, env, out).c_str()), 0)
      << slurp(dir / "out" / "check.log");
  std::string lines = slurp(calls);
  // By default A keeps the rule before 2026-11-30 and B the loop's own.
  EXPECT_NE(lines.find("gpu=0 " + loop + ab + "/a/results.tsv --corpus " + ab +
                       "/a/corpus.jsonl --min-gain 0.01 --confirm 0\n"),
            std::string::npos)
      << lines;
  EXPECT_NE(
      lines.find("gpu=1 " + loop + ab + "/b/results.tsv --corpus " + ab + "/b/corpus.jsonl\n"),
      std::string::npos)
      << lines;
  EXPECT_NE(lines.find("gpu=0 bench --model llama-1b --positions 0 --config " + out +
                       "/searchab_a_best.json --config " + out +
                       "/searchab_b_best.json --config best:llama-1b:h200 --baseline graph-pdl"),
            std::string::npos)
      << lines;
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "searchab_b_best.json"));
  // One GPU: both loops on GPU 0, A then B, with the flags given.
  std::filesystem::remove(calls);
  gpus(1);
  ASSERT_EQ(
      std::system(device_check_on_stand_ins(
                      dir, env + " SEARCHAB_FLAGS_A='--strategy elite' SEARCHAB_FLAGS_B=''", out)
                      .c_str()),
      0);
  lines = slurp(calls);
  const size_t a1 = lines.find("gpu=0 " + loop + ab + "/a/results.tsv --corpus " + ab +
                               "/a/corpus.jsonl --strategy elite\n");
  const size_t b1 =
      lines.find("gpu=0 " + loop + ab + "/b/results.tsv --corpus " + ab + "/b/corpus.jsonl\n");
  EXPECT_NE(a1, std::string::npos) << lines;
  EXPECT_NE(b1, std::string::npos) << lines;
  EXPECT_LT(a1, b1) << lines;
  EXPECT_EQ(lines.find("--confirm"), std::string::npos) << lines;
  // A loop with no best fails the stage.
  write_stand_ins(dir, "if [ \"$1\" = loop ]; then exit 1; else echo '| table |'; fi\n");
  EXPECT_NE(std::system(device_check_on_stand_ins(dir, env, out).c_str()), 0);
  EXPECT_NE(slurp(dir / "out" / "check.log").find("searchab: a: no best config"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
