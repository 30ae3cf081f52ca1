#include "schedule/program.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "schedule/lower.h"
#include "schedule/search.h"
#include "tests/h100_target.h"

namespace megasched::schedule {
namespace {

GpuTarget test_target() { return testing_support::h100_target(6, "test-gpu"); }

// A program that exercises every opcode and flag: unfused norm / residual / SiLU / RoPE, split-K,
// split attention.
Program busy_program() {
  ScheduleConfig config;
  config.tiling.gemv_k_split = 2;
  config.tiling.attn_kv_partitions = 2;
  config.fusion.norm_into_gemv = false;
  config.fusion.residual_into_gemv = false;
  config.fusion.silu_mul_into_down = false;
  config.fusion.rope_kv_into_qkv = false;
  config.dependencies.residual = Granularity::kPerSlice;
  config.assignment.policy = AssignPolicy::kLoadBalance;
  std::string error;
  std::optional<Program> p = lower(*find_preset("toy"), test_target(), config, &error);
  EXPECT_TRUE(p.has_value()) << error;
  return *p;
}

TEST(ProgramJson, RoundTripIsExact) {
  const Program p = busy_program();
  const nlohmann::json j = to_json(p);
  std::string error;
  // Through text, as a program travels between processes.
  std::optional<Program> back = program_from_json(nlohmann::json::parse(j.dump()), &error);
  ASSERT_TRUE(back.has_value()) << error;
  EXPECT_EQ(to_json(*back), j);
  ASSERT_EQ(back->tasks.size(), p.tasks.size());
  EXPECT_EQ(std::memcmp(back->tasks.data(), p.tasks.data(), p.tasks.size() * sizeof(ms_abi::Instr)),
            0);
  EXPECT_EQ(std::memcmp(&back->model, &p.model, sizeof(ms_abi::ModelParams)), 0);
  EXPECT_EQ(back->buffer_elements, p.buffer_elements);
  EXPECT_EQ(back->counter_totals, p.counter_totals);
  EXPECT_EQ(back->counter_names, p.counter_names);
  EXPECT_EQ(back->queues, p.queues);
  ASSERT_EQ(back->ops.size(), p.ops.size());
  for (size_t i = 0; i < p.ops.size(); ++i) {
    EXPECT_EQ(back->ops[i].name, p.ops[i].name);
    EXPECT_EQ(back->ops[i].kind, p.ops[i].kind);
    EXPECT_EQ(back->ops[i].layer, p.ops[i].layer);
  }
  ASSERT_EQ(back->regions.size(), p.regions.size());
  for (size_t i = 0; i < p.regions.size(); ++i) {
    EXPECT_EQ(back->regions[i].name, p.regions[i].name);
    EXPECT_EQ(back->regions[i].begin, p.regions[i].begin);
    EXPECT_EQ(back->regions[i].end, p.regions[i].end);
    EXPECT_EQ(back->regions[i].input, p.regions[i].input);
  }
  EXPECT_EQ(back->launch.dynamic_queue, p.launch.dynamic_queue);
  EXPECT_EQ(back->launch.smem_bytes, p.launch.smem_bytes);
  EXPECT_EQ(back->build.knobs, p.build.knobs);
  EXPECT_EQ(back->build.x_floats, p.build.x_floats);
  EXPECT_EQ(back->model.rms_eps, p.model.rms_eps);
}

TEST(ProgramJson, MissingFieldIsAnErrorNamingIt) {
  nlohmann::json j = to_json(busy_program());
  j["tasks"][3].erase("op_id");
  std::string error;
  EXPECT_FALSE(program_from_json(j, &error).has_value());
  EXPECT_EQ(error, "program.tasks[3].op_id: missing");
}

TEST(ProgramJson, WrongTypesAreErrorsNotExceptions) {
  const nlohmann::json good = to_json(busy_program());
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"string for int", [](nlohmann::json& j) { j["launch"]["grid_blocks"] = "six"; },
       "program.launch.grid_blocks: expected an integer"},
      {"negative offset", [](nlohmann::json& j) { j["tasks"][0]["out"] = -1; },
       "program.tasks[0].out: expected a non-negative integer"},
      {"too large for uint16", [](nlohmann::json& j) { j["tasks"][0]["opcode"] = 70000; },
       "program.tasks[0].opcode: expected a smaller integer"},
      {"wait not a pair", [](nlohmann::json& j) { j["waits"][0] = nlohmann::json::array({1}); },
       "program.waits[0]: expected [counter, threshold]"},
      {"queues not arrays", [](nlohmann::json& j) { j["queues"][0] = 5; },
       "program.queues[0]: expected an array"},
      {"unknown op kind", [](nlohmann::json& j) { j["ops"][0]["kind"] = "conv"; },
       "program.ops[0].kind: unknown op kind \"conv\""},
      {"bool for bool", [](nlohmann::json& j) { j["regions"][0]["input"] = 1; },
       "program.regions[0].input: expected a boolean"},
      {"short buffer list", [](nlohmann::json& j) { j["buffer_elements"].erase(3); },
       "program.buffer_elements: expected 4 entries"},
      {"float for float ok, string not", [](nlohmann::json& j) { j["model"]["rms_eps"] = "x"; },
       "program.model.rms_eps: expected a number"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    c.edit(j);
    std::string error;
    EXPECT_FALSE(program_from_json(j, &error).has_value()) << c.what;
    EXPECT_EQ(error, c.expected) << c.what;
  }
  std::string error;
  EXPECT_FALSE(program_from_json(nlohmann::json::array(), &error).has_value());
  EXPECT_EQ(error, "program: expected an object");
}

TEST(Program, NameTablesCoverEveryValue) {
  EXPECT_STREQ(opcode_name(ms_abi::kGemv), "gemv");
  EXPECT_STREQ(opcode_name(ms_abi::kAttnPartial), "attn_partial");
  EXPECT_STREQ(opcode_name(ms_abi::kArgmax), "argmax");
  EXPECT_STREQ(opcode_name(ms_abi::kOpcodeCount), "?");
  EXPECT_STREQ(buffer_name(ms_abi::kBufActivations), "act");
  EXPECT_STREQ(buffer_name(ms_abi::kBufStep), "step");
  EXPECT_STREQ(buffer_name(ms_abi::kBufCount), "?");
  EXPECT_STREQ(op_kind_name(OpKind::kAttnCombine), "attn_combine");
  EXPECT_STREQ(op_kind_name(OpKind::kLmHead), "lm_head");
  EXPECT_STREQ(op_kind_name(OpKind::kCount), "?");
}

TEST(Program, WaitHeadsAreEachTasksFirstWaitsWithTheirTotals) {
  const Program p = busy_program();
  const std::vector<ms_abi::WaitHead> heads = wait_heads(p);
  ASSERT_EQ(heads.size(), p.tasks.size() * ms_abi::kWaitHeads);
  size_t multi = 0;
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    const ms_abi::Instr& in = p.tasks[t];
    multi += in.wait_count >= 2;
    for (uint32_t j = 0; j < ms_abi::kWaitHeads; ++j) {
      const ms_abi::WaitHead& h = heads[t * ms_abi::kWaitHeads + j];
      if (j >= in.wait_count) {
        EXPECT_EQ(h.counter, 0u);
        EXPECT_EQ(h.threshold, 0u);
        EXPECT_EQ(h.total, 0u);
        continue;
      }
      const ms_abi::Wait& w = p.waits[in.wait_begin + j];
      EXPECT_EQ(h.counter, w.counter) << p.task_label(static_cast<uint32_t>(t));
      EXPECT_EQ(h.threshold, w.threshold);
      EXPECT_EQ(h.total, p.counter_totals[w.counter]);
      EXPECT_EQ(h.pad, 0u);
    }
  }
  EXPECT_GT(multi, 0u);  // the program has tasks with a second head

  // A wait or counter index out of range leaves the head zero instead of reading past the tables.
  Program bad = p;
  for (ms_abi::Instr& in : bad.tasks) {
    if (in.wait_count == 0) continue;
    bad.waits[in.wait_begin].counter = bad.num_counters();
    break;
  }
  const std::vector<ms_abi::WaitHead> bad_heads = wait_heads(bad);
  bool zeroed = false;
  for (size_t t = 0; t < bad.tasks.size() && !zeroed; ++t) {
    if (bad.tasks[t].wait_count == 0) continue;
    zeroed = bad_heads[t * ms_abi::kWaitHeads].total == 0 &&
             bad_heads[t * ms_abi::kWaitHeads].counter == 0;
  }
  EXPECT_TRUE(zeroed);
  EXPECT_EQ(wait_heads(Program{}).size(), ms_abi::kWaitHeads);
}

TEST(Program, LabelsNameOpsTilesAndRegions) {
  std::string error;
  const Program p = *lower(*find_preset("toy"), test_target(), ScheduleConfig{}, &error);
  // Task 0 is the embed, 1-2 the two QKV tiles.
  EXPECT_EQ(p.task_label(2), "task 2 (L0.qkv tile 1)");
  EXPECT_EQ(p.task_label(0), "task 0 (embed tile 0)");
  EXPECT_EQ(p.task_label(999), "task 999 (out of range)");
  const Region* q = p.find_region("L0.q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(
      p.range_label(ms_abi::kBufActivations, q->begin + 2, q->begin + 5),
      "act[" + std::to_string(q->begin + 2) + ":" + std::to_string(q->begin + 5) + "] (L0.q[2:5])");
  EXPECT_EQ(p.find_region("no such region"), nullptr);
}

TEST(Program, StatsCountTasksAndWeightBytes) {
  std::string error;
  const Program p = *lower(*find_preset("toy"), test_target(), ScheduleConfig{}, &error);
  const ProgramStats s = stats(p);
  EXPECT_EQ(s.tasks, p.tasks.size());
  EXPECT_EQ(s.waits, p.waits.size());
  EXPECT_EQ(s.counters, p.counter_totals.size());
  EXPECT_EQ(s.queues, 6u);
  // fp32: the embedding row, each GEMV matrix once, and the fused-norm gamma once per task that
  // normalises (2 QKV tiles, 4 gate_up tiles, 1 LM-head tile).
  const uint64_t elements =
      64 + (128 * 64 + 2 * 64) + 64 * 64 + (256 * 64 + 4 * 64) + 64 * 128 + (256 * 64 + 1 * 64);
  EXPECT_EQ(s.weight_bytes, elements * 4);
}

// A program read from JSON is checked against the model that will run it: every field a crash or
// a silent change of the prediction once came from.
TEST(ProgramFitsModel, RefusesEveryFieldThatDiffersFromTheModelOrTheKnobTable) {
  const ModelShape toy = *find_preset("toy");
  const GpuTarget target = test_target();
  std::string error;
  const std::optional<Program> base = lower(toy, target, ScheduleConfig{}, &error);
  ASSERT_TRUE(base) << error;
  ASSERT_TRUE(check_program_fits_model(*base, toy, target, &error)) << error;
  struct Case {
    const char* says;
    std::function<void(Program&)> edit;
  };
  const std::vector<Case> cases = {
      {"lowered for model 'small', not 'toy'", [](Program& p) { p.model_name = "small"; }},
      {"program.model.layers is 2, but model toy has 1", [](Program& p) { p.model.layers = 2; }},
      {"program.model.vocab is 512", [](Program& p) { p.model.vocab = 512; }},
      {"program.model.rms_eps", [](Program& p) { p.model.rms_eps = 0.5f; }},
      {"program.model.attn_scale", [](Program& p) { p.model.attn_scale = 1.0f; }},
      {"buffer_elements[0] (weights) is 1099511627776",
       [](Program& p) { p.buffer_elements[0] = uint64_t{1} << 40; }},
      {"buffer_elements[1] (act) is 1099511627776, but model toy needs at most",
       [](Program& p) { p.buffer_elements[1] = uint64_t{1} << 40; }},
      {"buffer_elements[2] (kv)", [](Program& p) { p.buffer_elements[2] += 1; }},
      {"buffer_elements[3] (step) is 5", [](Program& p) { p.buffer_elements[3] = 5; }},
      {"reads weights at element", [](Program& p) { p.tasks[0].weight = uint64_t{1} << 62; }},
      {"MS_UNROLL (kernel.unroll) is 3; allowed values: 1, 2, 4, 8",
       [](Program& p) { p.build.knobs["MS_UNROLL"] = 3; }},
      {"MS_STREAM_DEPTH (kernel.stream_depth) is 5; allowed values: 2, 3, 4",
       [](Program& p) { p.build.knobs["MS_STREAM_DEPTH"] = 5; }},
      {"MS_VECTOR_BYTES (kernel.vector_bytes) is 32",
       [](Program& p) { p.build.knobs["MS_VECTOR_BYTES"] = 32; }},
      {"MS_ROWS_PER_WARP (kernel.rows_per_warp) is 0",
       [](Program& p) { p.build.knobs["MS_ROWS_PER_WARP"] = 0; }},
      {"MS_WEIGHT_LOAD is 2, but kernel.weight_load has 2 choices",
       [](Program& p) { p.build.knobs["MS_WEIGHT_LOAD"] = 2; }},
      {"MS_WEIGHT_RING is missing", [](Program& p) { p.build.knobs.erase("MS_WEIGHT_RING"); }},
      {"MS_FAST is no kernel knob", [](Program& p) { p.build.knobs["MS_FAST"] = 1; }},
      {"program.build.x_floats is 4096, but the knobs give 0",
       [](Program& p) { p.build.x_floats = 4096; }},
      {"smem_pages (smem.pages) is 3", [](Program& p) { p.launch.smem_pages = 3; }},
      {"smem_page_bytes (smem.page_bytes) is 100",
       [](Program& p) { p.launch.smem_page_bytes = 100; }},
      {"program.launch.smem_bytes is 1", [](Program& p) { p.launch.smem_bytes = 1; }},
      {"threads_per_block (launch.threads_per_block) is 4096",
       [](Program& p) { p.launch.threads_per_block = 4096; }},
      {"prefetch_depth (pipeline.prefetch_depth) is -1",
       [](Program& p) { p.launch.prefetch_depth = -1; }},
      {"program.launch.grid_blocks is 7", [](Program& p) { p.launch.grid_blocks = 7; }},
  };
  for (const Case& c : cases) {
    Program p = *base;
    c.edit(p);
    error.clear();
    EXPECT_FALSE(check_program_fits_model(p, toy, target, &error)) << c.says;
    EXPECT_NE(error.find(c.says), std::string::npos) << error;
  }
  // Another model's program, either way round.
  const ModelShape small = *find_preset("small");
  EXPECT_FALSE(check_program_fits_model(*base, small, target, &error));
  const std::optional<Program> of_small = lower(small, target, ScheduleConfig{}, &error);
  ASSERT_TRUE(of_small) << error;
  EXPECT_FALSE(check_program_fits_model(*of_small, toy, target, &error));
  EXPECT_TRUE(check_program_fits_model(*of_small, small, target, &error)) << error;
}

TEST(ProgramFitsModel, EveryLoweringFitsItsModelAndItsActivationBound) {
  const GpuTarget target = test_target();
  std::mt19937_64 rng(5);
  for (const char* name : {"toy", "toy-2L", "small"}) {
    const ModelShape shape = *find_preset(name);
    const uint64_t bound = max_activation_elements(shape);
    for (int i = 0; i < 60; ++i) {
      const ScheduleConfig config = i == 0 ? ScheduleConfig{} : random_config(shape, target, rng);
      std::string error;
      const std::optional<Program> p = lower(shape, target, config, &error);
      if (!p) continue;
      EXPECT_LE(p->buffer_elements[ms_abi::kBufActivations], bound) << name << " " << i;
      EXPECT_TRUE(check_program_fits_model(*p, shape, target, &error)) << name << ": " << error;
    }
  }
}

}  // namespace
}  // namespace megasched::schedule
