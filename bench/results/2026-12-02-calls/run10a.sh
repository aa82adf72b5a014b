#!/bin/bash
# Session 10, call 1: SASS of the hdim-128 forward kernels (FP8 and bf16), and the A/B of
# skipping O's rescale where no row of a warp changed its max (HFA_AB_SKIP_RESCALE, a knob of
# the experiment library only), FP8 grid then bf16 grid, alternated.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r10a; mkdir -p $R
xz -d -T8 -f $B/libhfa.so.0.1.0.xz
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/info.txt
# 1. SASS of the forward kernels at hdim 128, no window, no softcap (bf16 and e4m3 inputs)
cuobjdump -sass $B/libhfa.so > /tmp/all.sass
awk '/Function :/ {keep = ($3 ~ /forward_kernel/ && $3 ~ /TileConfigILi128ELi128ELb0ELb0E/)} keep' /tmp/all.sass | gzip > $R/fwd-d128-sass.txt.gz
ls -la $R
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1 HFA_LIBRARY=$B/libhfa.so
F8="--hdims 128 256 --causal both --impls hfa --seqlens 2048 4096 8192 16384 --no-plot"
for arm in base skip base2 skip2; do
  case $arm in skip*) export HFA_AB_SKIP_RESCALE=1;; *) unset HFA_AB_SKIP_RESCALE;; esac
  timeout 80 python3 bench/bench_fwd_fp8.py --out $R --tag fp8-$arm $F8 > $R/fp8-$arm.txt 2>&1; echo "fp8 $arm rc=$?"
done
BF="--hdims 64 128 256 --causal both --impls hfa --seqlens 512 1024 4096 16384 --no-plot"
for arm in base skip; do
  case $arm in skip*) export HFA_AB_SKIP_RESCALE=1;; *) unset HFA_AB_SKIP_RESCALE;; esac
  timeout 90 python3 bench/bench_fwd.py --out $R --tag bf16-$arm $BF > $R/bf16-$arm.txt 2>&1; echo "bf16 $arm rc=$?"
done
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
