// `megasched report`: the analyst report over results.tsv and corpus.jsonl (flywheel/report.h):
// text or JSON on stdout, and a self-contained HTML page (inline SVG) written to --out.
#include <iostream>

#include "flywheel/report_render.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/verbs.h"

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
    ReportRequest request;
    request.results_path = opt->results;
    request.corpus_path = opt->corpus;
    request.html_path = opt->out;
    request.model = opt->model;
    request.target = opt->target;
    VerbResult report = build_report_document(request);
    if (report.exit_code != kExitOk || opt->format == "json")
      return void(ctx.exit_code = finish_verb("report", report));
    std::cout << flywheel::report_text(report.document);
    if (!opt->out.empty()) std::cout << "html: " << opt->out << "\n";
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
