#!/bin/bash
# Issue 32 (prepared in session 23 for the next): pp5 = the ping-pong on the late dQ with the
# turn handed on after every exponential (branch issue32-pingpong head), pp = r23g's.
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/fin .device/pp5 .device/pp .device/fa3
results r24a
export HFA_FA3_DIR=$PWD/.device/fa3 BENCH_TIMEOUT=150
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv | tee "$R/gpu.txt"
OUT=$R HFA_BIN=$PWD/.device/pp5 timeout 150 bash bench/device_run.sh tests:test_sm90_backward > "$R/tests-pp5.txt" 2>&1
grep -E "passed|FAIL|Failure" "$R/tests-pp5.txt" | head -12
pack
grep -q "test_sm90_backward: [0-9]* passed, [0-9]* skipped, 0 failed" "$R/tests-pp5.txt" || { echo "tests failed"; exit 0; }
export BENCH_TIMEOUT=60
i=0
for arm in fin pp5 pp pp pp5 fin; do
  i=$((i + 1)); acc=""; [ $i -gt 3 ] && acc="--acc-max-seqlen 0"
  HFA_COMMIT=$arm bench_with $arm bench_bwd.py e-$i-$arm $acc --impls hfa fa3 --modes bwd --no-plot --hdims 64 128 --seqlens 1024 4096 16384
done
pack
f() { ls $R/*-e-$1.json | head -1; }
python3 bench/compare_runs.py --arms fin=$(f 1-fin),$(f 6-fin) pp5=$(f 2-pp5),$(f 5-pp5) pp=$(f 3-pp),$(f 4-pp) | tee "$R/compare.md" | tail -18
pack
echo "done at ${SECONDS}s"
