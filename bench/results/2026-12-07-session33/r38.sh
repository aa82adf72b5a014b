#!/bin/bash
# Session 33, call r38 (issues 34 and 33):
#   landlib  main + decision 048's MLA levers (r35's mla3): 3bb32bf's library
#   comb     landlib + the combine kernels reading a partial's row in contiguous spans (a lane's
#            columns (32 k + lane) · 4 …, float4 loads; were 16 consecutive columns a lane, a
#            load touching 32 lines): library, test_sm90_mla_decode, test_sm90_decode
#   main     dcb218d's library;  candlib  main + decision 047's FADD row sums
#   fa3x, flashmlax  the peers with their libraries xz-packed (unpack restores them)
# 1. comb's GPU suites
# 2. bench_mla 1k and 4k, batch 64/128, 16/64/128 heads, s_q 1/2, both kinds, FlashMLA beside:
#    landlib comb comb landlib
# 3. bench_fwd_fp8 hdim 128/256, 4k/16k, both masks, FA3 beside: main candlib candlib main
# 4. bench_decode batch 4 (split, the uniform combine), bf16, 8k/32k: landlib comb comb landlib
# 5. bench_mla's whole grid of comb (bench/results)
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/landlib .device/comb .device/main .device/candlib .device/fa3x .device/flashmlax
results r38
export HFA_FA3_DIR=$PWD/.device/fa3x HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
SUITES="test_sm90_mla_decode test_sm90_decode" SUITES_TIMEOUT=150 PYTEST_TIMEOUT=0 \
  bash bench/device_suites.sh .device/comb r38-suites
j() { ls "$R"/*-"$1".json | head -1; }
ab() {  # ab NAME A B: the A/B table of NAME-A/B rounds 1 and 2
  python3 bench/compare_runs.py --arms $2="$(j $1-$2-1)","$(j $1-$2-2)" $3="$(j $1-$3-1)","$(j $1-$3-2)" \
    2>&1 | tee "$R/ab-$1.md" | tail -4
}
m() { HFA_COMMIT=$1 BENCH_TIMEOUT=80 bench_with $1 bench_mla.py mla-$1-$2 --batches 64 128 \
        --seqlens 1024 4096 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 --warmup 10 --rep 40 "${@:3}"; }
m landlib 1; m comb 1 --impls flashmla hfa; pack; m comb 2; m landlib 2 --impls flashmla hfa
ab mla landlib comb; pack
f() { HFA_COMMIT=$1 BENCH_TIMEOUT=80 bench_with $1 bench_fwd_fp8.py fp8-$1-$2 --impls hfa fa3 \
        --hdims 128 256 --seqlens 4096 16384 --causal both --no-plot; }
f main 1; f candlib 1; pack; f candlib 2; f main 2; ab fp8 main candlib; pack
d() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_decode.py decode-$1-$2 --batch 4 \
        --formats bf16 --peers --warmup 10 --rep 40; }
d landlib 1; d comb 1; d comb 2; d landlib 2; ab decode landlib comb; pack
HFA_COMMIT=${COMB_COMMIT:-comb} BENCH_TIMEOUT=200 bench_with comb bench_mla.py mla
pack
