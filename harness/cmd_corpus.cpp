// `megasched corpus show|import|archive`: the shared corpus (flywheel/shared_corpus.h), one
// <target>.corpus.jsonl per GPU target in flywheel/data/ (--flywheel, $MEGASCHED_FLYWHEEL_DIR).
//   show    per file: rows, rows of the current kernel build and stale rows (its archive's
//           included), by source and model
//   import  appends the GPU records of corpus.jsonl files (a loop's --corpus, or older runs' kept
//           in git) as they are: their build identities stay, so rows of an older kernel show as
//           stale and train no prior unless `--corpus-stale include` asks. Importing twice adds
//           nothing the second time.
//   archive moves the stale rows of each file into flywheel/data/archive/<target>.corpus.jsonl.gz
//           (gzip), where `--corpus-stale include` and `prior --eval --corpus-stale include` still
//           read them, so the live files, which every GPU machine receives, hold the current
//           kernel's rows.
#include <filesystem>
#include <map>
#include <memory>

#include "flywheel/gzip_lines.h"
#include "flywheel/shared_corpus.h"
#include "harness/cli_util.h"
#include "harness/commands.h"
#include "harness/trial_flags.h"
#include "vm/nvrtc_build.h"

namespace megasched::harness {
namespace {

struct CorpusOptions {
  std::string flywheel_dir = flywheel::default_flywheel_dir();
  std::vector<std::string> files;  // import
  std::string model;               // show: only this model
  std::string target;              // archive: only this target's file
  bool dry_run = false;            // archive: count, change nothing
  bool all = false;                // archive: every row, not only the stale ones
};

/// The summary of one shared file: counts of every row, the current build's, and by source and
/// model.
nlohmann::json file_summary(const std::string& dir, const std::string& file,
                            const std::string& model, const std::string& build) {
  flywheel::SharedCorpusFilter every;
  every.target = file;
  every.model = model;
  every.include_stale = true;
  every.dedupe = false;
  every.build = build;
  const flywheel::SharedCorpusRead read = flywheel::read_shared(dir, every);
  std::map<std::string, int> by_source, by_model, by_build;
  for (const flywheel::CorpusRecord& r : read.records) {
    ++by_source[r.source.empty() ? "?" : r.source];
    ++by_model[r.model];
    ++by_build[r.versions.value("build", std::string("?"))];
  }
  return {{"rows", read.records.size()},
          {"current_build_rows", static_cast<int>(read.records.size()) - read.stale},
          {"stale_rows", read.stale},
          {"archived_rows", read.archived},
          {"archive",
           read.archives.empty() ? nlohmann::json(nullptr) : nlohmann::json(read.archives.front())},
          {"by_source", by_source},
          {"by_model", by_model},
          {"by_build", by_build},
          {"problems", read.problems}};
}

int show(const CorpusOptions& o) {
  if (!flywheel::flywheel_enabled(o.flywheel_dir)) {
    print_error("corpus", "the shared corpus is off (--flywheel none); name its folder");
    return kExitUsage;
  }
  flywheel::SharedCorpusFilter every;
  every.include_stale = true;
  const flywheel::SharedCorpusRead read = flywheel::read_shared(o.flywheel_dir, every);
  if (!read.error.empty()) return print_error("corpus", read.error), kExitEnvironment;
  const std::string build = vm::build_identity();
  nlohmann::json files = nlohmann::json::object();
  for (const std::string& path : read.files) {
    std::string name = std::filesystem::path(path).filename().string();
    name = name.substr(0, name.find('.'));
    files[std::filesystem::path(path).filename().string()] =
        file_summary(o.flywheel_dir, name, o.model, build);
  }
  if (read.files.empty())
    print_error("corpus", "no shared corpus in " + o.flywheel_dir +
                              " yet (GPU runs of loop, bench, promote and landscape record fill "
                              "it; `megasched corpus import FILE` adds a corpus.jsonl)");
  print_json({{"flywheel", o.flywheel_dir}, {"build", build}, {"files", files}});
  return kExitOk;
}

int archive(const CorpusOptions& o) {
  if (!flywheel::flywheel_enabled(o.flywheel_dir)) {
    print_error("corpus", "the shared corpus is off (--flywheel none); name its folder");
    return kExitUsage;
  }
  const std::string build = vm::build_identity();
  const flywheel::ArchiveResult r = flywheel::archive_rows(
      o.flywheel_dir, o.target, build,
      o.all ? flywheel::ArchiveScope::kEveryRecord : flywheel::ArchiveScope::kStale, o.dry_run);
  nlohmann::json files = nlohmann::json::array();
  for (const flywheel::ArchiveFileResult& f : r.files)
    files.push_back({{"file", f.file},
                     {"archive", f.archive},
                     {"kept", f.kept},
                     {"moved", f.moved},
                     {"stale_moved", f.stale},
                     {"appended_to_archive", f.written}});
  if (!r.error.empty()) {
    print_error("corpus",
                "archive: " + r.error +
                    (flywheel::zlib_available()
                         ? ""
                         : " (hint: `corpus archive --dry-run` counts without zlib; the live files "
                           "are unchanged)"));
    print_json({{"flywheel", o.flywheel_dir}, {"build", build}, {"files", files}});
    return kExitEnvironment;
  }
  if (r.files.empty())
    print_error("corpus", "no shared corpus file in " + o.flywheel_dir +
                              (o.target.empty() ? "" : " for target " + o.target));
  print_json(
      {{"flywheel", o.flywheel_dir}, {"build", build}, {"dry_run", o.dry_run}, {"files", files}});
  return kExitOk;
}

int import(const CorpusOptions& o) {
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& file : o.files) {
    const flywheel::ImportResult r = flywheel::import_corpus(o.flywheel_dir, file);
    for (const std::string& p : r.problems) print_error("corpus", "warning: " + p);
    if (!r.error.empty()) {
      print_error("corpus", "import " + file + ": " + r.error);
      const bool missing =
          !std::filesystem::exists(file) || !flywheel::flywheel_enabled(o.flywheel_dir);
      return missing ? kExitUsage : kExitEnvironment;
    }
    rows.push_back({{"file", file},
                    {"read", r.read},
                    {"imported", r.imported},
                    {"cpu_left_out", r.cpu},
                    {"already_held", r.already}});
  }
  print_json({{"flywheel", o.flywheel_dir}, {"imports", rows}});
  return kExitOk;
}

}  // namespace

void add_corpus_command(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<CorpusOptions>();
  auto* cmd = app.add_subcommand(
      "corpus",
      "The shared corpus of GPU trials (flywheel/data/<target>.corpus.jsonl): show, import, "
      "archive");
  cmd->require_subcommand(1);
  auto* show_cmd = cmd->add_subcommand(
      "show", "Per target file: rows, rows of the current kernel build, stale rows, by source");
  show_cmd->add_option("--model", opt->model, "Only this model's rows");
  add_flywheel_flag(show_cmd, &opt->flywheel_dir);
  show_cmd->callback([&ctx, opt] { ctx.exit_code = show(*opt); });
  auto* import_cmd = cmd->add_subcommand(
      "import",
      "Append the GPU records of corpus.jsonl files, build identities kept (older kernels' rows "
      "show as stale); a record already held is not appended again");
  import_cmd->add_option("files", opt->files, "corpus.jsonl files")->required();
  add_flywheel_flag(import_cmd, &opt->flywheel_dir);
  import_cmd->callback([&ctx, opt] { ctx.exit_code = import(*opt); });
  auto* archive_cmd = cmd->add_subcommand(
      "archive",
      "Move the rows of other kernel builds (stale rows) of each target file, or with --all "
      "every row, into <folder>/archive/<target>.corpus.jsonl.gz (gzip); every reader reads the "
      "archive after the live file (stale rows still only with `--corpus-stale include`)");
  archive_cmd->add_option("--target", opt->target,
                          "Only this GPU target's file (h100, h200, or a GPU name)");
  archive_cmd->add_flag("--dry-run", opt->dry_run, "Count what would move; change nothing");
  archive_cmd->add_flag("--all", opt->all,
                        "Move every row, the current build's too, so the live files start empty "
                        "and the corpus that travels with the checkout stays compressed");
  add_flywheel_flag(archive_cmd, &opt->flywheel_dir);
  archive_cmd->callback([&ctx, opt] { ctx.exit_code = archive(*opt); });
}

}  // namespace megasched::harness
