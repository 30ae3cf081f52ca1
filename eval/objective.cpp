#include "eval/objective.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "schedule/format.h"

namespace megasched::eval {

namespace {

std::string syntax_hint(const std::string& flag) {
  return "; give POS:WEIGHT,POS:WEIGHT,... (e.g. " + flag +
         " 0:1,1024:1,4096:2; a bare POS weighs 1)";
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

/// A whole-text integer (an optional sign, then digits); nullopt for anything else or overflow.
std::optional<long long> whole_integer(const std::string& s) {
  if (s.empty()) return std::nullopt;
  const size_t digits = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (digits == s.size() || !std::all_of(s.begin() + static_cast<std::ptrdiff_t>(digits), s.end(),
                                         [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return v;
}

/// A whole-text number strtod reads (inf and nan included: objective_error refuses them).
std::optional<double> whole_number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

std::string weight_text(double weight) { return schedule::fmt("%g", weight); }

}  // namespace

std::optional<Objective> parse_objective(const std::string& text, std::string* error,
                                         const std::string& flag) {
  auto fail = [&](const std::string& message) -> std::optional<Objective> {
    if (error) *error = message;
    return std::nullopt;
  };
  if (trim(text).empty()) return fail(flag + " is empty" + syntax_hint(flag));
  Objective objective;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string entry = trim(text.substr(begin, comma - begin));
    begin = comma + 1;
    const std::string quoted = flag + " '" + text + "': entry '" + entry + "'";
    if (entry.empty()) return fail(quoted + " is empty" + syntax_hint(flag));
    const size_t colon = entry.find(':');
    const std::string pos_text = trim(entry.substr(0, colon));
    const std::optional<long long> position = whole_integer(pos_text);
    if (!position)
      return fail(quoted + ": position '" + pos_text + "' is not an integer" + syntax_hint(flag));
    if (*position > std::numeric_limits<int>::max())
      return fail(quoted + ": position " + pos_text + " is too large");
    ObjectiveTerm term;
    term.position =
        static_cast<int>(std::max<long long>(*position, std::numeric_limits<int>::min()));
    if (colon != std::string::npos) {
      const std::string weight_part = trim(entry.substr(colon + 1));
      const std::optional<double> weight = whole_number(weight_part);
      if (!weight)
        return fail(quoted + ": weight '" + weight_part + "' is not a number" + syntax_hint(flag));
      term.weight = *weight;
    }
    objective.push_back(term);
  }
  if (const std::string why = objective_error(objective, flag); !why.empty()) return fail(why);
  // The weight that runs is the one the canonical text (and so the schedule id) names.
  for (ObjectiveTerm& t : objective) t.weight = std::strtod(weight_text(t.weight).c_str(), nullptr);
  if (const std::string why = objective_error(objective, flag); !why.empty()) return fail(why);
  std::sort(objective.begin(), objective.end(),
            [](const ObjectiveTerm& a, const ObjectiveTerm& b) { return a.position < b.position; });
  return objective;
}

std::string objective_error(const Objective& objective, const std::string& flag) {
  for (const ObjectiveTerm& t : objective) {
    if (t.position < 0)
      return flag + ": position " + std::to_string(t.position) +
             " is negative; positions are >= 0 (0 is the first decode step)";
    if (!std::isfinite(t.weight) || !(t.weight > 0))
      return flag + ": the weight of position " + std::to_string(t.position) + " is " +
             weight_text(t.weight) +
             "; a weight is a finite number above 0 (drop the position to leave it out)";
  }
  std::vector<int> positions;
  for (const ObjectiveTerm& t : objective) positions.push_back(t.position);
  std::sort(positions.begin(), positions.end());
  const auto twice = std::adjacent_find(positions.begin(), positions.end());
  if (twice != positions.end())
    return flag + ": position " + std::to_string(*twice) +
           " is given twice; name each position once with its whole weight";
  return "";
}

std::string objective_range_error(const Objective& objective, const std::string& model, int max_seq,
                                  const std::string& flag) {
  for (const ObjectiveTerm& t : objective)
    if (t.position >= max_seq)
      return flag + ": position " + std::to_string(t.position) + " is beyond model " + model +
             "'s max_seq " + std::to_string(max_seq) + " (positions lie in [0, " +
             std::to_string(max_seq - 1) + "])";
  return "";
}

std::string objective_text(const Objective& objective) {
  Objective sorted = objective;
  std::stable_sort(
      sorted.begin(), sorted.end(),
      [](const ObjectiveTerm& a, const ObjectiveTerm& b) { return a.position < b.position; });
  std::string text;
  for (const ObjectiveTerm& t : sorted)
    text += (text.empty() ? "" : ",") + std::to_string(t.position) + ":" + weight_text(t.weight);
  return text;
}

std::vector<int> objective_positions(const Objective& objective) {
  std::vector<int> positions;
  for (const ObjectiveTerm& t : objective) positions.push_back(t.position);
  std::sort(positions.begin(), positions.end());
  return positions;
}

double weighted_mean(const Objective& objective, const std::vector<double>& values) {
  double sum = 0.0, weights = 0.0;
  for (size_t i = 0; i < objective.size() && i < values.size(); ++i) {
    sum += objective[i].weight * values[i];
    weights += objective[i].weight;
  }
  return weights > 0 ? sum / weights : 0.0;
}

Objective objective_of_entries(const nlohmann::json& entries) {
  Objective objective;
  if (!entries.is_array()) return {};
  for (const nlohmann::json& e : entries) {
    if (!e.is_object() || !e.contains("position") || !e["position"].is_number_integer() ||
        !e.contains("weight") || !e["weight"].is_number())
      return {};
    objective.push_back({e["position"].get<int>(), e["weight"].get<double>()});
  }
  return objective;
}

bool judged_alike(int verdict_position, const nlohmann::json& verdict_objective, int timed_position,
                  const Objective& objective) {
  if (objective_text(objective_of_entries(verdict_objective)) != objective_text(objective))
    return false;  // another objective, or one on one side only
  return !objective.empty() || verdict_position == timed_position;
}

}  // namespace megasched::eval
