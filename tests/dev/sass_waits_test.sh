#!/bin/sh
# dev/sass_waits.py on a cubin built here: a kernel named ms_megakernel loads eight vectors
# (ld.global.nc, one source line), stores their sum and then polls a flag (ld.acquire.gpu, another
# line). The loads are one group, its scoreboards are waited on before the poll's load, the JSON
# has its fields; bad inputs exit 2 with a one-line message. Skipped (77) without nvcc or python3.
set -eu
ROOT=$1
WORK=$2
command -v nvcc > /dev/null && command -v python3 > /dev/null || exit 77
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
cat > k.cu << 'CU'
extern "C" __global__ void ms_megakernel(const uint4* w, const unsigned* flag, unsigned* out) {
  uint4 a[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint4* p = w + i * 256 + threadIdx.x;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a[i].x), "=r"(a[i].y), "=r"(a[i].z), "=r"(a[i].w) : "l"(p));  // line 6: the loads
  }
  unsigned s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += a[i].x ^ a[i].y ^ a[i].z ^ a[i].w;
  out[threadIdx.x] = s;  // line 11: stored before the poll (its "memory" clobber), after the loads
  unsigned v;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");  // line 14: the poll
  } while (v == 0);
  out[blockDim.x + threadIdx.x] = v;
}
CU
nvcc -arch=sm_90a -cubin -lineinfo -o k.cubin k.cu
S="python3 $ROOT/dev/sass_waits.py"
$S k.cubin --from k.cu:6 --until k.cu:14 > report.txt
grep -q "^group 0: 8 LDG" report.txt || { echo "sass_waits: no group of 8 loads"; cat report.txt; exit 1; }
$S k.cubin --from k.cu:6 --until k.cu:14 --json > report.json
$S k.cubin --dump --json > dump.json
python3 - << 'PY'
import json
d = json.load(open("report.json"))
for k in ("cubin", "function", "instructions", "from", "until", "until_op", "window", "groups"):
    assert k in d, ("top-level field", k, sorted(d))
assert d["function"] == "ms_megakernel" and d["until_op"] == "LDG", d
assert len(d["groups"]) >= 1, ("at least one group of loads on line 6", d["groups"])
g = d["groups"][0]
for k in ("first", "last", "loads", "scoreboards", "scanned", "until", "waits", "joins"):
    assert k in g, ("group field", k, sorted(g))
assert g["loads"] == 8 and g["scoreboards"], ("eight loads, on some scoreboard", g)
u = g["until"]
assert u and u["at"] == "k.cu:14" and u["opcode"] == "LDG", ("the scan ends at the poll", u)
assert g["waits"], ("the sum stored before the poll waits on the loads", g)
inst = ("address", "at", "file", "line", "opcode", "stall", "yield", "wb", "rb", "wait_mask", "wait")
for x in g["waits"] + g["joins"] + [u]:
    assert all(k in x for k in inst), ("instruction fields", sorted(x))
for x in g["waits"]:
    assert set(x["wait"]) & set(g["scoreboards"]), ("a wait on the group's scoreboards", x)
    assert g["last"] < x["address"] <= u["address"], ("between the loads and the poll", x)
dump = json.load(open("dump.json"))["dump"]
assert len(dump) == d["instructions"], (len(dump), d["instructions"])
assert sum(x["opcode"] == "LDG" and x["at"] == "k.cu:6" for x in dump) == 8, "the dump's loads"
PY
# Bad inputs: a missing file, not an ELF file, a cubin for another architecture, a function the
# cubin lacks, a cubin without a line table, FILE:LINE syntax, a line with no instruction, an
# unknown --until-op.
nvcc -arch=sm_80 -cubin -lineinfo -o sm80.cubin k.cu
nvcc -arch=sm_90a -cubin -o noline.cubin k.cu
L="--from k.cu:6 --until k.cu:14"
for args in "missing.cubin $L" "k.cu $L" "sm80.cubin $L" "k.cubin --function nope $L" \
            "noline.cubin $L" "k.cubin --from k.cu --until k.cu:14" "k.cubin --from k.cu:6" \
            "k.cubin --from k.cu:6 --until k.cu:999" "k.cubin $L --until-op nope"; do
  set +e
  $S $args > /dev/null 2> err.txt
  rc=$?
  set -e
  [ "$rc" = 2 ] || { echo "sass_waits $args: exit $rc, expected 2"; exit 1; }
  [ -s err.txt ] && [ "$(wc -l < err.txt)" = 1 ] || { echo "sass_waits $args: not one line"; exit 1; }
done
echo "sass_waits: ok"
