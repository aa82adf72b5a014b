#!/bin/bash
# Session 13, call 4: ncu (speed of light, compute pipes, instruction and warp-state statistics)
# of hfa (new/, 68ffbb5) and cuDNN on one long grid cell of each head dim and mask that misses
# 1.15x, and on the 32 x 256-token hdim 128 causal shape, for the pipe utilizations and stall
# reasons that explain each miss (issue 13).
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device/new
R=/tmp/r13d; mkdir -p $R
xz -d -T8 -f $B/libhfa.so.0.1.0.xz
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1 HFA_LIBRARY=$B/libhfa.so
for shape in "4 4096 32 32 64" "4 4096 32 32 64 causal" "2 8192 16 16 128 causal" \
             "2 8192 8 8 256" "4 4096 8 8 256 causal" "32 256 32 8 128 causal"; do
  for impl in hfa cudnn; do
    tag=ncu-$impl-$(echo $shape | tr ' ' '-')
    timeout 50 ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats \
      --section SchedulerStats -f --export $R/$tag python3 bench/profile_fwd_shape.py $impl $shape > $R/$tag.log 2>&1
    echo "$tag rc=$?"
    ncu --import $R/$tag.ncu-rep --page raw --csv > $R/$tag-raw.csv 2>&1
  done
done
rm -f $R/*.ncu-rep; gzip $R/*-raw.csv
sed -i -e "s#$PWD/#./#g" $R/*.log 2>/dev/null
tar -C /tmp -czf $OUT/r13d.tar.gz r13d
