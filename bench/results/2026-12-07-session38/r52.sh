#!/bin/bash
# Prepared in session 35 for session 36 (after r50.sh and r51.sh), issue 34: the MLA epilogue's
# stores in runs of 4 columns as one store (mla-vector-stores.patch: 16 bytes a partial's run,
# 8 bytes of out where its address and strides allow; was 4 scalar stores a run: 128 a thread a
# piece), CPU-built only (SASS: ST.E.128 and STG.E.64 in the MLA kernels, registers unchanged).
#   kept     HEAD's library (.device/reuse), the holder kept
#   vec      HEAD + mla-vector-stores.patch (.device/vecstore: library and the two suites)
# 1. vec's suites; 2. bench_mla 1k/4k rounds kept vec | vec kept, FlashMLA beside in alternate
# rounds. Carry .device/reuse .device/vecstore .device/flashmlax.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/reuse .device/vecstore .device/flashmlax
results r52
export HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
SUITES="test_sm90_mla_decode test_sm90_decode" SUITES_TIMEOUT=100 PYTEST_TIMEOUT=0 \
  bash bench/device_suites.sh .device/vecstore r52-suites-vec
grep -q "test_sm90_mla_decode: [0-9]* passed, 0 skipped, 0 failed" /tmp/r52-suites-vec/tests.txt &&
  grep -q "test_sm90_decode: [0-9]* passed, 0 skipped, 0 failed" /tmp/r52-suites-vec/tests.txt ||
  { echo "vec: suites failed, no timing"; exit 1; }
j() { ls "$R"/*-"$1".json | head -1; }
m() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $3 bench_mla.py mla-$1-$2 --batches 64 128 \
        --seqlens 1024 4096 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 --warmup 10 --rep 40 \
        "${@:4}"; }
m kept 1 reuse; m vec 1 vecstore --impls flashmla hfa; pack
m vec 2 vecstore; m kept 2 reuse --impls flashmla hfa
python3 bench/compare_runs.py --arms kept="$(j mla-kept-1)","$(j mla-kept-2)" \
  vec="$(j mla-vec-1)","$(j mla-vec-2)" 2>&1 | tee "$R/ab-vec.md" | tail -1
pack
