#!/usr/bin/env python3
"""One markdown row per ncu report: the pipe utilizations and stall reasons that say what bounds
an attention kernel. Reads the raw pages that `ncu --import REP --page raw --csv > NAME-raw.csv`
writes (gzip-compressed or not), taking the longest kernel of each, as profiled with the
SpeedOfLight, ComputeWorkloadAnalysis, InstructionStats, WarpStateStats and SchedulerStats
sections (as session 13 did: git show a5067c1:bench/results/2026-12-02-calls/run13d.sh).

    python3 bench/ncu_pipes.py RAW.csv[.gz] ... > table.md
"""

import csv
import gzip
import os
import sys

# (column, metric): percentages of the peak over the elapsed cycles, averaged over the SMs
COLUMNS = [
    ("tensor %", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"),
    ("MUFU %", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed"),
    ("FMA %", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed"),
    ("ALU %", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed"),
    ("issue %", "sm__issue_active.avg.pct_of_peak_sustained_elapsed"),
]
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
TOP_STALLS = 4


def number(text):
    return float(text.replace(",", "")) if text else 0.0


# ncu picks each report's units; these put them on one scale
SCALE = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
         "hz": 1e-6, "khz": 1e-3, "mhz": 1.0, "ghz": 1e3}


def longest_kernel(path):
    """The longest kernel's metrics, durations in µs and clocks in MHz."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    header_at = next(i for i, row in enumerate(rows) if "Kernel Name" in row)
    header, units, kernels = rows[header_at], rows[header_at + 1], rows[header_at + 2:]
    scale = [SCALE.get(unit.lower(), 1.0) for unit in units]
    duration = header.index("gpu__time_duration.sum")
    kernel = max(kernels, key=lambda row: number(row[duration]) * scale[duration])
    return {name: (value, s) for name, value, s in zip(header, kernel, scale)}


def row_of(path):
    metrics = longest_kernel(path)
    m = {name: value for name, (value, _) in metrics.items()}

    def scaled(name):
        value, scale = metrics[name]
        return number(value) * scale

    label = os.path.basename(path).split("-raw.csv")[0]
    # Cycles a warp spent stalled per instruction issued, by reason ("selected" is the issue
    # itself, one cycle).
    stalls = sorted(((number(v), k[len(STALL_PREFIX):-len(STALL_SUFFIX)])
                     for k, v in m.items()
                     if k.startswith(STALL_PREFIX) and k.endswith(STALL_SUFFIX)
                     and "selected" not in k), reverse=True)
    cells = [label, m["Kernel Name"][:40], f"{scaled('gpu__time_duration.sum'):.1f}",
             f"{scaled('gpc__cycles_elapsed.avg.per_second'):.0f}"]
    cells += [f"{number(m[metric]):.1f}" for _, metric in COLUMNS]
    cells += [f"{number(m['smsp__inst_executed.sum']) / 1e6:.1f}",
              f"{number(m['smsp__average_warp_latency_per_inst_issued.ratio']):.2f}",
              " ".join(f"{name} {value:.2f}" for value, name in stalls[:TOP_STALLS])]
    return cells


def main(paths):
    if not paths:
        sys.exit(__doc__)
    head = (["report", "kernel", "µs", "GPC MHz"] + [c for c, _ in COLUMNS]
            + ["instructions (M)", "cycles a warp per issue", "top stalls (cycles per issue)"])
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for path in paths:
        print("| " + " | ".join(row_of(path)) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
