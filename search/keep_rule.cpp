#include "search/keep_rule.h"

#include <algorithm>
#include <cmath>

#include "flywheel/report.h"
#include "flywheel/results.h"
#include "schedule/format.h"

namespace megasched::search {

using nlohmann::json;
using schedule::fmt;

std::string failure_status(const eval::Verdict& v) {
  if (v.status == "crash") return flywheel::kStatusCrash;
  if (v.status == "timeout" || v.status == "hang") return flywheel::kStatusTimeout;
  if (v.status == "rejected" || !v.valid) return flywheel::kStatusRejected;
  if (v.status == "incorrect" || !v.correct) return flywheel::kStatusIncorrect;
  return "";
}

bool has_latency(const eval::Verdict& v) {
  return failure_status(v).empty() && v.correct && v.latency_us && *v.latency_us > 0;
}

double latency_sigma_us(const eval::Verdict& v) {
  if (v.samples_us.size() >= kRobustSigmaSamples) {
    // (p90 - p10) / 2.563, one sigma of a normal: a few outlier samples (a step that waited on
    // the host) do not widen it. Their standard deviation did: one re-measured incumbent gave a
    // 560 us margin, and a candidate 18% slower was kept as a near-tie (an H200, 2026-11-29).
    std::vector<double> s = v.samples_us;
    std::sort(s.begin(), s.end());
    auto quantile = [&s](double q) {
      const double at = q * static_cast<double>(s.size() - 1);
      const size_t lo = static_cast<size_t>(at);
      const size_t hi = std::min(lo + 1, s.size() - 1);
      return s[lo] + (s[hi] - s[lo]) * (at - static_cast<double>(lo));
    };
    return (quantile(0.9) - quantile(0.1)) / 2.563;
  }
  if (v.samples_us.size() >= 2) {
    double mean = 0;
    for (double s : v.samples_us) mean += s;
    mean /= static_cast<double>(v.samples_us.size());
    double var = 0;
    for (double s : v.samples_us) var += (s - mean) * (s - mean);
    return std::sqrt(var / static_cast<double>(v.samples_us.size() - 1));
  }
  if (v.latency_spread_us > 0) return v.latency_spread_us / 2.563;
  return 0.0;
}

KeepDecision decide_keep(const eval::Verdict& candidate, int candidate_complexity,
                         const eval::Verdict& incumbent, int incumbent_complexity, double min_gain,
                         double sigmas, std::optional<double> fastest_us) {
  KeepDecision d;
  const double cand = *candidate.latency_us, inc = *incumbent.latency_us;
  const double sc = latency_sigma_us(candidate), si = latency_sigma_us(incumbent);
  const double noise = sigmas * std::sqrt(sc * sc + si * si);
  d.margin_us = std::max(min_gain * inc, noise);
  d.gain_us = inc - cand;
  const std::string pct = fmt("%.2f%%", 100.0 * d.gain_us / inc);
  const std::string margin = fmt("%.3f us", d.margin_us) +
                             (noise > min_gain * inc ? " (" + fmt("%.1f", sigmas) + " sigma)"
                                                     : " (" + fmt("%.0f%%", 100 * min_gain) + ")");
  const bool simpler_tie =
      std::abs(d.gain_us) <= d.margin_us && candidate_complexity < incumbent_complexity;
  if (d.gain_us > d.margin_us) {
    d.keep = true;
    d.reason = "faster by " + fmt("%.3f us", d.gain_us) + " (" + pct + ") > margin " + margin;
  } else if (simpler_tie) {
    // A near-tie goes to the simpler config, within bounds: each may give up a margin, and
    // chained they would walk the incumbent away from the fastest config the run found (a trade
    // stays within one margin of it), and a wide noise margin would let one give up a lot (never
    // more than kMaxTradeShare of the incumbent).
    const std::string tie = "near-tie (" + pct + ", margin " + margin + "), simpler";
    if (-d.gain_us > kMaxTradeShare * inc) {
      d.reason = tie + ", but slower by more than " + fmt("%.0f%%", 100 * kMaxTradeShare) +
                 " of the incumbent, more than a trade gives up";
    } else if (fastest_us && cand - *fastest_us > d.margin_us) {
      d.reason = tie + ", but " + fmt("%.3f us", cand - *fastest_us) +
                 " slower than the run's fastest kept (" + fmt("%.3f us", *fastest_us) +
                 "), beyond the margin";
    } else {
      d.keep = true;
      d.reason = tie + ": " + std::to_string(candidate_complexity) + " knobs off default vs " +
                 std::to_string(incumbent_complexity);
    }
  } else if (std::abs(d.gain_us) < 5e-4) {
    d.reason = "as fast as the incumbent, and not simpler (" +
               std::to_string(candidate_complexity) + " knobs off default vs " +
               std::to_string(incumbent_complexity) + ")";
  } else if (std::abs(d.gain_us) <= d.margin_us) {
    d.reason = (d.gain_us > 0 ? "faster by " + fmt("%.3f us", d.gain_us) + " (" + pct + ") but"
                              : "slower by " + fmt("%.3f us", -d.gain_us) + " (" +
                                    fmt("%.2f%%", -100.0 * d.gain_us / inc) + "),") +
               " within margin " + margin + ", and not simpler (" +
               std::to_string(candidate_complexity) + " knobs off default vs " +
               std::to_string(incumbent_complexity) + ")";
  } else {
    d.reason = "slower by " + fmt("%.3f us", -d.gain_us) + " (" +
               fmt("%.2f%%", -100.0 * d.gain_us / inc) + ")";
  }
  return d;
}

std::string KeepRule::judge(const schedule::ScheduleConfig& candidate, const eval::Verdict& v,
                            flywheel::CorpusRecord* r, const Remeasure& remeasure) {
  std::string status = failure_status(v);
  std::string decision;
  if (status.empty() && !has_latency(v)) {
    status = flywheel::kStatusDiscarded;
    decision = "correct but no latency reported" +
               (v.notes.empty() ? std::string() : ": " + v.notes.front());
  } else if (status.empty() && !incumbent_.latency()) {
    status = flywheel::kStatusKept;
    decision = "first correct latency of the run";
    r->keep = {{"incumbent_id", incumbent_.id}, {"incumbent_us", nullptr}, {"reason", decision}};
  } else if (status.empty()) {
    KeepDecision d = decide_keep(v, r->complexity, *incumbent_.verdict, incumbent_.complexity,
                                 min_gain_, sigmas_, incumbent_.fastest_us);
    r->keep = {{"incumbent_id", incumbent_.id},
               {"incumbent_us", *incumbent_.latency()},
               {"margin_us", d.margin_us},
               {"gain_us", d.gain_us}};
    const bool measured = v.latency_kind == "measured-gpu";
    if (d.keep && measured) d = judge_again(v, *r, std::move(d), remeasure);
    // Rule 3b: a difference of at least the share that the noise left open, either way: a
    // candidate faster but inside the margin, or a simpler one slower that rule 4 would trade
    // for (the reason is empty when the incumbent's re-measurement was abandoned).
    if (measured && confirm_ > 0 && !d.reason.empty() && incumbent_.latency()) {
      const double share = min_gain_ * *incumbent_.latency();
      const bool hidden_gain = !d.keep && d.gain_us >= share && d.gain_us <= d.margin_us;
      const bool costly_trade = d.keep && -d.gain_us >= share && -d.gain_us <= d.margin_us;
      if (hidden_gain || costly_trade)
        d = confirm(candidate, *r, std::move(d), remeasure, hidden_gain);
    }
    r->keep["reason"] = d.reason;
    status = d.keep ? flywheel::kStatusKept : flywheel::kStatusDiscarded;
    decision = d.reason;
  } else {
    decision = v.rejected_reason.empty() ? (v.notes.empty() ? v.status : v.notes.front())
                                         : v.rejected_reason;
  }
  r->status = status;
  return decision;
}

KeepDecision KeepRule::judge_again(const eval::Verdict& v, flywheel::CorpusRecord& r,
                                   KeepDecision d, const Remeasure& remeasure) {
  const std::optional<eval::Verdict> remeasured = remeasure(incumbent_.config);
  if (!remeasured) return {};
  const eval::Verdict& again = *remeasured;
  if (has_latency(again)) {
    r.keep["remeasured_incumbent_us"] = *again.latency_us;
    incumbent_.verdict = again;
    d = decide_keep(v, r.complexity, again, incumbent_.complexity, min_gain_, sigmas_,
                    incumbent_.fastest_us);
    r.keep["margin_us"] = d.margin_us;
    r.keep["gain_us"] = d.gain_us;
    d.reason += " (against the incumbent re-measured at " + fmt("%.3f us", *again.latency_us) + ")";
  } else {
    r.keep["remeasured_incumbent_status"] = again.status;
    d.reason += " (the incumbent's re-measurement failed: " + again.status + ")";
  }
  return d;
}

KeepDecision KeepRule::confirm(const schedule::ScheduleConfig& candidate, flywheel::CorpusRecord& r,
                               KeepDecision d, const Remeasure& remeasure, bool candidate_faster) {
  // The rounds test whether `faster` (the candidate, or the incumbent against a trade) is.
  const double sign = candidate_faster ? 1.0 : -1.0;
  const char* faster = candidate_faster ? "candidate" : "incumbent";
  std::vector<double> shares = {d.gain_us / *incumbent_.latency()};  // incumbent - candidate
  json rounds = json::array();
  std::string lost;  // why the rounds did not confirm `faster`, "" while they do
  for (int i = 0; i < confirm_ && lost.empty(); ++i) {
    // The order alternates (incumbent first in even rounds): a drift over the rounds favours
    // neither side.
    std::optional<eval::Verdict> timed[2];  // [0] the incumbent, [1] the candidate
    for (int k = 0; k < 2; ++k) {
      const int side = (i % 2 == 0) ? k : 1 - k;
      timed[side] = remeasure(side ? candidate : incumbent_.config);
      if (!timed[side]) return {};  // abandoned: the caller checks why
    }
    if (!has_latency(*timed[0]) || !has_latency(*timed[1])) {
      lost = "round " + std::to_string(i + 1) + " did not time both (" + timed[0]->status + ", " +
             timed[1]->status + ")";
      break;
    }
    const double inc = *timed[0]->latency_us, cand = *timed[1]->latency_us;
    incumbent_.verdict = *timed[0];
    rounds.push_back({{"incumbent_us", inc}, {"candidate_us", cand}});
    shares.push_back((inc - cand) / inc);
    if (sign * (inc - cand) <= 0)
      lost = "round " + std::to_string(i + 1) + " timed the incumbent " + fmt("%.3f us", inc) +
             ", the candidate " + fmt("%.3f us", cand);
  }
  std::vector<double> lead;  // the tested side's gains
  for (double x : shares) lead.push_back(sign * x);
  const double median = flywheel::median(lead);
  if (lost.empty() && median < min_gain_)
    lost = "median gain " + fmt("%.2f%%", 100 * median) + " under the " +
           fmt("%.2f%%", 100 * min_gain_) + " share";
  const bool confirmed = lost.empty();
  d.keep = candidate_faster == confirmed;
  r.keep["confirm"] = {{"faster", faster},
                       {"rounds", rounds},
                       {"gain_shares", shares},
                       {"median_gain_share", median},
                       {"confirmed", confirmed}};
  confirms_.push_back(r.keep["confirm"]);
  const std::string won = "faster in " + std::to_string(confirm_) + " of " +
                          std::to_string(confirm_) + " back-to-back rounds, median gain " +
                          fmt("%.2f%%", 100 * median);
  if (candidate_faster)
    d.reason += confirmed ? "; confirmed: " + won : "; not confirmed: " + lost;
  else
    d.reason += confirmed ? "; the trade refused: the incumbent was " + won
                          : "; the incumbent's lead not confirmed (" + lost + "): the trade stands";
  return d;
}

json KeepRule::confirm_summary() const {
  if (confirm_ == 0) return nullptr;
  std::vector<const json*> confirms;
  for (const json& c : confirms_) confirms.push_back(&c);
  json out = flywheel::confirm_counts(confirms);
  out["rounds"] = confirm_;
  return out;
}

void KeepRule::adopt(const schedule::ScheduleConfig& config, const std::string& id,
                     const std::optional<eval::Verdict>& verdict, int complexity) {
  incumbent_.config = config;
  incumbent_.id = id;
  incumbent_.verdict = verdict;
  incumbent_.complexity = complexity;
  if (verdict && verdict->latency_us &&
      (!incumbent_.fastest_us || *verdict->latency_us < *incumbent_.fastest_us))
    incumbent_.fastest_us = verdict->latency_us;
}

std::string KeepRule::best_text() const {
  std::string best = incumbent_.latency() ? fmt("%.3f us", *incumbent_.latency()) : "-";
  if (incumbent_.latency() && default_us_)
    best += fmt(" (%.2fx)", *default_us_ / *incumbent_.latency());
  return best;
}

json KeepRule::best_summary() const {
  if (!incumbent_.verdict) return nullptr;
  const eval::Verdict& v = *incumbent_.verdict;
  return {
      {"schedule_id", incumbent_.id},
      {"latency_us", *v.latency_us},
      {"latency_kind", v.latency_kind},
      {"pct_of_floor", v.floor_us > 0 ? json(100.0 * v.floor_us / *v.latency_us) : json(nullptr)},
      {"speedup_vs_default", default_us_ ? json(*default_us_ / *v.latency_us) : json(nullptr)},
      {"complexity", incumbent_.complexity},
      {"config", schedule::to_json(incumbent_.config)},
      {"verdict", eval::to_json(v)}};
}

json KeepRule::others_summary() const {
  json others = json::object();
  for (const auto& [type, inc] : others_)
    others[type] = {{"schedule_id", inc.id},
                    {"latency_us", inc.latency() ? json(*inc.latency()) : json(nullptr)},
                    {"config", schedule::to_json(inc.config)}};
  return others;
}

}  // namespace megasched::search
