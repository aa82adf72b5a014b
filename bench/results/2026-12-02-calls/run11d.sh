#!/bin/bash
# Session 11, call 4: where the forward's time goes on the shortest batched shape (64 × 128
# tokens, 16/4 heads, d128, causal: hfa 0.71× cuDNN by graph replay), ncu's full set with
# PC sampling, hfa (final/) and cuDNN: stall reasons by metric and, for hfa, by SASS line.
# The same for 32 × 512 (16 heads, d128, causal; 0.88×).
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device/final
R=/tmp/r11d; mkdir -p $R
xz -d -T8 -f $B/libhfa.so.0.1.0.xz
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
export PYTHONPATH=python HFA_LIBRARY=$B/libhfa.so
for shape in "64 128 16 4 128" "32 512 16 16 128"; do
  tag=$(echo $shape | awk '{print "b"$1"-s"$2}')
  for impl in hfa cudnn; do
    timeout 150 ncu --clock-control none --profile-from-start off --set full --import-source no \
      -f --export $R/$impl-$tag python3 bench/profile_fwd_shape.py $impl $shape causal > $R/$impl-$tag.log 2>&1
    echo "$impl $tag rc=$?"
    ncu --import $R/$impl-$tag.ncu-rep --page raw --csv > $R/$impl-$tag-raw.csv 2>&1
    ncu --import $R/$impl-$tag.ncu-rep --page details > $R/$impl-$tag-details.txt 2>&1
    [ $impl = hfa ] && ncu --import $R/$impl-$tag.ncu-rep --page source --csv --print-source sass > $R/$impl-$tag-sass.csv 2>&1
    grep -E "Duration|Warp Cycles Per Issued|Eligible Warps|Issued Warp" $R/$impl-$tag-details.txt | head -8
  done
done
rm -f $R/*.ncu-rep
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.log 2>/dev/null
tar -C /tmp -czf $OUT/r11d.tar.gz r11d
