#!/usr/bin/env python3
"""Where one kernel's warps stall, by SASS line: reads the source page that
`ncu --import REP --page source --csv --print-source sass > NAME-sass.csv` writes (gzip-compressed
or not) from a report profiled with `--section SourceCounters`, and prints the kernel's hottest
lines (share of all stall samples, times executed, the top reasons) and the samples of each
stretch of code between two EXITs, which separates the roles of a warp-specialized kernel (the
producer's, each consumer warpgroup's mainloop and epilogue). Session 22 found the backward's
epilogue this way (docs/decisions/040). --runs lists the stretches of consecutive
instructions executed equally often (a loop body's straight code: its length is the role's
instructions a step, as session 39 compared the backward's consumers with FA3's).

    python3 bench/ncu_lines.py NAME-sass.csv[.gz] KERNEL_SUBSTRING [--top N] [--dump FILE]
        [--runs MIN_MILLION_EXECUTED]
"""

import argparse
import csv
import gzip

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def kernel_lines(path, name_part):
    """The header and the rows of the first kernel whose name contains name_part."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    starts = [i for i, row in enumerate(rows) if row and row[0] == "Kernel Name"]
    for n, start in enumerate(starts):
        if name_part in rows[start][1]:
            end = starts[n + 1] if n + 1 < len(starts) else len(rows)
            header = rows[start + 1]
            body = [row for row in rows[start + 2:end] if len(row) == len(header)]
            return rows[start][1], header, body
    raise SystemExit(f"no kernel containing {name_part!r} in {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path")
    p.add_argument("kernel")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--dump", help="every line with its share and reasons, to this file")
    p.add_argument("--runs", type=float, metavar="M",
                   help="also the runs of equally executed lines: those of at least M million "
                        "executions in all")
    a = p.parse_args()
    name, header, body = kernel_lines(a.path, a.kernel)
    at = {column: i for i, column in enumerate(header)}
    reasons = [c for c in header if c.startswith("stall_") and "(Not Issued)" not in c]
    samples = [int(row[at[SAMPLES]] or 0) for row in body]
    total = sum(samples) or 1

    def line(row, count):
        top = sorted(((int(row[at[r]] or 0), r[6:]) for r in reasons), reverse=True)[:2]
        why = " ".join(f"{r}:{v}" for v, r in top if v)
        return (f"{row[0][-5:]} {1000 * count / total:6.1f}‰ {row[at[EXECUTED]]:>10} "
                f"{row[1].strip()[:64]:64s} {why}")

    print(f"{name[:160]}\n{total} samples, {len(body)} instructions")
    by_reason = sorted(((sum(int(row[at[r]] or 0) for row in body), r[6:]) for r in reasons),
                       reverse=True)
    print("reasons: " + " ".join(f"{r} {100 * v / total:.1f}%" for v, r in by_reason[:8]))
    print(f"\nhottest {a.top} lines (address, share, executed, instruction, reasons):")
    for count, row in sorted(zip(samples, body), key=lambda x: -x[0])[:a.top]:
        print(line(row, count))
    print("\nstretches between EXITs (first, last address, share):")
    first = 0
    for i, row in enumerate(body + [None]):
        if row is None or "EXIT" in row[1]:
            end = min(i + 1, len(body))
            if end > first:
                share = sum(samples[first:end]) / total
                print(f"{body[first][0][-5:]} - {body[end - 1][0][-5:]} {1000 * share:6.1f}‰")
            first = i + 1
    if a.runs is not None:
        print("\nruns of equally executed lines (first, last address, lines, executed each, "
              "share):")
        runs = []  # [first row, last row, executed, lines, samples]
        for count, row in zip(samples, body):
            executed = int(row[at[EXECUTED]] or 0)
            if runs and runs[-1][2] == executed:
                runs[-1][1] = row
                runs[-1][3] += 1
                runs[-1][4] += count
            else:
                runs.append([row, row, executed, 1, count])
        for first_row, last_row, executed, lines, count in runs:
            if executed * lines >= a.runs * 1e6:
                print(f"{first_row[0][-5:]} - {last_row[0][-5:]} {lines:5d} × {executed:>9} "
                      f"{1000 * count / total:6.1f}‰")
    if a.dump:
        with open(a.dump, "w") as f:
            for count, row in zip(samples, body):
                f.write(line(row, count) + "\n")


if __name__ == "__main__":
    main()
