#!/bin/bash
# Session 16, call 1: issue 32's GQA head split (new/, branch issue32-gqa-split 1479b7d; base/ its
# parent, early/ with LSE and D loaded before the GEMM waits), with that tree's bench and python
# package: the backward GPU tests on new/, the GQA table beside FA3 and cuDNN, and beside the
# whole-group grid (new/ with HFA_BWD_HEADS_PER_TILE=64) and base/.
set -u
cd "$(dirname "$0")"
ln -sfn .. .device
source bench/device_call.sh
unpack .device/base .device/new .device/early .device/fa3
results r16a
export HFA_FA3_DIR=$PWD/.device/fa3 HFA_COMMIT=1479b7d
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$R/gpu.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  LD_LIBRARY_PATH=$PWD/.device/new OUT=$R HFA_BIN=.device/new timeout 150 \
    bash bench/device_run.sh "tests:test_sm90_backward" | tail -8
  pack
fi
BENCH_TIMEOUT=150 bench_with new bench_bwd.py gqa-new --gqa --modes bwd --impls hfa fa3 cudnn \
  --acc-heads 1 --acc-max-seqlen 8192
pack
export HFA_BWD_HEADS_PER_TILE=64
BENCH_TIMEOUT=100 bench_with new bench_bwd.py gqa-group --gqa --modes bwd --impls hfa fa3 \
  --acc-max-seqlen 0
unset HFA_BWD_HEADS_PER_TILE
BENCH_TIMEOUT=100 bench_with base bench_bwd.py gqa-base --gqa --modes bwd --impls hfa fa3 \
  --acc-max-seqlen 0
pack
