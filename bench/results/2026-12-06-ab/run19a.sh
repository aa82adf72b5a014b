#!/bin/bash
# Session 19, call 1. Issue 32: backward levers against main in ABBA order, FA3 in each run.
# lev: main (the lean step); bd: LSE/D loaded before the waits (hdim 128 without softcap, 256)
# and dV issued before the dP wait (hdim 128 without softcap); b4: the dQ writer frees its
# tile once the bulk add has read it (-DHFA_SM90_BWD_DQ_WAIT_LANDED=0). Their tests first.
# Issue 36: host time per call against the pre-issue build (f4c373d), native ops for both.
# Issue 33: the FP8 forward with the V transpose's shared-memory reads swizzled (tv), ABBA.
# Issue 35: the GPU suites of the ALiBi branch (forward features and backward, ALiBi included).
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/base .device/lev .device/bd .device/b4 .device/tv .device/fa3 .device/pre .device/alibi
results r19a
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv | tee "$R/gpu.txt"
for arm in bd; do
  OUT=$R HFA_BIN=$PWD/.device/$arm timeout 50 bash bench/device_run.sh tests:test_sm90_backward 2>&1 | tail -3 | tee "$R/tests-$arm.txt"
done
OUT=$R HFA_BIN=$PWD/.device/tv timeout 40 bash bench/device_run.sh tests:test_sm90_forward_fp8 2>&1 | tail -3 | tee "$R/tests-tv.txt"
OUT=$R HFA_BIN=$PWD/.device/alibi timeout 90 bash bench/device_run.sh "tests:test_sm90_forward_features test_sm90_backward" 2>&1 | tail -8 | tee "$R/tests-alibi.txt"
pack
export BENCH_TIMEOUT=40
i=0
for arm in lev bd b4 b4 bd lev; do
  i=$((i + 1))
  HFA_COMMIT=$arm bench_with $arm bench_bwd.py grid-$i-$arm --impls hfa fa3 --modes bwd --no-plot --seqlens 2048 8192
done
pack
overhead() {  # TAG LIBDIR PYTHONPATH COMMIT MODES...
  local tag=$1 lib=$2 path=$3 commit=$4
  shift 4
  HFA_COMMIT=$commit HFA_LIBRARY=$PWD/$lib/libhfa.so HFA_TORCH_LIBRARY=$PWD/$lib/libhfa_torch.so \
    HFA_TORCH_OPS=native PYTHONPATH=$path timeout 40 python3 bench/bench_overhead.py --out "$R" \
    --tag "$tag" --reps 11 --modes "$@" > "$R/$tag.txt" 2>&1
  echo "$tag rc=$? $(tail -1 "$R/$tag.txt" | cut -c1-80)"
}
for arm in lev tv tv lev; do
  i=$((i + 1))
  HFA_COMMIT=$arm bench_with $arm bench_fwd_fp8.py fp8-$i-$arm --impls hfa fa3 --no-plot --hdims 128 --seqlens 2048 4096
done
pack
overhead overhead-pre1 .device/pre .device/pre/python f4c373d eager graph
overhead overhead-cur1 .device/base python 92438d0 eager graph
overhead overhead-cur2 .device/base python 92438d0 eager graph
overhead overhead-pre2 .device/pre .device/pre/python f4c373d eager graph
pack
