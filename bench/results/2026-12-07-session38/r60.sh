#!/bin/bash
# Prepared in session 37 (issue 33): the forward beside FA3 under ncu, the first reading since
# decision 043's step schedule: bf16 hdim 128 causal 8k (2 × 16 heads; hfa ÷ FA3 0.96-0.97 in
# r56) and without a mask at 4k (4 × 16), then FP8 hdim 128 causal 2k (8 × 16; 0.84 of FA3 after
# the in-kernel V transpose). ncu_compare.py and ncu_pipes.py read them here afterwards.
# Carry .device/head .device/fa3.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/head
results r60
export HFA_FA3_DIR=$PWD/.device/fa3 PYTHONPATH=python:$PWD/.device/fa3
n() {  # n TAG IMPL BATCH SEQLEN HEADS KV_HEADS HDIM [causal]
  local tag=$1; shift
  HFA_LIBRARY=$PWD/.device/head/libhfa.so timeout 90 ncu --profile-from-start off --set full \
    -o $R/ncu-$tag python3 bench/profile_fwd_shape.py "$@" > $R/ncu-$tag.log 2>&1
  echo "ncu $tag rc=$?"
  ncu --import $R/ncu-$tag.ncu-rep --page raw --csv | gzip > $R/$tag-raw.csv.gz
  ncu --import $R/ncu-$tag.ncu-rep --page source --csv --print-source sass | gzip > $R/$tag-sass.csv.gz
  rm -f $R/ncu-$tag.ncu-rep
}
for impl in hfa fa3; do n $impl-c8k $impl 2 8192 16 16 128 causal; done; pack
for impl in hfa fa3; do n $impl-nc4k $impl 4 4096 16 16 128; done; pack
for impl in hfa_fp8 fa3_fp8; do n $impl-c2k $impl 8 2048 16 16 128 causal; done
for c in c8k nc4k; do python3 bench/ncu_pipes.py $R/hfa-$c-raw.csv.gz $R/fa3-$c-raw.csv.gz > $R/pipes-$c.md 2>&1; done
python3 bench/ncu_pipes.py $R/hfa_fp8-c2k-raw.csv.gz $R/fa3_fp8-c2k-raw.csv.gz > $R/pipes-fp8-c2k.md 2>&1
pack
