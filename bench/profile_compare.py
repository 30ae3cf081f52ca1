#!/usr/bin/env python3
"""Where a step's time goes, compared: two `megasched profile` analyses, or one beside graph-pdl.

Two analyses of one step side by side show where a kernel change moved the time; one beside the
graph-pdl baseline's per-kernel timeline shows where the megakernel loses to it.

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

With --graph T.json (`megasched baseline --kind graph-pdl --timeline`'s output, the kprof stage's
kprof_timeline_POS.json, of the same model and position), each profile's op kinds are grouped
under the graph-pdl kernel that does their work (qkv and rope: ms_pdl_qkv_rope; attention and
attn_combine: ms_pdl_attention; o: ms_pdl_o_residual; silu_mul and down: ms_pdl_down_residual;
lm_head and argmax: ms_pdl_lm_head; ...) and each group's share of the step is set beside that
kernel's time on the graph's critical path, in all and per launch (a layer's).

usage: bench/profile_compare.py A.json [B.json] [--labels A,B] [--graph T.json] [--json]
exit 0, or 2 on a bad input (with a hint).
"""
import argparse
import json
import signal
import statistics
import sys

PARTS = ("exec", "staging", "stream", "epilogue", "wait", "signal")

# The graph-pdl kernel (eval/baselines/pdl_baseline.cuh) that does each op kind's work; the kinds
# left out (a separate norm, add or reduce) have no kernel of their own there.
GRAPH_KERNEL = {"embed": "ms_pdl_embed", "qkv": "ms_pdl_qkv_rope", "rope": "ms_pdl_qkv_rope",
                "attention": "ms_pdl_attention", "attn_combine": "ms_pdl_attention",
                "o": "ms_pdl_o_residual", "gate_up": "ms_pdl_gate_up",
                "silu_mul": "ms_pdl_down_residual", "down": "ms_pdl_down_residual",
                "lm_head": "ms_pdl_lm_head", "argmax": "ms_pdl_lm_head"}


def fail(msg):
    print(f"profile_compare: {msg}", file=sys.stderr)
    sys.exit(2)


def read_json(path, hint):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}; hint: {hint}")
    except json.JSONDecodeError as e:
        fail(f"{path} is not JSON ({e.msg}, line {e.lineno}); hint: {hint}")


def load(path):
    d = read_json(path, "the file `megasched profile --out` wrote")
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


def load_graph(path):
    d = read_json(path, "the kprof stage's kprof_timeline_POS.json")
    by_kernel = d.get("timeline", {}).get("by_kernel") if isinstance(d, dict) else None
    if not isinstance(by_kernel, dict):
        fail(f"{path} has no timeline.by_kernel; hint: `megasched baseline --kind graph-pdl "
             "--timeline` writes it (the kprof stage's kprof_timeline_POS.json)")
    return d


def vs_graph(label, summary, span, g):
    """The profile's kinds grouped under graph-pdl's kernels, each group beside its kernel."""
    by_kernel = g["timeline"]["by_kernel"]
    groups = {}
    for kind, row in summary.items():
        groups.setdefault(GRAPH_KERNEL.get(kind, ""), []).append((kind, row))
    rows = []
    for kernel in list(by_kernel) + [k for k in groups if k not in by_kernel]:
        members = groups.get(kernel, [])
        mk = sum(r["step_us"] for _, r in members)
        ops = max([r["ops"] for _, r in members], default=0)
        k = by_kernel.get(kernel)
        rows.append({"kernel": kernel or "(no graph-pdl kernel)",
                     "kinds": [m for m, _ in members], "megakernel_us": mk, "ops": ops,
                     "graph_us": k["critical_us"] if k else None,
                     "launches": k["launches"] if k else None})
    step = g["timeline"].get("step_us", sum(k["critical_us"] for k in by_kernel.values()))
    return {"label": label, "span_us": span, "graph_step_us": step, "rows": rows}


def print_vs_graph(v):
    print(f"profile_compare: {v['label']} beside graph-pdl: span {v['span_us']:.1f} us, graph-pdl's "
          f"step {v['graph_step_us']:.1f} in place ({v['span_us'] - v['graph_step_us']:+.1f})")
    print(f"{'graph-pdl kernel':22} {'kinds':22} {'megakernel us':>14} {'graph-pdl us':>13} "
          f"{'diff':>8} {'per op':>8} {'per launch':>10} {'diff':>7}")
    for r in v["rows"]:
        mk, gu = r["megakernel_us"], r["graph_us"]
        per_op = mk / r["ops"] if r["ops"] else 0.0
        line = f"{r['kernel']:22} {','.join(r['kinds']) or '-':22} {mk:14.1f} "
        if gu is None:
            print(line + f"{'-':>13} {'':>8} {per_op:8.2f}")
            continue
        per_launch = gu / r["launches"] if r["launches"] else 0.0
        print(line + f"{gu:13.1f} {mk - gu:+8.1f} {per_op:8.2f} {per_launch:10.2f} "
              f"{per_op - per_launch:+7.2f}")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--labels", default="A,B", help="names of the two sides (default A,B)")
    ap.add_argument("--graph", help="graph-pdl's timeline (kprof_timeline_POS.json) to set beside")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = ap.parse_args()
    labels = args.labels.split(",")
    if len(labels) != 2 or not all(labels):
        fail(f"--labels takes two names joined by a comma (got '{args.labels}'); hint: --labels base,tree")
    if args.b is None and args.graph is None:
        fail("one profile needs --graph (graph-pdl's timeline) to compare with; hint: give two "
             "profiles, or --graph kprof_timeline_0.json")
    da = load(args.a)
    db = load(args.b) if args.b is not None else None
    g = load_graph(args.graph) if args.graph is not None else None
    for other, what in ((db, "the profiles"), (g, "the profile and graph-pdl's timeline")):
        for key in ("model", "position"):
            if other is not None and da.get(key) != other.get(key):
                fail(f"{what} differ in {key} ({da.get(key)} against {other.get(key)}); hint: "
                     "compare one model at one position")
    sa, span_a = summarise(da)
    graphs = [vs_graph(labels[0], sa, span_a, g)] if g is not None else []
    if db is None:
        if args.json:
            print(json.dumps({"model": da.get("model"), "position": da.get("position"),
                              "vs_graph": graphs}, indent=1))
        else:
            print_vs_graph(graphs[0])
        return
    sb, span_b = summarise(db)
    if g is not None:
        graphs.append(vs_graph(labels[1], sb, span_b, g))
    kinds = [k for k in sa if k in sb] + [k for k in sb if k not in sa]
    kinds += [k for k in sa if k not in kinds]
    if args.json:
        print(json.dumps({"labels": labels, "model": da.get("model"), "position": da.get("position"),
                          "span_us": [span_a, span_b],
                          "kinds": {k: [sa.get(k), sb.get(k)] for k in kinds},
                          "vs_graph": graphs}, indent=1))
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
    for v in graphs:
        print_vs_graph(v)


if __name__ == "__main__":
    main()
