#!/usr/bin/env python3
"""Summarise an ncu report of the megakernel: the warp-state stall reasons (details page) and the
SASS instructions with the most stall samples (source page, sampled with -lineinfo builds).

usage: bench/ncu_hotspots.py REPORT.ncu-rep [TOP]   (needs ncu on PATH; prints text)
"""
import csv
import io
import subprocess
import sys


def ncu(*args):
    return subprocess.run(["ncu", *args], capture_output=True, text=True, check=False).stdout


def main():
    rep = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    details = ncu("-i", rep, "--page", "details", "--section", "WarpStateStats",
                  "--section", "SchedulerStats", "--section", "SpeedOfLight",
                  "--section", "MemoryWorkloadAnalysis")
    print(details)
    raw = ncu("-i", rep, "--page", "raw", "--csv")
    rows = list(csv.reader(io.StringIO(raw)))
    if len(rows) >= 3:
        head, vals = rows[0], rows[2]
        stalls = [(h, v) for h, v in zip(head, vals)
                  if "smsp__average_warp" in h and "issue_stalled" in h and "ratio" in h]
        def num(v):
            try:
                return float(v.replace(",", ""))
            except ValueError:
                return 0.0
        # DRAM traffic, when the run collected it (device_check's NCU_STEPS pass
        # --metrics dram__bytes_read.sum,dram__bytes_write.sum): bytes actually read from HBM,
        # against the weights (and KV) the step must read once.
        wanted = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")
        if any(h in wanted for h in head):
            # In base units (bytes, ns): the page's own units round to a few digits.
            base = list(csv.reader(io.StringIO(
                ncu("-i", rep, "--page", "raw", "--csv", "--print-units", "base"))))
            if len(base) >= 3:
                print("== DRAM traffic (base units: bytes, ns)")
                for h, u, v in zip(base[0], base[1], base[2]):
                    if h in wanted:
                        print(f"{num(v):20.0f}  {h} ({u})")
        print("== stall reasons (warp cycles per issued instruction)")
        for h, v in sorted(stalls, key=lambda hv: -num(hv[1]))[:16]:
            print(f"{num(v):9.3f}  {h}")
    src = ncu("-i", rep, "--page", "source", "--csv", "--print-source", "sass")
    rows = list(csv.reader(io.StringIO(src)))
    header_at = next((i for i, r in enumerate(rows) if "Source" in r), None)
    if header_at is None:
        print("== no source page (was the build made with MEGASCHED_NVRTC_LINEINFO=1?)")
        print(src[:2000])
        return
    head = rows[header_at]
    body = [r for r in rows[header_at + 1:] if len(r) == len(head)]
    sample_col = next((i for i, h in enumerate(head) if "Sampling (All" in h), None)
    if sample_col is None:
        sample_col = next((i for i, h in enumerate(head) if "Sampling" in h), None)
    print("== source columns:", head)
    if sample_col is None:
        return

    def val(r):
        try:
            return float(r[sample_col].replace(",", ""))
        except ValueError:
            return 0.0
    total = sum(val(r) for r in body) or 1.0
    print(f"== top {top} SASS instructions by stall samples (of {total:.0f})")
    src_col = head.index("Source")
    addr_col = head.index("Address") if "Address" in head else None
    stall_cols = [i for i, h in enumerate(head) if h.startswith("stall_") or "Stall" in h]
    for r in sorted(body, key=val, reverse=True)[:top]:
        extra = " ".join(f"{head[i]}={r[i]}" for i in stall_cols if r[i] not in ("0", "", "0.0"))
        addr = r[addr_col] if addr_col is not None else ""
        print(f"{100 * val(r) / total:6.2f}% {addr} {r[src_col][:70]:70s} {extra[:200]}")
    # Context: the instructions around the top three hot spots, in address order.
    order = {id(r): i for i, r in enumerate(body)}
    for r in sorted(body, key=val, reverse=True)[:3]:
        i = order[id(r)]
        print(f"== around {r[addr_col] if addr_col is not None else i}")
        for q in body[max(0, i - 25):i + 8]:
            print(f"{100 * val(q) / total:6.2f}% {q[src_col][:90]}")


if __name__ == "__main__":
    main()
