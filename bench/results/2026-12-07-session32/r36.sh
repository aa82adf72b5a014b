#!/bin/bash
# Session 32, call r36: what fits the session's last device minutes (about 5 after the start),
# each lever's A/B in both orders, the calls packed as they go:
#   main     dcb218d's library
#   cand     main + decision 046's statistics early (backward) + decision 047's FADD row sums
#            (FP8 forward, P·1 deleted): r34a's cand
#   mla2     cand + decision 048's MLA levers (Q in flight at once, the exact rescale skip, the
#            dependent launches): r35's mla2
# 1. bench_bwd hdim 128, 4k/16k, both masks, FA3 beside: main cand cand main
# 2. bench_fwd_fp8 hdim 128/256, 2k/4k, both masks, FA3 beside: main cand cand main
# 3. bench_mla 1k, batch 64/128, 16/64/128 heads, s_q 1/2, fixed lengths, FlashMLA beside:
#    cand mla2 mla2 cand
# No suites: nothing of these lands from this call alone.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/main .device/candlib .device/mla2lib
results r36
export HFA_FA3_DIR=$PWD/.device/fa3 HFA_FLASHMLA_DIR=$PWD/.device/flashmla
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
j() { ls "$R"/*-"$1".json | head -1; }
ab() {  # ab NAME: the A/B table of NAME-main/cand or NAME-cand/mla2 rounds 1 and 2
  python3 bench/compare_runs.py --arms $2="$(j $1-$2-1)","$(j $1-$2-2)" $3="$(j $1-$3-1)","$(j $1-$3-2)" \
    2>&1 | tee "$R/ab-$1.md" | tail -12
}
b() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_bwd.py bwd-$1-$2 --impls hfa fa3 --modes bwd \
        --hdims 128 --seqlens 4096 16384 --causal both --no-plot --acc-max-seqlen 0; }
b main 1; b candlib 1; pack; b candlib 2; b main 2; ab bwd main candlib; pack
f() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_fwd_fp8.py fp8-$1-$2 --impls hfa fa3 \
        --hdims 128 256 --seqlens 2048 4096 --causal both --no-plot; }
f main 1; f candlib 1; pack; f candlib 2; f main 2; ab fp8 main candlib; pack
m() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_mla.py mla-$1-$2 --batches 64 128 \
        --seqlens 1024 --heads 16 64 128 --seqlens-q 1 2 --kinds fixed --acc-seqs 1 \
        --warmup 10 --rep 40 "${@:3}"; }
m candlib 1; m mla2lib 1 --impls flashmla hfa; pack; m mla2lib 2; m candlib 2 --impls flashmla hfa
ab mla candlib mla2lib; pack
