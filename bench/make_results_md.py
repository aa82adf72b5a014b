#!/usr/bin/env python3
"""Writes bench/results/RESULTS.md from the result JSON files in bench/results/.

    python3 bench/make_results_md.py            # rewrite RESULTS.md
    python3 bench/make_results_md.py --check    # exit 1 if RESULTS.md is not what it would write

Every *.json directly in the folder becomes one section: its header (what, commit, date, device,
versions, timing protocol, the SM clocks its rows recorded) and its rows as a table, the peers'
numbers beside hfa's with hfa's ratio to each. Any JSON renders, whatever its "what": rows with a
"case" (the shape of docs/design.md §5) as one table of the case fields and every number; other
lists of records (rows without a case, a "summary", lists inside a dict) as tables of their
fields; the remaining scalar fields as a list. So a new benchmark's files appear here without a
change to this script. The output depends only on the files (sorted, no timestamps): running it
twice gives the same bytes.
"""

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import table  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# Sections in this order; any other "what" follows, alphabetically.
KIND_ORDER = ["fwd", "fwd-shapes", "fwd-fp8", "fwd-features", "bwd", "decode", "mla", "cp",
              "overhead", "overhead-parts", "model", "train-step", "quantize-fp8", "fp8-accuracy",
              "fp8-accuracy-floor"]
# Implementations measured beside hfa: each gets a column "hfa ÷ <peer>" where the metric is a
# speed (higher is better) or a time (lower is better; the ratio is then the peer's time over
# hfa's, a speed ratio too).
PEERS = ["cudnn", "fa2", "fa3", "hfa_det", "fa3_det", "hfa_bf16", "sdpa", "sdpa_flash",
         "sdpa_cudnn", "torch", "copy", "torch_copy", "flashmla"]
SPEEDS = {"tflops", "GBps", "gbps", "tokens_per_s"}
TIMES = {"us", "ms", "s"}
# Row fields that are not columns of their own: the case (its fields are), the metric, the order
# of the timing rounds. Dicts (per-round values, the clocks under "gpu") are never columns; the
# clocks get one column of their own.
ROW_DETAILS = {"case", "metric", "round_order"}
# Top-level fields shown in the header or summarized, not listed again.
HEADER_FIELDS = {"what", "commit", "date", "device", "versions", "settings", "rows", "accuracy",
                 "skipped", "targets", "machine"}
# Columns that identify a row, first where they occur.
ID_FIELDS = ["cell", "test", "call", "part", "impl", "shape", "batch", "seqlen", "param"]
MAX_LIST = 8  # lists of at most this many scalars are shown inline; longer ones are left out


def fmt(x, digits=4):
    """A value as a table shows it: `digits` significant digits from 1 to 1000, whole numbers
    above, one digit fewer below 1, scientific below 0.01."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        a = abs(x)
        if a == 0:
            return "0"
        if a >= 1000:
            return f"{x:.0f}"
        if a >= 1:
            return f"{x:.{digits}g}"
        if a >= 0.01:
            return f"{x:.{digits - 1}g}"
        return f"{x:.{digits - 2}e}"
    if isinstance(x, list):
        return " ".join(fmt(v, digits) for v in x) if x else "–"
    return str(x).replace("|", "/").replace("\n", " ")


def is_scalar(x):
    return x is None or isinstance(x, (bool, int, float, str))


def shown(x):
    """Whether a field's value gets a cell: scalars, and short lists of scalars."""
    return is_scalar(x) or (isinstance(x, list) and len(x) <= MAX_LIST
                            and all(is_scalar(v) for v in x))


def is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def ordered_keys(records, skip=(), first=()):
    """The union of the records' shown keys: those of `first` that occur, then the others in
    first-seen order."""
    seen = []
    for r in records:
        for k, v in r.items():
            if k not in skip and k not in seen and shown(v):
                seen.append(k)
    return [k for k in first if k in seen] + [k for k in seen if k not in first]


def split_constant(records, keys):
    """(keys whose value differs between records, {key: value} of those that do not)."""
    if len(records) < 2:
        return keys, {}
    varying, constant = [], {}
    for k in keys:
        values = [json.dumps(r.get(k), sort_keys=True) for r in records]
        if len(set(values)) == 1 and k in records[0]:
            constant[k] = records[0][k]
        else:
            varying.append(k)
    return varying, constant


def constant_line(constant):
    return ("All rows: " + ", ".join(f"{k} {fmt(v)}" for k, v in constant.items()) + "."
            if constant else None)


def ratio(row, peer, metric):
    h, p = row.get("hfa"), row.get(peer)
    if not (is_number(h) and is_number(p)) or h == 0 or p == 0:
        return "–"
    return f"{(h / p if metric in SPEEDS else p / h):.2f}"


def gpu_states(row):
    """The row's {implementation: {"sm_mhz", "watts"}} (benchlib.GpuState), or {}."""
    gpu = row.get("gpu")
    return gpu if isinstance(gpu, dict) else {}


def clocks(row, impls):
    gpu = gpu_states(row)
    return "/".join(fmt((gpu.get(i) or {}).get("sm_mhz")) for i in impls)


def case_table(rows):
    """The lines for rows with a "case": the case fields that vary, the metric where it varies,
    every number of the row, hfa ÷ each peer, the SM clocks."""
    cases = [r["case"] for r in rows]
    case_keys, case_constant = split_constant(cases, ordered_keys(cases))
    value_keys = ordered_keys(rows, ROW_DETAILS, first=["hfa"])
    value_keys, value_constant = split_constant(rows, value_keys)
    metrics = {r.get("metric") for r in rows}
    constant = {**case_constant, **value_constant}
    if len(metrics) == 1 and None not in metrics:
        constant = {"metric": metrics.pop(), **constant}
        metric_column = False
    else:
        metric_column = any("metric" in r for r in rows)
    peers = [p for p in PEERS if p in value_keys and "hfa" in value_keys
             and any(r.get("metric") in SPEEDS | TIMES for r in rows)]
    clocked = [k for k in value_keys if any(k in gpu_states(r) for r in rows)]
    head = (case_keys + (["metric"] if metric_column else []) + value_keys
            + [f"hfa ÷ {p}" for p in peers]
            + ([f"SM MHz ({'/'.join(clocked)})"] if clocked else []))
    body = []
    for r in rows:
        c = r["case"]
        cells = ([fmt(c.get(k)) if k in c else "" for k in case_keys]
                 + ([fmt(r.get("metric"))] if metric_column else [])
                 + [fmt(r.get(k)) if k in r else "" for k in value_keys]
                 + [ratio(r, p, r.get("metric")) for p in peers]
                 + ([clocks(r, clocked)] if clocked else []))
        body.append(cells)
    line = constant_line(constant)
    return ([line, ""] if line else []) + table(head, body)


def record_table(records):
    """The lines for a list of records without a case: their shown fields that vary."""
    keys, constant = split_constant(records, ordered_keys(records, first=ID_FIELDS))
    line = constant_line(constant)
    body = [[fmt(r.get(k)) if k in r else "" for k in keys] for r in records]
    return ([line, ""] if line else []) + (table(keys, body) if keys else [])


def records_tables(records):
    """Rows with a "cell" field (several kinds of measurement in one file) as one table per
    cell; other records as one table."""
    if not records:
        return []
    if all("case" in r for r in records) and not any("cell" in r for r in records):
        return case_table(records)
    if any("cell" in r for r in records):
        lines = []
        for cell in dict.fromkeys(r.get("cell") for r in records):
            group = [{k: v for k, v in r.items() if k != "cell"} for r in records
                     if r.get("cell") == cell]
            lines += [f"Cell `{cell}`:", ""] + records_tables(group) + [""]
        return lines[:-1]
    flat = [{**{f"case.{k}": v for k, v in (r.get("case") or {}).items()},
             **{k: v for k, v in r.items() if k != "case"}} for r in records]
    return record_table(flat)


def is_records(x):
    return isinstance(x, list) and x and all(isinstance(r, dict) for r in x)


def header_lines(result):
    lines = []
    device = result.get("device")
    machine = result.get("machine")
    if isinstance(machine, dict):
        device = ", ".join(f"{k} {v}" for k, v in machine.items() if is_scalar(v))
    lines.append(f"- `{result.get('what', '?')}`, commit `{result.get('commit', '?')}`, "
                 f"{result.get('date', '?')}, {device or '?'}")
    versions = result.get("versions")
    if isinstance(versions, dict) and versions:
        lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    settings = result.get("settings")
    if isinstance(settings, dict):
        timing = [f"{k}: {fmt(settings[k])}" for k in ("do_bench", "cool_s") if k in settings]
        if timing:
            lines.append("- timing: " + ", ".join(timing))
    mhz = {}
    for row in result.get("rows") or []:
        for impl, state in (gpu_states(row) if isinstance(row, dict) else {}).items():
            if isinstance(state, dict) and is_number(state.get("sm_mhz")):
                mhz.setdefault(impl, []).append(state["sm_mhz"])
    if mhz:
        lines.append("- SM clock while each ran (MHz, lowest … highest over the rows): "
                     + ", ".join(f"{i} {min(v)} … {max(v)}" for i, v in mhz.items()))
    accuracy = [a for a in result.get("accuracy") or [] if isinstance(a, dict) and "pass" in a]
    if accuracy:
        passed = sum(a["pass"] is True for a in accuracy)
        lines.append(f"- accuracy: {passed} of {len(accuracy)} checked cells pass")
    for t in result.get("targets") or []:
        if isinstance(t, dict):
            lines.append(f"- target: {t.get('target')}: {t.get('verdict')}")
    skipped = {}
    for s in result.get("skipped") or []:
        if isinstance(s, dict):
            key = f"{s.get('impl')}: {s.get('reason')}"
            skipped[key] = skipped.get(key, 0) + 1
    for key, n in skipped.items():
        lines.append(f"- not run ({n} {'cell' if n == 1 else 'cells'}): {fmt(key)}")
    return lines


def other_fields(result):
    """The top-level fields not rendered elsewhere: tables for lists of records (one level into
    dicts too), a list for scalars and short lists (dicts of scalars flattened one level)."""
    lines, scalars = [], []
    for key, value in result.items():
        if key in HEADER_FIELDS:
            continue
        if is_records(value):
            lines += ["", f"`{key}`:", ""] + records_tables(value)
        elif isinstance(value, dict):
            for sub, v in value.items():
                if is_records(v):
                    lines += ["", f"`{key}.{sub}`:", ""] + records_tables(v)
                elif shown(v):
                    scalars.append((f"{key}.{sub}", v))
        elif shown(value):
            scalars.append((key, value))
    if scalars:
        lines = ["", *(f"- {k}: {fmt(v, digits=7)}" for k, v in scalars)] + lines
    return lines


def section(name, result):
    lines = [f"## {name}", ""] + header_lines(result)
    rows = result.get("rows")
    if is_records(rows):
        lines += [""] + records_tables(rows)
    lines += other_fields(result)
    return lines


def kind_key(item):
    name, result = item
    what = str(result.get("what", ""))
    return (KIND_ORDER.index(what) if what in KIND_ORDER else len(KIND_ORDER), what, name)


def render(folder):
    results = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            result = json.load(f)
        if isinstance(result, dict):
            results.append((os.path.basename(path)[:-len(".json")], result))
    results.sort(key=kind_key)
    lines = ["# Current results", "",
             "Written by `python3 bench/make_results_md.py` from the JSON files in this folder; "
             "do not edit by hand.",
             "Each section is one file, one run: ratios are formed only inside it (hfa ÷ a peer "
             "is hfa's speed over the peer's, from times the peer's time over hfa's). Older runs "
             "are in git history, and what each tuning decision measured is in "
             "`docs/decisions/`.", "",
             *table(["file", "what", "commit", "date"],
                    [[f"[{name}](#{name.lower()})", fmt(r.get("what", "?")),
                      f"`{r.get('commit', '?')}`", fmt(r.get("date", "?"))]
                     for name, r in results])]
    for name, result in results:
        lines += [""] + section(name, result)
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=RESULTS, help="the folder of result JSON files")
    p.add_argument("--out", default=None, help="default: RESULTS.md in that folder")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the file differs from what would be written")
    args = p.parse_args(argv)
    out = args.out or os.path.join(args.results, "RESULTS.md")
    text = render(args.results)
    if args.check:
        try:
            with open(out) as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            print(f"{out} is not up to date: run python3 bench/make_results_md.py",
                  file=sys.stderr)
        return 0 if same else 1
    with open(out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
