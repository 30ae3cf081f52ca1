#include "eval/generate_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/wait.h>

#include "eval/baselines/baseline.h"
#include "eval/device.h"
#include "eval/eager.h"
#include "eval/evaluate.h"
#include "eval/generate.h"
#include "eval/timing.h"
#include "schedule/format.h"
#include "schedule/lookup.h"

namespace megasched::eval {

using json = nlohmann::json;
using schedule::fmt;

namespace {

std::string case_label(const GenerateCase& c) {
  return std::to_string(c.prompt_len) + ":" + std::to_string(c.new_tokens);
}

std::optional<GenerateCase> parse_case(const std::string& item, std::string* error) {
  const size_t colon = item.find(':');
  const auto ints =
      colon == std::string::npos
          ? std::nullopt
          : schedule::parse_int_list(item.substr(0, colon) + "," + item.substr(colon + 1));
  if (!ints || ints->size() != 2) {
    *error = "--generate takes PROMPT_LEN:NEW_TOKENS (e.g. 128:4096), got '" + item + "'";
    return std::nullopt;
  }
  GenerateCase c{(*ints)[0], (*ints)[1]};
  if (c.prompt_len < 1 || c.new_tokens < 1) {
    *error = "--generate " + item + ": PROMPT_LEN and NEW_TOKENS must be at least 1";
    return std::nullopt;
  }
  return c;
}

double elapsed_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

/// A megasched row: eval::generate of `plan` on the GPU (every kernel built before the first step).
GenerateBenchRow plan_row(const schedule::Weights& weights, const schedule::GpuTarget& target,
                          const std::string& label, const schedule::Plan& plan,
                          const GenerateCase& c, uint64_t seed) {
  GenerateBenchRow row;
  row.name = label;
  row.kind = plan.single() ? "config" : "plan";
  row.gen = c;
  GenerateOptions o;
  o.prompt = generate_case_prompt(weights.shape, c, seed);
  o.max_tokens = c.new_tokens;
  o.device = "gpu";
  try {
    const GenerateResult g = generate(weights, target, plan, o);
    if (!g.ok) return row.status = "error", row.message = g.error, row;
    row.tokens = g.tokens;
    summarize_generation(g.step_us, c.prompt_len, &row);
    if (!g.switch_positions.empty()) {
      // The time of each boundary's step beside the median: a switch costs one step.
      row.detail["switch_positions"] = g.switch_positions;
      std::vector<double> at_switch;
      for (int pos : g.switch_positions) at_switch.push_back(g.step_us[static_cast<size_t>(pos)]);
      row.detail["switch_step_us"] = at_switch;
    }
  } catch (const std::exception& e) {
    row.status = "error";
    row.message = e.what();
  }
  return row;
}

/// A baseline row: its graph replayed once per step, its own argmax (read back alone) fed back.
GenerateBenchRow baseline_row(Baseline& baseline, const schedule::ModelShape& shape,
                              const GenerateCase& c, uint64_t seed) {
  GenerateBenchRow row;
  row.name = baseline.kind();
  row.kind = "baseline";
  row.gen = c;
  const std::vector<int32_t> prompt = generate_case_prompt(shape, c, seed);
  std::vector<double> step_us;
  int32_t token = prompt[0];
  try {
    for (int pos = 0; pos < c.prompt_len + c.new_tokens - 1; ++pos) {
      const auto t0 = std::chrono::steady_clock::now();
      const int32_t next = baseline.step_argmax(token, pos);
      step_us.push_back(elapsed_us(t0));
      token = pos + 1 < c.prompt_len ? prompt[static_cast<size_t>(pos + 1)] : next;
      if (pos + 1 >= c.prompt_len) row.tokens.push_back(next);
    }
  } catch (const std::exception& e) {
    row.status = "error";
    row.message = e.what();
    return row;
  }
  summarize_generation(step_us, c.prompt_len, &row);
  return row;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

/// `text`'s last `lines` lines, on one line.
std::string tail_lines(const std::string& text, int lines) {
  size_t at = text.size();
  if (at > 0 && text[at - 1] == '\n') --at;
  const size_t end = at;
  while (lines-- > 0 && at > 0) {
    const size_t nl = text.rfind('\n', at - 1);
    at = nl == std::string::npos ? 0 : nl;
  }
  std::string tail = text.substr(at, end - at);
  std::replace(tail.begin(), tail.end(), '\n', ' ');
  return tail;
}

GenerateBenchRow peer_failure(const GenerateCase& c, const std::string& status,
                              const std::string& message) {
  GenerateBenchRow row;
  row.name = "pytorch peer";
  row.kind = "peer";
  row.gen = c;
  row.status = status;
  row.message = message;
  return row;
}

/// The PyTorch peer's rows of case `c` (one failure row when it cannot run).
std::vector<GenerateBenchRow> torch_peer_rows(const TorchPeerRun& peer,
                                              const schedule::ModelShape& shape,
                                              const GenerateCase& c, uint64_t seed) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(peer.work_dir, ec);
  const fs::path dir(peer.work_dir);
  const std::string stem =
      "torch_peer_" + std::to_string(c.prompt_len) + "_" + std::to_string(c.new_tokens);
  const fs::path prompt_file = dir / (stem + "_prompt.json");
  const fs::path out = dir / (stem + ".json");
  const fs::path log = dir / (stem + ".log");
  std::ofstream(prompt_file) << json(generate_case_prompt(shape, c, seed)).dump() << "\n";
  std::string cmd = "python3 " + shell_quote(peer.script) + " --generate " + case_label(c) +
                    " --prompt-file " + shell_quote(prompt_file.string()) + " --out " +
                    shell_quote(out.string());
  cmd += peer.checkpoint.empty() ? " --shape " + shell_quote(shape.name)
                                 : " --checkpoint " + shell_quote(peer.checkpoint);
  fs::remove(out, ec);
  const int rc = std::system((cmd + " > " + shell_quote(log.string()) + " 2>&1").c_str());
  std::ifstream in(out);
  if (rc != 0 || !in) {
    std::ifstream l(log);
    std::stringstream text;
    text << l.rdbuf();
    const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : rc;
    return {peer_failure(c, "error",
                         "torch_peer.py exited " + std::to_string(code) + ": " +
                             tail_lines(text.str(), 3) + " (log: " + log.string() + ")")};
  }
  const json doc = json::parse(in, nullptr, false);
  std::string error;
  auto rows = doc.is_discarded() ? std::nullopt : generate_peer_rows(doc, &error);
  if (!rows) return {peer_failure(c, "error", out.string() + ": not a peer document " + error)};
  for (GenerateBenchRow& r : *rows) {
    // A random model of the same dimensions has other weights: its tokens say nothing.
    if (peer.checkpoint.empty())
      r.detail["tokens_not_compared"] = "random weights, not megasched's";
  }
  return *rows;
}

}  // namespace

std::optional<std::vector<GenerateCase>> parse_generate_cases(const std::vector<std::string>& args,
                                                              std::string* error) {
  std::vector<GenerateCase> cases;
  for (const std::string& arg : args) {
    std::stringstream items(arg);
    std::string item;
    while (std::getline(items, item, ',')) {
      auto c = parse_case(item, error);
      if (!c) return std::nullopt;
      cases.push_back(*c);
    }
  }
  if (cases.empty()) {
    *error = "--generate takes PROMPT_LEN:NEW_TOKENS (e.g. 128:4096), got nothing";
    return std::nullopt;
  }
  return cases;
}

std::string generate_case_error(const schedule::ModelShape& shape, const GenerateCase& c) {
  if (static_cast<int64_t>(c.prompt_len) + c.new_tokens <= shape.max_seq) return "";
  return "--generate " + case_label(c) + ": PROMPT_LEN + NEW_TOKENS = " +
         std::to_string(static_cast<int64_t>(c.prompt_len) + c.new_tokens) + " exceeds the " +
         std::to_string(shape.max_seq) + " positions of model " + shape.name +
         " (hint: keep PROMPT_LEN + NEW_TOKENS <= " + std::to_string(shape.max_seq) + ")";
}

std::vector<int32_t> generate_case_prompt(const schedule::ModelShape& shape, const GenerateCase& c,
                                          uint64_t seed) {
  return trial_tokens(shape.vocab, c.prompt_len, seed);
}

int first_token_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return static_cast<int>(i);
  return a.size() == b.size() ? -1 : static_cast<int>(n);
}

void summarize_generation(const std::vector<double>& step_us, int prompt_len,
                          GenerateBenchRow* row) {
  const size_t prompt_steps =
      std::min(step_us.size(), static_cast<size_t>(std::max(prompt_len - 1, 0)));
  const std::vector<double> decode(step_us.begin() + static_cast<std::ptrdiff_t>(prompt_steps),
                                   step_us.end());
  double prompt_us = 0.0, decode_us = 0.0;
  for (size_t i = 0; i < prompt_steps; ++i) prompt_us += step_us[i];
  for (double us : decode) decode_us += us;
  row->prompt_ms = prompt_us / 1000.0;
  row->total_ms = (prompt_us + decode_us) / 1000.0;
  if (decode.empty()) return;
  const SampleStats s = sample_stats(decode);
  row->token_p50_us = s.median;
  // sample_stats gives p10 and p90; p90 is the slow tail a user of the generation feels.
  row->token_p90_us = s.p90;
  row->tokens_per_s = decode_us > 0 ? static_cast<double>(decode.size()) / (decode_us * 1e-6) : 0;
}

void compare_generation_tokens(GenerateBenchResult* result) {
  for (const GenerateCase& c : result->cases) {
    auto same_case = [&](const GenerateBenchRow& r) {
      return r.gen.prompt_len == c.prompt_len && r.gen.new_tokens == c.new_tokens;
    };
    const GenerateBenchRow* ref = nullptr;
    for (const GenerateBenchRow& r : result->rows)
      if (!ref && same_case(r) && (r.kind == "plan" || r.kind == "config") && r.status == "ok")
        ref = &r;
    if (!ref) continue;
    if (result->reference.empty()) result->reference = ref->name;
    for (GenerateBenchRow& r : result->rows)
      if (same_case(r) && r.status == "ok" && !r.tokens.empty() &&
          !r.detail.contains("tokens_not_compared"))
        r.first_mismatch = first_token_difference(ref->tokens, r.tokens);
  }
}

std::optional<std::vector<GenerateBenchRow>> generate_peer_rows(const json& doc,
                                                                std::string* error) {
  if (!doc.is_object() || !doc.contains("generate_rows") || !doc["generate_rows"].is_array()) {
    *error = "a peer document needs a \"generate_rows\" array (torch_peer.py --generate)";
    return std::nullopt;
  }
  const std::string peer = doc.value("peer", "peer");
  std::vector<GenerateBenchRow> rows;
  for (const json& j : doc["generate_rows"]) {
    GenerateBenchRow r;
    r.kind = "peer";
    try {
      r.name = peer + " " + j.at("name").get<std::string>();
      r.gen = {j.at("prompt_len").get<int>(), j.at("new_tokens").get<int>()};
      r.status = j.value("status", "ok");
      r.message = j.value("message", "");
      if (r.status == "ok") {
        r.token_p50_us = j.at("token_p50_us").get<double>();
        r.token_p90_us = j.at("token_p90_us").get<double>();
        r.tokens_per_s = j.at("tokens_per_s").get<double>();
        r.prompt_ms = j.at("prompt_ms").get<double>();
        r.total_ms = j.at("total_ms").get<double>();
        r.tokens = j.at("tokens").get<std::vector<int32_t>>();
      }
    } catch (const json::exception& e) {
      *error = "generate_rows[" + std::to_string(rows.size()) + "]: " + e.what();
      return std::nullopt;
    }
    for (const char* key : {"note", "variant"})
      if (j.contains(key)) r.detail[key] = j[key];
    rows.push_back(std::move(r));
  }
  return rows;
}

std::optional<GenerateBenchResult> run_generate_bench(
    const schedule::Weights& weights, const schedule::GpuTarget& target,
    const GenerateBenchOptions& options, std::string* error,
    const std::function<void(const std::string&)>& progress) {
  if (!gpu_available(error)) return std::nullopt;
  GenerateBenchResult r;
  r.model = weights.shape.name;
  r.device = target.name;
  r.cases = options.cases;
  auto report = [&](const GenerateBenchRow& row) {
    if (progress)
      progress(case_label(row.gen) + " " + row.name + ": " +
               (row.token_p50_us ? fmt("%.1f us/token (p50)", *row.token_p50_us)
                                 : row.status + " " + row.message));
  };
  for (const GenerateCase& c : options.cases)
    for (const auto& [label, plan] : options.plans) {
      r.rows.push_back(plan_row(weights, target, label, plan, c, options.seed));
      report(r.rows.back());
    }
  for (const std::string& kind : options.baselines) {
    std::string why;
    std::unique_ptr<Baseline> baseline;
    try {
      baseline = create_baseline(kind, weights, &why);
    } catch (const std::exception& e) {
      why = e.what();
    }
    for (const GenerateCase& c : options.cases) {
      GenerateBenchRow row;
      if (baseline) {
        row = baseline_row(*baseline, weights.shape, c, options.seed);
      } else {
        row.name = kind;
        row.kind = "baseline";
        row.gen = c;
        row.status = "error";
        row.message = why;
      }
      r.rows.push_back(std::move(row));
      report(r.rows.back());
    }
  }
  if (!options.torch_peer.script.empty()) {
    // Where the peer cannot run, one "skipped" row per case says why.
    std::string skip;
    if (!std::filesystem::exists(options.torch_peer.script))
      skip = "no PyTorch peer script at '" + options.torch_peer.script + "' (--torch-peer)";
    else if (std::system("python3 -c 'import torch, transformers' > /dev/null 2>&1") != 0)
      skip = "python3 cannot import torch and transformers";
    for (const GenerateCase& c : options.cases) {
      const auto rows = skip.empty()
                            ? torch_peer_rows(options.torch_peer, weights.shape, c, options.seed)
                            : std::vector<GenerateBenchRow>{peer_failure(c, "skipped", skip)};
      for (const GenerateBenchRow& row : rows) {
        r.rows.push_back(row);
        report(r.rows.back());
      }
    }
  }
  compare_generation_tokens(&r);
  return r;
}

json generate_bench_to_json(const GenerateBenchResult& r) {
  json cases = json::array(), rows = json::array();
  for (const GenerateCase& c : r.cases)
    cases.push_back({{"prompt_len", c.prompt_len}, {"new_tokens", c.new_tokens}});
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  for (const GenerateBenchRow& row : r.rows) {
    json j = {{"name", row.name},
              {"kind", row.kind},
              {"prompt_len", row.gen.prompt_len},
              {"new_tokens", row.gen.new_tokens},
              {"status", row.status},
              {"token_p50_us", opt(row.token_p50_us)},
              {"token_p90_us", opt(row.token_p90_us)},
              {"tokens_per_s", row.tokens_per_s},
              {"prompt_ms", row.prompt_ms},
              {"total_ms", row.total_ms},
              {"tokens", row.tokens},
              {"first_mismatch", row.first_mismatch ? json(*row.first_mismatch) : json(nullptr)},
              {"tokens_match", row.first_mismatch ? json(*row.first_mismatch < 0) : json(nullptr)},
              {"detail", row.detail}};
    if (!row.message.empty()) j["message"] = row.message;
    rows.push_back(std::move(j));
  }
  return {{"model", r.model},
          {"device", r.device},
          {"cases", cases},
          {"reference", r.reference},
          {"rows", rows}};
}

std::string generate_bench_table(const GenerateBenchResult& r) {
  std::ostringstream md;
  md << "model " << r.model << " on " << r.device
     << "; greedy generation, one token per step from position 0 (the prompt included); per-token "
        "times are host wall time of the generating steps, each row feeding back its own argmax "
        "read "
        "back alone (the megakernel's and the graphs' step cell, the PyTorch peers' "
        "argmax().item()); "
        "tokens compared with "
     << (r.reference.empty() ? "-" : r.reference) << "\n\n";
  md << "| prompt:new | row | kind | p50 us/token | p90 us/token | tokens/s | prompt ms | total ms "
        "| tokens match |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const GenerateCase& c : r.cases) {
    for (const GenerateBenchRow& row : r.rows) {
      if (row.gen.prompt_len != c.prompt_len || row.gen.new_tokens != c.new_tokens) continue;
      md << "| " << case_label(c) << " | " << row.name << " | " << row.kind << " | ";
      if (!row.token_p50_us) {
        md << row.status << ": " << row.message.substr(0, 160) << " | - | - | - | - | - |\n";
        continue;
      }
      std::string match = "-";
      if (row.first_mismatch)
        match = *row.first_mismatch < 0
                    ? "yes"
                    : "no (first at " + std::to_string(*row.first_mismatch) + ")";
      md << fmt("%.1f", *row.token_p50_us) << " | " << fmt("%.1f", row.token_p90_us.value_or(0))
         << " | " << fmt("%.1f", row.tokens_per_s) << " | " << fmt("%.1f", row.prompt_ms) << " | "
         << fmt("%.1f", row.total_ms) << " | " << match << " |\n";
    }
  }
  return md.str();
}

}  // namespace megasched::eval
