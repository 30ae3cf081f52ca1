// Bad input to every verb, as an agent would send it: each row runs the megasched binary and must
// end with the exit code HARNESS.md section 6 gives (2: bad input, 3: a file that cannot be read
// or written, no GPU), one line on stderr that names the verb and says what was wrong, and never
// a crash, an abort or an endless read. Every row is a bug that once crashed, hung or exited 0.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "eval/device.h"
#include "flywheel/corpus.h"
#include "flywheel/results.h"
#include "schedule/lower.h"
#include "schedule/program.h"
#include "schedule/target.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The fixtures every row may name as {dir}/...: programs, configs, checkpoints and logs.
class CliBadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("ms_bad_input_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_programs();
    write_configs();
    write_checkpoints();
    write_logs();
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static json lowered(const std::string& model) {
    std::string error;
    auto p = megasched::schedule::lower(*megasched::schedule::find_preset(model),
                                        *megasched::schedule::find_target("h100"),
                                        megasched::schedule::ScheduleConfig{}, &error);
    EXPECT_TRUE(p) << error;
    return megasched::schedule::to_json(*p);
  }
  static void put(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }

  static void write_programs() {
    const json toy = lowered("toy");
    put("toy.json", toy.dump());
    put("small.json", lowered("small").dump());
    json p = toy;
    p["buffer_elements"][0] = uint64_t{1} << 40;
    put("huge_weights.json", p.dump());
    p = toy;
    p["buffer_elements"][1] = uint64_t{1} << 40;
    put("huge_act.json", p.dump());
    p = toy;
    p["tasks"][0]["weight"] = uint64_t{1} << 62;
    put("huge_offset.json", p.dump());
    p = toy;
    p["build"]["knobs"]["MS_UNROLL"] = 3;
    put("bad_unroll.json", p.dump());
    p = toy;
    p["build"]["knobs"]["MS_WEIGHT_LOAD"] = 7;
    put("bad_weight_load.json", p.dump());
    p = toy;
    p["launch"]["smem_pages"] = 64;
    put("bad_ring.json", p.dump());
    p = toy;
    p["model"]["hidden"] = 128;
    put("bad_model.json", p.dump());
    p = toy;
    p["build"]["unroll"] = 4;
    put("build_unroll.json", p.dump());
    p = toy;
    p["foo"] = 1;
    put("top_foo.json", p.dump());
  }

  static void write_configs() {
    put("dup.json", R"({"kernel": {"unroll": 4}, "kernel": {"vector_bytes": 8}})");
    put("deep.json",
        "{\"kernel\": {\"unroll\": " + std::string(60000, '[') + std::string(60000, ']') + "}}");
    put("big.json", "{\"kernel\": {\"unroll\": \"" + std::string(10 << 20, 'x') + "\"}}");
    put("bigkey.json", "{\"kernel\": {\"" + std::string(10 << 20, 'k') + "\": 1}}");
    put("README.md", "# notes\n\nnot a log\n");
    put("a_file", "x");
    fs::create_directories(dir_ / "a_dir");
  }

  static void checkpoint(const std::string& name, const json& changes) {
    json config = {{"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"hidden_size", 64},
                   {"num_hidden_layers", 1},
                   {"num_attention_heads", 4},
                   {"num_key_value_heads", 2},
                   {"intermediate_size", 128},
                   {"vocab_size", 256},
                   {"max_position_embeddings", 128},
                   {"torch_dtype", "float32"}};
    config.update(changes);
    fs::create_directories(dir_ / name);
    put(name + "/config.json", config.dump());
  }

  static void write_checkpoints() {
    // Each field in range, their product far beyond any buffer.
    checkpoint("ckpt_huge", {{"hidden_size", 1 << 16},
                             {"num_hidden_layers", 4096},
                             {"num_attention_heads", 512},
                             {"num_key_value_heads", 512},
                             {"intermediate_size", 1 << 20},
                             {"vocab_size", 1 << 20}});
    checkpoint("ckpt_head_dim", {{"head_dim", int64_t{1} << 32}});  // 0 as a 32-bit int
    checkpoint("ckpt_head_dim_product", {{"head_dim", int64_t{1} << 30}});
    checkpoint("ckpt_theta", {{"rope_theta", 0}});
    checkpoint("ckpt_eps", {{"rms_norm_eps", -1e-5}});
  }

  static void write_logs() {
    megasched::flywheel::CorpusRecord r;
    r.run_id = "r1";
    r.schedule_id = "s1";
    r.status = "kept";
    r.model = "toy";
    r.target = "h100";
    r.device = "cpu";
    std::string error;
    ASSERT_TRUE(megasched::flywheel::append_corpus((dir_ / "corpus.jsonl").string(), r, &error));
    ASSERT_TRUE(megasched::flywheel::append_result(
        (dir_ / "results.tsv").string(), megasched::flywheel::row_from_record(r), &error));
  }

  /// `megasched <args>` with {dir} replaced, stdin empty, at most 120 s.
  static Outcome run(std::string args) {
    for (size_t at; (at = args.find("{dir}")) != std::string::npos;)
      args.replace(at, 5, dir_.string());
    const std::string cmd = "timeout 120 " + std::string(MS_BINARY_PATH) + " " + args +
                            " < /dev/null > '" + (dir_ / "out.txt").string() + "' 2> '" +
                            (dir_ / "err.txt").string() + "'";
    const int status = std::system(cmd.c_str());
    Outcome r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(dir_ / "out.txt");
    r.err = slurp(dir_ / "err.txt");
    return r;
  }

  static fs::path dir_;
};

fs::path CliBadInput::dir_;

struct Row {
  const char* args;
  int exit_code;
  const char* says;          // a piece of the stderr line
  bool last_line = false;    // the verb prints progress first: only its last stderr line is checked
  bool without_gpu = false;  // the row is about a machine without a GPU
};

// Every verb with an input it must refuse; the comment says what it did before.
const Row kRows[] = {
    // evaluate
    {"evaluate --model toy --program {dir}/small.json", 2,
     "lowered for model 'small', not 'toy'"},  // segfault
    {"evaluate --model small --program {dir}/toy.json", 2,
     "lowered for model 'toy', not 'small'"},  // abort
    {"evaluate --model toy --program {dir}/huge_weights.json", 2,
     "buffer_elements[0] (weights) is 1099511627776"},
    {"evaluate --model toy --program {dir}/huge_act.json", 2,
     "buffer_elements[1] (act) is 1099511627776"},  // bad_alloc
    {"evaluate --model toy --program {dir}/huge_offset.json", 2,
     "reads weights at element 4611686018427387904"},
    {"evaluate --model toy --program {dir}/bad_unroll.json", 2,
     "MS_UNROLL (kernel.unroll) is 3; allowed values: 1, 2, 4, 8"},
    {"evaluate --model toy --program {dir}/bad_weight_load.json", 2, "MS_WEIGHT_LOAD is 7"},
    {"evaluate --model toy --program {dir}/bad_ring.json", 2, "smem_pages (smem.pages) is 64"},
    {"evaluate --model toy --program {dir}/bad_model.json", 2,
     "program.model.hidden is 128, but model toy has 64"},
    {"evaluate --model toy --program {dir}/build_unroll.json", 2,
     "program.build: unknown key 'unroll' (schemas/program.schema.json allows knobs, x_floats"},
    {"validate --program {dir}/top_foo.json", 2, "program: unknown key 'foo'"},  // both ignored
    {"evaluate --model toy --program {dir}/README.md", 2, "is not valid JSON"},
    {"evaluate --model toy --program {dir}/nonexistent.json", 3, "cannot read"},
    {"evaluate --model toy --timed-position -1", 2, "--timed-position: must be an integer in [0,"},
    {"evaluate --model toy --objective 0:1,x:2", 2,
     "position 'x' is not an integer; give POS:WEIGHT"},
    {"evaluate --model toy --objective 0:1,7:", 2, "weight '' is not a number"},
    {"evaluate --model toy --objective ' , '", 2, "entry '' is empty; give POS:WEIGHT"},
    {"evaluate --model toy --objective 0:1,-5:1", 2, "position -5 is negative"},
    {"evaluate --model toy --objective=-5", 2, "position -5 is negative"},
    {"evaluate --model toy --objective 0:1,7:0", 2,
     "the weight of position 7 is 0; a weight is a finite number above 0"},
    {"evaluate --model toy --objective 0:-2", 2, "the weight of position 0 is -2"},
    {"evaluate --model toy --objective 0:nan", 2, "a weight is a finite number above 0"},
    {"evaluate --model toy --objective 0:inf", 2, "a weight is a finite number above 0"},
    {"evaluate --model toy --objective 7:1,0,7:2", 2, "position 7 is given twice"},
    {"evaluate --model toy --objective 0:1,4096:1", 2,
     "position 4096 is beyond model toy's max_seq 128 (positions lie in [0, 127])"},
    {"evaluate --model toy --objective 0:1,60:1 --timed-position 60", 2,
     "--objective and --timed-position both say where trials are timed; use one or the other"},
    {"evaluate --model toy --iterations 0", 2, "--iterations: must be an integer in [1,"},
    {"evaluate --model toy --warmup -2", 2, "--warmup: must be an integer in [0,"},
    {"evaluate --model toy --seed -1", 2, "--seed: must be an integer in [0, 2^64 - 1], not '-1'"},
    {"evaluate --model toy --config {dir}/dup.json", 2,
     "key 'kernel' appears twice"},  // dropped a group
    {"evaluate --model toy --config {dir}/deep.json", 2, "has value [[[[[[[[[["},  // stack overflow
    {"evaluate --model toy --config {dir}/big.json", 2, "has value \"xxxxxxxxxx"},  // echoed 10 MB
    {"evaluate --model toy --config {dir}/bigkey.json", 2, "unknown config key 'kernel.kkkkkkkk"},
    {"evaluate --model toy --config {dir}/nonexistent.json", 3, "cannot read"},
    {"evaluate --model toy --config {dir}/a_dir", 3, "a directory"},
    {"evaluate --model toy --config /dev/zero", 3, "not a regular file"},
    {"evaluate --model toy --save-program /dev/full", 3,
     "--save-program: cannot write '/dev/full': No space left"},             // exit 0
    {"evaluate --model {dir}/ckpt_huge", 2, "more than megasched handles"},  // bad_alloc
    {"evaluate --model {dir}/ckpt_head_dim", 2,
     "head_dim 4294967296 is out of range (at most 2^30; a Llama's is hidden_size / "
     "num_attention_heads = 16)"},  // blamed q_proj.weight's shape [0, 64]
    {"evaluate --model {dir}/ckpt_head_dim_product", 2,
     "num_attention_heads x head_dim is 4.295e+09 elements"},
    {"evaluate --model {dir}/ckpt_theta", 2,
     "rope_theta must be a positive finite number"},  // blamed the schedule
    {"evaluate --model {dir}/ckpt_eps", 2, "rms_norm_eps must be a finite number >= 0"},
    {"evaluate --model toy --gpu auto", 3, "", false, true},  // exit 2
    // validate
    {"validate --model toy --program {dir}/small.json", 2,
     "lowered for model 'small', not 'toy'"},                                           // "ok"
    {"validate --program {dir}/huge_weights.json", 2, "buffer_elements[0] (weights)"},  // "ok"
    {"validate --model toy --program {dir}/bad_unroll.json", 2, "MS_UNROLL"},
    {"validate --random-configs -1", 2, "--random-configs: must be an integer in [1,"},
    {"validate --seed -5", 2, "--seed: must be an integer in [0, 2^64 - 1]"},
    {"validate --model {dir}/ckpt_huge", 2, "more than megasched handles"},
    {"validate --config {dir}/dup.json", 2, "appears twice"},
    // fuzz-validator
    {"fuzz-validator --n -1", 2, "--n: must be an integer >= 1, not '-1'"},  // ran 2^64 - 1
    {"fuzz-validator --n 0", 2, "--n: must be an integer >= 1"},
    {"fuzz-validator --n 1 --out /dev/full", 3, "--out: cannot write '/dev/full'", true},  // exit 0
    {"fuzz-validator --n 1 --dump-rejected-safe {dir}/nonexistent", 3, "is not a directory"},
    // loop
    {"loop --model toy --device cpu --budget 0", 2, "--budget: must be an integer in [1,"},
    {"loop --model toy --device cpu --minutes nan", 2,
     "--minutes: must be a finite number >= 0, not 'nan'"},
    {"loop --model toy --device cpu --minutes -1", 2, "--minutes"},
    {"loop --model toy --device cpu --plateau -1", 2, "--plateau"},
    {"loop --model toy --device cpu --restart-after 0", 2, "--restart-after"},
    {"loop --model toy --device cpu --min-gain 0.9", 2, "--min-gain"},
    {"loop --model toy --device cpu --min-gain -0.01", 2, "--min-gain"},
    {"loop --model toy --device cpu --confirm -1", 2, "--confirm"},
    {"loop --model toy --device cpu --confirm 11", 2, "--confirm"},
    {"loop --model toy --device cpu --exploration 1.5", 2,
     "--exploration: must be a finite number in [0, 1]"},
    {"loop --model toy --device cpu --pool 0", 2, "--pool"},
    {"loop --model toy --device gpu --compile-ahead -1", 2, "--compile-ahead: must be an integer"},
    {"loop --model toy --device gpu --compile-threads 0", 2,
     "--compile-threads: must be an integer in [1,"},
    {"loop --model toy --device cpu --compile-ahead 2", 2,
     "CPU trials build none: drop them, or run with --device gpu"},
    {"loop --model toy --device cpu --workers 2 --compile-threads 2", 2, "CPU trials build none"},
    {"landscape record --model toy --device cpu --compile-threads 0", 2, "--compile-threads"},
    {"loop --model toy --device cpu --seed -1", 2, "--seed"},
    {"loop --model toy --device cpu --weight-seed -1", 2, "--weight-seed"},
    {"loop --model toy --device cpu --baselines cudnn", 2,
     "unknown baseline kind 'cudnn' (choices: all, none, auto, cublas, graph-pdl"},
    {"landscape record --model toy --device cpu --baselines graph-pdl,graph-pdl", 2,
     "'graph-pdl' named twice"},
    {"evaluate --model toy --baselines cublas,none", 2, "'none' stands alone, not in a list"},
    {"evaluate --model toy --baselines none --no-baseline", 2, "excludes"},
    {"worker --model toy --device cpu --baselines ,", 2, "an empty kind"},
    {"loop --model toy --device cpu --stop-slower 1", 2,
     "--stop-slower: must be 0 (off) or a finite number >= 1.05, not 1"},
    {"landscape record --model toy --device cpu --stop-slower nan", 2, "--stop-slower"},
    {"worker --model toy --device cpu --stop-slower x2", 2, "'x2' is not a number"},
    {"loop --model toy --device cpu --timed-position -3", 2, "--timed-position"},
    {"loop --model toy --device cpu --objective '0:1;7:1'", 2, "weight '1;7:1' is not a number"},
    {"loop --model toy --device cpu --objective 0:0.0", 2, "a weight is a finite number above 0"},
    {"loop --model toy --device cpu --objective 3,3", 2, "position 3 is given twice"},
    {"loop --model toy --device cpu --workers 2 --objective 0,500", 2,
     "position 500 is beyond model toy's max_seq 128"},
    {"loop --model toy --device cpu --objective 0,60 --timed-position 5", 2,
     "use one or the other"},
    {"loop --model toy --device cpu --trial-timeout 0", 2,
     "--trial-timeout: must be a finite number in (0,"},  // all "timeout"
    {"loop --model toy --device cpu --trial-timeout inf", 2, "--trial-timeout"},
    {"loop --model toy --device cpu --results {dir}/README.md --corpus {dir}/c.jsonl", 2,
     "is not a results.tsv"},  // appended
    {"loop --model toy --device cpu --results {dir}/r.tsv --corpus {dir}/README.md", 2,
     "is not a corpus.jsonl"},
    {"loop --model toy --device cpu --results {dir}/corpus.jsonl --corpus {dir}/results.tsv", 2,
     "is not a results.tsv"},
    {"loop --model toy --device cpu --results {dir}/one --corpus {dir}/one", 2, "both name"},
    {"loop --model toy --device cpu --results /dev/zero --corpus {dir}/c.jsonl", 2,
     "/dev/zero is not a regular file"},  // read forever
    {"loop --model toy --device cpu --results {dir}/a_dir --corpus {dir}/c.jsonl", 2,
     "is a directory"},
    {"loop --model toy --device cpu --start {dir}/dup.json", 2, "appears twice"},
    {"loop --model toy --device cpu --workers 0", 2, "--workers"},
    {"loop --model toy --device gpu --workers 2", 2, "--workers runs CPU trials"},
    {"loop --model toy --device cpu --gpus all", 2, "--gpus runs one worker per GPU"},
    {"loop --model toy --gpus 0 --workers 2", 2, "give one"},
    {"loop --model toy --device cpu --workers 2 --mpi", 2, "give one"},
    {"loop --model toy --device cpu --mpi --rank-timeout 0", 2, "--rank-timeout"},
    {"loop --model toy --device cpu --start {dir}/nonexistent.json", 3, "cannot read"},
    // report
    {"report --results {dir}/results.tsv --corpus {dir}/corpus.jsonl --out {dir}/results.tsv", 2,
     "is the --results log it would read"},  // overwrote it
    {"report --results {dir}/results.tsv --corpus {dir}/corpus.jsonl --out {dir}/corpus.jsonl", 2,
     "is the --corpus log"},
    {"report --results /dev/zero --out ''", 3, "/dev/zero is a device"},  // read forever
    {"report --results {dir}/results.tsv --corpus {dir}/corpus.jsonl --out /dev/full", 3,
     "--out: cannot write '/dev/full'"},
    {"report --results {dir}/nonexistent.tsv", 3, "no results file"},
    {"report --results {dir}/results.tsv --corpus {dir}/corpus.jsonl --out '' --plan "
     "{dir}/dup.json",
     2, "appears twice"},
    // prior
    {"prior --compare --seeds 0", 2, "--seeds: must be an integer in [1,"},        // segfault
    {"prior --compare --work-dir {dir}/a_file", 2, "is a file, not a directory"},  // abort
    {"prior --compare --budget -1", 2, "--budget"},
    {"prior --compare --jobs 0", 2, "--jobs"},
    {"prior --compare --target-us nan", 2, "--target-us"},
    {"prior --eval --folds 1", 2, "--folds: must be an integer in [2, 1000]"},
    {"prior --eval --corpus /dev/zero", 3, "/dev/zero is a device"},
    {"prior --eval --corpus {dir}/corpus.jsonl --device tpu", 2,
     "--device: tpu not in {cpu,gpu}"},  // exit 1, no message
    {"prior --eval --corpus {dir}/corpus.jsonl --target bogus", 2,
     "--target: unknown GPU target 'bogus'"},  // exit 1, no message
    {"prior --eval --corpus {dir}/corpus.jsonl --target h100 --device gpu", 1,
     "has no trials on target h100 on device gpu"},  // exit 1, no message
    // worker
    {"worker --model toy --device cpu --timed-position -1", 2, "--timed-position"},
    {"worker --model toy --device cpu --objective 0:1,0:1", 2, "position 0 is given twice"},
    {"worker --model toy --device cpu --objective 0,128", 2, "position 128 is beyond model toy's"},
    {"worker --model toy --device cpu --weight-seed -1", 2, "--weight-seed"},
    {"worker --model {dir}/ckpt_theta --device cpu", 2, "rope_theta must be"},
    // generate
    {"generate --model toy --max-tokens 2 --logits-out /dev/full", 3,
     "--logits-out: cannot write '/dev/full'"},  // exit 0
    {"generate --model toy --max-tokens 0", 2, "--max-tokens"},
    {"generate --model toy --prompt-ids 1,300", 2,
     "prompt token 300 is outside the vocabulary [0, 256) of model toy"},  // exit 1
    {"generate --model toy --prompt-ids 1,-4", 2, "prompt token -4 is outside the vocabulary"},
    {"generate --model toy --max-tokens 100 --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,"
     "17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32",
     2, "= 131 steps exceeds the KV cache of 128 positions of model toy"},  // exit 1
    {"generate --model toy --seed -1", 2, "--seed"},
    {"generate --model {dir}/ckpt_huge", 2, "more than megasched handles"},  // bad_alloc
    {"generate --model toy --config {dir}/nonexistent.json", 3, "cannot read"},
    // doctor, baseline, profile
    {"doctor --repeats 0", 2, "--repeats"},
    {"doctor --buffer-mib -1", 2, "--buffer-mib"},
    {"baseline --iterations 0", 2, "--iterations"},
    {"baseline --warmup -1", 2, "--warmup"},
    {"baseline --model tyo", 2, "did you mean 'toy'"},  // exit 3 without a GPU
    {"baseline --kind cudnn", 2, "--kind"},
    {"baseline --timeline", 2, "--timeline needs --kind graph-pdl"},
    // bench: every argument is checked before the GPU is looked for
    {"bench --model tyo", 2, "did you mean 'toy'"},
    {"bench --model toy --positions 0,999", 2, "--positions: 999 is not in [0, 127]"},
    {"bench --model toy --positions x", 2, "--positions takes comma-separated integers"},
    {"bench --model toy --iterations 0", 2, "--iterations"},
    {"bench --model toy --baseline cudnn", 2, "--baseline"},
    {"bench --model toy --positions 0 --config {dir}/nonexistent.json", 3, "cannot read"},
    {"bench --model toy --positions 0 --config {dir}/dup.json", 2, "appears twice"},
    {"bench --model toy --positions 0 --peers {dir}/nonexistent.json", 3, "cannot read"},
    {"bench --model toy --positions 0 --peers {dir}/README.md", 2, "is not JSON"},
    {"bench --model toy --positions 0", 3, "bench measures on a GPU and predicts nothing", false,
     true},
    {"bench --model toy", 3, "bench measures on a GPU and predicts nothing", false,
     true},  // exit 2: its own default positions 1024 and 4096 lie beyond toy's 128
    // bench --generate: the cases, plans and flags, also before the GPU is looked for
    {"bench --model toy --generate 0:5", 2, "PROMPT_LEN and NEW_TOKENS must be at least 1"},
    {"bench --model toy --generate 100:29", 2,
     "= 129 exceeds the 128 positions of model toy (hint: keep PROMPT_LEN + NEW_TOKENS <= 128)"},
    {"bench --model toy --generate 128", 2, "--generate takes PROMPT_LEN:NEW_TOKENS"},
    {"bench --model toy --generate 4:4,x:2", 2, "got 'x:2'"},
    {"bench --model toy --generate 4:4 --positions 0", 2, "pass one of them"},
    {"bench --model toy --plan default", 2, "--plan times a whole generation"},
    {"bench --model toy --generate 4:4 --rounds 2", 2, "--rounds interleaves single-step rows"},
    {"bench --model toy --from-bench {dir}/b.json --fit-plan {dir}/p.json --rounds 3", 2,
     "--from-bench measures nothing"},
    {"bench --model toy --positions 0 --rounds 0", 2, "--rounds"},
    {"propose --model llama-1b --config best:llama-1b:h100 --position 99999", 2,
     "--position 99999 is past the last position 8191 of model llama-1b"},
    {"bench --model toy --generate 4:4 --fit-plan {dir}/p.json", 2,
     "--fit-plan fits a plan to single steps"},
    {"bench --model toy --positions 5,10 --fit-plan {dir}/p.json", 2,
     "--fit-plan needs position 0 among --positions"},
    {"bench --model toy --positions 0 --fit-plan {dir}/p.json --fit-margin 0.9", 2, "--fit-margin"},
    {"bench --model toy --generate 4:4 --plan {dir}/nonexistent.json", 3, "cannot read"},
    {"bench --model toy --generate 4:4", 3, "bench --generate times generations on a GPU", false,
     true},
    {"profile --model toy --out {dir}/p.json --top 0", 2, "--top"},
    {"profile --model toy --out {dir}/p.json --position -1", 2, "--position"},
    {"profile --model toy --out {dir}/p.json --warmup nan", 2, "--warmup"},
    {"profile --model toy --gpu h100 --out {dir}/p.json --config {dir}/deep.json", 2,
     "has value [[[["},
    // promote
    {"promote --model toy --config default", 3,
     "(--device cpu promotes without one, on the ReferenceVm and the cost model's predicted "
     "latencies; add --verify-only for the verify gate alone)",
     false, true},  // hinted --verify-only, as if --device cpu alone could not promote
    // propose
    {"propose --model toy --config {dir}/dup.json", 2, "appears twice"},
    {"propose --model toy --config {dir}/big.json", 2, "has value \"xxxx"},
    {"propose --model {dir}/ckpt_eps", 2, "rms_norm_eps"},
    {"propose --model toy --gpu auto", 3, "", false, true},  // exit 2
};

TEST_F(CliBadInput, EveryVerbRefusesBadInputWithItsExitCodeAndOneLine) {
  const bool gpu = megasched::eval::gpu_available(nullptr);
  for (const Row& row : kRows) {
    if (row.without_gpu && gpu) continue;
    SCOPED_TRACE(row.args);
    const Outcome r = run(row.args);
    EXPECT_EQ(r.exit_code, row.exit_code) << r.err;
    std::string err = r.err;
    if (!err.empty() && err.back() == '\n') err.pop_back();
    if (row.last_line) err = err.substr(err.rfind('\n') + 1);
    EXPECT_EQ(err.find('\n'), std::string::npos) << "more than one line on stderr:\n" << r.err;
    const std::string verb = std::string(row.args).substr(0, std::string(row.args).find(' '));
    EXPECT_EQ(err.rfind("megasched " + verb + ": ", 0), 0u) << err;
    EXPECT_NE(err.find(row.says), std::string::npos) << err;
    EXPECT_LT(err.size(), 600u) << "the message echoes its input: " << err.substr(0, 600);
  }
}

TEST_F(CliBadInput, AResultThatCannotBeWrittenToStdoutIsExitThree) {
  for (const char* args : {"propose --model toy", "models --json", "evaluate --model toy"}) {
    const std::string cmd = std::string(MS_BINARY_PATH) + " " + args + " > /dev/full 2> '" +
                            (dir_ / "err.txt").string() + "'";
    const int status = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << args;  // once exit 0
    EXPECT_NE(slurp(dir_ / "err.txt").find("cannot write the result to stdout"), std::string::npos)
        << args;
  }
}

TEST_F(CliBadInput, RefusedLogsAndReportInputsAreLeftAsTheyWere) {
  const std::string readme = slurp(dir_ / "README.md");
  const std::string results = slurp(dir_ / "results.tsv");
  const std::string corpus = slurp(dir_ / "corpus.jsonl");
  run("loop --model toy --device cpu --results {dir}/README.md --corpus {dir}/c2.jsonl");
  run("loop --model toy --device cpu --results {dir}/corpus.jsonl --corpus {dir}/results.tsv");
  run("report --results {dir}/results.tsv --corpus {dir}/corpus.jsonl --out {dir}/results.tsv");
  EXPECT_EQ(slurp(dir_ / "README.md"), readme);
  EXPECT_EQ(slurp(dir_ / "results.tsv"), results);
  EXPECT_EQ(slurp(dir_ / "corpus.jsonl"), corpus);
}

}  // namespace
