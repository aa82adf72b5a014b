#!/bin/bash
# Session 14, call 1: FP8 hdim 128 tiles. new/ (this session's tree: 224-key tiles where k and v
# have no per-block scales) against base/ (ee13ef9, 128 keys), two rounds alternated; one round
# each of v192/ (192-key tiles) and v2l/ (128 keys, two-level P·V: each block's P·V into a fresh
# accumulator, added to O in fp32), hfa alone. The FP8 accuracy table on new/ and v2l/ (4k and
# 16k keys), then base/; new/'s FP8, quantize and backward GPU suites. Packs after each part (a call cut
# short still brings back what it did).
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/base .device/new .device/v192 .device/v2l
results r14a
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv > "$R/gpu.txt"
cells=(--hdims 128 --seqlens 2048 8192 16384 --causal both --no-plot --impls hfa)
for lib in base new v192 v2l base new; do
  n=$(ls "$R" | grep -c "^fp8-$lib[0-9].txt")
  bench_with $lib bench_fwd_fp8.py fp8-$lib$((n + 1)) "${cells[@]}"
done
pack
OUT=$R HFA_BIN=.device/new timeout 200 bash bench/device_run.sh \
  "tests:test_sm90_forward_fp8 test_sm90_quantize_fp8 test_sm90_backward"
pack
accuracy() {  # lib name args...
  local lib=$1 name=$2
  shift 2
  mkdir -p "$R/$name"
  HFA_LIBRARY=$PWD/.device/$lib/libhfa.so timeout 100 python3 bench/fp8_accuracy.py \
    --out "$R/$name" "$@" > "$R/$name.txt" 2>&1
  echo "$name rc=$? $(grep -c rmse "$R/$name.txt") rows"
}
accuracy new acc-new-d128
accuracy v2l acc-v2l-d128
pack
accuracy new acc-new-d128-16k --seqlen 16384 --heads 2
accuracy v2l acc-v2l-d128-16k --seqlen 16384 --heads 2
pack
accuracy base acc-base-d128
pack
