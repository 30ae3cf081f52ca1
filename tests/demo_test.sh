#!/bin/sh
# `make demo` (scripts/demo.sh) in an empty folder: it exits 0, prints under 60 lines, no JSON
# document on the terminal, and leaves every file it names. Once it printed ~600 lines.
src="$1"
build="$2"
dir="$3"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
bash "$src/scripts/demo.sh" "$build" > out.txt 2>&1
rc=$?
cat out.txt
[ $rc -eq 0 ] || { echo "FAIL: the demo exited $rc"; exit 1; }
lines=$(wc -l < out.txt)
[ "$lines" -lt 60 ] || { echo "FAIL: $lines lines (at most 59)"; exit 1; }
if grep -q '^{' out.txt; then echo "FAIL: a JSON document on the terminal"; exit 1; fi
for f in propose.json cfg.json verdict.json loop_summary.json results.tsv corpus.jsonl report.txt \
         report.html; do
  [ -s "workspace/$f" ] || { echo "FAIL: workspace/$f missing or empty"; exit 1; }
  grep -q "workspace/$f" out.txt || { echo "FAIL: the output never names workspace/$f"; exit 1; }
done
[ "$(ls workspace/runs | wc -l)" -ge 2 ] || { echo "FAIL: no run directories in workspace/runs"; exit 1; }
echo "ok: $lines lines"
