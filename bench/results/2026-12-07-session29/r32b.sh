#!/bin/bash
# Session 29, call r32b: the FP8 in-kernel V transpose (vt, issue 33) and the forward's bits-alone
# partial blocks (fpart, issue 35): their suites, then A/B rounds against main 69f66ea; ncu last.
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/main .device/fpart .device/vt
results r32b
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
for v in vt:test_sm90_forward_fp8 fpart:test_sm90_forward_features; do
  OUT=$R HFA_BIN=$PWD/.device/${v%%:*} timeout 80 bash bench/device_run.sh "tests:${v#*:}" 2>&1 |
    grep -v "^Running main" | tee $R/tests-${v%%:*}.txt | tail -4
done
pack
fp8() { HFA_COMMIT=$2 BENCH_TIMEOUT=60 bench_with $1 bench_fwd_fp8.py fp8-$1-$3 --impls hfa fa3 --hdims 128 256 --seqlens 2048 4096 --causal both --no-plot; }
fp8 main 69f66ea 1; fp8 vt 34cc2d1 1; fp8 vt 34cc2d1 2; fp8 main 69f66ea 2
pack
cells=(--patterns causal causal_all_partial --impls hfa hfa_dense --seqlens 8192 16384 --hdims 64 128
       --acc-heads 1 --acc-max-seqlen 1 --acc-rows 256 --no-plot)
sp() { HFA_COMMIT=$2 BENCH_TIMEOUT=60 bench_with $1 bench_sparse.py sparse-$1-$3 "${cells[@]}"; grep -E "^target: a partial" "$R/sparse-$1-$3.txt"; }
sp main 69f66ea 1; sp fpart fpart 1; sp fpart fpart 2; sp main 69f66ea 2
pack
export PYTHONPATH=python:$HFA_FA3_DIR
for impl in hfa fa3; do
  HFA_LIBRARY=$PWD/.device/main/libhfa.so timeout 60 ncu --profile-from-start off --set full \
    -o $R/ncu-$impl python3 bench/profile_bwd.py $impl 128 causal --seqlen 4096 > $R/ncu-$impl.log 2>&1
  ncu --import $R/ncu-$impl.ncu-rep --page raw --csv | gzip > $R/$impl-raw.csv.gz
  ncu --import $R/ncu-$impl.ncu-rep --page source --csv --print-source sass | gzip > $R/$impl-sass.csv.gz
  rm -f $R/ncu-$impl.ncu-rep
done
python3 bench/ncu_pipes.py $R/hfa-raw.csv.gz $R/fa3-raw.csv.gz > $R/pipes.md
pack
