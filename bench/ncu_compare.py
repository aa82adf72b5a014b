#!/usr/bin/env python3
"""Two kernels' executed instructions and stall samples side by side, by opcode and by stall
reason: hfa's kernel beside a peer's (FlashAttention-3's) on the same shape, from the source
pages ncu_lines.py reads (`ncu --import REP --page source --csv --print-source sass`).
A side given as FILE:KERNEL[:LOW-HIGH] keeps only the instructions whose address's last five hex
digits lie in LOW-HIGH (hex), so that one role of a warp-specialized kernel (the consumers'
mainloop, say; ncu_lines.py's hottest lines show where each role's code lies) is compared with
the same role of the other. Sessions 29-30 found the backward's fences (decision 046) and the FP8
forward's MUFU streak (decision 047) in these tables.

    python3 bench/ncu_compare.py hfa-sass.csv.gz:backward_kernel fa3-sass.csv.gz:FlashAttnBwdSm90
    python3 bench/ncu_compare.py hfa_fp8-sass.csv.gz:forward_kernel:0-e4000 \\
        fa3_fp8-sass.csv.gz:device_kernel:0-e1000 --top 20
"""

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_lines import EXECUTED, SAMPLES, kernel_lines  # noqa: E402


def opcode(source):
    """The mnemonic without its modifiers (a predicate skipped); a GMMA keeps its shape."""
    words = source.split()
    if not words:
        return None
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op if "GMMA" in op else op.split(".")[0]


def tally(spec):
    """(kernel name, {opcode: executed}, {opcode: samples}, {reason: samples}) of one side."""
    path, kernel, *span = spec.split(":")
    low, high = (int(x, 16) for x in span[0].split("-")) if span else (0, 0xFFFFF)
    name, header, body = kernel_lines(path, kernel)
    at = {column: i for i, column in enumerate(header)}
    reasons = [c for c in header if c.startswith("stall_") and "(Not Issued)" not in c]
    executed, samples, why = collections.Counter(), collections.Counter(), collections.Counter()
    for row in body:
        op = opcode(row[1])
        if op is None or not low <= int(row[0], 16) % 0x100000 < high:
            continue
        executed[op] += float(row[at[EXECUTED]] or 0)
        samples[op] += float(row[at[SAMPLES]] or 0)
        for r in reasons:
            why[r[6:]] += float(row[at[r]] or 0)
    return name, executed, samples, why


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", help="FILE:KERNEL[:LOW-HIGH], the first column (hfa's)")
    p.add_argument("b", help="FILE:KERNEL[:LOW-HIGH], the second (the peer's)")
    p.add_argument("--top", type=int, default=30, help="opcodes shown, largest difference first")
    args = p.parse_args()
    (name_a, ex_a, sm_a, why_a), (name_b, ex_b, sm_b, why_b) = tally(args.a), tally(args.b)
    print(f"a: {name_a[:150]}\nb: {name_b[:150]}\n")
    print(f"| | a | b | a − b |\n|---|---|---|---|")
    print(f"| instructions (M) | {sum(ex_a.values()) / 1e6:.2f} | {sum(ex_b.values()) / 1e6:.2f} "
          f"| {(sum(ex_a.values()) - sum(ex_b.values())) / 1e6:+.2f} |")
    print(f"| stall samples | {sum(sm_a.values()):.0f} | {sum(sm_b.values()):.0f} "
          f"| {sum(sm_a.values()) - sum(sm_b.values()):+.0f} |")
    print("\n| reason | a samples | b samples | a − b |\n|---|---|---|---|")
    for r in sorted(set(why_a) | set(why_b), key=lambda r: -(why_a[r] - why_b[r])):
        if why_a[r] + why_b[r] >= 1:
            print(f"| {r} | {why_a[r]:.0f} | {why_b[r]:.0f} | {why_a[r] - why_b[r]:+.0f} |")
    print("\n| opcode | a executed (M) | b executed (M) | a samples | b samples |\n"
          "|---|---|---|---|---|")
    ops = sorted(set(ex_a) | set(ex_b),
                 key=lambda o: -max(abs(ex_a[o] - ex_b[o]) / 1e6, abs(sm_a[o] - sm_b[o]) / 1e3))
    for o in ops[:args.top]:
        print(f"| {o} | {ex_a[o] / 1e6:.3f} | {ex_b[o] / 1e6:.3f} | {sm_a[o]:.0f} | {sm_b[o]:.0f} |")


if __name__ == "__main__":
    main()
