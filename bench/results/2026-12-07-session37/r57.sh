#!/bin/bash
# Session 37, call r57: r50's uniform and cpref arms again, with the per-call schedule (r50 ran
# them with the kept one, which their 7b97a73 Python does not have: every hfa cell refused
# "reuse_schedule: not an option"). Rounds percall uniform cpref | cpref uniform percall.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/oldpy .device/reuse .device/uniform .device/cpref .device/flashmlax
results r57
export HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
# benchlib puts its tree's python/ first on sys.path, so the old Python runs from a tree of
# links: this bench/ beside 7b97a73's python/.
OLD=/tmp/oldtree; mkdir -p $OLD; ln -sfn $PWD/bench $OLD/bench; ln -sfn $PWD/.device $OLD/.device
ln -sfn $PWD/.device/oldpy/python $OLD/python; cp CMakeLists.txt .device/oldpy/  # its _version.py reads ../../CMakeLists.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
j() { ls "$R"/*-"$1".json | head -1; }
m() { if [ "$4" = old ]; then (cd $OLD && R=$R m1 "$@"); else m1 "$@"; fi; }
m1() { PYTHONPATH=python HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $3 bench_mla.py mla-$1-$2 \
        --batches 64 128 --seqlens 1024 4096 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 \
        --warmup 10 --rep 40 --schedule per-call "${@:5}"; }
m percall 1 reuse python; m uniform 1 uniform old --impls flashmla hfa; m cpref 1 cpref old; pack
m cpref 2 cpref old --impls flashmla hfa; m uniform 2 uniform old; m percall 2 reuse python --impls flashmla hfa
for arm in uniform cpref; do
  python3 bench/compare_runs.py --arms percall="$(j mla-percall-1)","$(j mla-percall-2)" \
    $arm="$(j mla-$arm-1)","$(j mla-$arm-2)" 2>&1 | tee "$R/ab-$arm.md" | tail -1
done
pack
