#!/bin/bash
# Prepared in session 35 (no device machine started: every try refused, the budget spent on the
# tries), for session 36, issue 34: r49's A/B (59e82dd) and the schedule kept across a step's
# layers, then r51.sh. Rebuild what is gone: reuse = HEAD's library and test_sm90_mla_decode /
# test_sm90_decode (`ninja -C build/release` with CCACHE_BASEDIR at the checkout's parent, xz -T2 -6 the library,
# tar | xz --lzma2=preset=5,dict=192MiB the two suites); uniform / cpref = 7b97a73 with the
# patch of that name applied (both also apply to this commit), the same way; oldpy = `git archive 7b97a73 python | tar -x -C
# .device/oldpy`.
#   percall  e6abb5b (main + reuse_schedule + the workspace's alignment checked), bench_mla
#            --schedule per-call: no holder, each call makes its schedule (main's behaviour)
#   kept     the same library, the holder kept: the timed calls reuse its schedule
#   uniform  59e82dd's mla-uniform-share.patch on 7b97a73 (r49), run with 7b97a73's python/
#   cpref    59e82dd's combine-prefetch.patch on 7b97a73 (r49), the same
# Carry .device/reuse .device/uniform .device/cpref .device/oldpy .device/flashmlax.
# 1. suites: the reuse library's (test_sm90_mla_decode with ReusedSchedule, test_sm90_decode, the
# Python MLA suites on the GPU); 2. bench_mla 1k/4k, rounds percall
# uniform cpref kept | kept cpref uniform percall, FlashMLA beside in alternate rounds.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/oldpy .device/reuse .device/uniform .device/cpref .device/flashmlax
results r50
export HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
OLDPY=$PWD/.device/oldpy/python
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
# The reuse library's suites gate the timing (uniform's and cpref's wait for their adoption: the
# benchmark's accuracy column checks one sequence a case against float64).
# (session 37: the reuse library's suites passed in r56 just before; skipped here)
OUT=$R HFA_BIN=$PWD/.device/reuse timeout 90 bash bench/device_run.sh \
  "pytest:python/tests/test_torch_mla.py python/tests/test_mla.py"
pack
j() { ls "$R"/*-"$1".json | head -1; }
# m ARM ROUND LIB PYTHONPATH ARGS...
m() { PYTHONPATH=$4 HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $3 bench_mla.py mla-$1-$2 \
        --batches 64 128 --seqlens 1024 4096 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 \
        --warmup 10 --rep 40 "${@:5}"; }
m percall 1 reuse python --schedule per-call; m uniform 1 uniform $OLDPY --impls flashmla hfa
m cpref 1 cpref $OLDPY; m kept 1 reuse python --impls flashmla hfa; pack
m kept 2 reuse python; m cpref 2 cpref $OLDPY --impls flashmla hfa
m uniform 2 uniform $OLDPY; m percall 2 reuse python --impls flashmla hfa --schedule per-call
for arm in kept uniform cpref; do
  python3 bench/compare_runs.py --arms percall="$(j mla-percall-1)","$(j mla-percall-2)" \
    $arm="$(j mla-$arm-1)","$(j mla-$arm-2)" 2>&1 | tee "$R/ab-$arm.md" | tail -1
done
pack
