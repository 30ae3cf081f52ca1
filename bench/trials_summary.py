#!/usr/bin/env python3
"""Summarises bench/device_check.sh's "trials" stage (a checked trial at 0 and 4096, cold and warm, and loop trials per minute) into OUT/trials.json.

usage: trials_summary.py OUT_DIR BUDGET

Reads OUT/trials_wall.txt (name, wall seconds per CLI run), OUT/trials_<name>.json (the verdicts)
and OUT/trials_ws/results.tsv (the loop's rows); writes per trial the wall seconds, status,
correctness, the checks made (path, position, pass), the breakdown of the trial's time, where the
reference came from and the cubin cache counts, and for the loop its trials per minute, each next
to its target. Prints a short form; exits 1 when a target is missed or a run failed.
"""
import json
import os
import sys

TARGETS = {"pos0_warm": 2.5, "pos4096_warm": 6.0}
LOOP_TARGET_PER_MIN = 20.0


def trial_summary(out, name, wall):
    try:
        with open(os.path.join(out, f"trials_{name}.json")) as f:
            v = json.load(f)
    except (OSError, ValueError) as e:  # a failed run leaves no verdict
        return {"error": str(e), "wall_s": wall.get(name)}
    ref = v.get("reference", {})
    return {
        "wall_s": wall.get(name),
        "status": v.get("status"),
        "correct": v.get("correct"),
        "latency_us": v.get("latency_us"),
        "positions_checked": v.get("positions_checked"),
        "checks": [[c.get("path"), c.get("position"), c.get("pass")] for c in v.get("checks", [])],
        "breakdown_ms": v.get("breakdown_ms"),
        "reference": {k: ref.get(k) for k in ("reference_vm", "load_ms", "windows")},
        "cubin_cache": v.get("kernel", {}).get("cubin_cache"),
    }


def main():
    out, budget = sys.argv[1], int(sys.argv[2])
    wall = {}
    with open(os.path.join(out, "trials_wall.txt")) as f:
        for line in f:
            name, seconds = line.split()
            wall[name] = float(seconds)
    summary = {"targets": {**{k + "_s": t for k, t in TARGETS.items()},
                           "loop_trials_per_min": LOOP_TARGET_PER_MIN}}
    ok = True
    for name in ("pos0_cold", "pos0_warm", "pos4096_cold", "pos4096_warm"):
        s = trial_summary(out, name, wall)
        summary[name] = s
        ok = ok and s.get("correct") is True
        if name in TARGETS:
            s["meets_target"] = s.get("wall_s") is not None and s["wall_s"] <= TARGETS[name]
            ok = ok and s["meets_target"]
    rows = 0
    try:
        with open(os.path.join(out, "trials_ws", "results.tsv")) as f:
            rows = max(0, sum(1 for _ in f) - 1)
    except OSError:
        pass
    loop_s = wall.get("loop")
    per_min = 60.0 * rows / loop_s if loop_s else None
    summary["loop"] = {"budget": budget, "results_rows": rows, "wall_s": loop_s,
                       "trials_per_min": per_min,
                       "meets_target": per_min is not None and per_min >= LOOP_TARGET_PER_MIN}
    ok = ok and summary["loop"]["meets_target"]
    with open(os.path.join(out, "trials.json"), "w") as f:
        json.dump(summary, f, indent=1)
    short = {k: {kk: vv for kk, vv in v.items()
                 if kk in ("wall_s", "status", "correct", "trials_per_min", "meets_target")}
             for k, v in summary.items() if k != "targets"}
    print(json.dumps(short, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
