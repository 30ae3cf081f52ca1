#!/usr/bin/env python3
"""Summarise the kprof stage of bench/device_check.sh: the graph-pdl baseline per kernel.

From each kprof_timeline_POS.json (`megasched baseline --timeline`): per kernel the launches, the
step's time spent on it (each launch's end minus its predecessor's end, PDL overlap included), the
mean dependency hop (first block past the wait minus the predecessor's end) and the mean time from
the last block past the wait to the end. From ncu (kprof_ncu.csv, each kernel
alone, caches flushed): per kernel name the mean duration, DRAM bytes read, achieved bandwidth,
registers, occupancy limits and waves.

Usage: bench/kprof_summary.py OUT_DIR
"""
import csv
import glob
import io
import json
import sys
from collections import defaultdict


def timeline_summary(path):
    try:
        out = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"timeline {path}: {e}")
        return
    tl = out.get("timeline", {})
    print(f"timeline at position {out.get('position')}: step {tl.get('step_us', 0):.1f} us in place "
          f"(timed median {out.get('latency_us', float('nan')):.1f} us)")
    print(f"{'kernel':24s} {'n':>4s} {'critical us':>12s} {'per launch':>11s} {'hop us':>8s} "
          f"{'after wait':>11s}")
    for name, k in tl.get("by_kernel", {}).items():
        n = k["launches"]
        print(f"{name:24s} {n:4d} {k['critical_us']:12.1f} {k['critical_us'] / n:11.2f} "
              f"{k['released_us'] / n:8.2f} {k['after_wait_us'] / n:11.2f}")


def ncu_summary(out):
    try:
        text = open(f"{out}/kprof_ncu.csv").read()
    except OSError:
        print("ncu: no csv")
        return
    lines = text.splitlines()
    head = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if head is None:
        print("ncu: no table")
        return
    per = defaultdict(lambda: defaultdict(list))
    order = []
    for r in csv.DictReader(io.StringIO("\n".join(lines[head:]))):
        name = r["Kernel Name"].split("(")[0]
        if name not in order:
            order.append(name)
        try:
            per[name][r["Metric Name"]].append(float(r["Metric Value"].replace(",", "")))
        except ValueError:
            pass
    cols = [("gpu__time_duration.sum", "us", 1e-3), ("dram__bytes_read.sum", "MB", 1e-6),
            ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram%", 1),
            ("launch__registers_per_thread", "regs", 1), ("launch__grid_size", "grid", 1),
            ("launch__occupancy_limit_registers", "blk/SM reg", 1),
            ("launch__occupancy_limit_shared_mem", "blk/SM smem", 1),
            ("sm__warps_active.avg.pct_of_peak_sustained_active", "occ%", 1),
            ("launch__waves_per_multiprocessor", "waves", 1)]
    print("ncu: each kernel alone (means over its launches)")
    print(f"{'kernel':24s} {'n':>4s} " + " ".join(f"{c[1]:>11s}" for c in cols) + f" {'GB/s':>8s}")
    for name in order:
        m = per[name]
        n = len(m.get("gpu__time_duration.sum", []))
        vals = []
        for key, _, scale in cols:
            v = m.get(key, [])
            vals.append(sum(v) / len(v) * scale if v else float("nan"))
        # --print-units base: the duration in ns, the bytes in bytes.
        gbs = vals[1] * 1e6 / (vals[0] * 1e3) if vals[0] else float("nan")
        print(f"{name:24s} {n:4d} " + " ".join(f"{v:11.2f}" for v in vals) + f" {gbs:8.0f}")


def main():
    out = sys.argv[1]
    for path in sorted(glob.glob(f"{out}/kprof_timeline_*.json")):
        timeline_summary(path)
    if glob.glob(f"{out}/kprof_ncu.csv"):
        ncu_summary(out)
    ncu_summary(out)


if __name__ == "__main__":
    main()
