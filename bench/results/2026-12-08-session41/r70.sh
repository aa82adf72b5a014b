#!/bin/bash
# Session 41's first call (issue 32): the backward levers, each against HEAD's kernels.
#   headlib (.device/headlib) e377678's library (HEAD's kernels)
#   fma4    (.device/fma4)    fma4.patch: every 4th exponential of P on the FMA
#                             pipes in hdim 128's turns kernels (decision 042 reopened by 044)
#   stack   (.device/stack)   + hint.patch: fma4 + every mbarrier wait sleeps with a
#                             10 ms suspend hint (FA3's SASS: NANOSLEEP.SYNCS in each wait loop)
# bench_bwd hdim 64/128/256 at 16k, both masks, arms in order then reversed, FA3 beside.
# Build the arms as README.md here says. The gate is r72.sh's (every GPU suite over snopp:
# stack + the forward's no-turns candidate).
# Carry .device/headlib .device/fma4 .device/stack .device/fa3.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/headlib .device/fma4 .device/stack
results r70
export HFA_FA3_DIR=$PWD/.device/fa3
arms="headlib fma4 stack"
pack
b() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_bwd.py bwd-$1-$2 --impls hfa fa3 --modes bwd \
        --hdims 64 128 256 --seqlens 16384 --causal both --no-plot --acc-max-seqlen 0; }
for a in $arms; do b $a 1; done; pack
for a in $(echo $arms | tr ' ' '\n' | tac); do b $a 2; done
ab bwd $arms
pack
