#!/bin/bash
# Session 39's first call (issue 32): session 38's r64 (removed, this holds it) with a fourth arm.
#   headlib (.device/headlib) ffd4499's library (HEAD's kernels)
#   rtwg    (.device/rtwg)    41f31ff: the backward consumers' code as one copy for both warpgroups
#   fma4    (.device/fma4)    7fb5844: rtwg + every 4th exponential of P on the FMA pipes in hdim
#                             128's turns kernels (decision 042 reopened by the turns)
#   hint    (.device/hint)    fma4 + every mbarrier wait sleeps with a 10 ms suspend hint (FA3's
#                             SASS: NANOSLEEP.SYNCS in each wait loop; r56: hfa's turns kernel
#                             re-issued its producer's and dQ writer's tests 5.9 M times)
# 1. gate: hint's test_sm90_backward (fma4's where hint's fails), rtwg's workspace and block-sparse
#    suites; 2. bench_bwd hdim 128/256, 4k/16k, both masks, arms in order then reversed, FA3 beside.
# Carry .device/headlib .device/rtwg .device/fma4 .device/hint .device/fa3.
# ARMS="headlib hint" (carry .device/headlib .device/hint .device/fa3): the whole stack against
# HEAD alone, hint's suite the only gate, for a call with little device time left.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
arms=${ARMS:-"headlib rtwg fma4 hint"}
unpack $(for a in $arms; do echo .device/$a; done)
results r67
export HFA_FA3_DIR=$PWD/.device/fa3
suite() {  # suite BIN_DIR TAG SUITES
  OUT=$R HFA_BIN=$PWD/.device/$1 timeout 150 bash bench/device_run.sh "tests:$3" 2>&1 |
    grep -v "^Running main" > $R/tests-$2.txt; tail -4 $R/tests-$2.txt
}
passed() { grep -q "test_sm90_backward: [0-9]* passed, 0 skipped, 0 failed" $R/tests-$1.txt; }
suite hint hint test_sm90_backward
if ! passed hint; then
  echo "hint: test_sm90_backward failed, no timing of it"; arms=${arms% hint}
  if [[ $arms == *fma4 ]]; then
    suite fma4 fma4 test_sm90_backward
    passed fma4 || { echo "fma4 failed too"; arms="headlib rtwg"; }
  fi
fi
[[ $arms == *rtwg* ]] && suite rtwg rtwg "test_sm90_backward_workspace test_sm90_backward_block_sparse"
pack
j() { ls "$R"/*-"$1".json | head -1; }
b() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_bwd.py bwd-$1-$2 --impls hfa fa3 --modes bwd \
        --hdims 128 256 --seqlens 4096 16384 --causal both --no-plot --acc-max-seqlen 0; }
for a in $arms; do b $a 1; done; pack
for a in $(echo $arms | tr ' ' '\n' | tac); do b $a 2; done
python3 bench/compare_runs.py --arms $(for a in $arms; do echo "$a=$(j bwd-$a-1),$(j bwd-$a-2)"; done) 2>&1 | tee "$R/ab-bwd.md" | tail -30
pack
# 3. where time is left (r68.sh is the full forward A/B): the hint in the forward, hdim 128.
f() { HFA_COMMIT=$1 BENCH_TIMEOUT=40 bench_with $1 bench_fwd.py fwd-$1-$2 --impls hfa fa3 \
        --hdims 128 --seqlens 4096 16384 --causal both --no-plot; }
if [ $SECONDS -lt 450 ]; then
  f headlib 1; f hint 1; f hint 2; f headlib 2
  python3 bench/compare_runs.py --arms headlib="$(j fwd-headlib-1),$(j fwd-headlib-2)" \
    hint="$(j fwd-hint-1),$(j fwd-hint-2)" 2>&1 | tee "$R/ab-fwd.md" | tail -12
  pack
fi
