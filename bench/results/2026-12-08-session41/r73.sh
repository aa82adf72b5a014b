#!/bin/bash
# Session 41's smallest call, where device time runs short: the whole candidate stack (stack:
# fma4 + the sleeping waits) against HEAD's kernels, backward hdim 128 and 256 at 16k, both
# masks, arms in order then reversed, FA3 beside; then the gate, snopp's test_sm90_backward
# (snopp: stack + the forward's no-turns candidate, with every GPU suite; its backward is
# stack's); then the forward at hdim 128/256 16k the same way, snopp a third arm.
# Carry .device/headlib .device/stack .device/snopp .device/fa3.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/headlib .device/stack .device/snopp
results r73
export HFA_FA3_DIR=$PWD/.device/fa3
b() { HFA_COMMIT=$1 BENCH_TIMEOUT=50 bench_with $1 bench_bwd.py bwd-$1-$2 --impls hfa fa3 --modes bwd \
        --hdims 128 256 --seqlens 16384 --causal both --no-plot --acc-max-seqlen 0; }
f() { HFA_COMMIT=$1 BENCH_TIMEOUT=40 bench_with $1 bench_fwd.py fwd-$1-$2 --impls hfa fa3 \
        --hdims 128 256 --seqlens 16384 --causal both --no-plot; }
b headlib 1; b stack 1; b stack 2; b headlib 2; ab bwd headlib stack; pack
suites_of snopp 150 test_sm90_backward; pack
f headlib 1; f stack 1; f snopp 1; f snopp 2; f stack 2; f headlib 2; ab fwd headlib stack snopp; pack
