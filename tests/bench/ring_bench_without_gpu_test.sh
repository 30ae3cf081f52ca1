#!/bin/sh
# `make bench` on a machine without a GPU: ring_bench (every case a GPU case) says so in one line
# and exits 0, instead of one "ERROR OCCURRED" line per case (Google Benchmark 1.7 has no
# SkipWithMessage). Skipped (77) where an NVIDIA driver is loaded.
bench="$1"
[ -e /proc/driver/nvidia/version ] && exit 77
out=$("$bench" --benchmark_min_time=0.01 2>&1) || { echo "$out"; echo "exit code $?"; exit 1; }
echo "$out"
case "$out" in
  *"ERROR OCCURRED"*) echo "FAIL: ERROR OCCURRED lines"; exit 1 ;;
esac
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || { echo "FAIL: more than one line"; exit 1; }
case "$out" in
  "ring_bench: every case needs a GPU; skipped ("*) exit 0 ;;
esac
echo "FAIL: not the one line saying why"
exit 1
