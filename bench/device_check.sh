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
# The shared corpus (flywheel/shared_corpus.h, HARNESS.md section "The shared corpus"): every GPU
# trial of the stages that run megasched (loop, bench, promote, landscape record) is appended to
# $MEGASCHED_FLYWHEEL_DIR (default ROOT/flywheel/data)/<target>.corpus.jsonl; the test stages run
# with it off (a test's trials are no measurements to keep). At the end the rows this run appended
# are copied, new rows only, to OUT_DIR/flywheel/<target>.corpus.jsonl; to keep them, on the
# machine with the checkout: `megasched corpus import OUT_DIR/flywheel/*.corpus.jsonl` (it appends
# each row once, whatever the checkout gained meanwhile), then `megasched corpus archive --all` (it
# moves the rows, gzipped, into flywheel/data/archive/, which every reader reads too) and commit
# flywheel/data/.
#
# OUT_DIR keeps at most 8 files (what the device machine returns): with more at the end, or when the
# script is stopped by a signal, everything but check.log is packed into OUT_DIR/bundle.tgz. The
# landscape and search stages copy their growing logs under OUT_DIR every COPY_EVERY s (20), so a call killed at
# its time limit still returns the rows recorded so far.
#
# usage: bench/device_check.sh OUT_DIR
# env:   STAGES (default "build tests doctor evaluate bench"; "ctest" runs the whole suite, CPU and
#        GPU tests, with ctest on every core into ctest.log (CTEST_FILTER, a ctest -R regex;
#        CTEST_TIMEOUT per test, default 300 s); add "crosscheck" for the transformers
#        cross-check, bench/hf_crosscheck.py, with CROSSCHECK_SHAPES and CROSSCHECK_STEPS; "drift" for
#        bench/hf_bf16_drift.py, megasched's and transformers' bf16 max abs logit error against
#        transformers' fp32 at DRIFT_POSITIONS, default 0,300,1024,4096, for DRIFT_SHAPES, default
#        all four, into bf16_drift.json), MODELS (default toy,small,llama-1b),
#        POSITIONS (default 0,1024), ITERATIONS (default 100), CONFIGS (all|default|NAME,NAME...|
#        PATH.json,...: all is the default and the named configs of bench/configs/README.md, the
#        list in bench/device_bench.cpp), GPU_TESTS (gtest filter of the tests stage; the default
#        names every suite with a GPU test),
#        BUILD (build dir), BUILD_TARGETS (what the build stage builds; default every binary the
#        stages run: megasched megasched_tests device_bench ring_bench gate_bench mlp_bench);
#        stage "profile" runs `megasched profile` for each of PROFILES (space-separated
#        MODEL@POSITION@CONFIG; CONFIG a file, a named config or default) into profile_N.json;
#        after stage kprof of that model and position, bench/profile_compare.py sets each op kind
#        beside graph-pdl's kernel for it in check.log;
#        stage "ring" runs bench/ring_bench.cpp (the weight streams per SM: 1, 66 and all blocks
#        streaming one op's tiles with no dependencies, `stream/OP/pairs_am` the streamed GEMV of
#        best:llama-1b:h100 at position 0, `stream/OP/h200_r3[_rowsN]` that of best:llama-1b:h200
#        (gate/up at three tile sizes, the LM head), `ring/OP/SHAPE` the whole-row ring;
#        RING_FILTER narrows it) into ring.json;
#        stage "gate" runs bench/gate_bench.cpp (the gate before megakernel v3: a bulk-copy
#        ring of 16-32 KiB pages with the copy-only, CUDA-core (C) and mma.sync (M) consumers on
#        each llama-1b GEMV shape, one SM and all SMs, checked against an fp64 reference, and the
#        hop chain between two SMs while the others stream, and the relay chains through a
#        cluster's shared memory (gate/relay/...); GATE_FILTER narrows it, e.g.
#        'gate/C/gate_up|gate/hop') into gate.json, with a short table of every case's GB/s,
#        us per link and verdict at the end of check.log;
#        stage "mlp" runs bench/mlp_bench.cpp (the MLP gate: 16 llama-1b MLP blocks back to back
#        as today's two dependent ops, gate/up then down, and with down folded into gate/up's
#        task as a split-K partial added with red.global.add.v4.f32; each checked against an
#        fp64 reference; MLP_FILTER narrows it) into mlp.json;
#        stage "ncu" profiles ring_bench cases (NCU_FILTERS; set it empty for none) with ncu into
#        ncu_N.txt + ring_N.ncu-rep, with NCU_GATE (gate_bench filters) the gate's kernel of each
#        case into ncu_gate_N.txt, with NCU_MLP (mlp_bench filters, e.g. mlp/fused) the MLP gate's
#        kernel into ncu_mlp_N.txt, and with NCU_STEPS (MODEL@POSITION@CONFIG ...) whole decode steps into ncu_step_N.txt
#        (with the step's dram__bytes_read.sum / dram__bytes_write.sum: any read beyond the weights
#        and the KV history is re-reading);
#        stage "scaleout" runs bench/scaleout_bench.sh (SCALEOUT_STAGES, default "cpu gpu1": CPU-path
#        trials/min with 1 vs 8 worker ranks, and `loop --gpus all` vs one worker on one GPU) into
#        scaleout/cpu.json, scaleout/gpu1.json;
#        stage "landscape" records or resumes LANDSCAPES (FILE@POSITION@NEIGHBOURS_OF ...) on every
#        GPU with compile-ahead for LANDSCAPE_SECONDS each (default 300), copied to OUT/landscapes/;
#        stage "peers" runs the PyTorch peer (bench/peers/torch_peer.py: CUDA-graph decode step,
#        eager and torch.compile, and transformers' generate; greedy tokens compared with
#        megasched's) into torch_peer.json when python3 can import torch and transformers (skipped
#        with a message otherwise); PEER_SHAPE (default llama-1b);
#        stage "compare" runs `megasched bench` for each of COMPARE (space-separated
#        MODEL@POSITIONS, default "llama-1b@0,1024,4096 small@0,1024 llama-8b@0"; the peers' rows
#        join the PEER_SHAPE model) into compare_MODEL/bench.{json,md,svg} + compare_MODEL.md
#        (a model named again: compare_MODEL_2, _3, ...);
#        a third field MODEL@POSITIONS@CONFIG,CONFIG adds configs (files or best:MODEL:GPU names);
#        stage "search" runs the search of record: `loop --device gpu` of llama-1b from the
#        default config for SEARCH_MINUTES (default 15) in SEARCH_DIR (default
#        workspace/search_of_record; a second call on the same warm machine resumes it, so 15
#        minutes fit two calls of 7.5), its best (kept as SEARCH_DIR/best.json) benched beside
#        best:llama-1b:<GPU> and graph-pdl at position 0 into search_bench.md, its report into
#        search_report.html, and its
#        results.tsv and corpus.jsonl into search_results.tsv and search_corpus.jsonl (SEARCH_FLAGS:
#        more loop flags, e.g. "--flywheel none" or "--start best:llama-1b:h100"; SEARCH_MODEL,
#        default llama-1b: the model searched and benched (the record row is llama-1b's only;
#        e.g. llama-8b with SEARCH_FLAGS="--start dev/configs/...json"); SEARCH_POSITION,
#        default 0: the position the loop checks and times and the bench measures; SEARCH_BESIDE,
#        space-separated configs, files or names, benched beside the best too, e.g. its start);
#        stage "searchab" runs two searches of llama-1b side by side that differ only in their
#        flags (SEARCHAB_FLAGS_A, default "--min-gain 0.01 --confirm 0", the GPU loop's keep
#        rule before 2026-11-30; SEARCHAB_FLAGS_B, default none, the loop's own): A on GPU 0
#        and B on GPU 1 at once (one after the other on a machine of one GPU), each from the
#        same start (SEARCHAB_START, default the default config) at SEARCHAB_POSITION
#        (default 0) for SEARCHAB_MINUTES (default 4.5) with its own empty logs
#        and kernel cache under SEARCHAB_DIR (default workspace/searchab); then both bests benched
#        on GPU 0 beside best:llama-1b:<GPU> in one process into searchab_bench.md, and each
#        loop's results.tsv and summary into searchab_{a,b}_results.tsv, searchab_{a,b}.json;
#        stage "plansearch" searches a plan bucket by bucket: `loop --plan PLANSEARCH_PLAN`
#        (default best:llama-1b:<this GPU>), each bucket a loop from its config at the bucket's
#        midpoint, PLANSEARCH_MINUTES (default 6) split over the buckets, logs in PLANSEARCH_DIR
#        (default workspace/plansearch), PLANSEARCH_FLAGS more loop flags (e.g. "--gpus all";
#        the keep rule is the GPU loop's own, --min-gain 0.005 --confirm 3, unless they say);
#        its plan (PLANSEARCH_DIR/plan.json, OUT/plansearch_plan.json) benched beside
#        PLANSEARCH_PLAN at each bucket's timed position into plansearch_bench.md, its report
#        (trajectories, the plan over positions) into plansearch_report.{txt,html}; the word
#        "plansearch" in PLANFIT_CONFIGS or as PROMOTE_CONFIG is that plan;
#        stage "planfit" times the default and PLANFIT_CONFIGS (default "record"; on a GPU that
#        is neither an H100 nor an H200 the three llama-1b record configs of 2026-11-27; a plan
#        such as best:llama-1b:h200 stands for its buckets' configs; the word "record" is
#        best:llama-1b:<this GPU> and "search" the search stage's best, of this call or an
#        earlier one on the same warm machine, SEARCH_DIR/best.json: so PLANFIT_CONFIGS="record
#        search" refits the record with the loop's find) at PLANFIT_POSITIONS (default
#        0,4,8,16,32,48,64,128,256,512,1024,2048,4096: about every doubling, and 48, past the 32
#        keys where attention partitions change path) in PLANFIT_ROUNDS interleaved rounds
#        (default 2; bench --rounds) with
#        `megasched bench --fit-plan` into planfit/ (plan.json: at each position the fastest
#        config, boundaries where latencies cross; plan_fit.json: why), then benches that plan
#        beside them at PLAN_POSITIONS (default 0,512,1024,2048,4096) into plan_table/ and
#        plan_table.md; the plan is the generate stage's GENERATE_PLAN unless one is given;
#        stage "generate" times whole greedy generations with `megasched bench --generate` for
#        each of GENERATE (PROMPT_LEN:NEW_TOKENS list, default 128:512) on GENERATE_MODEL (default
#        llama-1b): GENERATE_PLAN (a plan file or name, optional), GENERATE_CONFIGS (space-separated
#        files or best:MODEL:GPU names; default the default config), both baselines and, where
#        python3 imports torch and transformers, the PyTorch peer (bench/peers/torch_peer.py
#        --generate) on a random checkpoint of the model's dimensions saved under OUT_DIR that
#        megasched loads too (so the peer's greedy tokens are compared), into
#        generate_MODEL/generate.{json,md} + generate_MODEL.md; first the plan GPU tests
#        (GeneratePlanGpu.*, GenerateBenchGpu.*);
#        stage "kprof" profiles the graph-pdl baseline per kernel (its timeline in place at
#        KPROF_POSITIONS; with KPROF_NCU=1 also ncu, each kernel alone) into kprof_timeline_POS.json,
#        kprof_ncu.csv and a per-kernel summary in check.log;
#        stage "trials" measures a trial's cost and the loop's rate on TRIALS_MODEL (default llama-1b) into
#        trials.json (bench/trials_summary.py): a checked+timed trial at position 0 and one at 4096
#        (each cold, then warm: wall seconds of the CLI, the verdict's checks, breakdown_ms,
#        reference and cubin_cache) and `loop --device gpu` trials per minute over TRIALS_BUDGET
#        (default 20) trials, with fresh kernel and reference caches under OUT_DIR/trials_ws;
#        stage "promote" runs `megasched promote` of PROMOTE_CONFIG for PROMOTE_MODEL on PROMOTE_GPU
#        (default bench/configs/best_1b.json on llama-1b on this GPU's registry name, h100 where
#        it is neither an H100 nor an H200; the word "planfit" is this call's fitted
#        plan, "search" the search's best, as above; verify gate at PROMOTE_POSITIONS,
#        default 0,1024,4096, and generate --verify 64 tokens; PROMOTE_ROUNDS interleaved rounds
#        against what best:MODEL:GPU resolves to, the built-in record where the fresh registry has
#        no entry, needing PROMOTE_SPEEDUP, default 1.10) into OUT_DIR/verified.jsonl
#        (promote.json, runs/ beside it), then `registry list` and `registry verify` of the entry
#        it wrote;
#        stage "ab" times a kernel change against a base tree: it builds the megasched CLI of
#        AB_BASE (one or several space-separated untracked source trees inside the checkout, built
#        in parallel in the background from the call's start, beside the stages before it, each
#        timed as its own side; so they travel with it to the GPU
#        machine: `mkdir ab_base && git archive REV -- . ':(exclude)bench/results' | tar -x -C
#        ab_base`; the stored results left out, as the tree that travels is limited to 64 MiB)
#        beside this tree's, then runs `megasched bench` of AB_CONFIG (default
#        bench/configs/stream_r2u4.json; several space-separated configs are all benched) at
#        AB_POSITIONS (default 0) with the graph-pdl baseline from each build in turn, AB_ROUNDS
#        rounds (default 2), for each model of AB_MODELS (default llama-1b; space-separated), into
#        ab_{SIDE}_N.md (ab_{SIDE}_{MODEL}_N.md for a model other than llama-1b) and ab.md (the rows
#        of every round, then per model, position and config row, the default's included, each
#        side's mean and the tree's difference to it); SIDE is base and tree with one base, else each base's directory name
#        (AB_NCU, space-separated MODEL@POSITION@CONFIG: then each side's decode step of that config
#        under ncu into ncu_ab_SIDE_N.txt, as NCU_STEPS does; AB_NCU_KEEP=1 keeps the .ncu-rep;
#        AB_PROFILES, space-separated MODEL@POSITION@CONFIG: then each side's `megasched profile`
#        of that step into profile_ab_SIDE_N.json, and bench/profile_compare.py of every base
#        against the tree, op kind by op kind, into ab.md and check.log)
set -uo pipefail

OUT=${1:?usage: bench/device_check.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
STAGES=${STAGES:-build tests doctor evaluate bench peers compare}
MODELS=${MODELS:-toy,small,llama-1b}
POSITIONS=${POSITIONS:-0,1024}
ITERATIONS=${ITERATIONS:-100}
CONFIGS=${CONFIGS:-all}
# Every suite with a test that needs or branches on a GPU (eval::gpu_available, MS_REQUIRE_GPU) or
# on NVRTC: the megakernel, the baselines, the GPU reference, the planted bugs, the CLI verbs
# (profile, promote, bad input) and the MCP server on a device.
GPU_TESTS=${GPU_TESTS:-NvrtcBuild.*:GateBuild.*:MlpGateBuild.*:DeviceModel.*:GpuVm.*:GeneratePlanGpu.*:GenerateBenchGpu.*:BenchGpu.*:CublasBaseline.*:GraphPdlBaseline.*:Doctor.*:Bf16Precision.*:GpuReference.*:PlantedBug.*:PromoteCli.*:ProfileCommand.*:CliBadInput.*:McpServer.*}
PEER_SHAPE=${PEER_SHAPE:-llama-1b}
COMPARE=${COMPARE:-llama-1b@0,1024,4096 small@0,1024 llama-8b@0}
PROFILES=${PROFILES:-llama-1b@0@default}
CROSSCHECK_SHAPES=${CROSSCHECK_SHAPES:-small-gqa1-untied,small-gqa4-tied,llama-1b}
CROSSCHECK_STEPS=${CROSSCHECK_STEPS:-128}
PROMOTE_MODEL=${PROMOTE_MODEL:-llama-1b}
PROMOTE_CONFIG=${PROMOTE_CONFIG:-$ROOT/bench/configs/best_1b.json}
PROMOTE_POSITIONS=${PROMOTE_POSITIONS:-0,1024,4096}
PROMOTE_ROUNDS=${PROMOTE_ROUNDS:-3}
PROMOTE_SPEEDUP=${PROMOTE_SPEEDUP:-1.10}
export MEGASCHED_WORKSPACE=${MEGASCHED_WORKSPACE:-$ROOT/workspace}
# Absolute, so every stage appends to the checkout's shared corpus whatever its directory.
export MEGASCHED_FLYWHEEL_DIR=${MEGASCHED_FLYWHEEL_DIR:-$ROOT/flywheel/data}
LOG="$OUT/check.log"
status=0
# The line count of each shared corpus file before the stages: what follows it is this run's.
declare -A FLYWHEEL_LINES_BEFORE
for f in "$MEGASCHED_FLYWHEEL_DIR"/*.corpus.jsonl; do
  [ -f "$f" ] && FLYWHEEL_LINES_BEFORE[$(basename "$f")]=$(wc -l < "$f")
done

log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }
# run_gbench NAME FILTER OK_MESSAGE [FLAGS...]: the Google Benchmark binary BUILD/NAME_bench with
# FLAGS, the cases FILTER matches, into OUT/NAME.json, its table into check.log; when it fails,
# "NAME FAILED" and the call's status 1.
run_gbench() {
  local name=$1 filter=$2 ok=$3
  shift 3
  if "$BUILD/${name}_bench" "$@" --benchmark_filter="$filter" \
       --benchmark_out="$OUT/$name.json" --benchmark_out_format=json \
       --benchmark_counters_tabular=true >> "$LOG" 2>&1; then
    log "$ok"
  else
    log "$name FAILED"
    status=1
  fi
}
# bench_beside NAME MODEL POSITIONS WHAT ARGS...: `megasched bench` of MODEL at POSITIONS with
# ARGS (its --config rows) and graph-pdl, ITERATIONS steps a row, into OUT/NAME/ and OUT/NAME.md,
# the table appended to check.log; when it fails, "WHAT FAILED" and the call's status 1.
bench_beside() {
  local name=$1 model=$2 positions=$3 what=$4
  shift 4
  if "$BUILD/megasched" bench --model "$model" --positions "$positions" "$@" --baseline graph-pdl \
       --iterations "$ITERATIONS" --out "$OUT/$name" > "$OUT/$name.md" 2>> "$LOG"; then
    cat "$OUT/$name.md" >> "$LOG"
  else
    log "$what FAILED"; status=1
  fi
}
# The registry name of GPU 0 (h200, h100), or "" for another or none: best:llama-1b:<it>.
gpu_key() {
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)" in
    *H200*) echo h200 ;; *H100*) echo h100 ;; *) echo "" ;;
  esac
}

# Long stages keep a copy of what they record under OUT every 20 s, so a call killed at its time
# limit (or by a spent device budget) still brings back every row so far: keep_copying SRC DEST
# starts a background copier (replaced atomically each time; it ignores TERM and INT, so a signal
# to the whole process group leaves it copying while the stage's recorder writes its last rows,
# and it ends with this script), stop_copying ends them all with one last copy each.
COPIERS=()
COPIED=()  # SRC and DEST of each copier, in turn
MAIN_PID=$$
copy_once() { [ -f "$1" ] && cp "$1" "$2.part" 2>/dev/null && mv -f "$2.part" "$2"; }
keep_copying() {
  ( trap '' TERM INT
    while sleep "${COPY_EVERY:-20}" && kill -0 "$MAIN_PID" 2>/dev/null; do copy_once "$1" "$2"; done ) &
  COPIERS+=($!)
  COPIED+=("$1" "$2")
}
stop_copying() {
  for pid in "${COPIERS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for ((i = 0; i < ${#COPIED[@]}; i += 2)); do copy_once "${COPIED[i]}" "${COPIED[i + 1]}"; done
  COPIERS=()
  COPIED=()
}

# The device machine returns at most 8 files from OUT: when there are more, everything but
# check.log is packed into OUT/bundle.tgz (`tar xzf bundle.tgz` gives the same paths). Runs at
# the end, and on a kill (TERM, INT) with what is there.
finished=0
finish() {
  [ "$finished" = 1 ] && return
  finished=1
  stop_copying
  local n
  n=$(find "$OUT" -type f | wc -l)
  if [ "$n" -gt 8 ]; then
    (cd "$OUT" && find . -type f ! -name check.log ! -name bundle.tgz ! -name '*.part' -print0 |
       tar czf bundle.tgz --null -T - --remove-files) &&
      echo "[$(date -u +%H:%M:%S)] $n files in OUT: all but check.log packed into bundle.tgz" >> "$LOG"
    find "$OUT" -mindepth 1 -type d -empty -delete 2>/dev/null
  fi
}
trap finish EXIT
trap 'log "device_check: stopped by a signal"; finish; exit 143' TERM INT

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

# Stage "ab"'s base trees build in the background from the start, beside this tree's build and the
# stages before "ab" (the GPU tests leave the CPU cores mostly idle), so a call that tests and
# then times a change does not wait for the base builds at its end.
AB_BASE=${AB_BASE:-}
read -r -a ab_bases <<< "$AB_BASE"
ab_ok=1
[ "${#ab_bases[@]}" -gt 0 ] || ab_ok=0
for b in "${ab_bases[@]}"; do [ -f "$b/CMakeLists.txt" ] || ab_ok=0; done
ab_jobs=$(( $(nproc) / (${#ab_bases[@]} + 1) ))
[ "$ab_jobs" -ge 1 ] || ab_jobs=1
ab_pids=()
if has_stage ab && [ "$ab_ok" = 1 ]; then
  for b in "${ab_bases[@]}"; do
    name=$(basename "$b")
    # One base keeps the historical build directory and log names.
    dir="$BUILD-ab-base" && blog="$OUT/build_ab_base.log"
    [ "${#ab_bases[@]}" -gt 1 ] && dir="$BUILD-ab-$name" && blog="$OUT/build_ab_$name.log"
    log "ab: building the base tree $b into $dir (-j$ab_jobs, in the background)"
    { cmake -S "$b" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DMEGASCHED_CUDA=ON \
        -DMEGASCHED_WERROR=OFF && cmake --build "$dir" -j"$ab_jobs" --target megasched; } \
      > "$blog" 2>&1 &
    ab_pids+=($!)
  done
fi

if has_stage build; then
  log "build"
  if ! { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMEGASCHED_CUDA=ON -DMEGASCHED_WERROR=OFF &&
         cmake --build "$BUILD" -j"$(nproc)" --target ${BUILD_TARGETS:-megasched megasched_tests device_bench ring_bench gate_bench mlp_bench}; } > "$OUT/build.log" 2>&1; then
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
  if MEGASCHED_FLYWHEEL_DIR=none "$BUILD/megasched_tests" --gtest_filter="$GPU_TESTS" >> "$LOG" 2>&1; then
    log "GPU tests passed"
  else
    log "GPU tests FAILED"
    status=1
  fi
fi

if has_stage ctest; then
  # The whole suite, CPU and GPU tests alike, as ctest runs it (one process per test), on every
  # core of the machine: the CPU tests of a change in minutes instead of CI's quarter hour.
  log "ctest -j$(nproc) (every test; CTEST_FILTER ${CTEST_FILTER:-none})"
  if MEGASCHED_FLYWHEEL_DIR=none ctest --test-dir "$BUILD" -j"$(nproc)" --timeout "${CTEST_TIMEOUT:-300}" \
       ${CTEST_FILTER:+-R "$CTEST_FILTER"} > "$OUT/ctest.log" 2>&1; then
    log "ctest passed: $(grep -E 'tests passed' "$OUT/ctest.log")"
  else
    log "ctest FAILED: $(grep -E 'tests passed' "$OUT/ctest.log")"
    sed -n '/The following tests FAILED/,$p' "$OUT/ctest.log" | head -40 >> "$LOG"
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
  log "ring: per-SM streaming of the weight streams (filter ${RING_FILTER:-all})"
  run_gbench ring "${RING_FILTER:-.}" "ring ok" --benchmark_min_time=0.05
fi

if has_stage gate; then
  log "gate: bulk-copy ring, C and M consumers, hop under load (filter ${GATE_FILTER:-all})"
  run_gbench gate "${GATE_FILTER:-.}" "gate ok (verdicts: the table at the end of this log)"
fi

if has_stage mlp; then
  log "mlp: an MLP block as two dependent ops and with down folded into gate/up (filter ${MLP_FILTER:-all})"
  run_gbench mlp "${MLP_FILTER:-.}" "mlp ok"
fi

# Every profile: the sampled source counters (ncu at the shortest warp-sampling interval maps stall
# samples to SASS), stall reasons, scheduler, speed of light and memory sections of one launch;
# bench/ncu_hotspots.py prints the stall reasons and the hottest instructions into TEXT.
# usage: ncu_case LABEL REPORT TEXT HOTSPOT_ROWS NCU_OPTIONS_AND_COMMAND...
ncu_case() {
  local label=$1 report=$2 text=$3 rows=$4
  shift 4
  log "ncu $label"
  if ncu --clock-control none --launch-count 1 --import-source no --warp-sampling-interval 0 \
       --section SourceCounters --section WarpStateStats --section SchedulerStats \
       --section SpeedOfLight --section MemoryWorkloadAnalysis -f -o "$OUT/$report" "$@" \
       > "$OUT/ncu_run.log" 2>&1; then
    python3 "$ROOT/bench/ncu_hotspots.py" "$OUT/$report.ncu-rep" $rows > "$OUT/$text" 2>&1
    log "ncu $label ok"
  else
    log "ncu $label FAILED"; tail -30 "$OUT/ncu_run.log" >> "$LOG"
    status=1
  fi
  rm -f "$OUT/ncu_run.log"
}

if has_stage ncu; then
  # ncu on ring_bench cases (NCU_FILTERS, space-separated; default 66 blocks streaming gate_up
  # tiles, then O tiles), built with -lineinfo so the source page maps to the device sources:
  # ncu_N.txt (the reports themselves: ring_N.ncu-rep).
  NCU_FILTERS=${NCU_FILTERS-ring/gate_up/256thr_4x16k/blocks:66/ ring/o/256thr_4x16k/blocks:66/}
  n=0
  for filter in $NCU_FILTERS; do
    n=$((n + 1))
    MEGASCHED_NVRTC_LINEINFO=1 ncu_case "$n: ring_bench $filter" "ring_$n" "ncu_$n.txt" "" \
      --kernel-name ms_megakernel --launch-skip "${NCU_SKIP:-3}" \
      "$BUILD/ring_bench" --benchmark_min_time=0.01 --benchmark_filter="$filter"
  done
  # NCU_GATE (space-separated gate_bench filters, e.g. gate/C/gate_up/p32_n4/b1): the gate's kernel
  # of that case (its third launch: the check, a warm-up, then a timed one) into ncu_gate_N.txt
  # (gate_N.ncu-rep).
  n=0
  for filter in ${NCU_GATE:-}; do
    n=$((n + 1))
    ncu_case "gate $n: gate_bench $filter" "gate_$n" "ncu_gate_$n.txt" "" \
      --kernel-name regex:ms_gate_ --launch-skip 2 "$BUILD/gate_bench" --benchmark_filter="$filter"
  done
  # NCU_MLP (space-separated mlp_bench filters, e.g. mlp/fused): the MLP gate's kernel of that case
  # (its third launch: the check, a warm-up, then a timed one; 16 layers) into ncu_mlp_N.txt
  # (mlp_N.ncu-rep), with source lines.
  n=0
  for filter in ${NCU_MLP:-}; do
    n=$((n + 1))
    MEGASCHED_NVRTC_LINEINFO=1 ncu_case "mlp $n: mlp_bench $filter" "mlp_$n" "ncu_mlp_$n.txt" "" \
      --kernel-name regex:ms_mlp_ --launch-skip 2 "$BUILD/mlp_bench" \
      --benchmark_filter="^$filter/"
  done
  # NCU_STEPS (space-separated MODEL@POSITION@CONFIG): the whole megakernel of one timed decode
  # step of `megasched evaluate` into ncu_step_N.txt (step_N.ncu-rep), with the step's DRAM bytes.
  n=0
  for spec in ${NCU_STEPS:-}; do
    n=$((n + 1))
    IFS=@ read -r smodel spos scfg <<< "$spec"
    MEGASCHED_NVRTC_LINEINFO=1 ncu_case \
      "step $n: evaluate --model $smodel --positions $spos --config $scfg" "step_$n" \
      "ncu_step_$n.txt" 80 --kernel-name ms_megakernel --launch-skip "${NCU_STEP_SKIP:-4}" \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      "$BUILD/megasched" evaluate --model "$smodel" --gpu auto --device gpu --positions "$spos" \
      --timed-position "$spos" --config "$scfg" --iterations 3 --warmup 2 --no-baseline
  done
fi

if has_stage kprof; then
  # Per-kernel profile of the graph-pdl baseline (KPROF_MODEL, default llama-1b, at each of
  # KPROF_POSITIONS, default "0 4096", spaces or commas): the timeline of one replay in place,
  # PDL overlap included (`megasched baseline --timeline`: kprof_timeline_POS.json), and with
  # KPROF_NCU=1 each kernel alone under ncu: duration, DRAM bytes and throughput, registers,
  # occupancy (kprof_ncu.csv).
  # bench/kprof_summary.py prints both per kernel into check.log.
  KPROF_MODEL=${KPROF_MODEL:-llama-1b}
  kprof_positions=${KPROF_POSITIONS:-0 4096}
  for kpos in ${kprof_positions//,/ }; do
    log "kprof: baseline --kind graph-pdl --model $KPROF_MODEL --position $kpos --timeline"
    "$BUILD/megasched" baseline --kind graph-pdl --model "$KPROF_MODEL" --position "$kpos" \
      --iterations 20 --timeline > "$OUT/kprof_timeline_$kpos.json" 2>> "$LOG" ||
      { log "kprof timeline FAILED"; status=1; }
  done
  if [ "${KPROF_NCU:-0}" = 1 ]; then
    log "kprof: ncu on baseline --kind graph-pdl --model $KPROF_MODEL"
    ncu --clock-control none --kernel-name regex:ms_pdl --launch-count "${KPROF_LAUNCHES:-200}" --csv --print-units base \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active,launch__waves_per_multiprocessor \
      "$BUILD/megasched" baseline --kind graph-pdl --model "$KPROF_MODEL" --warmup 0 --iterations 1 \
      > "$OUT/kprof_ncu.csv" 2> "$OUT/kprof_ncu.log" || log "kprof ncu FAILED (kprof_ncu.log)"
  fi
  python3 "$ROOT/bench/kprof_summary.py" "$OUT" >> "$LOG" 2>&1 || log "kprof summary FAILED"
  log "kprof done"
fi

if has_stage trials; then
  TRIALS_MODEL=${TRIALS_MODEL:-llama-1b}
  TRIALS_BUDGET=${TRIALS_BUDGET:-20}
  log "trials: $TRIALS_MODEL at 0 and 4096 (cold, warm), loop of $TRIALS_BUDGET trials"
  TWS="$OUT/trials_ws"
  rm -rf "$TWS" "$OUT/trials_wall.txt"
  mkdir -p "$TWS"
  # Fresh kernel and reference caches: the first trial of each position is cold.
  trials_env=(MEGASCHED_WORKSPACE="$TWS" MEGASCHED_KERNEL_CACHE="$TWS/kernel_cache"
              MEGASCHED_REFERENCE_CACHE="$TWS/reference_cache")
  # One trial through the CLI: trials_<name>.json (its verdict) and its wall seconds.
  timed_trial() {
    local name=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    env "${trials_env[@]}" timeout 600 "$BUILD/megasched" evaluate --model "$TRIALS_MODEL" \
      --gpu auto --device gpu "$@" > "$OUT/trials_$name.json" 2>> "$LOG"
    t1=$(date +%s.%N)
    echo "$name $(python3 -c "print($t1 - $t0)")" >> "$OUT/trials_wall.txt"
  }
  timed_trial pos0_cold --positions 0 --timed-position 0
  timed_trial pos0_warm --positions 0 --timed-position 0
  timed_trial pos4096_cold --positions 0,1000,4095 --timed-position 4096
  timed_trial pos4096_warm --positions 0,1000,4095 --timed-position 4096
  t0=$(date +%s.%N)
  env "${trials_env[@]}" timeout 900 "$BUILD/megasched" loop --model "$TRIALS_MODEL" --gpu auto \
    --device gpu --budget "$TRIALS_BUDGET" --results "$TWS/results.tsv" \
    --corpus "$TWS/corpus.jsonl" > "$OUT/trials_loop.json" 2>> "$LOG"
  log "loop exit $?"
  t1=$(date +%s.%N)
  echo "loop $(python3 -c "print($t1 - $t0)")" >> "$OUT/trials_wall.txt"
  python3 "$ROOT/bench/trials_summary.py" "$OUT" "$TRIALS_BUDGET" >> "$LOG" 2>&1 || status=1
  log "trials done (trials.json)"
fi

if has_stage crosscheck; then
  # The external oracle: transformers' LlamaForCausalLM vs megasched generate (CPU and GPU).
  log "crosscheck: bench/hf_crosscheck.py --shapes $CROSSCHECK_SHAPES --steps $CROSSCHECK_STEPS"
  if PYTHONUNBUFFERED=1 timeout 420 python3 "$ROOT/bench/hf_crosscheck.py" --megasched "$BUILD/megasched" \
       --shapes "$CROSSCHECK_SHAPES" --steps "$CROSSCHECK_STEPS" --out "$OUT/crosscheck.json" >> "$LOG" 2>&1; then
    log "crosscheck passed"
  else
    log "crosscheck FAILED"
    status=1
  fi
fi

if has_stage drift; then
  # bf16 accuracy: megasched (GPU) and transformers bf16 vs transformers fp32, by position.
  DRIFT_POSITIONS=${DRIFT_POSITIONS:-0,300,1024,4096}
  DRIFT_SHAPES=${DRIFT_SHAPES:-hd128-gqa3-llama3,hd128-gqa3,hd64-gqa3-llama3,hd64-gqa3}
  log "drift: bench/hf_bf16_drift.py --shapes $DRIFT_SHAPES --positions $DRIFT_POSITIONS"
  if PYTHONUNBUFFERED=1 timeout 540 python3 "$ROOT/bench/hf_bf16_drift.py" --megasched "$BUILD/megasched" \
       --shapes "$DRIFT_SHAPES" --positions "$DRIFT_POSITIONS" --out "$OUT/bf16_drift.json" >> "$LOG" 2>&1; then
    log "drift passed (megasched within transformers' bf16 error at every position)"
  else
    log "drift FAILED"
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
      # Beside graph-pdl's kernels when the kprof stage timed this model at this position.
      if [ "${KPROF_MODEL:-llama-1b}" = "$pmodel" ] && [ -s "$OUT/kprof_timeline_$ppos.json" ]; then
        python3 "$ROOT/bench/profile_compare.py" "$OUT/profile_$n.json" \
          --graph "$OUT/kprof_timeline_$ppos.json" --labels "profile $n,-" >> "$LOG" 2>&1 ||
          log "profile $n: profile_compare FAILED"
      fi
    else
      log "profile $n FAILED"
      status=1
    fi
  done
fi

if has_stage scaleout; then
  # The loop over many workers (HARNESS.md section 13).
  log "scaleout: bench/scaleout_bench.sh ${SCALEOUT_STAGES:-cpu gpu1}"
  # shellcheck disable=SC2086
  if BUILD="$BUILD" timeout 1500 "$ROOT/bench/scaleout_bench.sh" "$OUT" ${SCALEOUT_STAGES:-cpu gpu1} >> "$LOG" 2>&1; then
    log "scaleout passed"
  else
    log "scaleout FAILED (or below its targets): see scaleout/*.json"
    status=1
  fi
fi

if has_stage landscape; then
  # Records (or resumes) measured landscapes with every GPU of the host and compile-ahead, each
  # stopped cleanly after LANDSCAPE_SECONDS (default 300; SIGINT: the rows so far stay) and copied
  # back under OUT/landscapes/; a second call on the same warm machine resumes the workspace copy. LANDSCAPES: space-separated FILE@POSITION@NEIGHBOURS_OF (POSITION
  # checked and timed; NEIGHBOURS_OF one config or several, comma-separated; FILE a
  # committed file of search/landscapes/ or dev/landscapes/ to resume, or a new path; the
  # target is the live GPU's, so a file of another GPU is refused, not mixed).
  mkdir -p "$OUT/landscapes"
  for spec in ${LANDSCAPES:-}; do
    IFS=@ read -r lfile lpos lnear <<< "$spec"
    IFS=, read -ra lnears <<< "$lnear"  # NEIGHBOURS_OF: one config or several, comma-separated
    nargs=()
    for n in "${lnears[@]}"; do nargs+=(--neighbours-of "$n"); done
    # The rows are recorded into workspace/landscapes/ (not copied over by the next call's tree,
    # which would put back the committed file's rows), seeded from FILE when that has more rows.
    lwork="$MEGASCHED_WORKSPACE/landscapes/$(basename "$lfile")"
    mkdir -p "$(dirname "$lwork")"
    if [ -f "$lfile" ] && { [ ! -f "$lwork" ] || [ "$(wc -l < "$lfile")" -gt "$(wc -l < "$lwork")" ]; }; then
      cp "$lfile" "$lwork"
    fi
    log "landscape: $lwork (from $lfile) at position $lpos (neighbours of $lnear first), ${LANDSCAPE_SECONDS:-300} s"
    keep_copying "$lwork" "$OUT/landscapes/$(basename "$lfile")"
    timeout -s INT "${LANDSCAPE_SECONDS:-300}" "$BUILD/megasched" landscape record \
      --model "${LANDSCAPE_MODEL:-llama-1b}" --gpu auto --device gpu --gpus all --positions "$lpos" \
      --timed-position "$lpos" \
      "${nargs[@]}" --sample "${LANDSCAPE_SAMPLE:-600}" --out "$lwork" \
      > "$OUT/landscapes/$(basename "$lfile").summary.json" 2>> "$LOG"
    rc=$?
    stop_copying
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 130 ]; then
      log "landscape: $(($(wc -l < "$lwork") - 1)) rows in $lwork (copy it over $lfile to keep them)"
    else
      log "landscape FAILED (exit $rc)"; status=1
    fi
  done
fi

if has_stage peers; then
  if python3 -c "import torch, transformers" > /dev/null 2>&1; then
    # The positions field of PEER_SHAPE's COMPARE entry (MODEL@POSITIONS[@CONFIGS]).
    peer_positions=$(for spec in $COMPARE; do
                       IFS=@ read -r pm pp _ <<< "$spec"
                       [ "$pm" = "$PEER_SHAPE" ] && echo "$pp"
                     done)
    log "peers: bench/peers/torch_peer.py --shape $PEER_SHAPE --positions ${peer_positions:-0}"
    if PYTHONUNBUFFERED=1 timeout 1200 python3 "$ROOT/bench/peers/torch_peer.py" --shape "$PEER_SHAPE" \
         --save-dir "$OUT/peer_$PEER_SHAPE" --positions "${peer_positions:-0}" --megasched "$BUILD/megasched" \
         --out "$OUT/torch_peer.json" >> "$LOG" 2>&1; then
      log "peers ok"
    else
      log "peers FAILED"
      status=1
    fi
    rm -rf "$OUT/peer_$PEER_SHAPE"  # the random checkpoint (GBs); its seed and shape rebuild it
  else
    log "peers skipped: python3 cannot import torch and transformers"
  fi
fi

if has_stage compare; then
  for spec in $COMPARE; do
    IFS=@ read -r cmodel cpositions cconfigs <<< "$spec"
    peers=()
    [ "$cmodel" = "$PEER_SHAPE" ] && [ -f "$OUT/torch_peer.json" ] && peers=(--peers "$OUT/torch_peer.json")
    configs=()
    for c in ${cconfigs//,/ }; do configs+=(--config "$c"); done
    # A model named twice (other positions or configs) writes compare_MODEL_2, _3, ...
    cname=$cmodel
    n=2
    while [ -e "$OUT/compare_$cname.md" ]; do cname=${cmodel}_$n; n=$((n + 1)); done
    log "compare: megasched bench --model $cmodel --positions $cpositions ${configs[*]} ${peers[*]}"
    if timeout 1800 "$BUILD/megasched" bench --model "$cmodel" --positions "$cpositions" \
         "${configs[@]}" "${peers[@]}" \
         --iterations "$ITERATIONS" --out "$OUT/compare_$cname" > "$OUT/compare_$cname.md" 2>> "$LOG"; then
      log "compare $cname ok"
      cat "$OUT/compare_$cname.md" >> "$LOG"
    else
      log "compare $cname FAILED"
      status=1
    fi
  done
fi

if has_stage search; then
  # The search of record: a fresh `loop --device gpu` of llama-1b from the default config (the
  # default strategy, compile-ahead, its own kernel cache) for SEARCH_MINUTES (default 15). The
  # loop's logs live in SEARCH_DIR (default workspace/search_of_record, which a warm GPU machine
  # keeps between calls: the tree that travels replaces only tracked files), so a second call
  # continues the same search with --resume: a 15-minute search fits two calls of
  # SEARCH_MINUTES=7.5. Then its best config is benched beside best:llama-1b:<this GPU> and
  # graph-pdl at SEARCH_POSITION (default 0) in one process (search_bench.md: the within-3% test), and the
  # report with its trajectory is written (search_report.html). SEARCH_FLAGS adds loop flags,
  # e.g. "--flywheel none" for a search that learns nothing from the shared corpus.
  SEARCH_MINUTES=${SEARCH_MINUTES:-15}
  SEARCH_DIR=${SEARCH_DIR:-$ROOT/workspace/search_of_record}
  SEARCH_POSITION=${SEARCH_POSITION:-0}
  SEARCH_MODEL=${SEARCH_MODEL:-llama-1b}
  spos=()
  [ "$SEARCH_POSITION" != 0 ] && spos=(--timed-position "$SEARCH_POSITION" --positions "$SEARCH_POSITION")
  sgpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)
  skey=$(gpu_key)
  mkdir -p "$SEARCH_DIR"
  sresume=()
  [ -s "$SEARCH_DIR/results.tsv" ] && sresume=(--resume)
  log "search: loop --model $SEARCH_MODEL --device gpu --minutes $SEARCH_MINUTES ${spos[*]} ${sresume[*]} ${SEARCH_FLAGS:-} in $SEARCH_DIR ($sgpu)"
  # The loop's logs, kept under OUT as they grow (results.tsv for the trajectory, corpus.jsonl for
  # `megasched corpus import`).
  keep_copying "$SEARCH_DIR/results.tsv" "$OUT/search_results.tsv"
  keep_copying "$SEARCH_DIR/corpus.jsonl" "$OUT/search_corpus.jsonl"
  # shellcheck disable=SC2086  # SEARCH_FLAGS is a list of flags
  MEGASCHED_KERNEL_CACHE="$SEARCH_DIR/kernels" timeout 3600 "$BUILD/megasched" loop \
    --model "$SEARCH_MODEL" --gpu auto --device gpu --budget 1000000 --minutes "$SEARCH_MINUTES" \
    --results "$SEARCH_DIR/results.tsv" --corpus "$SEARCH_DIR/corpus.jsonl" "${spos[@]}" "${sresume[@]}" \
    ${SEARCH_FLAGS:-} > "$OUT/search_summary.json" 2> "$OUT/search_progress.log"
  search_rc=$?
  stop_copying
  log "search: loop exit $search_rc ($(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); b=d.get("best") or {}; print(d.get("trials"), "trials, best", b.get("latency_us"), "us")' "$OUT/search_summary.json" 2>/dev/null))"
  if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); json.dump(d["best"]["config"], open(sys.argv[2], "w"), indent=1)' \
       "$OUT/search_summary.json" "$OUT/search_best.json" 2>> "$LOG"; then
    # Kept beside the loop's logs too: "search" in PLANFIT_CONFIGS or PROMOTE_CONFIG, in this
    # call or a later one on the same warm machine.
    cp "$OUT/search_best.json" "$SEARCH_DIR/best.json"
    sargs=(--config "$OUT/search_best.json")
    # The record beside it: the named records are llama-1b's.
    [ -n "$skey" ] && [ "$SEARCH_MODEL" = llama-1b ] && sargs+=(--config "best:llama-1b:$skey")
    for c in ${SEARCH_BESIDE:-}; do sargs+=(--config "$c"); done
    bench_beside search_bench "$SEARCH_MODEL" "$SEARCH_POSITION" "search: the bench of its best" \
      "${sargs[@]}"
  else
    log "search: no best config in the loop's summary"; status=1
  fi
  "$BUILD/megasched" report --results "$SEARCH_DIR/results.tsv" --html "$OUT/search_report.html" \
    > "$OUT/search_report.txt" 2>> "$LOG" || log "search: report FAILED"
fi

if has_stage searchab; then
  # Two searches that differ only in their flags, side by side: the keep rule's or a strategy's
  # A/B on a GPU (BENCHMARKS.md, "The search of record"). Each loop gets its own GPU (its own
  # machine's worth of noise and speed; the bench that decides runs both bests on GPU 0 in one
  # process), its own logs and its own kernel cache, so both start cold.
  SEARCHAB_MINUTES=${SEARCHAB_MINUTES:-4.5}
  SEARCHAB_DIR=${SEARCHAB_DIR:-$ROOT/workspace/searchab}
  SEARCHAB_POSITION=${SEARCHAB_POSITION:-0}
  SEARCHAB_FLAGS_A=${SEARCHAB_FLAGS_A---min-gain 0.01 --confirm 0}
  ab_gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
  ab_pos=()
  [ "$SEARCHAB_POSITION" != 0 ] && ab_pos=(--timed-position "$SEARCHAB_POSITION" --positions "$SEARCHAB_POSITION")
  ab_start=()
  [ -n "${SEARCHAB_START:-}" ] && ab_start=(--start "$SEARCHAB_START")
  rm -rf "$SEARCHAB_DIR"
  mkdir -p "$SEARCHAB_DIR/a" "$SEARCHAB_DIR/b"
  ab_search() {  # SIDE GPU FLAGS...: one loop, in the background when there are two GPUs
    local side=$1 gpu=$2
    shift 2
    log "searchab: $side on GPU $gpu: loop --minutes $SEARCHAB_MINUTES ${ab_start[*]} ${ab_pos[*]} $*"
    CUDA_VISIBLE_DEVICES=$gpu MEGASCHED_KERNEL_CACHE="$SEARCHAB_DIR/$side/kernels" timeout 3600 \
      "$BUILD/megasched" loop --model llama-1b --gpu auto --device gpu --budget 1000000 \
      --minutes "$SEARCHAB_MINUTES" --results "$SEARCHAB_DIR/$side/results.tsv" \
      --corpus "$SEARCHAB_DIR/$side/corpus.jsonl" "${ab_start[@]}" "${ab_pos[@]}" "$@" \
      > "$OUT/searchab_$side.json" 2> "$SEARCHAB_DIR/$side/progress.log"
  }
  keep_copying "$SEARCHAB_DIR/a/results.tsv" "$OUT/searchab_a_results.tsv"
  keep_copying "$SEARCHAB_DIR/b/results.tsv" "$OUT/searchab_b_results.tsv"
  # shellcheck disable=SC2086  # the flags are lists of flags
  if [ "$ab_gpus" -ge 2 ]; then
    ab_search a 0 $SEARCHAB_FLAGS_A & ab_a=$!
    ab_search b 1 ${SEARCHAB_FLAGS_B:-} & ab_b=$!
    wait "$ab_a"; ab_rc_a=$?
    wait "$ab_b"; ab_rc_b=$?
  else
    log "searchab: one GPU: A, then B"
    ab_search a 0 $SEARCHAB_FLAGS_A; ab_rc_a=$?
    ab_search b 0 ${SEARCHAB_FLAGS_B:-}; ab_rc_b=$?
  fi
  stop_copying
  ab_args=()
  for side in a b; do
    if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); json.dump(d["best"]["config"], open(sys.argv[2], "w"), indent=1)' \
         "$OUT/searchab_$side.json" "$OUT/searchab_${side}_best.json" 2>> "$LOG"; then
      log "searchab: $side: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("trials"), "trials, best", d["best"].get("latency_us"), "us")' "$OUT/searchab_$side.json" 2>/dev/null)"
      ab_args+=(--config "$OUT/searchab_${side}_best.json")
    else
      ab_rc=$ab_rc_a
      [ "$side" = b ] && ab_rc=$ab_rc_b
      log "searchab: $side: no best config in its summary (loop exit $ab_rc; $SEARCHAB_DIR/$side/progress.log says why)"
      status=1
    fi
  done
  ab_key=$(gpu_key)
  [ -n "$ab_key" ] && ab_args+=(--config "best:llama-1b:$ab_key")
  if [ ${#ab_args[@]} -gt 0 ]; then
    CUDA_VISIBLE_DEVICES=0 bench_beside searchab_bench llama-1b "$SEARCHAB_POSITION" \
      "searchab: the bench of both bests" "${ab_args[@]}"
  fi
fi

if has_stage plansearch; then
  # The record searched bucket by bucket: `loop --plan PLANSEARCH_PLAN` (default this GPU's
  # best:llama-1b:<gpu>), each bucket a loop from its config timed at the bucket's midpoint and
  # checked at both its ends, PLANSEARCH_MINUTES (default 6) split evenly over the buckets
  # (HARNESS.md, "Searching a plan"). The middle buckets of a fitted plan hold configs found at
  # other positions; a loop at their own position can find better (BENCHMARKS.md [O]). The
  # loop's logs live in PLANSEARCH_DIR (default workspace/plansearch; a re-run on the same warm
  # machine seeds each bucket with the best config its logs know there), its plan is kept as
  # PLANSEARCH_DIR/plan.json: "plansearch" in PLANFIT_CONFIGS refits the record with the
  # buckets' winners (a plan stands for its buckets' configs), "plansearch" as PROMOTE_CONFIG
  # promotes the plan as it came. Then the plan is benched beside PLANSEARCH_PLAN at every
  # bucket's timed position (plansearch_bench.md). PLANSEARCH_FLAGS adds loop flags, e.g.
  # "--gpus all" on a machine of several GPUs. The keep rule is the GPU loop's own (--min-gain
  # 0.005 --confirm 3: a bucket's gains are under 1%, inside one 30-step timing's noise, and only
  # back-to-back rounds keep them; BENCHMARKS.md [R]) unless PLANSEARCH_FLAGS says otherwise.
  PLANSEARCH_MINUTES=${PLANSEARCH_MINUTES:-6}
  PLANSEARCH_DIR=${PLANSEARCH_DIR:-$ROOT/workspace/plansearch}
  PLANSEARCH_PLAN=${PLANSEARCH_PLAN:-best:llama-1b:$(gpu_key)}
  if [ "$PLANSEARCH_PLAN" = "best:llama-1b:" ]; then
    log "plansearch: this GPU has no record of its own; set PLANSEARCH_PLAN (a plan file or best:MODEL:GPU)"
    status=1
  else
    mkdir -p "$PLANSEARCH_DIR"
    log "plansearch: loop --model llama-1b --device gpu --plan $PLANSEARCH_PLAN --minutes $PLANSEARCH_MINUTES ${PLANSEARCH_FLAGS:-} in $PLANSEARCH_DIR"
    keep_copying "$PLANSEARCH_DIR/results.tsv" "$OUT/plansearch_results.tsv"
    # shellcheck disable=SC2086  # PLANSEARCH_FLAGS is a list of flags
    MEGASCHED_KERNEL_CACHE="$PLANSEARCH_DIR/kernels" timeout 3600 "$BUILD/megasched" loop \
      --model llama-1b --gpu auto --device gpu --budget 1000000 --minutes "$PLANSEARCH_MINUTES" \
      --plan "$PLANSEARCH_PLAN" --results "$PLANSEARCH_DIR/results.tsv" \
      --corpus "$PLANSEARCH_DIR/corpus.jsonl" --runs-dir "$PLANSEARCH_DIR/runs" ${PLANSEARCH_FLAGS:-} \
      > "$OUT/plansearch_summary.json" 2> "$OUT/plansearch_progress.log"
    ps_rc=$?
    stop_copying
    # The summary names the plan file (under PLANSEARCH_DIR/runs/<run id>/) and each bucket's
    # timed position.
    read -r ps_plan ps_positions < <(python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
print(d.get("plan_file", ""), ",".join(str(b["timed_position"]) for b in d.get("buckets", [])))' \
      "$OUT/plansearch_summary.json" 2>> "$LOG")
    if [ $ps_rc -eq 0 ] && [ -n "${ps_plan:-}" ] && [ -s "$ps_plan" ]; then
      cp "$ps_plan" "$PLANSEARCH_DIR/plan.json"
      cp "$ps_plan" "$OUT/plansearch_plan.json"
      log "plansearch: loop exit 0, plan $PLANSEARCH_DIR/plan.json; benched beside $PLANSEARCH_PLAN at $ps_positions"
      bench_beside plansearch_bench llama-1b "$ps_positions" "plansearch: the bench of its plan" \
        --config "$OUT/plansearch_plan.json" --config "$PLANSEARCH_PLAN"
      # Each bucket's trajectory and, per bucket, its config against its neighbours' at the
      # buckets' timed positions (what a boundary saves).
      "$BUILD/megasched" report --results "$PLANSEARCH_DIR/results.tsv" --plan "$PLANSEARCH_DIR/plan.json" \
        --html "$OUT/plansearch_report.html" > "$OUT/plansearch_report.txt" 2>> "$LOG" \
        || log "plansearch: report FAILED"
    else
      log "plansearch: loop exit $ps_rc, no plan (plansearch_progress.log says why)"; status=1
    fi
  fi
fi

if has_stage planfit; then
  # The plan fitted to measurements (megasched bench --fit-plan): the default and PLANFIT_CONFIGS
  # timed at PLANFIT_POSITIONS, the fastest config at each position, boundaries where two
  # configs' latencies cross; then the fitted plan benched beside them at PLAN_POSITIONS. The
  # plan becomes the generate stage's GENERATE_PLAN unless one is given.
  # About every doubling of the position: a line through two measurements far apart can miss a
  # step (dev/perf_log.md section 47).
  PLANFIT_POSITIONS=${PLANFIT_POSITIONS:-0,4,8,16,32,48,64,128,256,512,1024,2048,4096}
  PLAN_POSITIONS=${PLAN_POSITIONS:-0,512,1024,2048,4096}
  if [ -z "${PLANFIT_CONFIGS:-}" ]; then
    PLANFIT_CONFIGS=record
    [ -z "$(gpu_key)" ] && PLANFIT_CONFIGS="bench/configs/stream_r2u4_pairs_am.json bench/configs/stream_r2u4_g4p8_pairs_am_st.json bench/configs/stream_r2u4_g4p16_pairs_am_st.json"
  fi
  pcargs=()
  for c in $PLANFIT_CONFIGS; do
    case "$c" in
      record) c="best:llama-1b:$(gpu_key)" ;;
      search) c="${SEARCH_DIR:-$ROOT/workspace/search_of_record}/best.json" ;;
      plansearch) c="${PLANSEARCH_DIR:-$ROOT/workspace/plansearch}/plan.json" ;;
    esac
    pcargs+=(--config "$c")
  done
  # Both benches: llama-1b, the configs and graph-pdl, ITERATIONS steps each.
  # PLANFIT_ROUNDS (default 2) interleaved rounds: between two rows of one process a config's
  # median moves by up to ~1.5% (BENCHMARKS.md, "Plans over positions"), the fit's tie margin is
  # 1%, so each row pools its rounds, timed in turn with every other row.
  planfit_bench() { timeout 900 "$BUILD/megasched" bench --model llama-1b "${pcargs[@]}" \
    --baseline graph-pdl --iterations "$ITERATIONS" --rounds "${PLANFIT_ROUNDS:-2}" "$@"; }
  log "planfit: megasched bench --positions $PLANFIT_POSITIONS ${pcargs[*]} --fit-plan $OUT/planfit/plan.json"
  if planfit_bench --positions "$PLANFIT_POSITIONS" --fit-plan "$OUT/planfit/plan.json" \
       --out "$OUT/planfit" > "$OUT/planfit.md" 2>> "$LOG"; then
    log "planfit: fitted $OUT/planfit/plan.json"
    cat "$OUT/planfit.md" >> "$LOG"
    GENERATE_PLAN=${GENERATE_PLAN:-$OUT/planfit/plan.json}
    log "planfit: the plan beside its configs at $PLAN_POSITIONS"
    if planfit_bench --positions "$PLAN_POSITIONS" --config "$OUT/planfit/plan.json" \
         --out "$OUT/plan_table" > "$OUT/plan_table.md" 2>> "$LOG"; then
      cat "$OUT/plan_table.md" >> "$LOG"
    else
      log "planfit: the plan table FAILED"; status=1
    fi
  else
    log "planfit FAILED"; status=1
  fi
fi

if has_stage generate; then
  GENERATE=${GENERATE:-128:512}
  GENERATE_MODEL=${GENERATE_MODEL:-llama-1b}
  log "generate: GPU tests GeneratePlanGpu.*:GenerateBenchGpu.* (a plan's kernels share one KV cache)"
  if "$BUILD/megasched_tests" --gtest_filter='GeneratePlanGpu.*:GenerateBenchGpu.*' >> "$LOG" 2>&1; then
    log "generate GPU tests passed"
  else
    log "generate GPU tests FAILED"
    status=1
  fi
  gmodel=$GENERATE_MODEL
  gckpt="$OUT/generate_checkpoint_$GENERATE_MODEL"
  if python3 -c "import torch, transformers" > /dev/null 2>&1; then
    # The peer's random model of the same dimensions, saved once; megasched loads it too.
    log "generate: saving a random $GENERATE_MODEL checkpoint for both sides into $gckpt"
    if PYTHONUNBUFFERED=1 timeout 600 python3 "$ROOT/bench/peers/torch_peer.py" --shape "$GENERATE_MODEL" \
         --save-dir "$gckpt" --save-only >> "$LOG" 2>&1; then
      gmodel=$gckpt
    else
      log "generate: the checkpoint was not saved; megasched runs preset $GENERATE_MODEL (peer tokens not compared)"
    fi
  else
    log "generate: python3 cannot import torch and transformers: no PyTorch peer rows"
  fi
  gargs=(--generate "$GENERATE")
  [ -n "${GENERATE_PLAN:-}" ] && gargs+=(--plan "$GENERATE_PLAN")
  for c in ${GENERATE_CONFIGS:-}; do gargs+=(--config "$c"); done
  log "generate: megasched bench --model $gmodel ${gargs[*]}"
  if timeout 3000 "$BUILD/megasched" bench --model "$gmodel" "${gargs[@]}" \
       --torch-peer "$ROOT/bench/peers/torch_peer.py" --out "$OUT/generate_$GENERATE_MODEL" \
       > "$OUT/generate_$GENERATE_MODEL.md" 2>> "$LOG"; then
    log "generate ok"
    cat "$OUT/generate_$GENERATE_MODEL.md" >> "$LOG"
  else
    log "generate FAILED"
    status=1
  fi
  rm -rf "$gckpt"  # GBs; the seed and the shape rebuild it
fi

if has_stage promote; then
  PROMOTE_GPU=${PROMOTE_GPU:-$(gpu_key)}
  PROMOTE_GPU=${PROMOTE_GPU:-h100}
  case "$PROMOTE_CONFIG" in
    planfit) PROMOTE_CONFIG="$OUT/planfit/plan.json" ;;
    plansearch) PROMOTE_CONFIG="${PLANSEARCH_DIR:-$ROOT/workspace/plansearch}/plan.json" ;;
    search) PROMOTE_CONFIG="${SEARCH_DIR:-$ROOT/workspace/search_of_record}/best.json" ;;
  esac
  log "promote --model $PROMOTE_MODEL --gpu $PROMOTE_GPU --config $PROMOTE_CONFIG" \
    "--positions $PROMOTE_POSITIONS --rounds $PROMOTE_ROUNDS --speedup $PROMOTE_SPEEDUP"
  timeout 540 "$BUILD/megasched" promote --model "$PROMOTE_MODEL" --gpu "$PROMOTE_GPU" \
    --device gpu --config "$PROMOTE_CONFIG" --positions "$PROMOTE_POSITIONS" \
    --rounds "$PROMOTE_ROUNDS" --speedup "$PROMOTE_SPEEDUP" --registry "$OUT/verified.jsonl" --runs-dir "$OUT/runs" \
    > "$OUT/promote.json" 2>> "$LOG"
  code=$?
  log "promote exit $code: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("message",""))' "$OUT/promote.json" 2>/dev/null)"
  [ $code -ne 0 ] && status=1
  "$BUILD/megasched" registry list --registry "$OUT/verified.jsonl" >> "$LOG" 2>&1
  id=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("entry",{}).get("id",""))' "$OUT/promote.json" 2>/dev/null)
  if [ -n "$id" ]; then
    timeout 300 "$BUILD/megasched" registry verify "$id" --device gpu --positions 0 \
      --registry "$OUT/verified.jsonl" >> "$LOG" 2>&1
    log "registry verify $id exit $?"
  fi
fi

if has_stage ab; then
  # AB_BASE may name several base trees (space-separated); each is built (in the background since
  # the call began, above) and timed in every round as its own side, named after its directory.
  AB_CONFIG=${AB_CONFIG:-$ROOT/bench/configs/stream_r2u4.json}
  AB_POSITIONS=${AB_POSITIONS:-0}
  AB_ROUNDS=${AB_ROUNDS:-2}
  if [ "$ab_ok" != 1 ]; then
    log "ab: AB_BASE must name source trees with a CMakeLists.txt (got '$AB_BASE')"
    status=1
  else
    # This tree's CLI (built already when the build stage ran), then the base builds' end.
    { { [ -f "$BUILD/CMakeCache.txt" ] ||
        cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMEGASCHED_CUDA=ON \
          -DMEGASCHED_WERROR=OFF; } && cmake --build "$BUILD" -j"$ab_jobs" --target megasched; } \
      >> "$OUT/build.log" 2>&1
    ab_built=$?
    [ "${#ab_pids[@]}" -gt 0 ] && log "ab: waiting for the base builds"
    for pid in "${ab_pids[@]}"; do wait "$pid" || ab_built=1; done
    if [ "$ab_built" != 0 ]; then
      log "ab: build FAILED (build_ab_*.log, build.log)"
      status=1
    else
      : > "$OUT/ab.md"
      ab_sides=()
      for b in "${ab_bases[@]}"; do
        if [ "${#ab_bases[@]}" -gt 1 ]; then ab_sides+=("$(basename "$b")"); else ab_sides+=(base); fi
      done
      ab_sides+=(tree)
      # The CLI of a side: this tree's, the one base's, or the base named SIDE's.
      ab_bin() {
        case $1 in
          tree) echo "$BUILD/megasched" ;;
          base) echo "$BUILD-ab-base/megasched" ;;
          *) echo "$BUILD-ab-$1/megasched" ;;
        esac
      }
      ab_args=()
      for c in $AB_CONFIG; do ab_args+=(--config "$c"); done
      for ab_model in ${AB_MODELS:-llama-1b}; do
        ab_tag=""
        [ "$ab_model" = llama-1b ] || ab_tag="_$ab_model"
        : > "$OUT/ab_model.tmp"
        for round in $(seq 1 "$AB_ROUNDS"); do
          for side in "${ab_sides[@]}"; do
            bin=$(ab_bin "$side")
            name="ab_${side}${ab_tag}_$round"
            log "ab: round $round, $side: megasched bench --model $ab_model ${ab_args[*]} --positions $AB_POSITIONS"
            if "$bin" bench --model "$ab_model" --positions "$AB_POSITIONS" "${ab_args[@]}" \
                 --baseline graph-pdl --iterations "$ITERATIONS" --out "$OUT/$name" \
                 > "$OUT/$name.md" 2>> "$LOG"; then
              grep -E '^\| [0-9]+ \| [^|]*\| (config|baseline) ' "$OUT/$name.md" |
                sed "s/^/$side round $round: /" | tee -a "$OUT/ab_model.tmp" >> "$LOG"
            else
              log "ab: round $round, $side, $ab_model FAILED"
              status=1
            fi
          done
        done
        { echo "model $ab_model:"; cat "$OUT/ab_model.tmp"; } >> "$OUT/ab.md"
        # The summary: per position and config row (the default's too), each side's mean over the
        # rounds, and the tree against every other side.
        awk -F'|' -v model="$ab_model" '$4 ~ /config/ {
            split($1, w, " "); side = w[1]; pos = $2 + 0; row = $3; gsub(/ /, "", row)
            sum[side, pos, row] += $5; n[side, pos, row]++; keys[pos, row] = 1; sides[side] = 1
          }
          END {
            for (k in keys) {
              split(k, pr, SUBSEP); p = pr[1]; r = pr[2]
              if (!n["tree", p, r]) continue
              t = sum["tree", p, r] / n["tree", p, r]
              for (s in sides) if (s != "tree" && n[s, p, r]) {
                b = sum[s, p, r] / n[s, p, r]
                printf "summary: %s, position %d, %s: %s %.1f us, tree %.1f us (mean of %d / %d rounds): %+.1f us, %+.2f%%\n", model, p, r, s, b, t, n[s, p, r], n["tree", p, r], t - b, 100 * (t - b) / b
              }
            }
          }' "$OUT/ab_model.tmp" | sort | tee -a "$OUT/ab.md" >> "$LOG"
        rm -f "$OUT/ab_model.tmp"
      done
      # AB_NCU (space-separated MODEL@POSITION@CONFIG): each side's megakernel of one timed decode
      # step under ncu, as NCU_STEPS does, into ncu_ab_SIDE_N.txt (stall reasons, scheduler, the
      # hottest SASS instructions with their source lines): what a change did to the kernel, not
      # only to its time. The reports are deleted unless AB_NCU_KEEP=1 (each can pass the 16 MiB
      # a returned file may have).
      n=0
      for spec in ${AB_NCU:-}; do
        n=$((n + 1))
        IFS=@ read -r smodel spos scfg <<< "$spec"
        for side in "${ab_sides[@]}"; do
          bin=$(ab_bin "$side")
          MEGASCHED_NVRTC_LINEINFO=1 ncu_case \
            "ab $side $n: evaluate --model $smodel --positions $spos --config $scfg" \
            "ab_${side}_$n" "ncu_ab_${side}_$n.txt" 80 --kernel-name ms_megakernel \
            --launch-skip "${NCU_STEP_SKIP:-4}" \
            --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
            "$bin" evaluate --model "$smodel" --gpu auto --device gpu --positions "$spos" \
            --timed-position "$spos" --config "$scfg" --iterations 3 --warmup 2 --no-baseline
          [ "${AB_NCU_KEEP:-0}" = 1 ] || rm -f "$OUT/ab_${side}_$n.ncu-rep"
        done
      done
      # AB_PROFILES (space-separated MODEL@POSITION@CONFIG): each side's stamped profile of one
      # step, then each base against the tree by op kind (bench/profile_compare.py): which ops a
      # change made faster or slower, and in which phase of their tasks.
      n=0
      for spec in ${AB_PROFILES:-}; do
        n=$((n + 1))
        IFS=@ read -r pmodel ppos pcfg <<< "$spec"
        pcfg_args=()
        [ "$pcfg" != default ] && pcfg_args=(--config "$pcfg")
        for side in "${ab_sides[@]}"; do
          log "ab: profile $n, $side: --model $pmodel --position $ppos ${pcfg_args[*]}"
          timeout 300 "$(ab_bin "$side")" profile --model "$pmodel" --gpu auto --position "$ppos" \
            "${pcfg_args[@]}" --out "$OUT/profile_ab_${side}_$n.json" --no-run-dir \
            >> "$LOG" 2>&1 || { log "ab: profile $n, $side FAILED"; status=1; }
        done
        for side in "${ab_sides[@]}"; do
          [ "$side" = tree ] && continue
          [ -s "$OUT/profile_ab_${side}_$n.json" ] && [ -s "$OUT/profile_ab_tree_$n.json" ] || continue
          { echo "profile $n ($spec):"
            python3 "$ROOT/bench/profile_compare.py" "$OUT/profile_ab_${side}_$n.json" \
              "$OUT/profile_ab_tree_$n.json" --labels "$side,tree"; } 2>&1 | tee -a "$OUT/ab.md" >> "$LOG"
        done
      done
    fi
  fi
fi

if has_stage gate && [ -f "$OUT/gate.json" ]; then
  # The gate's short table, last in the log: one row per case (skipped cases with their reason).
  python3 - "$OUT/gate.json" >> "$LOG" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"\ngate table ({d.get('context', {}).get('date', '')}; GB/s = matrix bytes x copies / median launch)")
print(f"{'case':44} {'GB/s':>8} {'GB/s/SM':>8} {'%bw':>6} {'us/link':>8} {'bg TB/s':>8} "
      f"{'rel_err':>8} {'regs':>5} gate")
n = passed = 0
for b in d.get("benchmarks", []):
    name = b.get("run_name", b.get("name", "")).split("/iterations:")[0]
    if b.get("error_occurred"):
        print(f"{name:44} SKIPPED: {b.get('error_message', '')[:160]}")
        continue
    def f(key, spec):
        return format(b[key], spec) if key in b else format("-", ">" + spec.split(".")[0])
    ok = b.get("gate_pass", 0) >= 1
    n += 1
    passed += ok
    print(f"{name:44} {f('GBps', '8.1f')} {f('GBps_per_SM', '8.1f')} {f('pct_of_bw', '6.1f')} "
          f"{f('us_per_link', '8.2f')} {f('bg_TBps', '8.2f')} {f('rel_err', '8.1e')} "
          f"{f('regs', '5.0f')} {'PASS' if ok else 'FAIL'}")
print(f"gate: {passed} of {n} measured cases pass")
EOF
fi

# The shared corpus rows this run appended, new rows only, for the lead to import and commit.
for f in "$MEGASCHED_FLYWHEEL_DIR"/*.corpus.jsonl; do
  [ -f "$f" ] || continue
  name=$(basename "$f")
  before=${FLYWHEEL_LINES_BEFORE[$name]:-0}
  after=$(wc -l < "$f")
  if [ "$after" -gt "$before" ]; then
    mkdir -p "$OUT/flywheel"
    tail -n +"$((before + 1))" "$f" > "$OUT/flywheel/$name"
    log "flywheel: $((after - before)) new rows of $name in $OUT/flywheel/$name" \
        "(keep them: megasched corpus import $OUT/flywheel/$name, then megasched corpus archive --all and commit flywheel/data/)"
  fi
done

log "device_check done (status $status)"
exit $status
