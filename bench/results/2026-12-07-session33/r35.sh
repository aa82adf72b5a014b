#!/bin/bash
# Call r35 (issue 34, decision 048), for the next session: the MLA decode's fixed-cost levers,
# each arm a library built on the one before, FlashMLA beside:
#   base  session 32's cand (its MLA kernels are main's)
#   mla1  + mla-q-load.patch: Q as one batch of cp.async copies, O's rescale skipped where every
#         factor of the warp is exactly 1
#   mla2  + mla-dependent-launches.patch: the attention and the combine as dependent launches,
#         the attention letting the combine launch at its start (r36: +3.5-12 % on ten of the 1k
#         rows, -18.5 % and -10 % at batch 64 with 16 heads)
#   mla3  + mla-late-trigger.patch: the combine let launch once the attention's work is done
#         (library and test_sm90_mla_decode)
# 1. bench_mla at 1k (batch 64/128, 16/64/128 heads, s_q 1/2, both kinds): base mla1 mla2 mla3,
#    then mla3 mla2 mla1 base
# 2. test_sm90_mla_decode of mla3
# 3. 4k, the same rows: base mla3 mla3 base
# 4. profile_mla.py (each kernel's time and the gaps between them) of base and mla3 on three
#    rows: the worst (b64 1k h128 s_q2), b64 1k h16 s_q1 (r36's loss), b64 1k h64 s_q1
# 5. the 16k rows at 128 heads, base and mla3
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/base .device/mla1 .device/mla2 .device/mla3
results r35
export HFA_FLASHMLA_DIR=$PWD/.device/flashmla BENCH_TIMEOUT=120
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
ROWS="--batches 64 128 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 --warmup 10 --rep 40"
m() { HFA_COMMIT=$1 bench_with $1 bench_mla.py mla-$1-$2 $ROWS "${@:3}"; }
j() { ls "$R"/*-"$1".json | head -1; }
m base 1 --seqlens 1024; m mla1 1 --seqlens 1024 --impls flashmla hfa
m mla2 1 --seqlens 1024; m mla3 1 --seqlens 1024 --impls flashmla hfa
pack
m mla3 2 --seqlens 1024; m mla2 2 --seqlens 1024 --impls flashmla hfa
m mla1 2 --seqlens 1024; m base 2 --seqlens 1024 --impls flashmla hfa
python3 bench/compare_runs.py --arms base="$(j mla-base-1)","$(j mla-base-2)" \
  mla1="$(j mla-mla1-1)","$(j mla-mla1-2)" mla2="$(j mla-mla2-1)","$(j mla-mla2-2)" \
  mla3="$(j mla-mla3-1)","$(j mla-mla3-2)" 2>&1 | tee "$R/ab-mla-1k.md" | tail -5
pack
SUITES="test_sm90_mla_decode" SUITES_TIMEOUT=150 PYTEST_TIMEOUT=0 \
  bash bench/device_suites.sh .device/mla3 r35-suites
m base 4k1 --seqlens 4096; m mla3 4k1 --seqlens 4096 --impls flashmla hfa
m mla3 4k2 --seqlens 4096; m base 4k2 --seqlens 4096 --impls flashmla hfa
python3 bench/compare_runs.py --arms base="$(j mla-base-4k1)","$(j mla-base-4k2)" \
  mla3="$(j mla-mla3-4k1)","$(j mla-mla3-4k2)" 2>&1 | tee "$R/ab-mla-4k.md" | tail -3
pack
for lib in base mla3; do
  for c in "64 1024 128 2" "64 1024 16 1" "64 1024 64 1"; do
    set -- $c
    HFA_LIBRARY=$PWD/.device/$lib/libhfa.so timeout 60 python3 bench/profile_mla.py --batch $1 \
      --seqlen $2 --heads $3 --seqlen-q $4 --json "$R/profile-$lib-$1-$2-$3-$4.json" \
      > "$R/profile-$lib-$1-$2-$3-$4.txt" 2>&1; echo "profile $lib $c rc=$?"
  done
done
pack
L="--batches 64 --seqlens 16384 --heads 128 --seqlens-q 1 2 --kinds fixed --acc-seqs 1 --warmup 10 --rep 40"
HFA_COMMIT=base bench_with base bench_mla.py mla-base-16k $L
HFA_COMMIT=mla3 bench_with mla3 bench_mla.py mla-mla3-16k $L --impls flashmla hfa
pack
