#!/usr/bin/env python3
"""Per-kernel table of an `ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum` log:
python3 ncu_kernels.py LOG. One row per kernel launch in order (name without its parameter list), µs, DRAM MB read and
written, then the total."""
import re
import sys

TIME = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6, "nsecond": 1e-3}
BYTES = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "Tbyte": 1e6}
HEADER = re.compile(r"^\s*(?:void\s+)?([A-Za-z_][\w:]*(?:<[^()]*>)?)\s*\(.*\)\s*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)")
METRIC = re.compile(r"^\s*(gpu__time_duration\.sum|dram__bytes_read\.sum|dram__bytes_write\.sum)\s+(\S+)\s+([\d.,]+)")


def parse(lines):
    rows, cur = [], None
    for line in lines:
        h = HEADER.match(line)
        if h:
            cur = {"name": h.group(1)}
            rows.append(cur)
            continue
        m = METRIC.match(line)
        if m and cur is not None:
            name, unit, value = m.group(1), m.group(2), float(m.group(3).replace(",", ""))
            scale = TIME if name.startswith("gpu__time") else BYTES
            if unit not in scale:
                raise SystemExit(f"ncu_kernels: unknown unit '{unit}' of {name}")
            cur[name] = value * scale[unit]
    return rows


def main(argv):
    if len(argv) != 1:
        raise SystemExit(__doc__)
    rows = parse(open(argv[0], errors="replace"))
    print(f"{'kernel':<60} {'us':>10} {'read MB':>9} {'write MB':>9}")
    total = 0.0
    for r in rows:
        us = r.get("gpu__time_duration.sum", float("nan"))
        total += us if us == us else 0.0
        print(f"{r['name'][:60]:<60} {us:>10.1f} {r.get('dram__bytes_read.sum', float('nan')):>9.1f} "
              f"{r.get('dram__bytes_write.sum', float('nan')):>9.1f}")
    print(f"{'total (' + str(len(rows)) + ' kernels)':<60} {total:>10.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
