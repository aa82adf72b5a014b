#!/bin/bash
# Prepared in session 35 for session 36 (see r50.sh), issue 34, after r50: the FP8-record kernel before and after the seesaw, and where
# an attention kernel's time goes CTA by CTA.
#   comblib  a283880's library (the MLA kernels before the seesaw), 7b97a73's python/ (oldpy)
#   kept     this tree's library (bc7cdfc: main + reuse_schedule), the holder kept
#   trace    bc7cdfc + mla-trace.patch (per-CTA clocks of each piece, appended to
#            HFA_MLA_TRACE_FILE by the launch; trace_mla.py runs a case and reads them)
# Carry .device/reuse .device/comblib .device/trace .device/oldpy.
# 1. bench_mla --cache fp8 1k/4k, hfa alone (FlashMLA has no dense FP8), rounds comblib kept
# kept comblib; 2. trace_mla.py at b64 1k and 4k 128 heads s_q 2 (fixed, ragged), 1k 16 heads.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/reuse .device/comblib .device/trace
results r51
OLDPY=$PWD/.device/oldpy/python
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
j() { ls "$R"/*-"$1".json | head -1; }
f() { PYTHONPATH=$3 HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $2 bench_mla.py fp8-$1-$4 \
        --cache fp8 --impls hfa --batches 64 128 --seqlens 1024 4096 --heads 16 64 128 \
        --seqlens-q 1 2 --acc-seqs 1 --warmup 10 --rep 40; }
f comblib comblib $OLDPY 1; f kept reuse python 1; f kept reuse python 2; f comblib comblib $OLDPY 2
python3 bench/compare_runs.py --arms comblib="$(j fp8-comblib-1)","$(j fp8-comblib-2)" \
  kept="$(j fp8-kept-1)","$(j fp8-kept-2)" 2>&1 | tee "$R/ab-fp8.md" | tail -1
pack
t() { HFA_LIBRARY=$PWD/.device/trace/libhfa.so timeout 60 python3 \
        bench/results/2026-12-07-session36/trace_mla.py --json "$R/trace-$1.json" "${@:2}" \
        > "$R/trace-$1.txt" 2>&1; echo "trace $1 rc=$?"; }
t 1k-128-fixed --batch 64 --seqlen 1024 --heads 128 --seqlen-q 2
t 1k-128-ragged --batch 64 --seqlen 1024 --heads 128 --seqlen-q 2 --kind ragged
t 4k-128-fixed --batch 64 --seqlen 4096 --heads 128 --seqlen-q 2
t 1k-16-fixed --batch 64 --seqlen 1024 --heads 16 --seqlen-q 1
pack
