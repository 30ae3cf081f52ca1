#!/usr/bin/env bash
# One command on a GPU machine with a fresh checkout: build, run the GPU tests, measure the
# streaming-read bandwidth, evaluate llama-1b with the default config, and run the benchmark matrix
# (toy, small, llama-1b at positions 0 and 1024: default and a handful of configs, each against the
# cuBLAS CUDA-graph baseline). Everything lands in OUT_DIR, in few files:
#   check.log              machine, build tail, doctor, GPU tests, evaluate stderr, bench progress
#   evaluate_llama-1b.json the Verdict of `megasched evaluate --model llama-1b --gpu auto --device gpu`
#   bench.json / bench.md  the benchmark matrix (machine-readable / table for BENCHMARKS.md)
#   device.json            the measured bandwidth (as stored in the workspace)
#
# usage: bench/device_check.sh OUT_DIR
# env:   STAGES (default "build tests doctor evaluate bench"; add "crosscheck" for the transformers
#        cross-check, bench/hf_crosscheck.py, with CROSSCHECK_SHAPES and CROSSCHECK_STEPS), MODELS (default toy,small,llama-1b),
#        POSITIONS (default 0,1024), ITERATIONS (default 100), CONFIGS (all|default|NAME,NAME...: see
#        bench/configs/*.json), GPU_TESTS (gtest filter of the tests stage),
#        BUILD (build dir); stage "profile" runs `megasched profile` for each of PROFILES
#        (space-separated MODEL@POSITION@CONFIG; CONFIG a file, a named config or default);
#        stage "ring" runs bench/ring_bench.cpp (the weight ring per SM: 1, 66 and all blocks
#        streaming one op's tiles with no dependencies; RING_FILTER narrows it) into ring.json;
#        stage "ncu" profiles ring_bench cases (NCU_FILTERS) with ncu into ncu_N.txt + ring_N.ncu-rep;
#        stage "promote" runs `megasched promote` of PROMOTE_CONFIG for PROMOTE_MODEL on PROMOTE_GPU
#        (verify gate at PROMOTE_POSITIONS, PROMOTE_ROUNDS interleaved rounds) into
#        OUT_DIR/verified.jsonl (promote.json, runs/ beside it), then `registry list` and
#        `registry verify` of the entry it wrote
set -uo pipefail

OUT=${1:?usage: bench/device_check.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
STAGES=${STAGES:-build tests doctor evaluate bench}
MODELS=${MODELS:-toy,small,llama-1b}
POSITIONS=${POSITIONS:-0,1024}
ITERATIONS=${ITERATIONS:-100}
CONFIGS=${CONFIGS:-all}
GPU_TESTS=${GPU_TESTS:-NvrtcBuild.*:GpuVm.*:CublasBaseline.*:Doctor.*}
PROFILES=${PROFILES:-llama-1b@0@default}
CROSSCHECK_SHAPES=${CROSSCHECK_SHAPES:-small-gqa1-untied,small-gqa4-tied,llama-1b}
CROSSCHECK_STEPS=${CROSSCHECK_STEPS:-128}
PROMOTE_MODEL=${PROMOTE_MODEL:-llama-1b}
PROMOTE_GPU=${PROMOTE_GPU:-h100}
PROMOTE_CONFIG=${PROMOTE_CONFIG:-$ROOT/bench/configs/rows_256thr_4x16k.json}
PROMOTE_POSITIONS=${PROMOTE_POSITIONS:-0,3,7}
PROMOTE_ROUNDS=${PROMOTE_ROUNDS:-3}
export MEGASCHED_WORKSPACE=${MEGASCHED_WORKSPACE:-$ROOT/workspace}
LOG="$OUT/check.log"
status=0

log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }

log "device_check: root $ROOT, build $BUILD, stages: $STAGES"
{
  # A staged copy (not a git checkout of its own) carries its commit in a COMMIT file.
  if [ -f "$ROOT/COMMIT" ]; then echo "commit: $(cat "$ROOT/COMMIT")"
  else
    # A copied tree may carry the .git of an older checkout: say how far the files differ from it.
    echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
      "(files differing from it: $(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l))"
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  nvcc --version 2>&1 | tail -1
  cmake --version 2>&1 | head -1
  g++ --version 2>&1 | head -1
  nproc
} >> "$LOG" 2>&1

if has_stage build; then
  log "build"
  if ! { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMEGASCHED_CUDA=ON -DMEGASCHED_WERROR=OFF &&
         cmake --build "$BUILD" -j"$(nproc)" --target megasched megasched_tests device_bench ring_bench; } > "$OUT/build.log" 2>&1; then
    log "build FAILED"
    tail -60 "$OUT/build.log" >> "$LOG"
    exit 1
  fi
  grep -E "warning:" "$OUT/build.log" | head -20 >> "$LOG"
  rm -f "$OUT/build.log"
  log "build ok"
fi

if has_stage tests; then
  log "GPU tests ($GPU_TESTS)"
  if "$BUILD/megasched_tests" --gtest_filter="$GPU_TESTS" >> "$LOG" 2>&1; then
    log "GPU tests passed"
  else
    log "GPU tests FAILED"
    status=1
  fi
fi

if has_stage doctor; then
  log "doctor --measure"
  if "$BUILD/megasched" doctor --measure >> "$LOG" 2>&1; then
    log "doctor ok"
  else
    log "megasched doctor failed (subcommand missing?); measuring through device_bench"
    "$BUILD/device_bench" --out "$OUT" --models "" --measure >> "$LOG" 2>&1 || status=1
  fi
  cp "$MEGASCHED_WORKSPACE/device.json" "$OUT/device.json" 2>/dev/null
fi

if has_stage evaluate; then
  log "evaluate --model llama-1b --gpu auto --device gpu (default config)"
  timeout 400 "$BUILD/megasched" evaluate --model llama-1b --gpu auto --device gpu \
    > "$OUT/evaluate_llama-1b.json" 2>> "$LOG"
  log "evaluate exit $?"
  python3 - "$OUT/evaluate_llama-1b.json" >> "$LOG" 2>&1 <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
keys = ["status", "correct", "positions_checked", "max_abs_err", "rel_err", "latency_kind", "latency_us",
        "latency_p90_us", "floor_us", "pct_of_floor", "pct_of_datasheet", "speedup_vs_baseline", "notes"]
print(json.dumps({k: v.get(k) for k in keys}, indent=1))
EOF
fi

if has_stage bench; then
  log "bench: models $MODELS, positions $POSITIONS, iterations $ITERATIONS, configs $CONFIGS"
  if "$BUILD/device_bench" --out "$OUT" --models "$MODELS" --positions "$POSITIONS" \
       --iterations "$ITERATIONS" --configs "$CONFIGS" >> "$LOG" 2>&1; then
    log "bench ok"
  else
    log "bench FAILED"
    status=1
  fi
fi

if has_stage ring; then
  log "ring: per-SM streaming of the weight ring (filter ${RING_FILTER:-all})"
  if "$BUILD/ring_bench" --benchmark_min_time=0.05 --benchmark_filter="${RING_FILTER:-.}" \
       --benchmark_out="$OUT/ring.json" --benchmark_out_format=json \
       --benchmark_counters_tabular=true >> "$LOG" 2>&1; then
    log "ring ok"
  else
    log "ring FAILED"
    status=1
  fi
fi

if has_stage ncu; then
  # ncu on ring_bench cases (NCU_FILTERS, space-separated; default 66 blocks streaming gate_up
  # tiles, then O tiles), built with -lineinfo and sampled at the shortest warp-sampling interval
  # so the source page maps stall samples to SASS; bench/ncu_hotspots.py prints the stall reasons
  # and the hottest instructions into ncu_N.txt (the reports themselves: ring_N.ncu-rep).
  NCU_FILTERS=${NCU_FILTERS:-ring/gate_up/256thr_4x16k/blocks:66/ ring/o/256thr_4x16k/blocks:66/}
  n=0
  for filter in $NCU_FILTERS; do
    n=$((n + 1))
    log "ncu $n: ring_bench $filter"
    if MEGASCHED_NVRTC_LINEINFO=1 ncu --clock-control none --kernel-name ms_megakernel \
         --launch-skip "${NCU_SKIP:-3}" --launch-count 1 --import-source no \
         --warp-sampling-interval 0 \
         --section SourceCounters --section WarpStateStats --section SchedulerStats \
         --section SpeedOfLight --section MemoryWorkloadAnalysis -f -o "$OUT/ring_$n" \
         "$BUILD/ring_bench" --benchmark_min_time=0.01 --benchmark_filter="$filter" \
         > "$OUT/ncu_run.log" 2>&1; then
      python3 "$ROOT/bench/ncu_hotspots.py" "$OUT/ring_$n.ncu-rep" > "$OUT/ncu_$n.txt" 2>&1
      log "ncu $n ok"
    else
      log "ncu $n FAILED"; tail -30 "$OUT/ncu_run.log" >> "$LOG"
      status=1
    fi
    rm -f "$OUT/ncu_run.log"
  done
fi

if has_stage crosscheck; then
  # Issue 7's external oracle: transformers' LlamaForCausalLM vs megasched generate (CPU and GPU).
  log "crosscheck: bench/hf_crosscheck.py --shapes $CROSSCHECK_SHAPES --steps $CROSSCHECK_STEPS"
  if PYTHONUNBUFFERED=1 timeout 420 python3 "$ROOT/bench/hf_crosscheck.py" --megasched "$BUILD/megasched" \
       --shapes "$CROSSCHECK_SHAPES" --steps "$CROSSCHECK_STEPS" --out "$OUT/crosscheck.json" >> "$LOG" 2>&1; then
    log "crosscheck passed"
  else
    log "crosscheck FAILED"
    status=1
  fi
fi

if has_stage profile; then
  # PROFILES: space-separated MODEL@POSITION@CONFIG (CONFIG: a file, a named config, or default).
  n=0
  for spec in $PROFILES; do
    IFS=@ read -r pmodel ppos pconfig <<< "$spec"
    n=$((n + 1))
    cfg=()
    [ "$pconfig" != "default" ] && cfg=(--config "$pconfig")
    log "profile $n: --model $pmodel --position $ppos ${cfg[*]}"
    if timeout 300 "$BUILD/megasched" profile --model "$pmodel" --gpu auto --position "$ppos" \
         "${cfg[@]}" --out "$OUT/profile_$n.json" >> "$LOG" 2>&1; then
      log "profile $n ok"
    else
      log "profile $n FAILED"
      status=1
    fi
  done
fi

if has_stage promote; then
  log "promote --model $PROMOTE_MODEL --gpu $PROMOTE_GPU --config $PROMOTE_CONFIG" \
    "--positions $PROMOTE_POSITIONS --rounds $PROMOTE_ROUNDS"
  timeout 540 "$BUILD/megasched" promote --model "$PROMOTE_MODEL" --gpu "$PROMOTE_GPU" \
    --device gpu --config "$PROMOTE_CONFIG" --positions "$PROMOTE_POSITIONS" \
    --rounds "$PROMOTE_ROUNDS" --registry "$OUT/verified.jsonl" --runs-dir "$OUT/runs" \
    > "$OUT/promote.json" 2>> "$LOG"
  code=$?
  log "promote exit $code"
  [ $code -ne 0 ] && status=1
  "$BUILD/megasched" registry list --registry "$OUT/verified.jsonl" >> "$LOG" 2>&1
  id=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("entry",{}).get("id",""))' "$OUT/promote.json" 2>/dev/null)
  if [ -n "$id" ]; then
    timeout 300 "$BUILD/megasched" registry verify "$id" --device gpu --positions 0 \
      --registry "$OUT/verified.jsonl" >> "$LOG" 2>&1
    log "registry verify $id exit $?"
  fi
fi

log "device_check done (status $status)"
exit $status
