#include "flywheel/prior.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "eval/objective.h"
#include "flywheel/shared_corpus.h"
#include "schedule/config.h"

namespace megasched::flywheel {
namespace {

using nlohmann::json;

constexpr int kShapeFeatures = 8;
// Refits stay interactive: the newest samples win when the corpus is larger than this.
constexpr size_t kMaxFitSamples = 1200;

const json* json_at_path(const json& config, const std::string& path) {
  const json* node = &config;
  size_t start = 0;
  for (;;) {
    size_t dot = path.find('.', start);
    std::string key =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
}

// One indicator per (knob, choice), in knob_specs() order.
struct IndicatorTable {
  std::vector<std::string> paths;  // knob path of each indicator
  std::vector<json> values;        // choice of each indicator
  std::vector<json> defaults;      // default of each indicator's knob
  std::vector<bool> first;         // the first indicator of its knob (its value is looked up)
};

const IndicatorTable& indicators() {
  static const IndicatorTable table = [] {
    IndicatorTable t;
    for (const schedule::KnobSpec& spec : schedule::knob_specs()) {
      for (const json& choice : spec.choices) {
        t.first.push_back(t.paths.empty() || t.paths.back() != spec.path);
        t.paths.push_back(spec.path);
        t.values.push_back(choice);
        t.defaults.push_back(spec.default_value);
      }
    }
    return t;
  }();
  return table;
}

double safe_log(double value) { return std::log(std::max(value, 1.0)); }

// Fits y ~ X w + b with ridge penalty lambda on w (X centered by the caller).
Eigen::VectorXd ridge(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, double lambda) {
  const Eigen::Index n = x.rows(), d = x.cols();
  if (n >= d) {
    Eigen::MatrixXd a = x.transpose() * x;
    a.diagonal().array() += lambda;
    return a.ldlt().solve(x.transpose() * y);
  }
  Eigen::MatrixXd k = x * x.transpose();
  k.diagonal().array() += lambda;
  Eigen::VectorXd alpha = k.ldlt().solve(y);
  return x.transpose() * alpha;
}

std::vector<double> ranks(const std::vector<double>& values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> rank(values.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && values[order[j + 1]] == values[order[i]]) ++j;
    double average = 0.5 * static_cast<double>(i + j) + 1.0;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = average;
    i = j + 1;
  }
  return rank;
}

}  // namespace

std::vector<PriorSample> prior_samples(const std::vector<CorpusRecord>& records,
                                       const std::string& target, const std::string& device) {
  std::vector<PriorSample> samples;
  const std::string kind = device == "gpu" ? "measured-gpu" : device == "cpu" ? "predicted" : "";
  for (const CorpusRecord& r : records) {
    if (!target.empty() && target_file_key(r.target) != target_file_key(target)) continue;
    if (!device.empty() && r.device != device) continue;
    PriorSample s;
    s.config = r.config;
    s.shape = r.model_shape;
    s.model = r.model;
    if (r.verdict.correct && r.verdict.latency_us && *r.verdict.latency_us > 0) {
      if (!kind.empty() && r.verdict.latency_kind != kind) continue;
      s.latency_us = r.verdict.latency_us;
    } else if (r.status == kStatusKept || r.status == kStatusDiscarded) {
      continue;  // correct but latency withheld (below the floor): neither a point nor a failure
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

int prior_feature_count() {
  const int m = static_cast<int>(indicators().paths.size());
  return m + m * (m - 1) / 2 + kShapeFeatures;
}

Eigen::VectorXd prior_features(const json& config, const json& shape) {
  const IndicatorTable& table = indicators();
  const size_t m = table.paths.size();
  std::vector<double> on(m, 0.0);
  const json* value = nullptr;
  for (size_t i = 0; i < m; ++i) {
    if (table.first[i]) value = json_at_path(config, table.paths[i]);  // once per knob
    on[i] = (value ? *value : table.defaults[i]) == table.values[i] ? 1.0 : 0.0;
  }
  Eigen::VectorXd f(prior_feature_count());
  Eigen::Index k = 0;
  for (size_t i = 0; i < m; ++i) f[k++] = on[i];
  for (size_t i = 0; i < m; ++i)
    for (size_t j = i + 1; j < m; ++j) f[k++] = on[i] * on[j];
  const double hidden = shape.value("hidden", 0), layers = shape.value("layers", 0);
  const double heads = shape.value("heads", 0), kv_heads = shape.value("kv_heads", 0);
  const double head_dim = shape.value("head_dim", 0), ffn = shape.value("ffn", 0);
  const double vocab = shape.value("vocab", 0);
  const double dtype_bytes = shape.value("dtype", "f32") == "bf16" ? 2.0 : 4.0;
  const double params = layers * (hidden * (heads + 2 * kv_heads) * head_dim +
                                  heads * head_dim * hidden + 3 * hidden * ffn) +
                        vocab * hidden * (shape.value("tied_embeddings", false) ? 1 : 2);
  f[k++] = safe_log(hidden);
  f[k++] = safe_log(layers);
  f[k++] = safe_log(heads);
  f[k++] = kv_heads > 0 ? heads / kv_heads : 1.0;
  f[k++] = safe_log(head_dim);
  f[k++] = hidden > 0 ? ffn / hidden : 0.0;
  f[k++] = safe_log(vocab);
  f[k++] = safe_log(params * dtype_bytes);
  return f;
}

bool Prior::fit(const std::vector<PriorSample>& all_samples, int min_samples) {
  trained_ = false;
  failure_trained_ = false;
  std::vector<const PriorSample*> samples;
  const size_t first =
      all_samples.size() > kMaxFitSamples ? all_samples.size() - kMaxFitSamples : 0;
  for (size_t i = first; i < all_samples.size(); ++i) samples.push_back(&all_samples[i]);
  const int d = prior_feature_count();
  const Eigen::Index n = static_cast<Eigen::Index>(samples.size());
  Eigen::MatrixXd x(n, d);
  for (Eigen::Index i = 0; i < n; ++i)
    x.row(i) = prior_features(samples[i]->config, samples[i]->shape).transpose();
  mean_ = n > 0 ? Eigen::VectorXd(x.colwise().mean().transpose()) : Eigen::VectorXd::Zero(d);

  // Failure model on every sample.
  int failures = 0;
  Eigen::VectorXd failed(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    failed[i] = samples[i]->latency_us ? 0.0 : 1.0;
    failures += samples[i]->latency_us ? 0 : 1;
  }
  if (failures > 0 && n > 1) {
    Eigen::MatrixXd xc = x.rowwise() - mean_.transpose();
    failure_bias_ = failed.mean();
    failure_weights_ = ridge(xc, failed.array() - failure_bias_, lambda_);
    failure_trained_ = true;
  }

  std::vector<Eigen::Index> with_latency;
  for (Eigen::Index i = 0; i < n; ++i)
    if (samples[i]->latency_us) with_latency.push_back(i);
  latency_samples_ = static_cast<int>(with_latency.size());
  if (latency_samples_ < std::max(min_samples, 2)) return false;
  Eigen::MatrixXd xl(latency_samples_, d);
  Eigen::VectorXd y(latency_samples_);
  for (int r = 0; r < latency_samples_; ++r) {
    xl.row(r) = x.row(with_latency[r]) - mean_.transpose();
    y[r] = std::log(*samples[with_latency[r]]->latency_us);
  }
  bias_ = y.mean();
  weights_ = ridge(xl, y.array() - bias_, lambda_);
  trained_ = true;
  return true;
}

double Prior::predict_log_latency(const json& config, const json& shape) const {
  if (!trained_) return 0.0;
  return bias_ + weights_.dot(prior_features(config, shape) - mean_);
}

double Prior::predict_failure(const json& config, const json& shape) const {
  if (!failure_trained_) return 0.0;
  double p = failure_bias_ + failure_weights_.dot(prior_features(config, shape) - mean_);
  return std::clamp(p, 0.0, 1.0);
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return 0.0;
  std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  const double mean = (n + 1.0) / 2.0;
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    cov += (ra[i] - mean) * (rb[i] - mean);
    va += (ra[i] - mean) * (ra[i] - mean);
    vb += (rb[i] - mean) * (rb[i] - mean);
  }
  if (va <= 0 || vb <= 0) return 0.0;
  return cov / std::sqrt(va * vb);
}

PriorEvaluation evaluate_prior(const std::vector<PriorSample>& samples, int folds, uint64_t seed) {
  PriorEvaluation result;
  std::vector<size_t> points;
  for (size_t i = 0; i < samples.size(); ++i)
    if (samples[i].latency_us) points.push_back(i);
  result.samples = static_cast<int>(points.size());
  result.folds = folds;
  if (points.size() < static_cast<size_t>(2 * folds) || folds < 2) return result;
  std::mt19937_64 rng(seed);
  std::shuffle(points.begin(), points.end(), rng);
  std::vector<int> fold_of(samples.size(), -1);
  for (size_t i = 0; i < points.size(); ++i) fold_of[points[i]] = static_cast<int>(i % folds);
  // Failures train every fold's failure model; they are never held out (no latency to rank).
  std::vector<double> predicted, actual;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_model;
  for (int fold = 0; fold < folds; ++fold) {
    std::vector<PriorSample> train;
    for (size_t i = 0; i < samples.size(); ++i)
      if (fold_of[i] != fold) train.push_back(samples[i]);
    Prior prior;
    if (!prior.fit(train)) continue;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (fold_of[i] != fold) continue;
      double p = prior.predict_log_latency(samples[i].config, samples[i].shape);
      double y = std::log(*samples[i].latency_us);
      predicted.push_back(p);
      actual.push_back(y);
      by_model[samples[i].model].first.push_back(p);
      by_model[samples[i].model].second.push_back(y);
    }
  }
  result.spearman = spearman(predicted, actual);
  for (const auto& [model, series] : by_model) {
    result.per_model[model] = {{"samples", series.first.size()},
                               {"spearman", spearman(series.first, series.second)}};
  }
  return result;
}

nlohmann::json evaluate_prior_per_target(const std::vector<CorpusRecord>& records,
                                         const std::string& target, const std::string& device,
                                         int folds, uint64_t seed) {
  // One GPU under one name: a row of `--gpu auto` names the live device ("NVIDIA H200"), one of
  // `--gpu h200` the registry's target; both are the target file's key (shared_corpus.h). Rows
  // judged differently (another timed position, or an objective) measure another latency, so
  // they are another group, as the loop's training keeps only rows judged as it judges.
  struct Group {
    std::string target, device;
    int position;               // the timed position, without an objective
    eval::Objective objective;  // empty: judged at `position` alone
    std::vector<CorpusRecord> records;
  };
  std::vector<Group> groups;
  for (const auto& r : records) {
    const std::string key = target_file_key(r.target);
    if ((!target.empty() && key != target_file_key(target)) ||
        (!device.empty() && r.device != device))
      continue;
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) {
      return x.target == key && x.device == r.device &&
             eval::judged_alike(r.verdict.timed_position, r.verdict.objective, x.position,
                                x.objective);
    });
    if (g == groups.end()) {
      eval::Objective objective = eval::objective_of_entries(r.verdict.objective);
      const int position = objective.empty() ? r.verdict.timed_position : 0;
      g = groups.insert(groups.end(), {key, r.device, position, std::move(objective), {}});
    }
    g->records.push_back(r);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const Group& g : groups) {
    const std::vector<PriorSample> samples = prior_samples(g.records, g.target, g.device);
    const PriorEvaluation e = evaluate_prior(samples, folds, seed);
    nlohmann::json entry = {{"target", g.target}, {"device", g.device}};
    if (g.objective.empty())
      entry["timed_position"] = g.position;
    else
      entry["objective"] = eval::objective_text(g.objective);
    entry.update({{"samples", e.samples},
                  {"failures", static_cast<int>(samples.size()) - e.samples},
                  {"spearman",
                   e.samples >= 2 * folds ? nlohmann::json(e.spearman) : nlohmann::json(nullptr)},
                  {"per_model", e.per_model}});
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace megasched::flywheel
