#!/bin/bash
# r25a (issue 32): the backward's exponentials of P on the FMA pipes, every 4th (e4) and every
# 2nd (e2; branch issue32-exp2-main, HFA_SM90_BWD_EXP2_ON_FMA_EVERY) against main's kernels (fin),
# FA3 beside: the arms' backward tests first, then ABBA (fin e4 e2 e2 e4 fin) at hdim 64 and 128.
#   run: carry [".device/fin", ".device/e4", ".device/e2", ".device/fa3", ".device/run25a.sh"]
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/fin .device/e4 .device/e2
results r25a
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$R/gpu.txt"
for arm in e2 e4; do
  timeout 120 ".device/$arm/test_sm90_backward" > "$R/tests-$arm.txt" 2>&1
  echo "tests $arm rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$R/tests-$arm.txt" | tr '\n' ' ')"
done
GRID="--impls hfa fa3 --modes bwd --hdims 64 128 --seqlens 1024 4096 16384 --no-plot"
export BENCH_TIMEOUT=100
bench_with fin bench_bwd.py fin-1 $GRID
bench_with e4 bench_bwd.py e4-1 $GRID
bench_with e2 bench_bwd.py e2-1 $GRID
bench_with e2 bench_bwd.py e2-2 $GRID --acc-max-seqlen 0
bench_with e4 bench_bwd.py e4-2 $GRID --acc-max-seqlen 0
bench_with fin bench_bwd.py fin-2 $GRID --acc-max-seqlen 0
j() { ls "$R"/*-"$1".json | head -1; }
python3 bench/compare_runs.py --arms fin=$(j fin-1),$(j fin-2) e4=$(j e4-1),$(j e4-2) \
  e2=$(j e2-1),$(j e2-2) 2>&1 | tee "$R/ab.md" | tail -20
pack
