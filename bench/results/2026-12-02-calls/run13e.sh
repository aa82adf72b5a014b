#!/bin/bash
# Session 13, call 5 (issue 12): the FP8 accuracy table (FlashAttention-3's setup) on the
# kernels of 68ffbb5 at hdim 128 and 256 (the last table, 53157ab, predates P's row sums on the
# tensor cores), and `hfa run` of the FP8 and bf16 forwards at 4k and 16k tokens, non-causal.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device/new
R=/tmp/r13e; mkdir -p $R
for f in $B/libhfa.so.0.1.0.xz $B/hfa.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/hfa
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1 HFA_LIBRARY=$B/libhfa.so
for d in 128 256; do
  mkdir -p $R/acc-d$d
  timeout 120 python3 bench/fp8_accuracy.py --out $R/acc-d$d --hdim $d > $R/acc-d$d.txt 2>&1
  echo "accuracy d$d rc=$? $(tail -1 $R/acc-d$d.txt | cut -c1-80)"
done
for d in 128 256; do
  for s in 4096 16384; do
    for t in e4m3 bf16; do
      echo -n "d$d s$s $t: " >> $R/hfa-run.txt
      timeout 60 $B/hfa run --device cuda --dtype $t --hdim $d --seqlen $s \
        --batch $((16384 / s)) --heads $((2048 / d)) >> $R/hfa-run.txt 2>&1
    done
  done
done
cat $R/hfa-run.txt | cut -c1-90
sed -i -e "s#$PWD/#./#g" $R/*.txt 2>/dev/null
tar -C /tmp -czf $OUT/r13e.tar.gz r13e
