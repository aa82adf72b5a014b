#!/bin/bash
# Session 9, call 2: tile order by section size (the experiment library's env knobs), backward
# and forward causal cells and the model's GQA backward; clocks during fwd / bwd / fwdbwd.
set -u
cd "$(dirname "$0")/.."
B=$PWD/.device
R=/tmp/r9b; mkdir -p $R
for f in $B/*.xz $B/exp/*.xz; do [ -f "$f" ] && xz -d -T8 -f $f & done; wait
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
ln -sf libhfa.so.0.1.0 $B/exp/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/exp/libhfa.so
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1 HFA_TORCH_OPS=native
export HFA_LIBRARY=$B/exp/libhfa.so HFA_TORCH_LIBRARY=$B/libhfa_torch.so
# 1. the model's backward shape (GQA 32/8, 8k, d128, causal): sections as shipped, global, 2
M="1 8192 128 --causal --heads 32 --kv-heads 8 --modes bwd"
timeout 60 python3 bench/profile_fwdbwd.py cudnn $M --json $R/gqa-cudnn.json > $R/gqa.txt 2>&1
for sec in ship 0 2 4; do
  if [ $sec = ship ]; then unset HFA_EXPERIMENT_BWD_SECTION; else export HFA_EXPERIMENT_BWD_SECTION=$sec; fi
  timeout 60 python3 bench/profile_fwdbwd.py hfa $M --json $R/gqa-hfa-$sec.json >> $R/gqa.txt 2>&1
done
unset HFA_EXPERIMENT_BWD_SECTION
grep "step" $R/gqa.txt
# 2. the backward's causal grid: shipped (with cuDNN), global, shipped again
G="--hdims 64 128 256 --causal true --modes bwd --no-plot"
timeout 120 python3 bench/bench_bwd.py --out $R --tag bwd-ship $G --impls hfa cudnn > $R/bwd-ship.txt 2>&1; echo "bwd ship rc=$?"
HFA_EXPERIMENT_BWD_SECTION=0 timeout 100 python3 bench/bench_bwd.py --out $R --tag bwd-global $G --impls hfa > $R/bwd-global.txt 2>&1; echo "bwd global rc=$?"
timeout 100 python3 bench/bench_bwd.py --out $R --tag bwd-ship2 $G --impls hfa > $R/bwd-ship2.txt 2>&1; echo "bwd ship2 rc=$?"
HFA_EXPERIMENT_BWD_SECTION=0 timeout 100 python3 bench/bench_bwd.py --out $R --tag bwd-global2 $G --impls hfa > $R/bwd-global2.txt 2>&1; echo "bwd global2 rc=$?"
# 3. the forward's causal grid: shipped (with cuDNN), global, shipped, global
F="--hdims 64 128 256 --causal true --no-plot"
timeout 100 python3 bench/bench_fwd.py --out $R --tag fwd-ship $F --impls hfa cudnn > $R/fwd-ship.txt 2>&1; echo "fwd ship rc=$?"
HFA_EXPERIMENT_FWD_SECTION=0 timeout 80 python3 bench/bench_fwd.py --out $R --tag fwd-global $F --impls hfa > $R/fwd-global.txt 2>&1; echo "fwd global rc=$?"
timeout 80 python3 bench/bench_fwd.py --out $R --tag fwd-ship2 $F --impls hfa > $R/fwd-ship2.txt 2>&1; echo "fwd ship2 rc=$?"
HFA_EXPERIMENT_FWD_SECTION=0 timeout 80 python3 bench/bench_fwd.py --out $R --tag fwd-global2 $F --impls hfa > $R/fwd-global2.txt 2>&1; echo "fwd global2 rc=$?"
# 4. issue 10: SM clocks and power while fwd, bwd and fwdbwd steps run (16k, d64)
export HFA_LIBRARY=$B/libhfa.so; unset HFA_TORCH_LIBRARY
for mode in fwd bwd fwdbwd; do
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 20 > $R/smi-$mode.csv &
  smi=$!
  timeout 60 python3 bench/profile_fwdbwd.py hfa 1 16384 64 --modes $mode >> $R/clocks.txt 2>&1
  kill $smi
done
grep step $R/clocks.txt
for mode in fwd bwd fwdbwd; do
  awk -F', ' '{c=$2+0; if (c > 1000) {n++; s+=c; p+=$3+0}} END {printf "%s: %d samples above 1 GHz, mean %.0f MHz, %.0f W\n", FILENAME, n, s/n, p/n}' $R/smi-$mode.csv
done
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
