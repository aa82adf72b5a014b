#!/bin/bash
# Session 34, issue 32: the backward grid and the GQA table of main's backward (dcb218d's
# library; the backward has not changed since) beside FA3 and cuDNN. Run as one command line
# from the repository root (carry .device/main .device/fa3x).
set -u
source bench/device_call.sh; unpack .device/main .device/fa3x; results r46
export HFA_FA3_DIR=$PWD/.device/fa3x
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
HFA_COMMIT=dcb218d BENCH_TIMEOUT=200 bench_with main bench_bwd.py gqa --gqa --impls hfa fa3 cudnn --modes bwd; pack
HFA_COMMIT=dcb218d BENCH_TIMEOUT=300 bench_with main bench_bwd.py bwd-bf16-fa3 --impls hfa fa3 hfa_det fa3_det cudnn --modes bwd --no-plot; pack
