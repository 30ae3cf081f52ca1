// The learned prior: predicts a config's latency from its knobs and the model shape, so the
// `prior` strategy can rank many candidates and spend trials only on the promising ones. It is
// advisory: every candidate it picks still goes through lower, validate, correctness and timing.
//
// Features (prior_features): one indicator per (knob, allowed value) from knob_specs(); the
// pairwise products of those indicators (knob interactions: rows per task x blocks per SM ...);
// and the model shape (log hidden, log layers, log heads, GQA ratio, log head_dim, ffn / hidden,
// log vocab, log weight bytes). Target: log(latency_us). Model: ridge regression solved with
// Eigen (primal normal equations when samples outnumber features, the dual form otherwise).
// A second ridge fit on the same features predicts failure (rejected / incorrect / crash /
// timeout as 1, a latency as 0), so the ranking avoids configs like those that failed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include <nlohmann/json.hpp>

#include "flywheel/corpus.h"

namespace megasched::flywheel {

/// One training point: a canonical config, its model shape, and its outcome.
struct PriorSample {
  nlohmann::json config;             // canonical ScheduleConfig JSON
  nlohmann::json shape;              // schedule::to_json(ModelShape)
  std::optional<double> latency_us;  // absent for a failure
  std::string model;                 // for per-model evaluation
};

/// Samples from corpus records of `target` and `device` ("" matches any; a target matches by its
/// shared-corpus key, so "NVIDIA H200" and "h200" are one GPU); latencies only from
/// correct trials of one latency kind (a device of "gpu" takes measured-gpu, "cpu" predicted).
std::vector<PriorSample> prior_samples(const std::vector<CorpusRecord>& records,
                                       const std::string& target, const std::string& device);

/// The feature vector of a config on a shape (length prior_feature_count()).
Eigen::VectorXd prior_features(const nlohmann::json& config, const nlohmann::json& shape);
int prior_feature_count();

class Prior {
 public:
  explicit Prior(double ridge_lambda = 1.0) : lambda_(ridge_lambda) {}
  /// Fits on the samples with a latency (and the failure model on all). False when fewer than
  /// `min_samples` have a latency; the prior is then untrained.
  bool fit(const std::vector<PriorSample>& samples, int min_samples = 4);
  bool trained() const { return trained_; }
  int latency_samples() const { return latency_samples_; }
  /// Predicted log(latency_us). Only meaningful when trained().
  double predict_log_latency(const nlohmann::json& config, const nlohmann::json& shape) const;
  /// Predicted failure likelihood in [0, 1] (0 when nothing has failed).
  double predict_failure(const nlohmann::json& config, const nlohmann::json& shape) const;

 private:
  double lambda_;
  bool trained_ = false;
  int latency_samples_ = 0;
  Eigen::VectorXd mean_;  // feature means (centering)
  Eigen::VectorXd weights_;
  double bias_ = 0.0;
  bool failure_trained_ = false;
  Eigen::VectorXd failure_weights_;
  double failure_bias_ = 0.0;
};

/// Spearman rank correlation (ties get their average rank). 0 when fewer than 2 points or a
/// constant series.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

struct PriorEvaluation {
  int samples = 0;  // latency samples used
  int folds = 0;
  double spearman = 0.0;  // predicted vs actual latency over all held-out points
  nlohmann::json per_model = nlohmann::json::object();  // model -> {samples, spearman}
};
/// K-fold cross-validation: each sample's latency is predicted by a prior fitted on the other
/// folds (folds assigned by a seeded shuffle).
PriorEvaluation evaluate_prior(const std::vector<PriorSample>& samples, int folds, uint64_t seed);

/// evaluate_prior for each (target, device, how the latency was judged) of the corpus in
/// first-seen order, a target named by its shared-corpus key (target_file_key: the registry's name
/// of a known GPU) (only `target` / `device` when not empty); a row timed at another position, or
/// under an objective, is another group (its latency is another quantity): [{"target", "device",
/// "timed_position" or "objective" (its canonical text), "samples", "failures" (records without a
/// latency), "spearman" (null below 2 x folds samples), "per_model"}].
nlohmann::json evaluate_prior_per_target(const std::vector<CorpusRecord>& records,
                                         const std::string& target, const std::string& device,
                                         int folds, uint64_t seed);

}  // namespace megasched::flywheel
