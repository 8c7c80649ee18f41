"""How often `moex bench`'s cross-check bound (bench/output_check.h) is passed by rounding alone.

One backend sums k weighted expert rows in float32, the other rounds each weighted row to bf16 first (grouped_mm in
bf16, as transformers' index_add of bf16 rows does); both round the sum to bf16. Gaussian rows, routing weights
normalised over the k slots. Prints, per batch, the values beyond 1e-2·rms + two bf16 steps at |ref| (the bound now)
and beyond 1e-2·rms + 2^-7·|ref| (the bound before), the largest |Δ| / rms among each, and of all values. Usage: python3 bench/cross_check_sim.py [values per batch] [batches] [k]   (numpy)
"""
import sys

import numpy as np


def bf16(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def bf16_step(x):
    _, e = np.frexp(np.abs(x).astype(np.float64))
    return np.where(x != 0, np.ldexp(1.0, e - 8), 0.0)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    k = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    rng = np.random.default_rng(1)
    totals = {"now": [0, 0.0], "before": [0, 0.0]}
    largest = 0.0
    for b in range(batches):
        w = rng.random((k, n), dtype=np.float32)
        t = (w / w.sum(0)) * rng.standard_normal((k, n), dtype=np.float32)
        ref = bf16(t.sum(0, dtype=np.float32)).astype(np.float64)
        got = bf16(bf16(t).sum(0, dtype=np.float32)).astype(np.float64)
        rms = np.sqrt((ref**2).mean())
        d = np.abs(got - ref)
        largest = max(largest, float(d.max() / rms))
        line = [f"all: the largest {d.max() / rms:.2e} rms"]
        for name, bound in (("now", 2 * bf16_step(ref)), ("before", 2.0**-7 * np.abs(ref))):
            out = d > 1e-2 * rms + bound
            bad = int(out.sum())
            far = float(d[out].max() / rms) if bad else 0.0
            totals[name][0] += bad
            totals[name][1] = max(totals[name][1], far)
            line.append(f"{name}: {bad} beyond, the largest {far:.2e} rms")
        print(f"batch {b} ({n} values): " + "; ".join(line))
    for name, (bad, far) in totals.items():
        print(f"bound {name}: {bad / (n * batches):.2e} of the values beyond it, the largest {far:.2e} rms")
    print(f"all values: the largest {largest:.2e} rms")

if __name__ == "__main__":
    main()
