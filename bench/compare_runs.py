#!/usr/bin/env python3
"""Side-by-side table of forward results (bench_fwd.py JSON files), for bench/results/README.md.

    python3 bench/compare_runs.py FILE.json ...

Each file becomes columns: its hfa TFLOP/s and, when the run measured cuDNN, the ratio
hfa/cudnn of that same run (ratios across runs are never formed).
"""
import json
import sys


def main(paths):
    runs = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        name = path.rsplit("/", 1)[-1].removesuffix(".json")
        runs.append((name, {row_key(r): r for r in data["rows"]}))
    keys = sorted({k for _, rows in runs for k in rows})
    header = ["hdim", "causal", "seqlen"]
    for name, rows in runs:
        header.append(f"{name} hfa")
        if any("cudnn" in r for r in rows.values()):
            header.append("÷cuDNN")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for key in keys:
        cells = [str(key[0]), "T" if key[1] else "F", str(key[2])]
        for _, rows in runs:
            row = rows.get(key)
            cells.append(f"{row['hfa']:.0f}" if row and row.get("hfa") else "")
            if any("cudnn" in r for r in rows.values()):
                ok = row and row.get("hfa") and row.get("cudnn")
                cells.append(f"{row['hfa'] / row['cudnn']:.2f}" if ok else "")
        print("| " + " | ".join(cells) + " |")


def row_key(row):
    case = row["case"]
    return case["hdim"], case["causal"], case["seqlen_q"]


if __name__ == "__main__":
    main(sys.argv[1:])
