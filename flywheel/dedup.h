// The schedule-id index: every schedule this workspace has already tried, in any run, failed or
// not. The loop asks it before each trial so no schedule is evaluated twice; the stored verdict of
// a known schedule is what the loop uses instead (for trial 0, a warm start, or the strategies'
// view of the landscape).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "flywheel/corpus.h"
#include "flywheel/results.h"

namespace megasched::flywheel {

class ScheduleIndex {
 public:
  /// Indexes the corpus records and the results rows (a row whose record was lost still counts).
  void add_corpus(const std::vector<CorpusRecord>& records);
  void add_results(const std::vector<ResultRow>& rows);
  void add(const CorpusRecord& record);

  bool contains(const std::string& schedule_id) const;
  /// The first record of `schedule_id`, or nullptr (unknown, or known only from results.tsv).
  const CorpusRecord* record(const std::string& schedule_id) const;
  size_t size() const { return ids_.size(); }

 private:
  std::map<std::string, CorpusRecord> records_;
  std::map<std::string, int> ids_;  // id -> times seen (more than once: a pre-dedup duplicate)
};

}  // namespace megasched::flywheel
