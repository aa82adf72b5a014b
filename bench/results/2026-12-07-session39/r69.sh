#!/bin/bash
# Session 40's smallest call (issue 32), for a few minutes of device time: the whole backward
# stack of r67 (hint: rtwg + fma4 + the sleeping waits) against HEAD's kernels (headlib), hdim 128
# only, 4k and 16k, both masks, arms in order then reversed, FA3 beside; bench_bwd's float64
# accuracy check up to 4k stands in for the suite. Carry .device/headlib .device/hint .device/fa3.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/headlib .device/hint
results r69
export HFA_FA3_DIR=$PWD/.device/fa3
j() { ls "$R"/*-"$1".json | head -1; }
b() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_bwd.py bwd-$1-$2 --impls hfa fa3 --modes bwd \
        --hdims 128 --seqlens 4096 16384 --causal both --no-plot --acc-max-seqlen 4096; }
b headlib 1; b hint 1; pack; b hint 2; b headlib 2
python3 bench/compare_runs.py --arms headlib="$(j bwd-headlib-1),$(j bwd-headlib-2)" \
  hint="$(j bwd-hint-1),$(j bwd-hint-2)" 2>&1 | tee "$R/ab-bwd.md" | tail -12
pack
