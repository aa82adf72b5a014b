#!/bin/bash
# Prepared in session 36 (run in session 37, with step 4 added) for the next device call (session 36's one call, r55, timed decision
# 051's backward; what it could not hold is here, in order of value):
#   mainlib (.device/mainlib) e6abb5b's library: the tile order before decision 051
#   sec     (.device/sec)     2ad44c3's library (decision 051; the kernels of this commit)
#   secwr   (.device/secwr)   sec + wait-read.patch: the dQ writer frees its tile once the bulk
#                             add has read it (FlashAttention-3's way), not once it has landed
#                             (decision 026 measured it level at 2k/8k, before the 80-row tile
#                             and never at 16k, where hfa ÷ FA3 drops to 0.95 at hdim 64/128)
#   reuse   (.device/reuse)   e6abb5b's library and its test_sm90_mla_decode / test_sm90_decode
# 1. bench_fwd causal, hdim 64/128/256, 1k-8k, FA3 beside: mainlib sec sec mainlib (decision 051
#    modelled hdim 256 causal 4k 1.098 → 1.024 of the ideal makespan, hdim 128 8k and hdim 256
#    1k-2k within 1.5 %: the forward's cells it changes, not yet timed)
# 2. main's MLA/decode suites (session 35's GPU tests, never run) and test_torch_mla.py
# 3. bench_bwd hdim 64/128, 4k/16k, both masks: sec secwr secwr sec
# 4. ncu --set full of the backward hdim 128 causal 4k, sec's library beside FA3 (the first
#    reading after decision 046's fences and 051's order; ncu_compare/ncu_pipes read it)
# Carry .device/mainlib .device/sec .device/secwr .device/reuse .device/fa3. Rebuild what is gone:
# a release build of the commit (`ninja -C build/release libhfa.so`, the patch applied for
# secwr), `xz -T2 -6` the library; reuse as r50.sh's header says.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/mainlib .device/sec .device/secwr .device/reuse
results r56
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
j() { ls "$R"/*-"$1".json | head -1; }
ab() {  # ab NAME A B: the A/B table of NAME-A/B rounds 1 and 2
  python3 bench/compare_runs.py --arms $2="$(j $1-$2-1)","$(j $1-$2-2)" $3="$(j $1-$3-1)","$(j $1-$3-2)" \
    2>&1 | tee "$R/ab-$1.md" | tail -20
}
f() { HFA_COMMIT=$1 BENCH_TIMEOUT=90 bench_with $1 bench_fwd.py fwd-$1-$2 --impls hfa fa3 \
        --hdims 64 128 256 --seqlens 1024 2048 4096 8192 --causal true --no-plot; }
f mainlib 1; f sec 1; pack; f sec 2; f mainlib 2
ab fwd mainlib sec; pack
SUITES="test_sm90_mla_decode test_sm90_decode" SUITES_TIMEOUT=100 PYTEST_TIMEOUT=0 \
  bash bench/device_suites.sh .device/reuse r56-suites | tail -4
cp /tmp/r56-suites/tests.txt $R/suites.txt 2>/dev/null
OUT=$R HFA_BIN=$PWD/.device/reuse timeout 60 bash bench/device_run.sh \
  "pytest:python/tests/test_torch_mla.py" > $R/pytest-mla.txt 2>&1
tail -3 $R/pytest-mla.txt
pack
b() { HFA_COMMIT=$1 BENCH_TIMEOUT=75 bench_with $1 bench_bwd.py bwd-$1-$2 --impls hfa fa3 --modes bwd \
        --hdims 64 128 --seqlens 4096 16384 --causal both --no-plot --acc-max-seqlen 0; }
b sec 1; b secwr 1; pack; b secwr 2; b sec 2
ab bwd sec secwr; pack
export PYTHONPATH=python:$HFA_FA3_DIR
for impl in hfa fa3; do
  HFA_LIBRARY=$PWD/.device/sec/libhfa.so timeout 80 ncu --profile-from-start off --set full \
    -o $R/ncu-$impl python3 bench/profile_bwd.py $impl 128 causal --seqlen 4096 > $R/ncu-$impl.log 2>&1
  echo "ncu $impl rc=$?"
  ncu --import $R/ncu-$impl.ncu-rep --page raw --csv | gzip > $R/$impl-raw.csv.gz
  ncu --import $R/ncu-$impl.ncu-rep --page source --csv --print-source sass | gzip > $R/$impl-sass.csv.gz
  rm -f $R/ncu-$impl.ncu-rep
done
python3 bench/ncu_pipes.py $R/hfa-raw.csv.gz $R/fa3-raw.csv.gz > $R/pipes.md 2>&1
pack
