#!/usr/bin/env bash
# `make demo`: the main job on the embedded `toy` model, on the CPU (predicted latencies):
# propose -> evaluate the default -> a keep/revert loop of 24 trials -> the analyst report.
# Leaves workspace/results.tsv, workspace/corpus.jsonl and workspace/report.html.
set -euo pipefail
build=${1:-build}
bin="$build/megasched"
ws=workspace
mkdir -p "$ws"

echo "== megasched propose --model toy --gpu h100   (incumbent + search space, first lines)"
"$bin" propose --model toy --gpu h100 | sed -n '1,12p'
echo "..."
echo
echo "== megasched evaluate --model toy --gpu h100 --device cpu   (default config)"
"$bin" evaluate --model toy --gpu h100 --device cpu
echo
echo "== megasched loop --model toy --gpu h100 --device cpu --budget 24 --strategy hillclimb"
"$bin" loop --model toy --gpu h100 --device cpu --budget 24 --strategy hillclimb --seed 1 \
  --results "$ws/results.tsv" --corpus "$ws/corpus.jsonl"
echo
echo "== megasched report"
"$bin" report --results "$ws/results.tsv" --corpus "$ws/corpus.jsonl" --html "$ws/report.html"
echo
echo "demo done: $ws/results.tsv, $ws/corpus.jsonl, $ws/report.html"
