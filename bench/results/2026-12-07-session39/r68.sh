#!/bin/bash
# Session 39 (issue 33): two forward levers against HEAD's kernels, FA3 beside.
#   headlib (.device/headlib) ffd4499's library (HEAD's kernels)
#   hint    (.device/hint)    every mbarrier wait sleeps with a 10 ms suspend hint (branch
#                             issue32-wait-hint; its other changes are backward-only)
#   nopp    (.device/nopp)    no consumer turns in the 16-bit forward where Q·Kᵀ is wider than 128
#                             columns (hdim 192, 256: FlashAttention-3's rule; branch
#                             issue33-d256-no-turns); its hdim 64/128 kernels are headlib's, a
#                             check of the noise
# bf16 hdim 64/128/256, 2k/4k/16k, both masks, rounds headlib hint nopp nopp hint headlib; then
# FP8 hdim 128 2k/16k, headlib hint hint headlib. Carry .device/headlib .device/hint
# .device/nopp .device/fa3.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/headlib .device/hint .device/nopp
results r68
export HFA_FA3_DIR=$PWD/.device/fa3
j() { ls "$R"/*-"$1".json | head -1; }
arms() {  # arms NAME ARM...: the A/B table of NAME's rounds 1 and 2
  local name=$1; shift
  python3 bench/compare_runs.py --arms $(for a in "$@"; do echo "$a=$(j $name-$a-1),$(j $name-$a-2)"; done) \
    2>&1 | tee "$R/ab-$name.md" | tail -24
}
f() { HFA_COMMIT=$1 BENCH_TIMEOUT=90 bench_with $1 bench_fwd.py fwd-$1-$2 --impls hfa fa3 \
        --hdims 64 128 256 --seqlens 2048 4096 16384 --causal both --no-plot; }
e() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_fwd_fp8.py fp8-$1-$2 --impls hfa fa3 \
        --hdims 128 --seqlens 2048 16384 --causal both --no-plot; }
f headlib 1; f hint 1; f nopp 1; pack; f nopp 2; f hint 2; f headlib 2
arms fwd headlib hint nopp; pack
e headlib 1; e hint 1; e hint 2; e headlib 2
arms fp8 headlib hint; pack
