#!/bin/bash
# Session 32, call r34b (prepared in session 31): the result grids of the tree that lands (.device/final, its
# commit in HFA_COMMIT), FA3 and cuDNN beside, for bench/results/ (RESULTS.md): the backward grid with the
# deterministic modes, the GQA shapes, the FP8 forward grid and the bf16 forward grid.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/final
results r34b
export HFA_FA3_DIR=$PWD/.device/fa3 BENCH_TIMEOUT=200
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
bench_with final bench_bwd.py bwd-bf16-fa3 --impls hfa fa3 hfa_det fa3_det cudnn --modes bwd --no-plot
pack
bench_with final bench_bwd.py gqa --gqa --impls hfa fa3 cudnn --modes bwd
pack
bench_with final bench_fwd_fp8.py e4m3 --impls hfa fa3 cudnn --no-plot
pack
bench_with final bench_fwd.py bf16 --impls hfa fa3 cudnn --no-plot
pack
