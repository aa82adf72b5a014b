#!/usr/bin/env python3
"""Static SASS counts of kernels' main loops, from `cuobjdump -sass` output.

Per kernel: instructions, local-memory instructions (LDL/STL), the longest backward branch's
body (the main loop; static: both sides of its branches), and that body's opcode histogram.
Writes Markdown to stdout.

    cuobjdump -sass libhfa.so | python3 bench/sass_loops.py --match stream_kernel [--values N]

--values: cache values a thread widens per loop iteration, to print instructions per value.
"""

import argparse
import collections
import re
import sys

INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
BRANCH_TARGET = re.compile(r"BRA.*?0x([0-9a-f]+)")
PREDICATE = re.compile(r"^@!?U?P\w+\s+")


def functions(lines):
    """{mangled name: [(address, instruction text)]}"""
    found, name = {}, None
    for line in lines:
        header = re.search(r"Function : (\S+)", line)
        if header:
            name = header.group(1)
            found[name] = []
        elif name:
            m = INSTRUCTION.match(line)
            if m:
                found[name].append((int(m.group(1), 16), m.group(2)))
    return found


def main_loop(instructions):
    """The body of the longest backward branch, or []."""
    loops = []
    for address, text in instructions:
        target = BRANCH_TARGET.search(text)
        if target and int(target.group(1), 16) < address:
            loops.append((int(target.group(1), 16), address))
    if not loops:
        return []
    first, last = max(loops, key=lambda span: span[1] - span[0])
    return [text for address, text in instructions if first <= address <= last]


def opcode(text):
    return PREDICATE.sub("", text).split()[0]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--match", default="", help="regex on the mangled name")
    p.add_argument("--values", type=int, default=0)
    p.add_argument("--top", type=int, default=12, help="opcodes listed per loop")
    args = p.parse_args(argv)
    kernels = {n: ins for n, ins in functions(sys.stdin).items() if re.search(args.match, n)}
    print("| kernel | instructions | LDL/STL | main loop | per value | loop opcodes (static) |")
    print("|---|---|---|---|---|---|")
    for name, instructions in kernels.items():
        local = sum(1 for _, t in instructions if opcode(t).split(".")[0] in ("LDL", "STL"))
        loop = main_loop(instructions)
        histogram = collections.Counter(opcode(t) for t in loop).most_common(args.top)
        per_value = f"{len(loop) / args.values:.1f}" if args.values and loop else "–"
        listed = ", ".join(f"{op} {n}" for op, n in histogram)
        print(f"| `{name}` | {len(instructions)} | {local} | {len(loop)} | {per_value} | {listed} |")


if __name__ == "__main__":
    main()
