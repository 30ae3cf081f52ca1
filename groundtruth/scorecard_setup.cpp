#include "groundtruth/scorecard_setup.h"

#include <random>

#include "groundtruth/ground_truth.h"
#include "groundtruth/program_fuzz.h"
#include "schedule/lower.h"
#include "schedule/search.h"
#include "schedule/validate.h"

namespace megasched::groundtruth {

namespace {

constexpr size_t kMaxBaseTasks = 48;  // the explorer's state space stays small below this
constexpr int kBasesPerModel = 12;

}  // namespace

ScorecardBases scorecard_bases(uint64_t seed) {
  using namespace schedule;
  const GpuTarget target = fuzz_target(4);
  auto weights = std::make_shared<std::map<std::string, Weights>>();
  ScorecardBases out;
  std::mt19937_64 rng(seed);
  for (const char* name : {"toy", "toy-2L"}) {
    const ModelShape shape = *find_preset(name);
    weights->emplace(shape.name, generate_weights(shape, seed, 1));
    int kept = 0;
    for (int i = 0; i < 200 && kept < kBasesPerModel; ++i) {
      const ScheduleConfig cfg = i == 0 ? ScheduleConfig{} : random_config(shape, target, rng);
      std::string error;
      std::optional<Program> p = lower(shape, target, cfg, &error);
      if (!p || p->tasks.size() > kMaxBaseTasks || !validate(*p, target).ok()) continue;
      out.programs.push_back(std::move(*p));
      ++kept;
    }
  }
  out.weights = std::move(weights);
  return out;
}

ScorecardOptions scorecard_options(const ScorecardBases& bases, uint64_t n, uint64_t seed) {
  ScorecardOptions so;
  so.n = n;
  so.seed = seed;
  so.bases = bases.programs;
  so.record = [weights = bases.weights](const schedule::Program& p, int32_t position,
                                        std::vector<std::vector<uint64_t>>* reads,
                                        std::vector<std::vector<uint64_t>>* writes) {
    auto it = weights->find(p.model_name);
    const schedule::Weights& w =
        it != weights->end() ? it->second : weights->at("toy");  // hand-built: no weight reads
    TaskAccesses acc;
    std::string error;
    if (!record_accesses(p, w, position, &acc, &error)) return false;
    *reads = std::move(acc.reads);
    *writes = std::move(acc.writes);
    return true;
  };
  return so;
}

}  // namespace megasched::groundtruth
