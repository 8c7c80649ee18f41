#!/usr/bin/env python3
"""The SASS census's loop check: no main loop of batched_mm's mma kernels (a backward branch whose body issues an
MMA) holds a division (a CALL of the division routine, or MUFU.RCP, its fast path). The quantized decode once ran a
64-bit `%` per sub-step and divisions per promotion there (bench/RESULTS.md AB2: FP8 decode 4-7% slower).
Usage: sass_loops.py SASS_DUMP (the output of cuobjdump --dump-sass). Exit 1 on a loop with a division."""
import re
import sys

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);")
BRANCH = re.compile(r"\bBRA (0x[0-9a-f]+)")
DIVISION = re.compile(r"\bCALL\b|MUFU\.RCP")


def functions(lines):
    name, body = None, []
    for line in lines:
        f = FUNCTION.search(line)
        if f:
            if name:
                yield name, body
            name, body = f.group(1), []
            continue
        i = INSTRUCTION.match(line)
        if i and name:
            body.append((int(i.group(1), 16), i.group(2).strip()))
    if name:
        yield name, body


def mma_loops(instructions):
    index = {address: i for i, (address, _) in enumerate(instructions)}
    for i, (address, text) in enumerate(instructions):
        b = BRANCH.search(text)
        target = int(b.group(1), 16) if b else None
        if target is not None and target < address and target in index:
            body = [t for _, t in instructions[index[target]:i + 1]]
            if any("MMA" in t for t in body):
                yield body


def main():
    with open(sys.argv[1]) as f:
        lines = f.read().splitlines()
    kernels = loops = 0
    bad = []
    for name, instructions in functions(lines):
        if "batched_proj_kernel" not in name or "LoopE0E" not in name:
            continue
        kernels += 1
        for body in mma_loops(instructions):
            loops += 1
            found = [t for t in body if DIVISION.search(t)]
            if found:
                bad.append(f"{name[:110]}: {found[:2]}")
    if kernels == 0 or loops == 0:
        print(f"FAIL: batched_mm's mma loops: found {kernels} kernels, {loops} loops (the census sees no loop)")
        return 1
    if bad:
        print(f"FAIL: batched_mm's mma loops hold a division: {len(bad)} of {loops} loops")
        print("\n".join(bad[:8]))
        return 1
    print(f"ok: batched_mm's mma loops hold no division ({loops} loops in {kernels} kernels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
