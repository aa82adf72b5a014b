#!/bin/bash
# Prepared in session 33, run in session 34 as r42a (steps 1-3; the backward tables later):
#   comb  a283880's library and suites (main's decode kernels since)
#   pstm  comb + mla-p-stmatrix.patch: the MLA consumers write P with stmatrix (2 STSM a warp a
#         tile, were 8 STS; SwizzledTile::store_packed_fragment, which the backward's
#         store_scores now calls: its SASS unchanged, checked on 4 TUs): library and suites
#   main  dcb218d's library (the backward and forward kernels are main's)
# 1. pstm's GPU suites (test_sm90_mla_decode, test_sm90_decode)
# 2. bench_mla 1k and 4k, batch 64/128, 16/64/128 heads, s_q 1/2, both kinds, FlashMLA beside:
#    comb pstm pstm comb
# 3. ncu of the MLA attention at b64 1k 128 heads s_q 2, comb and FlashMLA: raw and source
#    pages (ncu_lines.py: where the 2.4x instructions of r40 go)
# 4. the backward grid and the GQA table of main beside FA3 and cuDNN (issue 32's tables)
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/comb .device/pstm .device/fa3x .device/flashmlax
results r42
export HFA_FA3_DIR=$PWD/.device/fa3x HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
SUITES="test_sm90_mla_decode test_sm90_decode" SUITES_TIMEOUT=100 PYTEST_TIMEOUT=0 \
  bash bench/device_suites.sh .device/pstm r42-suites
j() { ls "$R"/*-"$1".json | head -1; }
m() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_mla.py mla-$1-$2 --batches 64 128 \
        --seqlens 1024 4096 --heads 16 64 128 --seqlens-q 1 2 --acc-seqs 1 --warmup 10 --rep 40 "${@:3}"; }
m comb 1; m pstm 1 --impls flashmla hfa; pack; m pstm 2; m comb 2 --impls flashmla hfa
python3 bench/compare_runs.py --arms comb="$(j mla-comb-1)","$(j mla-comb-2)" pstm="$(j mla-pstm-1)","$(j mla-pstm-2)" \
  2>&1 | tee "$R/ab-mla.md" | tail -3
pack
for k in "hfa mla_decode_kernel" "flashmla flash_fwd_splitkv_mla"; do
  set -- $k
  HFA_LIBRARY=$PWD/.device/comb/libhfa.so timeout 120 ncu --set full --import-source yes -k regex:$2 -s 3 -c 1 \
    -o $R/ncu-$1 python3 bench/profile_mla.py --batch 64 --seqlen 1024 --heads 128 --seqlen-q 2 > $R/ncu-$1.log 2>&1
  echo "ncu $1 rc=$?"
  ncu --import $R/ncu-$1.ncu-rep --page raw --csv | gzip > $R/$1-raw.csv.gz
  ncu --import $R/ncu-$1.ncu-rep --page source --csv --print-source sass | gzip > $R/$1-sass.csv.gz
  rm -f $R/ncu-$1.ncu-rep
done
python3 bench/ncu_pipes.py $R/hfa-raw.csv.gz $R/flashmla-raw.csv.gz > $R/pipes.md 2>&1
pack
