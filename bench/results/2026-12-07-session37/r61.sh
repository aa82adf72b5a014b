#!/bin/bash
# Prepared in session 37 (issue 32): the backward's consumers as one copy of code for both
# warpgroups (branch issue32-shared-consumer-code, 41f31ff: hdim 128 and 256 and block-sparse
# hdim 64; ~40 % fewer SASS instructions a kernel, registers and stack unchanged), against the
# two copies of HEAD. ncu of hdim 128 causal 4k (r56) had the consumers stalled on
# no_instruction 2 951 samples against FA3's 343, on branch targets of two ~20 KB copies.
#   headlib (.device/headlib) ffd4499's library (= .device/head's)
#   rtwg    (.device/rtwg)    41f31ff's library and its three backward suites
# 1. the backward suites of rtwg (gate); 2. bench_bwd hdim 64/128/256, 2k/8k/16k, both masks,
# rounds headlib rtwg rtwg headlib, FA3 beside; 3. ncu of rtwg's turns kernel at hdim 128 causal
# 4k (the no_instruction samples against r56's).
# Carry .device/headlib .device/rtwg .device/fa3 (27 MB). Rebuild rtwg if gone: a release build
# of 41f31ff (`ninja -C build/release libhfa.so test_sm90_backward test_sm90_backward_workspace
# test_sm90_backward_block_sparse`), packed as r58.sh's header says.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/headlib .device/rtwg
results r61
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
OUT=$R HFA_BIN=$PWD/.device/rtwg timeout 200 bash bench/device_run.sh \
  "tests:test_sm90_backward_workspace test_sm90_backward_block_sparse test_sm90_backward" 2>&1 |
  grep -v "^Running main" | tee $R/tests-rtwg.txt | tail -6
grep -q "test_sm90_backward: [0-9]* passed, 0 skipped, 0 failed" $R/tests-rtwg.txt ||
  { echo "rtwg: suites failed, no timing"; pack; exit 1; }
pack
j() { ls "$R"/*-"$1".json | head -1; }
b() { HFA_COMMIT=$1 BENCH_TIMEOUT=90 bench_with $1 bench_bwd.py bwd-$1-$2 --impls hfa fa3 --modes bwd \
        --hdims 64 128 256 --seqlens 2048 8192 16384 --causal both --no-plot --acc-max-seqlen 0; }
b headlib 1; b rtwg 1; pack; b rtwg 2; b headlib 2
python3 bench/compare_runs.py --arms headlib="$(j bwd-headlib-1)","$(j bwd-headlib-2)" \
  rtwg="$(j bwd-rtwg-1)","$(j bwd-rtwg-2)" 2>&1 | tee "$R/ab-bwd.md" | tail -22
pack
export PYTHONPATH=python:$HFA_FA3_DIR
HFA_LIBRARY=$PWD/.device/rtwg/libhfa.so timeout 80 ncu --profile-from-start off --set full \
  -o $R/ncu-rtwg python3 bench/profile_bwd.py hfa 128 causal --seqlen 4096 > $R/ncu-rtwg.log 2>&1
echo "ncu rtwg rc=$?"
ncu --import $R/ncu-rtwg.ncu-rep --page raw --csv | gzip > $R/rtwg-raw.csv.gz
ncu --import $R/ncu-rtwg.ncu-rep --page source --csv --print-source sass | gzip > $R/rtwg-sass.csv.gz
rm -f $R/ncu-rtwg.ncu-rep
pack
