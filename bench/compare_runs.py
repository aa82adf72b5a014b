#!/usr/bin/env python3
"""Side-by-side table of benchmark results (any bench/*.py JSON of one kind: its rows' "case",
"metric" and "hfa"), for the decision records (docs/decisions/).

    python3 bench/compare_runs.py FILE.json ...
    python3 bench/compare_runs.py --arms BASE=FILE.json,FILE.json NEW=FILE.json ...

Rows are matched by their whole case; the table shows the case fields that differ between rows.
Each file becomes columns: its hfa value (TFLOP/s, µs, ...: the rows' metric) and, when the run
measured cuDNN, the ratio hfa/cudnn of that same run (ratios across runs are never formed).
--arms: an A/B of libraries timed in one call, each arm's files its rounds: per cell the mean
hfa value of each arm (its rounds beside it) and its speed relative to the first arm's (the
ratio of values, or of times for a metric in µs: above 1 is faster), then each arm's geometric
mean of those ratios.
"""
import json
import statistics
import sys


def load_rows(path):
    with open(path) as f:
        rows = json.load(f)["rows"]
    if any("case" not in r for r in rows):  # bench_decode.py's rows: one per (seqlen, impl)
        sys.exit(f"compare_runs: {path}: rows without a 'case' (not a grid benchmark's JSON)")
    return {row_key(r): r for r in rows}


def row_key(row):
    return tuple(row["case"].items())


def key_order(key):
    """Cases in order of their values (numbers as numbers)."""
    return [(type(v).__name__, 0 if v is None else v) for _, v in key]


def table_keys(row_maps):
    """Every case of the runs in order, and the case fields whose values differ between them
    (the table's first columns), in the cases' order."""
    keys = sorted({k for rows in row_maps for k in rows}, key=key_order)
    fields = list(dict.fromkeys(name for key in keys for name, _ in key))
    values = {name: {repr(dict(key).get(name)) for key in keys} for name in fields}
    return keys, [name for name in fields if len(values[name]) > 1] or fields[:1]


def case_cells(key, fields):
    case = dict(key)
    return [("T" if case.get(f) else "F") if isinstance(case.get(f), bool) else str(case.get(f, ""))
            for f in fields]


def speed(value, base, metric):
    """value's speed relative to base: times invert."""
    return base / value if metric == "us" else value / base


def arms_table(specs):
    arms = []  # (name, {key: [hfa value of each round]})
    metric = "tflops"
    for spec in specs:
        name, files = spec.split("=", 1)
        rounds = {}
        for path in files.split(","):
            for key, row in load_rows(path).items():
                if row.get("hfa"):
                    rounds.setdefault(key, []).append(row["hfa"])
                    metric = row.get("metric", metric)
        arms.append((name, rounds))
    base_name, base = arms[0]
    keys, fields = table_keys(rounds for _, rounds in arms)
    header = fields + [f"{name} {metric}" for name, _ in arms]
    header += [f"{name} ÷ {base_name} speed" for name, _ in arms[1:]]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    ratios = {name: [] for name, _ in arms[1:]}
    for key in keys:
        cells = case_cells(key, fields)
        for _, rounds in arms:
            values = rounds.get(key, [])
            cells.append(f"{statistics.mean(values):.1f} ({' / '.join(f'{v:.0f}' for v in values)})"
                         if values else "")
        for name, rounds in arms[1:]:
            if key in rounds and key in base:
                ratio = speed(statistics.mean(rounds[key]), statistics.mean(base[key]), metric)
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
    keys, fields = table_keys(rows for _, rows in runs)
    header = list(fields)
    for name, rows in runs:
        header.append(f"{name} hfa")
        if any("cudnn" in r for r in rows.values()):
            header.append("÷cuDNN")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for key in keys:
        cells = case_cells(key, fields)
        for _, rows in runs:
            row = rows.get(key)
            cells.append(f"{row['hfa']:.0f}" if row and row.get("hfa") else "")
            if any("cudnn" in r for r in rows.values()):
                ok = row and row.get("hfa") and row.get("cudnn")
                cells.append(f"{row['hfa'] / row['cudnn']:.2f}" if ok else "")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
