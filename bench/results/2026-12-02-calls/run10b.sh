#!/bin/bash
# Session 10, call 2: descriptors advanced instead of rebuilt for every wgmma (SASS counts), A/B
# against call 1's library ("old"), each with and without the rescale skip knob; FP8 and bf16
# forward grids and the backward grid, alternated.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r10b; mkdir -p $R
xz -d -T8 -f $B/libhfa.so.0.1.0.xz & xz -d -T8 -f $B/old/libhfa.so.0.1.0.xz & wait
for d in $B $B/old; do ln -sf libhfa.so.0.1.0 $d/libhfa.so.0.1; ln -sf libhfa.so.0.1 $d/libhfa.so; done
cuobjdump -sass $B/libhfa.so > /tmp/all.sass
awk '/Function :/ {keep = ($3 ~ /forward_kernel/ && $3 ~ /TileConfigILi(128ELi128|64ELi64)ELb0ELb0E/)} keep' /tmp/all.sass | gzip > $R/fwd-d128-d64-sass.txt.gz
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
run() {  # arm bench tag args...
  local arm=$1 bench=$2 tag=$3; shift 3
  case $arm in old) export HFA_LIBRARY=$B/old/libhfa.so; unset HFA_AB_SKIP_RESCALE;;
               new) export HFA_LIBRARY=$B/libhfa.so; unset HFA_AB_SKIP_RESCALE;;
               skip) export HFA_LIBRARY=$B/libhfa.so; export HFA_AB_SKIP_RESCALE=1;; esac
  timeout 90 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-60)"
}
F8="--hdims 128 256 --causal both --impls hfa --seqlens 2048 4096 8192 16384 --no-plot"
BF="--hdims 64 128 256 --causal both --impls hfa --seqlens 512 1024 2048 4096 8192 16384 --no-plot"
BW="--hdims 64 128 256 --causal both --impls hfa --modes bwd --seqlens 1024 4096 16384 --no-plot"
for round in 1 2; do
  for arm in old new skip; do run $arm bench_fwd_fp8.py fp8-$arm$round $F8; done
  for arm in old new skip; do run $arm bench_fwd.py bf16-$arm$round $BF; done
done
for round in 1 2; do for arm in old new; do run $arm bench_bwd.py bwd-$arm$round $BW; done; done
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
