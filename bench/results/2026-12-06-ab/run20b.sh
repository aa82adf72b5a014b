#!/bin/bash
# Session 20, call 2 (one call: little device time is left). Issue 33: the FP8 forward with V transposed in the kernel (f1a, on
# 8b76959) against main (cur, 8a26585: the transpose pass, swizzled), its tests first, ABBA, FA3
# beside. Issues 35/36: every GPU suite on main (ALiBi always compiled). Issue 36: host time per call, main's host path (92438d0, unchanged since) against
# f4c373d, native torch ops for both, ABBA.
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/cur .device/f1a .device/fa3 .device/base .device/pre
results r20b
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv | tee "$R/gpu.txt"
OUT=$R HFA_BIN=$PWD/.device/f1a timeout 120 bash bench/device_run.sh tests:test_sm90_forward_fp8 2>&1 | tail -12 | tee "$R/tests-f1a.txt"
pack
export BENCH_TIMEOUT=80
if grep -q "test_sm90_forward_fp8: [0-9]* passed, [0-9]* skipped, 0 failed" "$R/tests-f1a.txt"; then
  i=0
  for arm in cur f1a f1a cur; do
    i=$((i + 1))
    HFA_COMMIT=$arm bench_with $arm bench_fwd_fp8.py fp8-$i-$arm --impls hfa fa3 --no-plot --seqlens 2048 4096 16384
  done
  pack
fi
OUT=$R HFA_BIN=$PWD/.device/cur timeout 230 bash bench/device_run.sh "tests:test_sm90_ptx test_sm90_tile_order test_sm90_tile_maps test_sm90_sm_margin test_sm90_forward test_sm90_forward_features test_sm90_backward test_sm90_forward_fp8 test_sm90_partials test_sm90_merge_partials test_sm90_quantize_fp8 test_sm90_decode test_sm90_quantize test_quant_gpu" > "$R/tests-cur.txt" 2>&1
grep -E "passed|FAIL" "$R/tests-cur.txt" | head -30
pack
overhead() {  # TAG LIBDIR PYTHONPATH COMMIT MODES...
  local tag=$1 lib=$2 path=$3 commit=$4
  shift 4
  mkdir -p "$R/$tag"
  HFA_COMMIT=$commit HFA_LIBRARY=$PWD/$lib/libhfa.so HFA_TORCH_LIBRARY=$PWD/$lib/libhfa_torch.so \
    HFA_TORCH_OPS=native PYTHONPATH=$path timeout 45 python3 bench/bench_overhead.py --out "$R/$tag" \
    --reps 11 --modes "$@" > "$R/$tag.txt" 2>&1
  echo "$tag rc=$? $(tail -1 "$R/$tag.txt" | cut -c1-80)"
}
overhead overhead-pre1 .device/pre .device/pre/python f4c373d eager graph
overhead overhead-cur1 .device/base python 92438d0 eager graph
overhead overhead-cur2 .device/base python 92438d0 eager graph
overhead overhead-pre2 .device/pre .device/pre/python f4c373d eager graph
pack
