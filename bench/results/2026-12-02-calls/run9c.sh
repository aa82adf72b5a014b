#!/bin/bash
# Session 9, call 3: pairs_per_section (one wave of tiles at least, sections evened out) against
# the old rule (HFA_EXPERIMENT_OLD_SECTIONS, same library): GPU tests, backward and forward
# causal grids, the model's GQA shape, the model.
set -u
cd "$(dirname "$0")/.."
B=$PWD/.device
R=/tmp/r9c; mkdir -p $R
for f in $B/*.xz $B/exp/*.xz; do [ -f "$f" ] && xz -d -T8 -f $f & done; wait
ln -sf libhfa.so.0.1.0 $B/exp/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/exp/libhfa.so
chmod +x $B/exp/test_* 2>/dev/null
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1 HFA_TORCH_OPS=native
export HFA_LIBRARY=$B/exp/libhfa.so HFA_TORCH_LIBRARY=$B/libhfa_torch.so
( OUT=$R/tests HFA_BIN=$B/exp timeout 300 bench/device_run.sh "tests:test_sm90_backward test_sm90_forward test_sm90_forward_features test_sm90_sm_margin" ) > $R/tests.txt 2>&1
tail -12 $R/tests.txt
old() { HFA_EXPERIMENT_OLD_SECTIONS=1 "$@"; }
M="1 8192 128 --causal --heads 32 --kv-heads 8"
timeout 60 python3 bench/profile_fwdbwd.py cudnn $M --modes fwd bwd --json $R/gqa-cudnn.json > $R/gqa.txt 2>&1
timeout 60 python3 bench/profile_fwdbwd.py hfa $M --modes fwd bwd --json $R/gqa-hfa-new.json >> $R/gqa.txt 2>&1
old timeout 60 python3 bench/profile_fwdbwd.py hfa $M --modes fwd bwd --json $R/gqa-hfa-old.json >> $R/gqa.txt 2>&1
grep step $R/gqa.txt
G="--hdims 64 128 256 --causal true --modes bwd --no-plot"
timeout 120 python3 bench/bench_bwd.py --out $R --tag bwd-new $G --impls hfa cudnn > $R/bwd-new.txt 2>&1; echo "bwd new rc=$?"
old timeout 100 python3 bench/bench_bwd.py --out $R --tag bwd-old $G --impls hfa > $R/bwd-old.txt 2>&1; echo "bwd old rc=$?"
timeout 100 python3 bench/bench_bwd.py --out $R --tag bwd-new2 $G --impls hfa > $R/bwd-new2.txt 2>&1; echo "bwd new2 rc=$?"
old timeout 100 python3 bench/bench_bwd.py --out $R --tag bwd-old2 $G --impls hfa > $R/bwd-old2.txt 2>&1; echo "bwd old2 rc=$?"
F="--hdims 64 128 256 --causal true --no-plot"
timeout 100 python3 bench/bench_fwd.py --out $R --tag fwd-new $F --impls hfa cudnn > $R/fwd-new.txt 2>&1; echo "fwd new rc=$?"
old timeout 80 python3 bench/bench_fwd.py --out $R --tag fwd-old $F --impls hfa > $R/fwd-old.txt 2>&1; echo "fwd old rc=$?"
timeout 80 python3 bench/bench_fwd.py --out $R --tag fwd-new2 $F --impls hfa > $R/fwd-new2.txt 2>&1; echo "fwd new2 rc=$?"
old timeout 80 python3 bench/bench_fwd.py --out $R --tag fwd-old2 $F --impls hfa > $R/fwd-old2.txt 2>&1; echo "fwd old2 rc=$?"
timeout 200 python3 bench/bench_model.py --out $R --reps 10 > $R/model.txt 2>&1; echo "model rc=$?"
grep "bench:" $R/model.txt
# the same without the packed-sequence check (one host read a forward: position_ids' min, nonzero)
mkdir -p $R/nocheck
timeout 150 python3 -c "
import runpy, sys
import hfa.integrations.transformers as t
t._packed_offsets = lambda position_ids: None
sys.argv = ['bench_model.py', '--out', '$R/nocheck', '--reps', '10']
runpy.run_path('bench/bench_model.py', run_name='__main__')" > $R/model-nocheck.txt 2>&1; echo "model nocheck rc=$?"
grep "bench:" $R/model-nocheck.txt
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md $R/tests/* 2>/dev/null
