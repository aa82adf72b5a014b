#!/usr/bin/env python3
"""Side-by-side table of forward results (bench_fwd.py JSON files), for the decision records
(docs/decisions/).

    python3 bench/compare_runs.py FILE.json ...
    python3 bench/compare_runs.py --arms BASE=FILE.json,FILE.json NEW=FILE.json ...

Each file becomes columns: its hfa TFLOP/s and, when the run measured cuDNN, the ratio
hfa/cudnn of that same run (ratios across runs are never formed).
--arms: an A/B of libraries timed in one call, each arm's files its rounds: per cell the mean
hfa TFLOP/s of each arm (its rounds beside it) and its ratio to the first arm's, then each
arm's geometric mean of those ratios.
"""
import json
import statistics
import sys


def load_rows(path):
    with open(path) as f:
        return {row_key(r): r for r in json.load(f)["rows"]}


def arms_table(specs):
    arms = []  # (name, {key: [hfa TFLOP/s of each round]})
    for spec in specs:
        name, files = spec.split("=", 1)
        rounds = {}
        for path in files.split(","):
            for key, row in load_rows(path).items():
                if row.get("hfa"):
                    rounds.setdefault(key, []).append(row["hfa"])
        arms.append((name, rounds))
    base_name, base = arms[0]
    header = ["hdim", "causal", "seqlen"] + [name for name, _ in arms]
    header += [f"{name} ÷ {base_name}" for name, _ in arms[1:]]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    ratios = {name: [] for name, _ in arms[1:]}
    for key in sorted({k for _, rounds in arms for k in rounds}):
        cells = [str(key[0]), "T" if key[1] else "F", str(key[2])]
        for _, rounds in arms:
            values = rounds.get(key, [])
            cells.append(f"{statistics.mean(values):.1f} ({' / '.join(f'{v:.0f}' for v in values)})"
                         if values else "")
        for name, rounds in arms[1:]:
            if key in rounds and key in base:
                ratio = statistics.mean(rounds[key]) / statistics.mean(base[key])
                ratios[name].append(ratio)
                cells.append(f"{ratio:.3f}")
            else:
                cells.append("")
        print("| " + " | ".join(cells) + " |")
    print()
    for name, values in ratios.items():
        if values:
            print(f"{name} ÷ {base_name}, geometric mean over {len(values)} cells: "
                  f"{statistics.geometric_mean(values):.3f}")


def main(paths):
    if paths[:1] == ["--arms"]:
        return arms_table(paths[1:])
    runs = []
    for path in paths:
        name = path.rsplit("/", 1)[-1].removesuffix(".json")
        runs.append((name, load_rows(path)))
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
