#!/bin/bash
# Prepared in session 38 (issue 32): ncu of the backward beside FA3 on the GQA table's worst
# rows (dcb218d's table, H100: hdim 128 non-causal 8k, batch 1, 32 heads on 8: 0.91 of FA3;
# hdim 64 causal 8k, batch 2, 32 heads on 4: 0.87), where the dense grid's cells at the same
# length are at 0.96-1.01. hfa's CTA walks every query head of its group (one CTA a key block
# and KV head), FA3's one query head (dK/dV reduced across the group): the dQ adds' contention,
# L2 locality and the wave count are what to read (ncu_pipes.py, ncu_lines.py here afterwards).
# LIB: the library folder (default .device/headlib, ffd4499's). Carry it and .device/fa3.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
LIB=${LIB:-.device/headlib}
unpack $LIB
results r66
export HFA_FA3_DIR=$PWD/.device/fa3 PYTHONPATH=python:$PWD/.device/fa3
n() {  # n TAG IMPL HDIM [causal] --seqlen S --batch B --heads H --heads-kv HKV
  local tag=$1; shift
  HFA_LIBRARY=$PWD/$LIB/libhfa.so timeout 100 ncu --profile-from-start off --set full \
    -o $R/ncu-$tag python3 bench/profile_bwd.py "$@" > $R/ncu-$tag.log 2>&1
  echo "ncu $tag rc=$?"
  ncu --import $R/ncu-$tag.ncu-rep --page raw --csv | gzip > $R/$tag-raw.csv.gz
  ncu --import $R/ncu-$tag.ncu-rep --page source --csv --print-source sass | gzip > $R/$tag-sass.csv.gz
  rm -f $R/ncu-$tag.ncu-rep
}
for impl in hfa fa3; do n $impl-d128 $impl 128 --seqlen 8192 --batch 1 --heads 32 --heads-kv 8; done; pack
for impl in hfa fa3; do n $impl-d64c $impl 64 causal --seqlen 8192 --batch 2 --heads 32 --heads-kv 4; done
for c in d128 d64c; do python3 bench/ncu_pipes.py $R/hfa-$c-raw.csv.gz $R/fa3-$c-raw.csv.gz > $R/pipes-$c.md 2>&1; done
pack
