// megasched's bf16 accuracy against transformers', on the CPU (dev/bf16_precision.md): a random
// bf16 model (generate_weights) decodes one random token stream from position 0; at each requested
// position the max abs logit error of
//   megasched      the ReferenceVm running the default lowered program (the GPU agrees with it),
//   hf_bf16        transformers' bf16 eager path, emulated (eval/transformers_emulation.h) with
//                  inv_freq fp32 as from_pretrained(dtype=bfloat16) leaves it,
//   hf_bf16_cast   the same after model.to(bfloat16), which rounds inv_freq to bf16,
// against two fp32-compute references on the same weights:
//   ref            transformers with dtype float32 and inv_freq fp32 (from_pretrained),
//   ref_cast       the same model cast to bf16 and back to float32 (inv_freq rounded to bf16),
//                  the reference bench/hf_crosscheck.py used before it kept inv_freq fp32.
//
// usage: precision_bench [--head-dim 128] [--gqa 3] [--heads-total-dim 384] [--layers 2]
//                        [--rope-scaling llama3|none] [--positions 0,300,1024,4096] [--seed 1]
//                        [--out FILE.json]
// Prints one line per position and the JSON summary (also written to --out).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/transformers_emulation.h"
#include "schedule/lower.h"
#include "schedule/target.h"
#include "vm/reference_vm.h"

namespace {

using namespace megasched;

struct Options {
  int head_dim = 128;
  int gqa = 3;      // query heads per KV head
  int q_dim = 384;  // heads x head_dim, also the hidden size
  int layers = 2;
  bool llama3 = true;  // llama3 RoPE scaling (factor 32, low 1, high 4, original 8192)
  std::vector<int> positions = {0, 300, 1024, 4096};
  uint64_t seed = 1;
  std::string out;
};

[[noreturn]] void usage(const std::string& why, int code = 2) {
  std::fprintf(code == 0 ? stdout : stderr,
               "precision_bench: %s\nusage: precision_bench [--head-dim N] [--gqa N] "
               "[--heads-total-dim N] [--layers N] [--rope-scaling llama3|none] "
               "[--positions P,P,...] [--seed N] [--out FILE.json]\n",
               why.c_str());
  std::exit(code);
}

int positive(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v <= 0 || v > 1 << 20)
    usage(flag + " wants a positive integer, got '" + text + "'");
  return static_cast<int>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h")
      usage("CPU bf16 accuracy against emulated transformers (fp32 and bf16)", 0);
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--head-dim") {
      o.head_dim = positive(flag, value);
    } else if (flag == "--gqa") {
      o.gqa = positive(flag, value);
    } else if (flag == "--heads-total-dim") {
      o.q_dim = positive(flag, value);
    } else if (flag == "--layers") {
      o.layers = positive(flag, value);
    } else if (flag == "--seed") {
      o.seed = static_cast<uint64_t>(positive(flag, value));
    } else if (flag == "--out") {
      o.out = value;
    } else if (flag == "--rope-scaling") {
      if (value != "llama3" && value != "none") usage("--rope-scaling is llama3 or none");
      o.llama3 = value == "llama3";
    } else if (flag == "--positions") {
      o.positions.clear();
      std::stringstream ss(value);
      for (std::string item; std::getline(ss, item, ',');)
        o.positions.push_back(item == "0" ? 0 : positive(flag, item));
      if (o.positions.empty()) usage("--positions is empty");
    } else {
      usage("unknown flag " + flag);
    }
  }
  const int heads = o.q_dim / o.head_dim;
  if (o.head_dim % 2 != 0 || o.q_dim % o.head_dim != 0 || heads % o.gqa != 0)
    usage("--heads-total-dim must be a multiple of --head-dim x --gqa, and head_dim even");
  return o;
}

schedule::ModelShape shape_for(const Options& o) {
  schedule::ModelShape s;
  s.name = "precision-hd" + std::to_string(o.head_dim) + "-gqa" + std::to_string(o.gqa) +
           (o.llama3 ? "-llama3" : "");
  s.hidden = o.q_dim;
  s.layers = o.layers;
  s.heads = o.q_dim / o.head_dim;
  s.kv_heads = s.heads / o.gqa;
  s.head_dim = o.head_dim;
  s.ffn = 1024;
  s.vocab = 2048;
  s.max_seq = *std::max_element(o.positions.begin(), o.positions.end()) + 1;
  s.rope_theta = 500000.0f;
  s.dtype = schedule::DType::kBF16;
  if (o.llama3) {
    s.rope_scaling_factor = 32.0f;  // Llama 3.2's
    s.rope_low_freq_factor = 1.0f;
    s.rope_high_freq_factor = 4.0f;
    s.rope_original_max_position = 8192;
  }
  return s;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float e = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]));
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const schedule::ModelShape shape = shape_for(o);
  const schedule::Weights weights = schedule::generate_weights(shape, o.seed, 0);
  std::string error;
  const std::optional<schedule::Program> program =
      schedule::lower(shape, *schedule::find_target("h100"), schedule::ScheduleConfig{}, &error);
  if (!program) usage("lowering failed: " + error);
  vm::ReferenceVm vm(*program, weights);
  using eval::TransformersLlama;
  TransformersLlama ref(weights, {false, false}), ref_cast(weights, {false, true});
  TransformersLlama hf_bf16(weights, {true, false}), hf_bf16_cast(weights, {true, true});

  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  nlohmann::json rows = nlohmann::json::array();
  const int last = shape.max_seq - 1;
  for (int pos = 0; pos <= last; ++pos) {
    const int32_t token = static_cast<int32_t>(rng() % static_cast<uint32_t>(shape.vocab));
    const vm::ReferenceVm::StepResult ms = vm.step(token, pos);
    if (!ms.completed) usage("the ReferenceVm step did not complete: " + ms.stuck);
    const std::vector<float> r = ref.step(token, pos), rc = ref_cast.step(token, pos);
    const std::vector<float> b = hf_bf16.step(token, pos), bc = hf_bf16_cast.step(token, pos);
    if (std::find(o.positions.begin(), o.positions.end(), pos) == o.positions.end()) continue;
    nlohmann::json row = {
        {"position", pos},
        {"vs_ref",
         {{"megasched", max_abs_diff(ms.logits, r)},
          {"hf_bf16", max_abs_diff(b, r)},
          {"hf_bf16_cast", max_abs_diff(bc, r)}}},
        {"vs_ref_cast",
         {{"megasched", max_abs_diff(ms.logits, rc)}, {"hf_bf16_cast", max_abs_diff(bc, rc)}}},
        {"ref_cast_vs_ref", max_abs_diff(rc, r)}};
    std::printf(
        "%s pos %5d | vs ref: megasched %.4f hf_bf16 %.4f hf_bf16_cast %.4f | vs ref_cast: "
        "megasched %.4f hf_bf16_cast %.4f\n",
        shape.name.c_str(), pos, row["vs_ref"]["megasched"].get<float>(),
        row["vs_ref"]["hf_bf16"].get<float>(), row["vs_ref"]["hf_bf16_cast"].get<float>(),
        row["vs_ref_cast"]["megasched"].get<float>(),
        row["vs_ref_cast"]["hf_bf16_cast"].get<float>());
    std::fflush(stdout);
    rows.push_back(row);
  }
  const nlohmann::json summary = {{"shape", schedule::to_json(shape)},
                                  {"rope_scaling", o.llama3 ? "llama3" : "none"},
                                  {"seed", o.seed},
                                  {"metric", "max abs logit error"},
                                  {"rows", rows}};
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    f << summary.dump(2) << "\n";
    if (!f.good()) {
      std::fprintf(stderr, "precision_bench: cannot write %s\n", o.out.c_str());
      return 3;
    }
  }
  return 0;
}
