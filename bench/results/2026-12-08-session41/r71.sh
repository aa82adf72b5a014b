#!/bin/bash
# Session 41's second call (issue 33): the forward levers against HEAD's kernels, FA3 beside.
#   headlib, stack, snopp as in r70.sh: stack's forward differs from HEAD's by the sleeping
#   waits alone; snopp's adds no consumer turns at 16-bit hdim 192/256 (FlashAttention-3's
#   rule), its hdim 64/128 kernels stack's (a check of the noise).
# Gate: snopp's test_sm90_forward. bf16 hdim 64/128/256 (FA3 has no 192), 4k/16k, both masks,
# rounds headlib stack snopp snopp stack headlib; FP8 hdim 128/256 4k/16k, headlib stack stack
# headlib.
# Carry .device/headlib .device/stack .device/snopp .device/fa3.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/headlib .device/stack .device/snopp
results r71
export HFA_FA3_DIR=$PWD/.device/fa3
suites_of snopp 170 test_sm90_forward; pack
f() { HFA_COMMIT=$1 BENCH_TIMEOUT=70 bench_with $1 bench_fwd.py fwd-$1-$2 --impls hfa fa3 \
        --hdims 64 128 256 --seqlens 4096 16384 --causal both --no-plot; }
e() { HFA_COMMIT=$1 BENCH_TIMEOUT=50 bench_with $1 bench_fwd_fp8.py fp8-$1-$2 --impls hfa fa3 \
        --hdims 128 256 --seqlens 4096 16384 --causal both --no-plot; }
f headlib 1; f stack 1; f snopp 1; pack; f snopp 2; f stack 2; f headlib 2
ab fwd headlib stack snopp; pack
e headlib 1; e stack 1; e stack 2; e headlib 2
ab fp8 headlib stack; pack
