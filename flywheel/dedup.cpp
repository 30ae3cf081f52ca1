#include "flywheel/dedup.h"

namespace megasched::flywheel {

void ScheduleIndex::add_corpus(const std::vector<CorpusRecord>& records) {
  for (const CorpusRecord& record : records) add(record);
}

void ScheduleIndex::add_results(const std::vector<ResultRow>& rows) {
  for (const ResultRow& row : rows)
    if (!row.schedule_id.empty()) ++ids_[row.schedule_id];
}

void ScheduleIndex::add(const CorpusRecord& record) {
  ++ids_[record.schedule_id];
  records_.emplace(record.schedule_id, record);
}

bool ScheduleIndex::contains(const std::string& schedule_id) const {
  return ids_.count(schedule_id) != 0;
}

const CorpusRecord* ScheduleIndex::record(const std::string& schedule_id) const {
  auto it = records_.find(schedule_id);
  return it == records_.end() ? nullptr : &it->second;
}

}  // namespace megasched::flywheel
