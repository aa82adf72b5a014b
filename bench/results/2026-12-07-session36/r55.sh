#!/bin/bash
# Session 36, call r55: r54 cut to what the session's last device minutes hold: decision 051's
# three cells and their neighbours (bench_bwd causal), main (.device/mainlib, e6abb5b's library)
# against sec (this tree), FA3 beside, rounds main sec sec main; accuracy in sec's first.
# Carry .device/mainlib .device/sec .device/fa3.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/mainlib .device/sec
results r55
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
j() { ls "$R"/*-"$1".json | head -1; }
b() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_bwd.py bwd-$1-$2 --impls hfa fa3 --modes bwd \
        --hdims 64 128 256 --seqlens 2048 4096 8192 --causal true --no-plot "${@:3}"; }
b mainlib 1 --acc-max-seqlen 0; pack; b sec 1 --acc-max-seqlen 4096; pack
b sec 2 --acc-max-seqlen 0; b mainlib 2 --acc-max-seqlen 0
python3 bench/compare_runs.py --arms main="$(j bwd-mainlib-1)","$(j bwd-mainlib-2)" \
  sec="$(j bwd-sec-1)","$(j bwd-sec-2)" 2>&1 | tee "$R/ab-bwd.md" | tail -14
pack
