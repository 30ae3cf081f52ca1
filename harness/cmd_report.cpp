// `megasched report`: the analyst report over results.tsv and corpus.jsonl (flywheel/report.h):
// text or JSON on stdout, and a self-contained HTML page (inline SVG) written to --out; with a
// plan (--plan, or the newest plan run beside --results) latency against position per bucket.
#include <cctype>
#include <filesystem>
#include <iostream>
#include <optional>

#include "flywheel/lessons.h"
#include "flywheel/plan_report.h"
#include "flywheel/report_render.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/verbs.h"

namespace megasched::harness {
namespace {

/// The plan section's plots as SVG files beside LESSONS.md (plan_<model>_<target>_<device>.svg),
/// each group's "svg_file" its name; false with *error when one cannot be written.
bool write_plan_plots(const std::string& lessons_path, nlohmann::json* plan, std::string* error) {
  const std::filesystem::path dir = std::filesystem::path(lessons_path).parent_path();
  if (!plan->contains("groups")) return true;
  for (nlohmann::json& g : (*plan)["groups"]) {
    std::string name = "plan_" + g["model"].get<std::string>() + "_" +
                       g["target"].get<std::string>() + "_" + g["device"].get<std::string>() +
                       (g["latency_kind"] == "predicted" ? "_predicted" : "") + ".svg";
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
    if (!write_text_file((dir / name).string(), flywheel::plan_positions_svg(*plan, g), error))
      return false;
    g["svg_file"] = name;
  }
  return true;
}

/// Writes LESSONS.md for the corpus (filtered as the report is); the lessons document, or an
/// exit code after its message.
std::optional<nlohmann::json> write_lessons(const ReportRequest& request, const std::string& out,
                                            nlohmann::json plan, int* code) {
  flywheel::CorpusRead corpus = flywheel::read_corpus(request.corpus_path);
  if (!corpus.error.empty() || !corpus.exists) {
    print_error("report",
                "--lessons: " +
                    (corpus.error.empty() ? "no corpus at " + request.corpus_path : corpus.error) +
                    " (the lessons need each trial's config: pass --corpus PATH)");
    *code = kExitEnvironment;
    return std::nullopt;
  }
  std::vector<flywheel::CorpusRecord> records;
  for (auto& r : corpus.records)
    if ((request.model.empty() || r.model == request.model) &&
        (request.target.empty() || r.target == request.target))
      records.push_back(std::move(r));
  nlohmann::json lessons = flywheel::build_lessons(records);
  std::string error;
  if (!write_plan_plots(out, &plan, &error)) {
    print_error("report", "--lessons-out: " + error);
    *code = kExitEnvironment;
    return std::nullopt;
  }
  lessons["plan"] = plan;
  if (!write_text_file(out, flywheel::lessons_markdown(lessons, request.corpus_path), &error)) {
    print_error("report", "--lessons-out: " + error);
    *code = kExitEnvironment;
    return std::nullopt;
  }
  lessons["path"] = out;
  return lessons;
}

}  // namespace

void add_report_command(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string results = "workspace/results.tsv";
    std::string corpus;  // default: corpus.jsonl beside --results
    std::string out;     // default: report.html beside --results
    std::string format = "text";
    std::string model;
    std::string target;
    bool lessons = false;
    std::string lessons_out;
    std::string plan;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "report", "Summarise results.tsv and corpus.jsonl per model and target (text, JSON, HTML)");
  cmd->add_option("--results", opt->results, "results.tsv path")->capture_default_str();
  CLI::Option* corpus =
      cmd->add_option("--corpus", opt->corpus, "corpus.jsonl path (default: beside --results)");
  CLI::Option* out =
      cmd->add_option("--out,--html", opt->out,
                      "HTML report path (default: report.html beside --results; '': none)");
  cmd->add_option("--format", opt->format, "stdout format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--model", opt->model, "Only this model");
  cmd->add_option("--target", opt->target, "Only this target");
  cmd->add_flag("--lessons", opt->lessons,
                "Also write LESSONS.md: knob effects with confidence intervals, failed configs "
                "by rule or position, bottleneck classes over time");
  cmd->add_option("--plan", opt->plan,
                  "Plot latency against position for this plan's bucket configs and show where a "
                  "bucket boundary pays (FILE, -, best:MODEL:GPU; default: the newest "
                  "runs/*/plan.json beside --results)");
  cmd->add_option("--lessons-out", opt->lessons_out,
                  "LESSONS.md path (default: LESSONS.md beside --results)");
  cmd->callback([&ctx, opt, corpus, out] {
    // What the user did not name lies beside the results they named.
    const std::filesystem::path beside = std::filesystem::path(opt->results).parent_path();
    if (corpus->count() == 0) opt->corpus = (beside / "corpus.jsonl").string();
    if (out->count() == 0) opt->out = (beside / "report.html").string();
    ReportRequest request;
    request.results_path = opt->results;
    request.corpus_path = opt->corpus;
    request.html_path = opt->out;
    request.model = opt->model;
    request.target = opt->target;
    request.plan = opt->plan;
    VerbResult report = build_report_document(request);
    if (report.exit_code == kExitOk && opt->lessons) {
      std::string out = opt->lessons_out;
      if (out.empty()) {
        const auto parent = std::filesystem::path(opt->results).parent_path();
        out =
            (parent.empty() ? std::filesystem::path("LESSONS.md") : parent / "LESSONS.md").string();
      }
      int code = kExitOk;
      auto lessons = write_lessons(request, out, report.document["plan"], &code);
      if (!lessons) return void(ctx.exit_code = code);
      report.document["lessons"] = *lessons;
    }
    if (report.exit_code != kExitOk || opt->format == "json")
      return void(ctx.exit_code = finish_verb("report", report));
    std::cout << flywheel::report_text(report.document);
    if (!opt->out.empty()) std::cout << "html: " << opt->out << "\n";
    if (opt->lessons)
      std::cout << "lessons: " << report.document["lessons"]["path"].get<std::string>() << "\n";
    ctx.exit_code = kExitOk;
  });
}

}  // namespace megasched::harness
