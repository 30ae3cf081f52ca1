#include "eval/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "schedule/format.h"

namespace megasched::eval {

using nlohmann::json;

std::vector<ReferenceWindow> compute_windows(ReferenceForward& engine,
                                             const schedule::ModelShape& shape,
                                             const std::vector<int32_t>& tokens,
                                             const std::vector<int>& starts, int steps,
                                             const WindowProgress& progress) {
  std::set<int> snap(starts.begin(), starts.end());
  std::set<int> want;  // positions whose logits a window holds
  for (int s : starts)
    for (int p = s; p < std::min(s + steps, shape.max_seq); ++p) want.insert(p);
  std::map<int, vm::KvSnapshot> kv;
  std::map<int, std::vector<float>> logits;
  engine.reset();
  const int end = want.empty() ? 0 : *want.rbegin() + 1;
  for (int p = 0; p < end;) {
    if (snap.count(p)) kv[p] = engine.kv_snapshot(p);
    if (want.count(p)) {
      logits[p] = engine.step(tokens[static_cast<size_t>(p)], p);
      ++p;
      if (progress) progress(p, end);
      continue;
    }
    // Up to the next position that needs a snapshot or logits, nothing is read back.
    // (In stretches of at most 64 positions when someone is told the progress.)
    int next = std::min(*want.upper_bound(p),
                        snap.upper_bound(p) == snap.end() ? end : *snap.upper_bound(p));
    if (progress) next = std::min(next, p + 64);
    engine.prefill(tokens, p, next);
    p = next;
    if (progress) progress(p, end);
  }
  std::vector<ReferenceWindow> out;
  for (int s : std::set<int>(starts.begin(), starts.end())) {
    ReferenceWindow w;
    w.start = s;
    w.engine = engine.name();
    w.kv = std::move(kv[s]);
    for (int p = s; p < std::min(s + steps, shape.max_seq); ++p) w.logits.push_back(logits[p]);
    out.push_back(std::move(w));
  }
  return out;
}

std::optional<std::vector<ReferenceWindow>> reference_windows(
    const schedule::Weights& weights, const std::string& weights_id,
    const std::vector<int32_t>& tokens, const std::vector<int>& starts, int steps,
    const ReferenceCache& cache,
    const std::function<std::unique_ptr<ReferenceForward>(std::string*)>& make_engine,
    std::vector<WindowOrigin>* origins, std::string* error, const WindowProgress& progress) {
  const schedule::ModelShape& shape = weights.shape;
  const std::set<int> unique(starts.begin(), starts.end());
  auto key_of = [&](int s) {
    ReferenceKey k;
    k.weights_id = weights_id;
    k.start = s;
    k.steps = std::min(steps, shape.max_seq - s);
    k.tokens.assign(tokens.begin(), tokens.begin() + s + k.steps);
    k.dtype = shape.dtype;
    return k;
  };
  std::map<int, ReferenceWindow> have;
  std::vector<int> missing;
  origins->clear();
  for (int s : unique) {
    WindowOrigin o;
    o.start = s;
    ReferenceWindow w;
    const CacheLookup lookup = cache.load(key_of(s), &w, &o.note);
    o.lookup = lookup_name(lookup);
    if (lookup == CacheLookup::kHit) {
      o.engine = w.engine;
      have[s] = std::move(w);
    } else {
      missing.push_back(s);
    }
    origins->push_back(o);
  }
  if (!missing.empty()) {
    std::unique_ptr<ReferenceForward> engine = make_engine(error);
    if (!engine) return std::nullopt;
    for (ReferenceWindow& w : compute_windows(*engine, shape, tokens, missing, steps, progress)) {
      for (WindowOrigin& o : *origins) {
        if (o.start != w.start) continue;
        o.engine = w.engine;
        std::string why;
        if (!cache.store(key_of(w.start), w, &why)) o.note += (o.note.empty() ? "" : "; ") + why;
      }
      have[w.start] = std::move(w);
    }
  }
  std::vector<ReferenceWindow> out;
  for (auto& [s, w] : have) out.push_back(std::move(w));
  return out;
}

CrossCheck cross_check(ReferenceForward& a, ReferenceForward& b, const std::vector<int32_t>& tokens,
                       const std::vector<int>& positions, schedule::DType dtype) {
  CrossCheck c;
  c.positions = positions;
  std::sort(c.positions.begin(), c.positions.end());
  c.positions.erase(std::unique(c.positions.begin(), c.positions.end()), c.positions.end());
  if (c.positions.empty() || c.positions.back() >= static_cast<int>(tokens.size())) {
    c.message = "cross_check needs positions within the token sequence";
    return c;
  }
  a.reset();
  b.reset();
  c.pass = true;
  int next = 0;
  for (int p : c.positions) {
    a.prefill(tokens, next, p);
    b.prefill(tokens, next, p);
    const Comparison cmp = compare_logits(a.step(tokens[static_cast<size_t>(p)], p),
                                          b.step(tokens[static_cast<size_t>(p)], p), dtype);
    c.logits.push_back(cmp);
    if (!cmp.pass && c.pass) {
      c.pass = false;
      c.message = a.name() + " differs from " + b.name() + " at position " + std::to_string(p) +
                  ": rel_err " + schedule::fmt("%.4g", cmp.rel_err) + ", max_abs_err " +
                  schedule::fmt("%.4g", cmp.max_abs_err) +
                  (cmp.argmax_match ? "" : ", argmax differs");
    }
    next = p + 1;
  }
  const vm::KvSnapshot ka = a.kv_snapshot(next), kb = b.kv_snapshot(next);
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < ka.elements() && i < kb.elements(); ++i) {
    const double x = ka.get(i), y = kb.get(i);
    diff = std::isfinite(x - y) ? std::max(diff, std::abs(x - y)) : INFINITY;
    scale = std::max(scale, std::abs(y));
  }
  c.kv_rel_err = scale > 0 ? diff / scale : diff;
  if (ka.elements() != kb.elements() || !(c.kv_rel_err <= tolerance_for(dtype).rel_err)) {
    if (c.pass)
      c.message = a.name() + " and " + b.name() + " leave different KV caches: relative error " +
                  schedule::fmt("%.4g", c.kv_rel_err);
    c.pass = false;
  }
  return c;
}

json to_json(const CrossCheck& c) {
  json per = json::array();
  for (size_t i = 0; i < c.logits.size(); ++i)
    per.push_back({{"position", c.positions[i]},
                   {"rel_err", c.logits[i].rel_err},
                   {"max_abs_err", c.logits[i].max_abs_err},
                   {"argmax_match", c.logits[i].argmax_match},
                   {"pass", c.logits[i].pass}});
  return {{"pass", c.pass}, {"logits", per}, {"kv_rel_err", c.kv_rel_err}, {"message", c.message}};
}

}  // namespace megasched::eval
