#!/usr/bin/env python3
"""The dense GEMM rate of torch on this CPU, for `moex bench --peer-gemm` (issue #15 item 4).

torch's CPU matmul runs oneDNN, which uses the AMX tiles of a Xeon that has them; moex's own dense GEMM is one of the
floor's GEMMs, and this one joins it so that the floor's compute term is the fastest GEMM the machine has, not only
moex's. Prints one line, `torch.matmul <dtype> <n>³ (<threads> threads)=<GFLOP/s>`, the best of several timed runs
of C = A·Bᵀ with A (n, n) and B (n, n) in the given dtype (the experts' weight layout), after a warm-up.

  python bench/torch_gemm_rate.py --dtype bf16 --n 4096 --threads 16
"""
import argparse
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--n", type=int, default=2048, help="M = N = K")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--tries", type=int, default=5)
    args = ap.parse_args()
    if args.n <= 0 or args.tries <= 0:
        sys.exit("torch_gemm_rate: --n and --tries must be positive")
    try:
        import torch
    except ImportError as e:
        sys.exit(f"torch_gemm_rate: no torch in {sys.executable}: {e}")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    g = torch.Generator().manual_seed(0)
    a = torch.rand(args.n, args.n, generator=g).to(dtype)
    b = (0.02 * torch.rand(args.n, args.n, generator=g)).to(dtype)
    torch.matmul(a, b.t())  # warm-up: oneDNN builds its kernels on the first call
    best = float("inf")
    for _ in range(args.tries):
        t0 = time.perf_counter()
        torch.matmul(a, b.t())
        best = min(best, time.perf_counter() - t0)
    gflops = 2.0 * args.n**3 / best / 1e9
    print(f"torch.matmul {args.dtype} {args.n}³ ({torch.get_num_threads()} threads)={gflops:.1f}")


if __name__ == "__main__":
    main()
