// The objective a trial is judged by: the positions it is timed at, each with a weight. Its
// latency is the weighted mean sum(w_p * latency_p) / sum(w_p) of the per-position latencies
// (measured or predicted), its floor the weighted mean of the per-position floors
// (eval/evaluate.h, HARNESS.md section 2). An empty objective is today's single timed position
// (EvaluatorOptions::timed_position).
//
// The text form is what `--objective` and the MCP tools take: "POS:WEIGHT,POS:WEIGHT,..." (a bare
// POS weighs 1), e.g. "0:1,1024:1,4096:2". Its canonical form (positions ascending, weights
// printed with %g) names the objective in schedule ids ("|obj0:1,1024:1,4096:2"), so two spellings
// of one objective are one trial.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace megasched::eval {

struct ObjectiveTerm {
  int position = 0;     // decode position timed (the KV cache filled up to it), >= 0
  double weight = 1.0;  // its share of the objective: finite, > 0
};

/// The terms, positions ascending and distinct; empty: no objective (one timed position).
using Objective = std::vector<ObjectiveTerm>;

/// Parses the text form. The weights are kept as their canonical text reads back (6 significant
/// digits), so the schedule id names exactly the objective that runs. nullopt with *error naming
/// `flag`, the entry at fault and the syntax when the text is empty or malformed, or when
/// objective_error refuses the terms.
std::optional<Objective> parse_objective(const std::string& text, std::string* error,
                                         const std::string& flag = "--objective");

/// "" when the terms form an objective: every position >= 0, every weight finite and > 0, no
/// position twice (in any order); else the message, naming `flag`.
std::string objective_error(const Objective& objective, const std::string& flag = "--objective");

/// "" when every position lies in [0, max_seq - 1] of `model`; else the message, naming `flag`.
std::string objective_range_error(const Objective& objective, const std::string& model, int max_seq,
                                  const std::string& flag = "--objective");

/// The canonical text: positions ascending, "POS:WEIGHT" with the weight printed with %g, joined
/// by commas ("0:1,1024:1,4096:2"); "" for no objective.
std::string objective_text(const Objective& objective);

/// The positions, ascending.
std::vector<int> objective_positions(const Objective& objective);

/// sum(w_i * values[i]) / sum(w_i); values holds one number per term, in the terms' order.
double weighted_mean(const Objective& objective, const std::vector<double>& values);

/// The objective a verdict's "objective" entries describe ([{"position", "weight", ...}]); empty
/// for null, an absent field or anything that is not such a list.
Objective objective_of_entries(const nlohmann::json& entries);

/// Whether a trial whose verdict has `verdict_position` (timed_position) and `verdict_objective`
/// (its "objective" entries) was judged as a loop of `timed_position` and `objective` judges: the
/// same objective (positions and weights), or with none on either side the same timed position.
/// What warm start adopts and what the prior strategy trains on.
bool judged_alike(int verdict_position, const nlohmann::json& verdict_objective, int timed_position,
                  const Objective& objective);

}  // namespace megasched::eval
