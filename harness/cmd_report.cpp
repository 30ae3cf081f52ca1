// `megasched report`: the analyst report over results.tsv and corpus.jsonl (flywheel/report.h):
// text or JSON on stdout, and a self-contained HTML page (inline SVG) written to --out.
#include <filesystem>
#include <iostream>

#include "flywheel/corpus.h"
#include "flywheel/report.h"
#include "flywheel/report_render.h"
#include "flywheel/results.h"
#include "harness/cli_util.h"
#include "harness/commands.h"

namespace megasched::harness {

void add_report_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string results = "workspace/results.tsv";
    std::string corpus = "workspace/corpus.jsonl";
    std::string out = "workspace/report.html";
    std::string format = "text";
    std::string model;
    std::string target;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "report", "Summarise results.tsv and corpus.jsonl per model and target (text, JSON, HTML)");
  cmd->add_option("--results", opt->results, "results.tsv path")->capture_default_str();
  cmd->add_option("--corpus", opt->corpus, "corpus.jsonl path")->capture_default_str();
  cmd->add_option("--out,--html", opt->out, "HTML report path (empty: no HTML)")
      ->capture_default_str();
  cmd->add_option("--format", opt->format, "stdout format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--model", opt->model, "Only this model");
  cmd->add_option("--target", opt->target, "Only this target");
  cmd->callback([&ctx, opt] {
    for (const std::string* input : {&opt->results, &opt->corpus})
      if (!opt->out.empty() && same_file(opt->out, *input)) {
        print_error("report", "--out '" + opt->out + "' is the " +
                                  (input == &opt->results ? "--results" : "--corpus") +
                                  " log it would read; name another file (e.g. report.html)");
        ctx.exit_code = kExitUsage;
        return;
      }
    flywheel::ResultsRead results = flywheel::read_results(opt->results);
    if (!results.error.empty()) {
      print_error("report", results.error);
      ctx.exit_code = kExitEnvironment;
      return;
    }
    if (!results.exists) {
      print_error("report", "no results file at " + opt->results +
                                " (run `megasched loop` first, or pass --results PATH)");
      ctx.exit_code = kExitEnvironment;
      return;
    }
    flywheel::CorpusRead corpus = flywheel::read_corpus(opt->corpus);
    if (!corpus.error.empty()) {
      print_error("report", corpus.error);
      ctx.exit_code = kExitEnvironment;
      return;
    }
    auto keep = [&](const std::string& model, const std::string& target) {
      return (opt->model.empty() || model == opt->model) &&
             (opt->target.empty() || target == opt->target);
    };
    std::vector<flywheel::ResultRow> rows;
    for (auto& row : results.rows)
      if (keep(row.model, row.target)) rows.push_back(std::move(row));
    std::vector<flywheel::CorpusRecord> records;
    for (auto& r : corpus.records)
      if (keep(r.model, r.target)) records.push_back(std::move(r));
    nlohmann::json report = flywheel::build_report(rows, records);
    report["sources"] = {{"results", opt->results}, {"corpus", corpus.exists ? opt->corpus : ""}};
    nlohmann::json problems = results.problems;
    for (const auto& p : corpus.problems) problems.push_back(p);
    if (!corpus.exists)
      problems.push_back("no corpus at " + opt->corpus +
                         ": best configs and knob effects are missing");
    report["problems"] = problems;
    if (!opt->out.empty()) {
      std::error_code ec;
      auto parent = std::filesystem::path(opt->out).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent, ec);
      std::string error;
      if (!write_text_file(opt->out, flywheel::report_html(report), &error)) {
        print_error("report", "--out: " + error);
        ctx.exit_code = kExitEnvironment;
        return;
      }
      report["html"] = opt->out;
    }
    if (opt->format == "json") {
      print_json(report);
    } else {
      std::cout << flywheel::report_text(report);
      if (!opt->out.empty()) std::cout << "html: " << opt->out << "\n";
    }
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
