#!/bin/bash
# Prepared in session 34 (no device time left to run it), for the next session (issue 34):
#   mask     main (f5cebb3 … 3197c0e: the same kernels): library and suites
#   uniform  main + mla-uniform-share.patch: a batch of equal sequences takes whole sequences a
#            part where the share rounds up to them by at most kSequenceCost (the fixed rows of
#            bench_mla with 2-4 row tiles: no sequence cut, no part longer; decision 049's model;
#            test_sm90_split_schedule passes on the CPU)
#   cpref    main + combine-prefetch.patch: the combine loads a contributing split's row a split
#            ahead (ragged rows keep their cuts: the combine is 12.6-14.1 µs at 128 heads s_q 2)
#   comblib  a283880's library (the MLA kernels before the seesaw): the FP8-record kernel's speed
#            before and after it (bench_mla --cache fp8, hfa alone: FlashMLA has no dense FP8)
# Rebuild any that is gone: git apply the patch, `export CCACHE_BASEDIR=/work; ninja -C
# build/release src/libhfa.so.0.1.0 tests/sm90/decode/test_sm90_mla_decode
# tests/sm90/decode/test_sm90_decode`, xz -T2 -6 the library and tar | xz
# --lzma2=preset=5,dict=192MiB the two suites into .device/NAME/ (comblib: the library of
# a283880 alone). Carry .device/mask .device/uniform .device/cpref .device/comblib
# .device/flashmlax (about 48 MB).
# 1. the suites of uniform and cpref; 2. bench_mla 1k/4k, rounds mask uniform cpref cpref
# uniform mask, FlashMLA beside; 3. profile_mla at b64 1k 128 heads s_q 2, fixed and ragged;
# 4. the FP8 cache: bench_mla --cache fp8 1k/4k, rounds comblib mask mask comblib.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/mask .device/uniform .device/cpref .device/comblib .device/flashmlax
results r49
export HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
for lib in uniform cpref; do
  SUITES="test_sm90_mla_decode test_sm90_decode" SUITES_TIMEOUT=120 PYTEST_TIMEOUT=0 \
    bash bench/device_suites.sh .device/$lib r49-suites-$lib
  grep -q "test_sm90_mla_decode: [0-9]* passed, 0 skipped, 0 failed" /tmp/r49-suites-$lib/tests.txt &&
    grep -q "test_sm90_decode: [0-9]* passed, 0 skipped, 0 failed" /tmp/r49-suites-$lib/tests.txt ||
    { echo "$lib: suites failed, no timing"; exit 1; }
done
j() { ls "$R"/*-"$1".json | head -1; }
m() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_mla.py mla-$1-$2 --batches 64 128 \
        --seqlens 1024 4096 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 --warmup 10 --rep 40 "${@:3}"; }
m mask 1; m uniform 1 --impls flashmla hfa; m cpref 1; pack
m cpref 2 --impls flashmla hfa; m uniform 2; m mask 2 --impls flashmla hfa
for arm in uniform cpref; do
  python3 bench/compare_runs.py --arms mask="$(j mla-mask-1)","$(j mla-mask-2)" \
    $arm="$(j mla-$arm-1)","$(j mla-$arm-2)" 2>&1 | tee "$R/ab-$arm.md" | tail -1
done
for lib in mask uniform cpref; do
  for kind in fixed ragged; do
    HFA_LIBRARY=$PWD/.device/$lib/libhfa.so timeout 60 python3 bench/profile_mla.py --impls hfa \
      --batch 64 --seqlen 1024 --heads 128 --seqlen-q 2 --kind $kind \
      --json $R/profile-$lib-$kind.json > $R/profile-$lib-$kind.txt 2>&1
  done
done
pack
f() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_mla.py fp8-$1-$2 --cache fp8 --impls hfa \
        --batches 64 128 --seqlens 1024 4096 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 \
        --warmup 10 --rep 40; }
f comblib 1; f mask 1; f mask 2; f comblib 2
python3 bench/compare_runs.py --arms comblib="$(j fp8-comblib-1)","$(j fp8-comblib-2)" \
  mask="$(j fp8-mask-1)","$(j fp8-mask-2)" 2>&1 | tee "$R/ab-fp8.md" | tail -1
pack
