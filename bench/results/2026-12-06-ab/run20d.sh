#!/bin/bash
# Session 20, call 3. Issue 32: the backward with 80-query blocks at hdim 128 without a window
# (b3, on 8a26585) against main (cur): its tests, then ABBA at hdim 128, FA3 beside.
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/cur .device/b3
results r20d
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv | tee "$R/gpu.txt"
OUT=$R HFA_BIN=$PWD/.device/b3 timeout 110 bash bench/device_run.sh tests:test_sm90_backward > "$R/tests-b3.txt" 2>&1
grep -E "passed|FAIL|Failure" "$R/tests-b3.txt" | head -12
pack
if grep -q "test_sm90_backward: [0-9]* passed, [0-9]* skipped, 0 failed" "$R/tests-b3.txt"; then
  export BENCH_TIMEOUT=50
  i=0
  for arm in cur b3 b3 cur; do
    i=$((i + 1))
    HFA_COMMIT=$arm bench_with $arm bench_bwd.py bwd-$i-$arm --impls hfa fa3 --modes bwd --no-plot --hdims 128 --seqlens 2048 8192 16384
  done
  pack
fi
