#!/bin/bash
# Prepared in session 34 (no device time left to run it), for the next session (issue 34):
#   mask     main at f5cebb3/aa137f3: library and suites (build main, pack as below)
#   uniform  main + mla-uniform-share.patch: a batch of equal sequences takes whole sequences a
#            part where the share rounds up to them by at most kSequenceCost (the fixed rows of
#            bench_mla with 2-4 row tiles: no sequence cut, the parts no longer; test_sm90_split_
#            schedule passes on the CPU): library and suites
# Rebuild either if gone: apply the patch (git apply), `export CCACHE_BASEDIR=/work; ninja -C
# build/release src/libhfa.so.0.1.0 tests/sm90/decode/test_sm90_mla_decode
# tests/sm90/decode/test_sm90_decode`, then xz -T2 -6 the library and tar | xz
# --lzma2=preset=5,dict=192MiB the two suites into .device/NAME/ (carry .device/mask
# .device/uniform .device/flashmlax).
# 1. uniform's GPU suites; 2. bench_mla 1k/4k ABBA (mask uniform uniform mask), FlashMLA beside;
# 3. profile_mla of b64 1k 128 heads s_q 2 with uniform (the combine should be gone from it).
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/mask .device/uniform .device/flashmlax
results r49
export HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
SUITES="test_sm90_mla_decode test_sm90_decode" SUITES_TIMEOUT=120 PYTEST_TIMEOUT=0 \
  bash bench/device_suites.sh .device/uniform r49-suites
grep -q "test_sm90_mla_decode: [0-9]* passed, 0 skipped, 0 failed" /tmp/r49-suites/tests.txt || { echo "suites failed: no timing"; exit 1; }
j() { ls "$R"/*-"$1".json | head -1; }
m() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_mla.py mla-$1-$2 --batches 64 128 \
        --seqlens 1024 4096 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 --warmup 10 --rep 40 "${@:3}"; }
m mask 1; m uniform 1 --impls flashmla hfa; pack; m uniform 2; m mask 2 --impls flashmla hfa
python3 bench/compare_runs.py --arms mask="$(j mla-mask-1)","$(j mla-mask-2)" uniform="$(j mla-uniform-1)","$(j mla-uniform-2)" \
  2>&1 | tee "$R/ab-mla.md" | tail -3
HFA_LIBRARY=$PWD/.device/uniform/libhfa.so timeout 60 python3 bench/profile_mla.py --batch 64 \
  --seqlen 1024 --heads 128 --seqlen-q 2 --json $R/profile-uniform.json > $R/profile-uniform.txt 2>&1
pack
