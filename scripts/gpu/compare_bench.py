#!/usr/bin/env python3
"""Before/after table of `moex bench --json-file` runs: python3 compare_bench.py BEFORE.jsonl... -- AFTER.jsonl...

Each side may have several runs (taken in ABBA order); a case's time on a side is the median of its runs. Prints one
row per (shape, T, backend, graph) with both times and after / before, then the worst ratio."""
import json
import statistics
import sys


def load(paths):
    runs = {}
    for path in paths:
        for line in open(path):
            j = json.loads(line)
            if j.get("kind") != "result":
                continue
            key = (j["shape"], j["T"], j["backend"], j.get("graph", False))
            runs.setdefault(key, []).append(j["us"])
    return {k: statistics.median(v) for k, v in runs.items()}


def main(argv):
    if "--" not in argv:
        raise SystemExit(__doc__)
    cut = argv.index("--")
    before, after = load(argv[:cut]), load(argv[cut + 1:])
    print(f"{'shape':<20} {'T':>6} {'backend':<11} {'before us':>10} {'after us':>10} {'after/before':>12}")
    worst = 0.0
    for key in sorted(set(before) & set(after)):
        shape, T, backend, graph = key
        ratio = after[key] / before[key]
        worst = max(worst, ratio)
        name = backend + ("+graph" if graph else "")
        print(f"{shape:<20} {T:>6} {name:<11} {before[key]:>10.1f} {after[key]:>10.1f} {ratio:>12.3f}")
    print(f"worst after/before: {worst:.3f} over {len(set(before) & set(after))} cases")


if __name__ == "__main__":
    main(sys.argv[1:])
