// The logs of one loop invocation (search/loop.h): checked, locked, repaired and read before the
// first trial; the index over what every earlier run logged; --resume's replay of the last run
// (restoring a results row a kill lost); trial 0's choice; each trial's record appended to the
// corpus and the results with its progress line. Private to search/.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"
#include "flywheel/corpus.h"
#include "flywheel/dedup.h"
#include "flywheel/locked_file.h"
#include "flywheel/results.h"
#include "schedule/config.h"
#include "search/keep_rule.h"
#include "search/loop_context.h"

namespace megasched::search {

class LoopLogs {
 public:
  LoopLogs(LoopContext& ctx, KeepRule& keep) : ctx_(ctx), keep_(keep) {}

  /// Checks the log paths (check_log_paths), locks both logs for the run, moves a torn last line
  /// aside and reads what every earlier run left behind. False (with ctx.result failed) when the
  /// loop cannot start.
  bool open();

  /// The run: a new one, or with --resume the last one of this model / target / device, whose
  /// trials are replayed into the counts, the incumbent, the history and the strategy. False when
  /// a results row lost to a kill cannot be restored.
  bool resume();

  /// The config of trial 0 and where it comes from ("default", "warm-start", "start"): with
  /// warm_start the best known at the position, else start, else the default.
  std::pair<schedule::ScheduleConfig, std::string> seed_choice() const;

  /// Whether some run already logged this schedule id (this run included).
  bool known(const std::string& id) const {
    return index_.contains(id) || ctx_.this_run_ids.count(id);
  }
  /// The corpus record of a schedule id, or nullptr.
  const flywheel::CorpusRecord* record(const std::string& id) const { return index_.record(id); }
  /// The verdict a run logged for a schedule id and that run's id (a verdict known only from
  /// results.tsv is rebuilt from its row); nullopt when none did.
  std::optional<std::pair<eval::Verdict, std::string>> logged(const std::string& id) const;

  flywheel::CorpusRecord make_record(int trial, const std::string& strategy_name,
                                     const schedule::ScheduleConfig& config, const std::string& id,
                                     const schedule::ScheduleConfig* parent,
                                     const std::string& parent_id,
                                     const eval::Verdict& verdict) const;

  /// Appends the record and its row, updates the state, prints the progress line.
  bool log_trial(flywheel::CorpusRecord& record, const schedule::ScheduleConfig& config,
                 double trial_s);

  /// The summary's parts about the files: their paths and the rows restored.
  void add_to_summary(nlohmann::json& summary) const;

 private:
  /// What every earlier run left behind: the corpus, the results and the index over both.
  void read_logs();
  /// What every record of this invocation carries: versions, the device fingerprint, the shape.
  void describe_trials();
  /// The progress line of a logged trial (no newline).
  std::string progress_line(const flywheel::CorpusRecord& record) const;

  LoopContext& ctx_;
  KeepRule& keep_;
  // The logs, held for the run against a second loop of this workload.
  flywheel::WorkloadLock corpus_lock_, results_lock_;
  // What earlier runs left behind.
  flywheel::CorpusRead corpus_;
  flywheel::ResultsRead results_;
  flywheel::ScheduleIndex index_;
  std::map<std::string, const flywheel::ResultRow*> row_of_;
  // What every record carries.
  nlohmann::json versions_, fingerprint_, shape_json_;
  int restored_rows_ = 0;
};

}  // namespace megasched::search
