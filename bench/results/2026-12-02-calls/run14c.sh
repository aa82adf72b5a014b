#!/bin/bash
# Session 14, call 3: two FP8 levers on 3a3d924 (new/), hfa alone, two rounds alternated:
# nopp/ (the consumer warpgroups without ping-pong turns on FP8: both issue GEMMs when ready, so
# both may run softmax at once) and emu8/ (every 8th exponential of a row on the FMA pipes).
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/new .device/nopp .device/emu8
results r14c
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv > "$R/gpu.txt"
cells=(--hdims 128 256 --seqlens 2048 8192 16384 --causal both --no-plot --impls hfa)
for round in 1 2; do
  for lib in new nopp emu8; do bench_with $lib bench_fwd_fp8.py fp8-$lib$round "${cells[@]}"; done
done
pack
