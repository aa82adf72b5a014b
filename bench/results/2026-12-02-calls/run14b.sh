#!/bin/bash
# Session 14, call 2: the committed tree (new/): the forward's other GPU suites (its kernels all
# changed: O's map is prefetched only where TMA stores O), the FP8 grid beside our bf16 forward
# and cuDNN, and ncu's full set (stall reasons by SASS line) on the FP8 forward at hdim 128,
# 16k keys.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/new
results r14b
OUT=$R HFA_BIN=.device/new timeout 220 bash bench/device_run.sh info \
  "tests:test_sm90_forward test_sm90_forward_features test_sm90_partials test_sm90_sm_margin"
pack
BENCH_TIMEOUT=200 bench_with new bench_fwd_fp8.py e4m3-$HFA_COMMIT
pack
export HFA_LIBRARY=$PWD/.device/new/libhfa.so
tag=ncu-fp8-d128-16k
timeout 120 ncu --clock-control none --profile-from-start off --set full --import-source no \
  -f --export "$R/$tag" python3 bench/profile_fwd_shape.py hfa_fp8 1 16384 16 16 128 > "$R/$tag.log" 2>&1
echo "ncu rc=$?"
ncu --import "$R/$tag.ncu-rep" --page details > "$R/$tag-details.txt" 2>&1
ncu --import "$R/$tag.ncu-rep" --page raw --csv > "$R/$tag-raw.csv" 2>&1
ncu --import "$R/$tag.ncu-rep" --page source --csv --print-source sass > "$R/$tag-sass.csv" 2>&1
grep -E "Duration|Warp Cycles Per Issued|Eligible Warps|Issued Warp" "$R/$tag-details.txt" | head -8
rm -f "$R"/*.ncu-rep
gzip "$R"/*.csv
pack
