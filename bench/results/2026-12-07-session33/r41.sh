#!/bin/bash
# Session 33, call r41 (issue 34): the vector stores of the decode epilogue and combine.
#   comb  a283880's library (the combine's contiguous reads)
#   vec   comb + runs of 4 values stored as one vector store (ptx::store_run): library,
#         test_sm90_mla_decode, test_sm90_decode
# 1. vec's GPU suites
# 2. bench_mla 1k and 4k, batch 64/128, 16/64/128 heads, s_q 1/2, both kinds, FlashMLA beside:
#    comb vec vec comb
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/comb .device/vec .device/flashmlax
results r41
export HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
SUITES="test_sm90_mla_decode test_sm90_decode" SUITES_TIMEOUT=100 PYTEST_TIMEOUT=0 \
  bash bench/device_suites.sh .device/vec r41-suites
j() { ls "$R"/*-"$1".json | head -1; }
m() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_mla.py mla-$1-$2 --batches 64 128 \
        --seqlens 1024 4096 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 --warmup 10 --rep 40 "${@:3}"; }
m comb 1; m vec 1 --impls flashmla hfa; pack; m vec 2; m comb 2 --impls flashmla hfa
python3 bench/compare_runs.py --arms comb="$(j mla-comb-1)","$(j mla-comb-2)" vec="$(j mla-vec-1)","$(j mla-vec-2)" \
  2>&1 | tee "$R/ab-mla.md" | tail -3
pack
