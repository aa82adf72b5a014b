#!/bin/bash
# Session 15, call 1: the backward with a GQA group's query heads split over CTAs (one query head
# a CTA, dK and dV added in fp32: new/), its GPU tests, the GQA table beside FA3 and cuDNN and
# beside the whole-group grid (new/ with HFA_BWD_HEADS_PER_TILE=64, and base/ = the commit
# before the patch), and an A/B of the MHA grid: base, new, early (HFA_SM90_BWD_STATS_EARLY=1:
# LSE and D loaded before the GEMM waits), waitread (HFA_SM90_BWD_DQ_WAIT_LANDED=0: the dQ
# writer frees its tile once the bulk add has read it), evictlast (HFA_SM90_BWD_DQ_EVICT_LAST=1);
# FA3 beside every arm as the control of the clock.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/base .device/new .device/early .device/waitread .device/evictlast .device/fa3
results r15a
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$R/gpu.txt"
OUT=$R HFA_BIN=.device/new timeout 200 bash bench/device_run.sh "tests:test_sm90_backward"
pack
BENCH_TIMEOUT=150 bench_with new bench_bwd.py gqa-new --gqa --modes bwd --impls hfa fa3 cudnn \
  --acc-heads 1 --acc-max-seqlen 8192
export HFA_BWD_HEADS_PER_TILE=64
bench_with new bench_bwd.py gqa-group --gqa --modes bwd --impls hfa fa3 --acc-max-seqlen 0
unset HFA_BWD_HEADS_PER_TILE
bench_with base bench_bwd.py gqa-base --gqa --modes bwd --impls hfa fa3 --acc-max-seqlen 0
pack
ab() {  # ab LIB ROUND
  bench_with "$1" bench_bwd.py "ab-$1-$2" --modes bwd --impls hfa fa3 --seqlens 2048 8192 16384 \
    --acc-max-seqlen 0 --no-plot
}
arms=(base new early waitread evictlast)
for arm in "${arms[@]}"; do ab "$arm" r1; done
for ((i = ${#arms[@]} - 1; i >= 0; i--)); do ab "${arms[$i]}" r2; done
pack
export HFA_LIBRARY=$PWD/.device/new/libhfa.so
for impl in hfa fa3; do
  timeout 60 ncu --clock-control none --profile-from-start off --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy -f --export "$R/ncu-$impl-d128-8k" \
    python3 bench/profile_bwd.py $impl 128 > "$R/ncu-$impl-d128-8k.log" 2>&1
  echo "ncu $impl rc=$?"
  ncu --import "$R/ncu-$impl-d128-8k.ncu-rep" --page raw --csv > "$R/ncu-$impl-d128-8k-raw.csv" 2>&1
  ncu --import "$R/ncu-$impl-d128-8k.ncu-rep" --page details > "$R/ncu-$impl-d128-8k.txt" 2>&1
done
rm -f "$R"/*.ncu-rep
pack
