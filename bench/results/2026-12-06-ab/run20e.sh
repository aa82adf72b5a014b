#!/bin/bash
# Session 20, call 4. Issue 32: the backward grid with 80-query blocks at hdim 128 (b3 = d334a21,
# 8a26585 + B3), FA3, cuDNN and both deterministic modes beside; then the deterministic mode at
# hdim 128, main (cur) against b3 and back.
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/cur .device/b3
results r20e
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv | tee "$R/gpu.txt"
BENCH_TIMEOUT=150 HFA_COMMIT=d334a21 bench_with b3 bench_bwd.py bf16-fa3-d334a21 --modes bwd --no-plot --impls hfa fa3 hfa_det fa3_det cudnn
pack
export BENCH_TIMEOUT=40
i=0
for arm in cur b3 b3 cur; do
  i=$((i + 1))
  HFA_COMMIT=$arm bench_with $arm bench_bwd.py det-$i-$arm --impls hfa_det --modes bwd --no-plot --hdims 128 --causal false --seqlens 2048 8192 16384
done
pack
