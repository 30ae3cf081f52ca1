#!/usr/bin/env bash
# The megakernel's register budget at two blocks per SM, measured by ptxas on a machine without a
# GPU (dev/perf_log.md section 25): the position-0 record's config with launch.blocks_per_sm 2
# (128 registers a thread at 256 threads) built with nvcc for sm_90a, for subsets of its opcodes
# (MS_OPCODES: 4 the GEMV alone, 516 with the argmax, 36 with the attention, 549 all it uses) and
# input-staging batches (kStreamStageBatch of vm/device/stream.cuh, 8 in the tree), each a copy of
# the tree's device sources in a scratch folder; then the graph-pdl baseline's kernels (the same
# warp GEMV, launched at two blocks per SM) for comparison. Prints one line per build: the spill
# stores ptxas reports for ms_megakernel and for gemv_stream (a non-inlined function), and the
# local-memory stores / loads dev/sass_spills.py finds in the streamed GEMV's hot loop (WarpStream
# and stream_run of vm/device/stream.cuh): spills there are paid on every chunk of weights.
#
# usage: dev/register_budget.sh [BUILD_DIR]   (BUILD_DIR/megasched gives the record's defines;
#                                              default build)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
NVCC=${NVCC:-nvcc}
command -v "$NVCC" > /dev/null || { echo "register_budget: no $NVCC (the CUDA toolkit)" >&2; exit 3; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

cat > "$WORK/config.json" << 'EOF'
{"kernel": {"weight_stream": "registers", "vector_bytes": 16, "rows_per_warp": 2, "unroll": 4,
            "weight_load": "ldg_stream"},
 "smem": {"pages": 2, "page_bytes": 16384}, "pipeline": {"prefetch_depth": 0},
 "launch": {"threads_per_block": 256, "blocks_per_sm": 2},
 "tiling": {"gemv_rows_per_task": 0, "lm_head_rows_per_task": 0, "attn_q_heads_per_task": 1,
            "qkv_rope_pairs": true},
 "fusion": {"argmax_into_lm_head": true}}
EOF
# The defines NVRTC would build the config's kernel with (validate --kernel reports them).
defines=$("$BUILD/megasched" validate --model llama-1b --gpu h100 --config "$WORK/config.json" \
            --kernel | python3 -c 'import json,sys; print(" ".join("-D" + d for d in json.load(sys.stdin)["kernel"]["defines"]))')
echo "defines: $defines"
(cd "$ROOT" && tar -cf - abi vm eval) | tar -xf - -C "$WORK"
echo '#include "vm/device/megakernel.cuh"' > "$WORK/mk.cu"
echo '#include "eval/baselines/pdl_baseline.cuh"' > "$WORK/pdl.cu"

S="$WORK/vm/device/stream.cuh"
# The hot loop's source lines: WarpStream (its load and fma) and stream_run.
hot="stream.cuh:$(grep -n '^struct WarpStream {' "$S" | cut -d: -f1)-$(grep -n '^/// Elements \[at, at + 4)' "$S" | cut -d: -f1)"
hot2="stream.cuh:$(grep -n 'void stream_run(' "$S" | cut -d: -f1)-$(grep -n '^/// The streamed GEMV task' "$S" | cut -d: -f1)"

spills() {  # the "N bytes spill stores" of each function ptxas reports, as NAME=N; the hot loop's
  "$NVCC" -std=c++17 -arch=sm_90a -cubin -lineinfo -Xptxas -v "$@" -I"$WORK" -o "$WORK/k.cubin" 2>&1 |
    awk '/Function properties for/ {f = $NF; sub(/^_ZN6ms_dev[0-9]+/, "", f); sub(/E.*/, "", f)}
         /Used [0-9]+ registers/ {regs[f] = $5}
         /bytes spill stores/ {sp[f] = $5; order[++n] = f}
         END {for (i = 1; i <= n; ++i) printf "%s=%s%s ", order[i], sp[order[i]],
              (order[i] in regs) ? "(" regs[order[i]] " regs)" : ""}'
  [[ "${*: -1}" == */mk.cu ]] && python3 "$ROOT/dev/sass_spills.py" "$WORK/k.cubin" --lines "$hot" \
    --lines "$hot2" --json | python3 -c 'import json,sys; r=json.load(sys.stdin)["ranges"]
print("hot loop STL/LDL %d/%d" % (sum(x["stl"] for x in r), sum(x["ldl"] for x in r)), end="")'
  rm -f "$WORK/k.cubin"
}

for batch in 8 2 1; do
  sed -i "s/constexpr int kStreamStageBatch = [0-9]*;/constexpr int kStreamStageBatch = $batch;/" \
    "$WORK/vm/device/stream.cuh"
  for ops in 4 516 36 549; do
    d=$(sed "s/-DMS_OPCODES=[0-9]*/-DMS_OPCODES=$ops/" <<< "$defines")
    # shellcheck disable=SC2086  # the defines are a list of flags
    echo "stage batch $batch, MS_OPCODES=$ops: $(spills $d "$WORK/mk.cu")"
  done
done
echo "graph-pdl (launch bounds 256, 2): $(spills -DMS_KV_BF16=1 -DMS_WEIGHT_BF16=1 -DMS_THREADS=256 -DMS_HEAD_DIM=64 "$WORK/pdl.cu")"
