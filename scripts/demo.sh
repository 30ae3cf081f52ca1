#!/usr/bin/env bash
# `make demo`: the main job on the embedded `toy` model, on the CPU (predicted latencies):
# propose -> evaluate the default -> a keep/revert loop of 24 trials -> the analyst report.
# The terminal gets the progress and a few lines per step (under 60 in all); every JSON document
# goes to a file under workspace/ that the step names.
set -euo pipefail
build=${1:-build}
bin="$build/megasched"
ws=workspace
mkdir -p "$ws"

# The fields of a JSON document worth a glance, one line each ("key": value).
fields() {
  local file=$1
  shift
  for key in "$@"; do grep -m1 -o "\"$key\": [^,}]*" "$file" || true; done | sed 's/^/   /'
}

echo "== 1. propose: the incumbent config and the search space for toy on an H100"
"$bin" propose --model toy --gpu h100 > "$ws/propose.json"
"$bin" propose --model toy --gpu h100 --config-only > "$ws/cfg.json"
echo "   -> $ws/propose.json (incumbent + every knob's choices), $ws/cfg.json (the incumbent alone)"
echo
echo "== 2. evaluate $ws/cfg.json on the CPU: validate, check against the eager reference, predict"
"$bin" evaluate --model toy --gpu h100 --device cpu --config "$ws/cfg.json" \
  --runs-dir "$ws/runs" > "$ws/verdict.json"
fields "$ws/verdict.json" valid correct latency_us latency_kind floor_us
echo "   -> $ws/verdict.json (the whole Verdict)"
echo
echo "== 3. loop: 24 keep/revert trials (hillclimb), one progress line each"
"$bin" loop --model toy --gpu h100 --device cpu --budget 24 --strategy hillclimb --seed 1 \
  --results "$ws/results.tsv" --corpus "$ws/corpus.jsonl" > "$ws/loop_summary.json"
echo "   -> $ws/loop_summary.json, $ws/results.tsv (one row a trial), $ws/corpus.jsonl, $ws/runs/"
echo
echo "== 4. report: the analyst report over the loop's logs"
"$bin" report --results "$ws/results.tsv" > "$ws/report.txt"
grep -E '^(best:|  \(the loop)' "$ws/report.txt" | sed 's/^/   /'
echo "   -> $ws/report.txt (text), $ws/report.html (charts)"
echo
echo "demo done; next: build/megasched --help, HARNESS.md (the agent contract), make test"
