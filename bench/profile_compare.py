#!/usr/bin/env python3
"""Two `megasched profile` analyses of one step side by side: where a kernel change moved the time.

For each task kind (qkv, attention, o, gate_up, down, lm_head, ...) of two profiles (the same model,
position and config built from two trees, or two configs), the kind's share of the step and its
average task:
  step_us    how far the kind's ops move the step's end: the ops sorted by their last signal, each
             op's last signal minus the one before it, summed over the kind's ops (the step's span
             is the sum over every kind); `per_op` the median of those increments (for a layer's op:
             its share of a layer)
  exec, staging, stream, epilogue, wait, signal   microseconds a task, averaged over the kind's tasks
                                                  (staging, stream and epilogue: the streamed GEMV's
                                                  phases, 0 for other opcodes)
and B minus A for each. The stamps add a timer read and a barrier per task, so the span is not the
step's latency (`megasched bench` measures that); both sides pay them alike.

usage: bench/profile_compare.py A.json B.json [--labels A,B] [--json]
exit 0, or 2 on a bad input (with a hint).
"""
import argparse
import json
import signal
import statistics
import sys

PARTS = ("exec", "staging", "stream", "epilogue", "wait", "signal")


def fail(msg):
    print(f"profile_compare: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}; hint: the file `megasched profile --out` wrote")
    except json.JSONDecodeError as e:
        fail(f"{path} is not JSON ({e.msg}, line {e.lineno}); hint: the file `megasched profile --out` wrote")
    if not isinstance(d, dict) or not isinstance(d.get("per_op"), list) or not isinstance(
            d.get("per_kind"), list):
        fail(f"{path} has no per_op and per_kind lists; hint: the file `megasched profile --out` "
             "wrote (not its --json table, not a bench.json)")
    return d


def summarise(d):
    """{kind: {step_us, per_op, ops, tasks, exec, staging, ...}} and the span."""
    out = {}
    ops = sorted((o for o in d["per_op"] if "last_signal_us" in o),
                 key=lambda o: o["last_signal_us"])
    incr = {}
    prev = 0.0
    for o in ops:
        incr.setdefault(o["kind"], []).append(o["last_signal_us"] - prev)
        prev = o["last_signal_us"]
    for k in d["per_kind"]:
        kind, tasks = k["kind"], max(1, int(k.get("tasks", 0)))
        parts = k.get("exec_parts", {})
        ptasks = max(1, int(parts.get("tasks", 0)))
        row = {"tasks": int(k.get("tasks", 0)),
               "exec": k.get("exec_us", {}).get("sum", 0.0) / tasks,
               "wait": k.get("wait_us", {}).get("sum", 0.0) / tasks,
               "signal": k.get("signal_us", {}).get("sum", 0.0) / tasks}
        for p in ("staging", "stream", "epilogue"):
            row[p] = parts.get(f"{p}_us", {}).get("sum", 0.0) / ptasks
        steps = incr.get(kind, [])
        row["ops"] = len(steps)
        row["step_us"] = sum(steps)
        row["per_op"] = statistics.median(steps) if steps else 0.0
        out[kind] = row
    return out, prev


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--labels", default="A,B", help="names of the two sides (default A,B)")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = ap.parse_args()
    labels = args.labels.split(",")
    if len(labels) != 2 or not all(labels):
        fail(f"--labels takes two names joined by a comma (got '{args.labels}'); hint: --labels base,tree")
    da, db = load(args.a), load(args.b)
    for key in ("model", "position"):
        if da.get(key) != db.get(key):
            fail(f"the profiles differ in {key} ({da.get(key)} against {db.get(key)}); hint: compare "
                 "one model at one position")
    sa, span_a = summarise(da)
    sb, span_b = summarise(db)
    kinds = [k for k in sa if k in sb] + [k for k in sb if k not in sa]
    kinds += [k for k in sa if k not in kinds]
    if args.json:
        print(json.dumps({"labels": labels, "model": da.get("model"), "position": da.get("position"),
                          "span_us": [span_a, span_b],
                          "kinds": {k: [sa.get(k), sb.get(k)] for k in kinds}}, indent=1))
        return
    a, b = labels
    print(f"profile_compare: {da.get('model')} at position {da.get('position')}, {a} -> {b}; "
          f"span {span_a:.1f} -> {span_b:.1f} us ({span_b - span_a:+.1f})")
    print(f"{'kind':10} {'ops':>4} {'step us':>20} {'per op':>18} " +
          " ".join(f"{p:>16}" for p in PARTS) + "   (us a task)")
    for k in kinds:
        ra, rb = sa.get(k), sb.get(k)
        if ra is None or rb is None:
            print(f"{k:10} only in {a if rb is None else b}")
            continue

        def cell(key, width):
            return f"{ra[key]:.1f}->{rb[key]:.1f} ({rb[key] - ra[key]:+.1f})".rjust(width)

        print(f"{k:10} {rb['ops']:>4} {cell('step_us', 20)} {cell('per_op', 18)} " +
              " ".join(f"{ra[p]:.2f}->{rb[p]:.2f}".rjust(16) for p in PARTS))


if __name__ == "__main__":
    main()
