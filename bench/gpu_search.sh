#!/usr/bin/env bash
# A GPU search in one command on a GPU machine (after bench/device_check.sh built
# BUILD and measured the bandwidth): start from the fastest row of a bench.json that
# device_check's bench stage wrote (or from START), run `megasched loop` on the GPU, then profile
# the best config the loop kept.
#
# usage: bench/gpu_search.sh OUT_DIR
# env:   MODEL (llama-1b), STRATEGY (hillclimb), BUDGET (80 trials), MINUTES (4), PLATEAU (30),
#        SEED (1), TIMED_POSITION (0: the position trials are timed at), START (a config file or
#        name; default: the fastest ok row of OUT_DIR/bench.json for MODEL at TIMED_POSITION),
#        BUILD (build dir, default build-gpu)
set -uo pipefail
OUT=${1:?usage: bench/gpu_search.sh OUT_DIR}
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
MODEL=${MODEL:-llama-1b}
STRATEGY=${STRATEGY:-hillclimb}
BUDGET=${BUDGET:-80}
MINUTES=${MINUTES:-4}
PLATEAU=${PLATEAU:-30}
SEED=${SEED:-1}
TIMED_POSITION=${TIMED_POSITION:-0}
export MEGASCHED_WORKSPACE=${MEGASCHED_WORKSPACE:-$ROOT/workspace}
LOG="$OUT/check.log"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }

START=${START:-}
if [ -z "$START" ]; then
  START="$OUT/start.json"
  if ! python3 - "$OUT/bench.json" "$MODEL" "$START" "$TIMED_POSITION" >> "$LOG" 2>&1 <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = [r for r in doc["results"] if r["model"] == sys.argv[2] and "median_us" in r
        and r["position"] == int(sys.argv[4])]
best = min(rows, key=lambda r: r["median_us"])
print(f"start: {best['config_name']} ({best['median_us']:.1f} us at position {best['position']})")
json.dump(best["config_patch"], open(sys.argv[3], "w"))
PY
  then
    log "no ok row for $MODEL at position $TIMED_POSITION in $OUT/bench.json: run device_check's bench stage first, or set START"
    exit 1
  fi
fi
log "loop: --model $MODEL --strategy $STRATEGY --budget $BUDGET --minutes $MINUTES --start $START"
"$BUILD/megasched" loop --model "$MODEL" --gpu auto --device gpu --strategy "$STRATEGY" \
  --start "$START" --budget "$BUDGET" --minutes "$MINUTES" --plateau "$PLATEAU" --seed "$SEED" \
  --timed-position "$TIMED_POSITION" \
  --results "$OUT/results.tsv" --corpus "$OUT/corpus.jsonl" > "$OUT/loop.json" 2>> "$LOG"
log "loop exit $?"
python3 - "$OUT/loop.json" "$OUT/best_config.json" >> "$LOG" 2>&1 <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
b = j["best"]
print(json.dumps({k: j.get(k) for k in ["trials", "status_counts", "stop_reason"]}))
print(f"best {b['schedule_id']}: {b['latency_us']:.1f} us ({b['latency_kind']}), "
      f"{b['pct_of_floor']:.1f}% of floor")
json.dump(b["config"], open(sys.argv[2], "w"), indent=1)
PY
log "profile of the best config"
"$BUILD/megasched" profile --model "$MODEL" --gpu auto --position "$TIMED_POSITION" \
  --config "$OUT/best_config.json" --out "$OUT/profile_best.json" >> "$LOG" 2>&1
log "gpu_search done"
