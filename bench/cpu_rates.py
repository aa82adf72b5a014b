#!/usr/bin/env python3
"""The CPU backend's forward and backward as a fraction of this machine's fp32 GEMM rate.

Runs `hfa bench --device cpu --backward --json` (built by the cpu preset) for each dtype over
--rounds rounds, each round timing the GEMM yardstick (the fastest of OpenBLAS and hfa's own
blocked GEMM on the forward's QKᵀ and PV products) beside the attention passes, and writes

    <out>/<date>-cpu-rates-<dtype>-<commit>.json   every round's bench JSON, the machine, the
                                                  load average before and after each round
    <out>/<date>-cpu-rates-<dtype>-<commit>.md     the table: % of GEMM per case, median over
                                                  the rounds, and each round's

Other processes slow the attention and the GEMM alike only when they run the whole time:
read the load averages and the idle share of the cores sampled before each round (--wait-idle
holds a round back until the cores are that idle), and rerun on a quiet machine for numbers to
quote. Ratios are only ever formed inside one round (the GEMM rate of the round's own shape).

    python3 bench/cpu_rates.py [--dtypes f32 bf16] [--hdims 64 128] [--rounds 3]
                               [--wait-idle 90] [--out DIR]
"""

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import REPO, git_commit, utc_now  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hfa", default=os.path.join(REPO, "build", "cpu", "hfa"), help="the hfa tool")
    p.add_argument("--dtypes", nargs="+", choices=["f32", "bf16", "f16"], default=["f32"])
    p.add_argument("--hdims", nargs="+", type=int, default=[64, 128])
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--iters", type=int, default=5, help="timed calls per pass (the median counts)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--wait-idle", type=float, default=0.0,
                   help="before each round, wait until the cores are at least this %% idle over "
                        "2 s (giving up after --wait-max seconds)")
    p.add_argument("--wait-max", type=float, default=600.0)
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    return p.parse_args(argv)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average():
    return [round(x, 2) for x in os.getloadavg()]


def idle_percent(seconds=2.0):
    """The share of all cores' time spent idle over the next `seconds` (/proc/stat)."""
    def times():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, all
    idle0, total0 = times()
    time.sleep(seconds)
    idle1, total1 = times()
    return round(100.0 * (idle1 - idle0) / max(total1 - total0, 1), 1)


def wait_for_idle(args):
    """Samples until the cores are --wait-idle % idle or --wait-max seconds passed; the last sample."""
    start = time.monotonic()
    while True:
        idle = idle_percent()
        if idle >= args.wait_idle or time.monotonic() - start > args.wait_max:
            return idle


def run_round(args, dtype):
    idle = wait_for_idle(args)
    command = [args.hfa, "bench", "--device", "cpu", "--backward", "--json", "--dtype", dtype,
               "--hdim", ",".join(map(str, args.hdims)), "--seqlen", str(args.seqlen),
               "--heads", str(args.heads), "--batch", "1", "--iters", str(args.iters)]
    before = load_average()
    bench = json.loads(subprocess.run(command, check=True, capture_output=True, text=True,
                                      env=dict(os.environ, HFA_COMMIT=git_commit())).stdout)
    return {"idle_before": idle, "load_before": before, "load_after": load_average(),
            "bench": bench}, command


def case_key(row):
    c = row["case"]
    return (c["hdim"], c["causal"], c["pass"])


def summarize(rounds):
    """Per case: each round's % of its GEMM rate, and their median."""
    cases = {}
    for r in rounds:
        for row in r["bench"]["rows"]:
            cases.setdefault(case_key(row), []).append(
                {"tflops": row["hfa"], "gemm_tflops": row["gemm_fp32"],
                 "of_gemm": 100.0 * row["hfa"] / row["gemm_fp32"]})
    return [{"hdim": k[0], "causal": k[1], "pass": k[2],
             "of_gemm_median": round(statistics.median(x["of_gemm"] for x in v), 1),
             "of_gemm_rounds": [round(x["of_gemm"], 1) for x in v],
             "tflops_rounds": [x["tflops"] for x in v],
             "gemm_tflops_rounds": [x["gemm_tflops"] for x in v]}
            for k, v in sorted(cases.items())]


def markdown(result):
    lines = [f"# CPU forward and backward against the fp32 GEMM rate ({result['dtype']})", "",
             f"commit `{result['commit']}`, {result['date']}, {result['machine']['cpu']}, "
             f"{result['machine']['device']}", "",
             f"Command: `{result['command']}`", "",
             f"GEMM: {result['gemm']}", "",
             "Each round: % of the cores idle over 2 s just before it; load average (1, 5, 15 min) "
             "before / after it: " +
             "; ".join(f"{r['idle_before']} %, {r['load_before']} / {r['load_after']}"
                       for r in result["rounds"]), "",
             "| hdim | causal | pass | % of GEMM (median) | each round | GEMM GFLOP/s each round |",
             "|---:|:---:|:---:|---:|---|---|"]
    for s in result["summary"]:
        lines.append(f"| {s['hdim']} | {'yes' if s['causal'] else 'no'} | {s['pass']} | "
                     f"{s['of_gemm_median']:.1f} | {', '.join(f'{x:.1f}' for x in s['of_gemm_rounds'])} | "
                     f"{', '.join(f'{1e3 * x:.0f}' for x in s['gemm_tflops_rounds'])} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    commit = git_commit()
    now = utc_now()
    for dtype in args.dtypes:
        rounds = []
        for i in range(args.rounds):
            r, command = run_round(args, dtype)
            rounds.append(r)
            print(f"{dtype} round {i + 1}/{args.rounds}: {r['idle_before']} % idle before, load "
                  f"{r['load_before']} -> {r['load_after']}", file=sys.stderr)
        first = rounds[0]["bench"]
        result = {
            "what": "cpu fwd,bwd against the fp32 GEMM rate",
            "commit": commit,
            "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "device": first["device"],
                        "kernel": platform.release()},
            "dtype": dtype,
            "command": "python3 bench/cpu_rates.py " + " ".join(map(shlex.quote, argv or sys.argv[1:])),
            "bench_command": " ".join(map(shlex.quote, [os.path.relpath(command[0], REPO)] + command[1:])),
            "gemm": first["versions"].get("gemm", ""),
            "summary": summarize(rounds),
            "rounds": rounds,
        }
        tag = commit[:7] + ("-dirty" if commit.endswith("-dirty") else "")
        stem = os.path.join(args.out, f"{now:%Y-%m-%d}-cpu-rates-{dtype}-{tag}")
        with open(stem + ".json", "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        with open(stem + ".md", "w") as f:
            f.write(markdown(result))
        print(markdown(result))
        print(f"wrote {stem}.json and .md", file=sys.stderr)


if __name__ == "__main__":
    main()
