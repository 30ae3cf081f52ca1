#!/bin/sh
# dev/sass_spills.py on cubins built here: a kernel held to 32 registers spills, and its spills land
# on the lines of its register array; the same kernel with no limit has none; bad inputs exit 2.
# Skipped (77) without nvcc or python3.
set -eu
ROOT=$1
WORK=$2
command -v nvcc > /dev/null && command -v python3 > /dev/null || exit 77
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
cat > k.cu << 'CU'
extern "C" __global__ void k(const float4* w, float* out, int n) {
  float4 a[24];
#pragma unroll
  for (int i = 0; i < 24; ++i) a[i] = w[i * 256 + threadIdx.x];  // line 4: the loads
  float s = 0.0f;
  for (int k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 24; ++i) s = s * 0.5f + a[i].x * a[i].y + a[i].z * a[i].w;  // line 8
  }
  out[threadIdx.x] = s;
}
CU
nvcc -arch=sm_90a -cubin -lineinfo -maxrregcount=32 -o tight.cubin k.cu
nvcc -arch=sm_90a -cubin -lineinfo -o free.cubin k.cu
S="python3 $ROOT/dev/sass_spills.py"
$S tight.cubin --function k --lines k.cu:1-11 --json > tight.json
$S free.cubin --function k --lines k.cu:1-11 --json > free.json
python3 - << 'PY'
import json
t, f = json.load(open("tight.json")), json.load(open("free.json"))
assert t["stl"] > 0 and t["ldl"] > 0, ("the 32-register build spills", t["stl"], t["ldl"])
assert t["ranges"][0]["stl"] == t["stl"], ("every spill is on the kernel's lines", t["ranges"])
loop = [e for e in t["by_line"] if e["line"] == 8 and e["kind"] == "LDL"]
assert loop and loop[0]["count"] > 0, ("the loop (line 8) reloads spilled values", t["by_line"])
assert f["stl"] == 0 and f["ldl"] == 0, ("the free build does not spill", f["stl"], f["ldl"])
PY
# Bad inputs: a missing file, a function the cubin lacks, a cubin without a line table.
nvcc -arch=sm_90a -cubin -o noline.cubin k.cu
for args in "missing.cubin" "free.cubin --function nope" "noline.cubin --function k" \
            "free.cubin --function k --lines k.cu"; do
  set +e
  $S $args > /dev/null 2> err.txt
  rc=$?
  set -e
  [ "$rc" = 2 ] || { echo "sass_spills $args: exit $rc, expected 2"; exit 1; }
  grep -q "sass_spills:" err.txt || { echo "sass_spills $args: no message"; exit 1; }
done
echo "sass_spills: ok"
