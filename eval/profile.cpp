#include "eval/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <optional>
#include <stdexcept>

namespace megasched::eval {

using nlohmann::json;

namespace {

/// ns -> us with 3 decimals (ns are integers, so the division is exact to the ns).
double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

double fraction(uint64_t part, uint64_t whole) {
  if (whole == 0) return 0.0;
  return std::round(1e4 * static_cast<double>(part) / static_cast<double>(whole)) / 1e4;
}

/// A run task's stamps made monotone (start <= ready <= done <= signal), so no phase is negative
/// even if a stamp is off by a tick.
struct Phases {
  uint64_t start, ready, done, signal;
  uint64_t wait() const { return ready - start; }
  uint64_t exec() const { return done - ready; }
  uint64_t sig() const { return signal - done; }
};

Phases phases(const vm::TaskStamp& s) {
  Phases p;
  p.start = s.start_ns;
  p.ready = std::max(s.ready_ns, p.start);
  p.done = std::max(s.done_ns, p.ready);
  p.signal = std::max(s.signal_ns, p.done);
  return p;
}

/// Sum and max of one phase over a set of tasks.
struct Acc {
  uint64_t sum = 0;
  uint64_t max = 0;
  void add(uint64_t v) {
    sum += v;
    max = std::max(max, v);
  }
  json to_json() const { return {{"sum", us(sum)}, {"max", us(max)}}; }
};

/// A streamed GEMV's exec time in three parts (its staged and streamed stamps, made monotone inside
/// [ready, done]); nullopt for a task without them.
struct ExecParts {
  uint64_t staging, stream, epilogue;
};

std::optional<ExecParts> exec_parts(const vm::TaskStamp& s, const Phases& p) {
  if (s.staged_ns == 0 || s.streamed_ns == 0) return std::nullopt;
  const uint64_t staged = std::clamp(s.staged_ns, p.ready, p.done);
  const uint64_t streamed = std::clamp(s.streamed_ns, staged, p.done);
  return ExecParts{staged - p.ready, streamed - staged, p.done - streamed};
}

struct OpAcc {
  int tasks = 0;
  Acc wait, exec, signal;
  int streamed = 0;               // tasks with exec parts (streamed GEMVs)
  Acc staging, stream, epilogue;  // their parts
  uint64_t first_start = UINT64_MAX;
  uint64_t last_signal = 0;
  std::vector<uint64_t> lags;  // ready lags of the tasks that have one (ready_lag)
  void add(const Phases& p, int64_t lag, const std::optional<ExecParts>& parts) {
    if (parts) {
      ++streamed;
      staging.add(parts->staging);
      stream.add(parts->stream);
      epilogue.add(parts->epilogue);
    }
    ++tasks;
    wait.add(p.wait());
    exec.add(p.exec());
    signal.add(p.sig());
    first_start = std::min(first_start, p.start);
    last_signal = std::max(last_signal, p.signal);
    if (lag >= 0) lags.push_back(static_cast<uint64_t>(lag));
  }
  /// The streamed GEMVs' exec in parts: {tasks, staging_us, stream_us, epilogue_us} (sum and max
  /// over those tasks; staging + stream + epilogue = their exec).
  json parts_json() const {
    return {{"tasks", streamed},
            {"staging_us", staging.to_json()},
            {"stream_us", stream.to_json()},
            {"epilogue_us", epilogue.to_json()}};
  }
  /// {tasks, median, max} of the ready lags (median: the lower middle of an even count).
  json lag_json() const {
    if (lags.empty()) return {{"tasks", 0}, {"median", 0.0}, {"max", 0.0}};
    std::vector<uint64_t> v = lags;
    std::sort(v.begin(), v.end());
    return {{"tasks", v.size()}, {"median", us(v[(v.size() - 1) / 2])}, {"max", us(v.back())}};
  }
};

/// For each counter, the run tasks that signal it sorted by signal time, and the running sum of
/// their increments: the releaser of a wait (c, th) is the first at which the sum reaches th.
class Releasers {
 public:
  Releasers(const schedule::Program& program, const std::vector<vm::TaskStamp>& stamps,
            const std::vector<Phases>& ph) {
    by_counter_.resize(program.num_counters());
    for (uint32_t t = 0; t < program.tasks.size(); ++t) {
      const ms_abi::Instr& in = program.tasks[t];
      if (stamps[t].block < 0 || in.signal_increment == 0) continue;
      if (in.signal_counter >= by_counter_.size()) by_counter_.resize(in.signal_counter + 1);
      by_counter_[in.signal_counter].push_back({ph[t].signal, t, in.signal_increment});
    }
    for (auto& list : by_counter_) {
      std::sort(list.begin(), list.end(), [](const Signal& a, const Signal& b) {
        return a.at != b.at ? a.at < b.at : a.task < b.task;
      });
      uint64_t sum = 0;
      for (Signal& s : list) s.running = sum += s.increment;
    }
  }

  /// The task whose signal made `counter` reach `threshold`; -1 when the threshold is 0 (no
  /// producer needed) or was not reached by the tasks that ran.
  int64_t releaser(uint32_t counter, uint32_t threshold) const {
    if (threshold == 0 || counter >= by_counter_.size()) return -1;
    const auto& list = by_counter_[counter];
    auto it = std::lower_bound(list.begin(), list.end(), threshold,
                               [](const Signal& s, uint64_t th) { return s.running < th; });
    return it == list.end() ? -1 : static_cast<int64_t>(it->task);
  }

 private:
  struct Signal {
    uint64_t at;
    uint32_t task;
    uint32_t increment;
    uint64_t running = 0;
  };
  std::vector<std::vector<Signal>> by_counter_;
};

/// Of task t's waits, the releaser that signalled last (-1 when none was released; ties keep the
/// first wait's) and its counter, and whether every wait with a threshold was released.
struct Release {
  int64_t task = -1;
  int64_t counter = -1;
  bool complete = true;
};

Release latest_release(const schedule::Program& program, const Releasers& releasers,
                       const std::vector<Phases>& ph, uint32_t t) {
  const ms_abi::Instr& in = program.tasks[t];
  Release out;
  for (uint32_t w = in.wait_begin; w < in.wait_begin + in.wait_count && w < program.waits.size();
       ++w) {
    if (program.waits[w].threshold == 0) continue;  // needs no producer
    const int64_t r = releasers.releaser(program.waits[w].counter, program.waits[w].threshold);
    if (r < 0) {
      out.complete = false;
    } else if (out.task < 0 || ph[r].signal > ph[out.task].signal) {
      out.task = r;
      out.counter = program.waits[w].counter;
    }
  }
  return out;
}

/// Task t's ready lag: ready - max(start, release), release being the latest releaser signal of
/// its waits (the moment the block had taken the task and every wait held); -1 when the task has
/// no wait with a producer or one of its waits was not released by the tasks that ran.
int64_t ready_lag(const schedule::Program& program, const Releasers& releasers,
                  const std::vector<Phases>& ph, uint32_t t) {
  const Release r = latest_release(program, releasers, ph, t);
  if (r.task < 0 || !r.complete) return -1;
  const uint64_t from = std::max(ph[t].start, ph[r.task].signal);
  return ph[t].ready > from ? static_cast<int64_t>(ph[t].ready - from) : 0;
}

std::string op_name(const schedule::Program& program, uint32_t op_id) {
  return op_id < program.ops.size() ? program.ops[op_id].name : "op" + std::to_string(op_id);
}

std::string kind_name(const schedule::Program& program, uint32_t op_id) {
  return op_id < program.ops.size() ? schedule::op_kind_name(program.ops[op_id].kind) : "?";
}

std::string counter_name(const schedule::Program& program, uint32_t counter) {
  return counter < program.counter_names.size() ? program.counter_names[counter]
                                                : "c" + std::to_string(counter);
}

json critical_path(const schedule::Program& program, const std::vector<vm::TaskStamp>& stamps,
                   const std::vector<Phases>& ph, const Releasers& releasers) {
  const uint32_t n = static_cast<uint32_t>(program.tasks.size());
  int64_t last = -1;
  for (uint32_t t = 0; t < n; ++t)
    if (stamps[t].block >= 0 && (last < 0 || ph[t].signal > ph[last].signal)) last = t;
  json out = {{"stages", 0},    {"tasks", 0},     {"span_us", 0.0},   {"gap_us", 0.0},
              {"wait_us", 0.0}, {"exec_us", 0.0}, {"signal_us", 0.0}, {"path", json::array()}};
  if (last < 0) return out;

  std::map<std::pair<int32_t, int32_t>, uint32_t> at;  // (block, order) -> task
  for (uint32_t t = 0; t < n; ++t)
    if (stamps[t].block >= 0) at[{stamps[t].block, stamps[t].order}] = t;

  struct Hop {
    uint32_t task;
    std::string via;  // how this task was reached from the one before it on the path
    int64_t counter = -1;
  };
  std::vector<Hop> chain;  // last task first
  std::vector<bool> seen(n, false);
  Hop cur{static_cast<uint32_t>(last), "start"};
  while (true) {
    seen[cur.task] = true;
    int64_t queue_pred = -1;
    if (auto it = at.find({stamps[cur.task].block, stamps[cur.task].order - 1}); it != at.end())
      queue_pred = it->second;
    const Release dep = latest_release(program, releasers, ph, cur.task);
    const int64_t dep_pred = dep.task, dep_counter = dep.counter;
    // On a tie the dependency wins: the task could not have run earlier either way, and the
    // dependency is the edge a schedule change can move.
    Hop next{0, ""};
    if (dep_pred >= 0 && (queue_pred < 0 || ph[dep_pred].signal >= ph[queue_pred].signal))
      next = {static_cast<uint32_t>(dep_pred), "", dep_counter};
    else if (queue_pred >= 0)
      next = {static_cast<uint32_t>(queue_pred), "", -1};
    else
      break;
    if (seen[next.task]) break;  // inconsistent stamps; never loop
    cur.via = next.counter >= 0 ? "dependency" : "queue";
    cur.counter = next.counter;
    chain.push_back(cur);
    cur = {next.task, "start"};
  }
  chain.push_back(cur);
  std::reverse(chain.begin(), chain.end());

  // Walk forward with a cursor at the end of the previous task on the path: each task's part of
  // the path is [cursor, its signal], split into gap (before it started), wait, exec and signal.
  uint64_t cursor = ph[chain.front().task].start;
  const uint64_t first = cursor;
  uint64_t gap = 0, wait = 0, exec = 0, sig = 0;
  int stages = 0;
  json path = json::array();
  for (const Hop& h : chain) {
    const Phases& p = ph[h.task];
    const uint64_t begin = std::max(p.start, cursor);
    const uint64_t ready = std::max(p.ready, begin);
    const uint64_t done = std::max(p.done, ready);
    const uint64_t end = std::max(p.signal, done);
    gap += begin - cursor;
    wait += ready - begin;
    exec += done - ready;
    sig += end - done;
    cursor = end;
    const uint32_t op = program.tasks[h.task].op_id;
    json e = {{"task", h.task},
              {"op", op_name(program, op)},
              {"kind", kind_name(program, op)},
              {"block", stamps[h.task].block},
              {"via", h.via},
              {"start_us", us(p.start)},
              {"signal_us", us(p.signal)}};
    if (h.counter >= 0) {
      e["counter"] = counter_name(program, static_cast<uint32_t>(h.counter));
      ++stages;
    }
    path.push_back(std::move(e));
  }
  out["stages"] = stages;
  out["tasks"] = chain.size();
  out["span_us"] = us(cursor - first);
  out["gap_us"] = us(gap);
  out["wait_us"] = us(wait);
  out["exec_us"] = us(exec);
  out["signal_us"] = us(sig);
  out["path"] = std::move(path);
  return out;
}

/// Per op (program order) and per op kind (by exec time): {ops, kinds} of analyze_profile.
std::pair<json, json> per_op_and_kind(const schedule::Program& program,
                                      const std::vector<Phases>& ph,
                                      const std::vector<std::optional<ExecParts>>& parts,
                                      const Releasers& releasers,
                                      const std::vector<uint32_t>& order) {
  std::map<uint32_t, OpAcc> per_op;
  std::map<std::string, OpAcc> per_kind;
  for (uint32_t t : order) {
    const int64_t lag = ready_lag(program, releasers, ph, t);
    per_op[program.tasks[t].op_id].add(ph[t], lag, parts[t]);
    per_kind[kind_name(program, program.tasks[t].op_id)].add(ph[t], lag, parts[t]);
  }
  json ops = json::array();
  for (const auto& [op, a] : per_op) {
    ops.push_back({{"op", op_name(program, op)},
                   {"kind", kind_name(program, op)},
                   {"layer", op < program.ops.size() ? program.ops[op].layer : -1},
                   {"tasks", a.tasks},
                   {"wait_us", a.wait.to_json()},
                   {"exec_us", a.exec.to_json()},
                   {"exec_parts", a.parts_json()},
                   {"signal_us", a.signal.to_json()},
                   {"ready_lag_us", a.lag_json()},
                   {"first_start_us", us(a.first_start)},
                   {"last_signal_us", us(a.last_signal)},
                   {"span_us", us(a.last_signal - a.first_start)}});
  }
  std::vector<std::pair<std::string, OpAcc>> kinds(per_kind.begin(), per_kind.end());
  std::stable_sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) {
    return a.second.exec.sum > b.second.exec.sum;
  });
  json kinds_json = json::array();
  for (const auto& [kind, a] : kinds)
    kinds_json.push_back({{"kind", kind},
                          {"tasks", a.tasks},
                          {"wait_us", a.wait.to_json()},
                          {"exec_us", a.exec.to_json()},
                          {"exec_parts", a.parts_json()},
                          {"signal_us", a.signal.to_json()},
                          {"ready_lag_us", a.lag_json()}});

  return {std::move(ops), std::move(kinds_json)};
}

}  // namespace

json analyze_profile(const schedule::Program& program, const std::vector<vm::TaskStamp>& stamps,
                     double wall_us) {
  const size_t n = program.tasks.size();
  if (stamps.size() != n)
    throw std::invalid_argument("analyze_profile: " + std::to_string(stamps.size()) +
                                " stamps for a program of " + std::to_string(n) +
                                " tasks (one stamp per task, indexed by task id)");
  for (size_t t = 0; t < n; ++t)
    if (stamps[t].block >= 0 && (stamps[t].task != static_cast<int32_t>(t) || stamps[t].order < 0))
      throw std::invalid_argument("analyze_profile: stamp " + std::to_string(t) + " names task " +
                                  std::to_string(stamps[t].task) + " at order " +
                                  std::to_string(stamps[t].order) +
                                  " (stamps are indexed by task id; orders start at 0)");

  std::vector<Phases> ph(n);
  std::vector<std::optional<ExecParts>> parts(n);  // a streamed GEMV's exec in parts
  uint64_t span = 0;
  int32_t max_block = -1;
  size_t run = 0;
  for (size_t t = 0; t < n; ++t) {
    if (stamps[t].block < 0) continue;
    ph[t] = phases(stamps[t]);
    parts[t] = exec_parts(stamps[t], ph[t]);
    span = std::max(span, ph[t].signal);
    max_block = std::max(max_block, stamps[t].block);
    ++run;
  }

  const Releasers releasers(program, stamps, ph);

  // The timeline, by start time.
  std::vector<uint32_t> order;
  for (uint32_t t = 0; t < n; ++t)
    if (stamps[t].block >= 0) order.push_back(t);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return ph[a].start != ph[b].start ? ph[a].start < ph[b].start : a < b;
  });
  json timeline = json::array();
  for (uint32_t t : order) {
    const ms_abi::Instr& in = program.tasks[t];
    const int layer =
        in.op_id < program.ops.size() ? program.ops[in.op_id].layer : static_cast<int>(in.layer);
    timeline.push_back({{"task", t},
                        {"op", op_name(program, in.op_id)},
                        {"opcode", schedule::opcode_name(in.opcode)},
                        {"layer", layer},
                        {"block", stamps[t].block},
                        {"order", stamps[t].order},
                        {"start_us", us(ph[t].start)},
                        {"ready_us", us(ph[t].ready)},
                        {"done_us", us(ph[t].done)},
                        {"signal_us", us(ph[t].signal)}});
    if (parts[t]) {
      timeline.back()["staged_us"] = us(ph[t].ready + parts[t]->staging);
      timeline.back()["streamed_us"] = us(ph[t].ready + parts[t]->staging + parts[t]->stream);
    }
  }

  auto [ops, kinds_json] = per_op_and_kind(program, ph, parts, releasers, order);

  // Per block: the five phases of its step (they add up to the span).
  const int blocks = std::max(program.launch.grid_blocks, max_block + 1);
  std::vector<std::vector<uint32_t>> by_block(static_cast<size_t>(std::max(blocks, 0)));
  for (uint32_t t : order) by_block[static_cast<size_t>(stamps[t].block)].push_back(t);
  uint64_t tot_wait = 0, tot_exec = 0, tot_sig = 0, tot_gap = 0, tot_idle = 0;
  json per_block = json::array();
  for (int b = 0; b < blocks; ++b) {
    auto& ts = by_block[static_cast<size_t>(b)];
    std::sort(ts.begin(), ts.end(),
              [&](uint32_t x, uint32_t y) { return stamps[x].order < stamps[y].order; });
    uint64_t wait = 0, exec = 0, sig = 0, gap = 0, cursor = 0;
    for (uint32_t t : ts) {
      gap += ph[t].start > cursor ? ph[t].start - cursor : 0;
      wait += ph[t].wait();
      exec += ph[t].exec();
      sig += ph[t].sig();
      cursor = std::max(cursor, ph[t].signal);
    }
    const uint64_t idle = span - cursor;
    tot_wait += wait;
    tot_exec += exec;
    tot_sig += sig;
    tot_gap += gap;
    tot_idle += idle;
    per_block.push_back({{"block", b},
                         {"tasks", ts.size()},
                         {"wait_us", us(wait)},
                         {"exec_us", us(exec)},
                         {"signal_us", us(sig)},
                         {"gap_us", us(gap)},
                         {"idle_us", us(idle)},
                         {"wait_fraction", fraction(wait, span)},
                         {"exec_fraction", fraction(exec, span)},
                         {"signal_fraction", fraction(sig, span)},
                         {"gap_fraction", fraction(gap, span)},
                         {"idle_fraction", fraction(idle, span)}});
  }
  const uint64_t area = span * static_cast<uint64_t>(std::max(blocks, 0));
  json totals = {{"span_us", us(span)},
                 {"wall_us", wall_us},
                 {"blocks", blocks},
                 {"tasks_run", run},
                 {"tasks_not_run", n - run},
                 {"wait_us", us(tot_wait)},
                 {"exec_us", us(tot_exec)},
                 {"signal_us", us(tot_sig)},
                 {"gap_us", us(tot_gap)},
                 {"idle_us", us(tot_idle)},
                 {"wait_fraction", fraction(tot_wait, area)},
                 {"exec_fraction", fraction(tot_exec, area)},
                 {"signal_fraction", fraction(tot_sig, area)},
                 {"gap_fraction", fraction(tot_gap, area)},
                 {"idle_fraction", fraction(tot_idle, area)}};

  return {{"tasks", std::move(timeline)},
          {"per_op", std::move(ops)},
          {"per_kind", std::move(kinds_json)},
          {"per_block", std::move(per_block)},
          {"totals", std::move(totals)},
          {"critical_path", critical_path(program, stamps, ph, releasers)}};
}

namespace {

// printf into a string (format checked by the compiler).
__attribute__((format(printf, 1, 2))) std::string printf_string(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

double pct(const json& j, const char* key) { return 100.0 * j.value(key, 0.0); }

}  // namespace

std::string format_profile(const json& a, int top_ops) {
  const json& tot = a.at("totals");
  const json& cp = a.at("critical_path");
  std::string s;
  s += printf_string(
      "profile: %d of %d tasks ran on %d blocks; span %.3f us (launch wall %.3f us, stamping "
      "included)\n",
      tot.value("tasks_run", 0), tot.value("tasks_run", 0) + tot.value("tasks_not_run", 0),
      tot.value("blocks", 0), tot.value("span_us", 0.0), tot.value("wall_us", 0.0));
  s += printf_string(
      "blocks x span: exec %.1f%%  wait %.1f%%  signal %.1f%%  gap %.1f%%  idle after last task "
      "%.1f%%\n",
      pct(tot, "exec_fraction"), pct(tot, "wait_fraction"), pct(tot, "signal_fraction"),
      pct(tot, "gap_fraction"), pct(tot, "idle_fraction"));

  // The critical path in one line, and the op kinds it spends its exec time in.
  const json& path = cp.at("path");
  std::map<std::string, double> path_exec;
  std::string ends;
  if (!path.empty())
    ends = " from " + path.front().value("op", "?") + " to " + path.back().value("op", "?");
  const int tasks = cp.value("tasks", 0);
  const int stages = cp.value("stages", 0);
  s += printf_string(
      "critical path: %d tasks, %d dependency stages, %d queue hops%s; %.3f us = exec %.3f + wait "
      "%.3f + signal %.3f + gap %.3f\n",
      tasks, stages, std::max(tasks - 1 - stages, 0), ends.c_str(), cp.value("span_us", 0.0),
      cp.value("exec_us", 0.0), cp.value("wait_us", 0.0), cp.value("signal_us", 0.0),
      cp.value("gap_us", 0.0));

  // Ops by exec time.
  std::vector<const json*> ops;
  for (const json& op : a.at("per_op")) ops.push_back(&op);
  std::stable_sort(ops.begin(), ops.end(), [](const json* x, const json* y) {
    return x->at("exec_us").value("sum", 0.0) > y->at("exec_us").value("sum", 0.0);
  });
  s += printf_string("\n%-20s %-13s %5s %11s %10s %11s %10s %10s %10s %8s %8s\n", "op", "kind",
                     "tasks", "exec_sum_us", "exec_max", "wait_sum_us", "wait_max", "signal_max",
                     "span_us", "lag_med", "lag_max");
  const size_t shown = std::min(ops.size(), static_cast<size_t>(std::max(top_ops, 0)));
  for (size_t i = 0; i < shown; ++i) {
    const json& op = *ops[i];
    const json lag = op.value("ready_lag_us", json::object());
    s += printf_string("%-20s %-13s %5d %11.3f %10.3f %11.3f %10.3f %10.3f %10.3f %8.3f %8.3f\n",
                       op.value("op", "?").c_str(), op.value("kind", "?").c_str(),
                       op.value("tasks", 0), op.at("exec_us").value("sum", 0.0),
                       op.at("exec_us").value("max", 0.0), op.at("wait_us").value("sum", 0.0),
                       op.at("wait_us").value("max", 0.0), op.at("signal_us").value("max", 0.0),
                       op.value("span_us", 0.0), lag.value("median", 0.0), lag.value("max", 0.0));
  }
  if (shown < ops.size()) s += printf_string("(%zu more ops)\n", ops.size() - shown);

  // The streamed GEMVs' exec by kind, in parts (means per task).
  bool header = false;
  for (const json& k : a.at("per_kind")) {
    const json parts = k.value("exec_parts", json::object());
    const int n = parts.value("tasks", 0);
    if (n == 0) continue;
    if (!header) {
      s += printf_string("\n%-13s %5s %12s %12s %12s  (streamed GEMV exec, us a task)\n", "kind",
                         "tasks", "staging", "stream", "epilogue");
      header = true;
    }
    auto mean = [&](const char* key) { return parts.at(key).value("sum", 0.0) / n; };
    s += printf_string("%-13s %5d %12.3f %12.3f %12.3f\n", k.value("kind", "?").c_str(), n,
                       mean("staging_us"), mean("stream_us"), mean("epilogue_us"));
  }

  // Blocks by idle time.
  std::vector<const json*> blocks;
  int empty = 0;
  for (const json& b : a.at("per_block")) {
    if (b.value("tasks", 0) == 0)
      ++empty;
    else
      blocks.push_back(&b);
  }
  std::stable_sort(blocks.begin(), blocks.end(), [](const json* x, const json* y) {
    return x->value("idle_us", 0.0) > y->value("idle_us", 0.0);
  });
  s += printf_string("\n%-6s %5s %10s %10s %10s %10s %10s\n", "block", "tasks", "exec_us",
                     "wait_us", "gap_us", "idle_us", "idle_pct");
  for (size_t i = 0; i < blocks.size() && i < 5; ++i) {
    const json& b = *blocks[i];
    s += printf_string("%-6d %5d %10.3f %10.3f %10.3f %10.3f %9.1f%%\n", b.value("block", -1),
                       b.value("tasks", 0), b.value("exec_us", 0.0), b.value("wait_us", 0.0),
                       b.value("gap_us", 0.0), b.value("idle_us", 0.0), pct(b, "idle_fraction"));
  }
  if (empty > 0) s += printf_string("(%d blocks ran no task)\n", empty);
  return s;
}

}  // namespace megasched::eval
