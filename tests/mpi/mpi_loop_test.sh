#!/usr/bin/env bash
# The MPI acceptance test (ctest MpiLoop.ThreeRanksBudget24KillAndResume, built with
# -DMEGASCHED_MPI=ON):
#   1. `mpirun --oversubscribe -np 3 megasched loop --mpi --device cpu --model toy --budget 24`
#      writes the same file formats as a plain loop (results.tsv header, corpus record keys) and
#      24 distinct trials, each timed by a worker rank (timed_on rank1/rank2);
#   2. the same job killed midway (kill -9 of rank 0, which owns the logs) and run again with
#      --resume completes the budget: 24 trials, numbered 0..23, no schedule twice.
# Usage: mpi_loop_test.sh MEGASCHED MPIEXEC WORKDIR
set -euo pipefail
bin=$1
mpiexec=$2
dir=$3
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
# mpirun refuses to run as root without these (CI containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Containers without ptrace rights break OpenMPI's shared-memory single copy of large messages
# ("Read -1, expected ..."): copy through the shared buffers instead.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
mpi=("$mpiexec" --oversubscribe -np 3)
fail() {
  echo "FAIL: $*" >&2
  for f in ./*.err; do [ -f "$f" ] && { echo "== $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}

# A column of results.tsv by header name (data rows only).
column() { awk -F'\t' -v name="$2" 'NR==1{for(i=1;i<=NF;i++) if($i==name) c=i; next} {print $c}' "$1"; }

# The logs of a run hold `n` trials numbered 0..n-1, no schedule twice, each timed by a worker rank.
check_logs() {
  local results=$1 n=$2
  [ "$(column "$results" trial | wc -l)" -eq "$n" ] || fail "$results: $(column "$results" trial | wc -l) rows, want $n"
  [ "$(column "$results" schedule_id | sort -u | wc -l)" -eq "$n" ] || fail "$results: a schedule appears twice"
  [ "$(column "$results" trial | sort -n | uniq | tr '\n' ' ')" = "$(seq 0 $((n - 1)) | tr '\n' ' ')" ] ||
    fail "$results: trials are not 0..$((n - 1)): $(column "$results" trial | sort -n | tr '\n' ' ')"
  column "$results" timed_on | grep -qvE '^rank[12]:cpu@' && fail "$results: a trial not timed by rank 1 or 2"
  return 0
}

# The formats of a plain loop, to compare with.
"$bin" loop --device cpu --model toy --budget 2 --results plain/results.tsv \
  --corpus plain/corpus.jsonl >plain.json 2>plain.err || fail "plain loop exited $?"

# 1. One whole run.
"${mpi[@]}" "$bin" loop --mpi --device cpu --model toy --budget 24 --results a/results.tsv \
  --corpus a/corpus.jsonl >a.json 2>a.err || fail "mpirun exited $?"
check_logs a/results.tsv 24
[ "$(head -1 a/results.tsv)" = "$(head -1 plain/results.tsv)" ] || fail "results.tsv header differs from a plain loop's"
[ "$(wc -l <a/corpus.jsonl)" -eq 24 ] || fail "corpus.jsonl has $(wc -l <a/corpus.jsonl) records, want 24"
[ "$(grep -c '"record":"trial"' a/corpus.jsonl)" -eq 24 ] || fail "corpus.jsonl records are not trial records"
for key in run_id schedule_id verdict keep model target device versions timed_on; do
  [ "$(grep -c "\"$key\":" a/corpus.jsonl)" -eq 24 ] || fail "corpus.jsonl: not every record has \"$key\""
done
grep -q '"trials": 24' a.json || fail "summary: trials is not 24: $(head -c 400 a.json)"
grep -q '"stop_reason": "budget"' a.json || fail "summary: stop reason is not the budget"
grep -q '"workers"' a.json || fail "summary has no workers"
grep -qE '^progress: [0-9]+/24 trials, [0-9.]+ trials/min \(rank1:cpu@[^ ]+ [0-9.]+, rank2:cpu@' a.err ||
  fail "rank 0 printed no progress line with trials/min per rank"

# 2. Killed midway, then resumed. Toy trials take milliseconds, so rank 0 (found among mpirun's
# children by its OMPI_COMM_WORLD_RANK) is held with SIGSTOP and let run a few milliseconds at a
# time until it has logged 6 trials; then it is killed with SIGKILL.
"${mpi[@]}" "$bin" loop --mpi --device cpu --model toy --budget 24 \
  --results b/results.tsv --corpus b/corpus.jsonl >b1.json 2>b1.err &
job=$!
rank0=""
for _ in $(seq 1 2000); do
  for pid in $(pgrep -P "$job"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0' && rank0=$pid
  done
  [ -n "$rank0" ] && break
  sleep 0.005
done
[ -n "$rank0" ] || fail "rank 0 not found among mpirun's children"
kill -STOP "$rank0"
rows=0
for _ in $(seq 1 4000); do
  kill -CONT "$rank0" 2>/dev/null || break
  sleep 0.003
  kill -STOP "$rank0" 2>/dev/null || break
  rows=$( [ -f b/results.tsv ] && column b/results.tsv trial | wc -l || echo 0)
  [ "$rows" -ge 6 ] && break
done
kill -9 "$rank0" 2>/dev/null || true
wait "$job" && fail "the killed job exited 0"
killed_at=$(column b/results.tsv trial | wc -l)
[ "$killed_at" -lt 24 ] || fail "the job finished before it was killed (trials too fast to test a kill)"
"${mpi[@]}" "$bin" loop --mpi --device cpu --model toy --budget 24 --resume \
  --results b/results.tsv --corpus b/corpus.jsonl >b2.json 2>b2.err || fail "the resumed job exited $?"
check_logs b/results.tsv 24
grep -q '"resumed": true' b2.json || fail "the second job did not resume the run"
[ "$(column b/results.tsv run_id | sort -u | wc -l)" -eq 1 ] || fail "the resume started another run"
echo "ok: 24 distinct trials; killed after $killed_at, resumed to 24 without a repeat"
