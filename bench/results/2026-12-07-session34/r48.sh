#!/bin/bash
# Session 34, issue 34: the MLA mask's loop as a branch of its own, registers 56/224 (mask)
# against aecb8fc (order).
# 1. mask's GPU suites (test_sm90_mla_decode, test_sm90_decode)
# 2. bench_mla 1k and 4k, batch 64/128, 16/64/128 heads, s_q 1/2, both kinds, FlashMLA beside:
#    order mask mask order
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/order .device/mask .device/flashmlax
results r48
export HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
SUITES="test_sm90_mla_decode test_sm90_decode" SUITES_TIMEOUT=120 PYTEST_TIMEOUT=0 \
  bash bench/device_suites.sh .device/mask r48-suites
grep -q "test_sm90_mla_decode: [0-9]* passed, 0 skipped, 0 failed" /tmp/r48-suites/tests.txt || { echo "suites failed: no timing"; exit 1; }
j() { ls "$R"/*-"$1".json | head -1; }
m() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_mla.py mla-$1-$2 --batches 64 128 \
        --seqlens 1024 4096 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 --warmup 10 --rep 40 "${@:3}"; }
m order 1; m mask 1 --impls flashmla hfa; pack; m mask 2; m order 2 --impls flashmla hfa
python3 bench/compare_runs.py --arms order="$(j mla-order-1)","$(j mla-order-2)" mask="$(j mla-mask-1)","$(j mla-mask-2)" \
  2>&1 | tee "$R/ab-mla.md" | tail -3
pack
