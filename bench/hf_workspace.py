# The device memory one transformers experts call takes beyond its inputs, the figure issue #12 item 4 bounds moex's
# workspace by: torch.cuda.max_memory_allocated over one call of Qwen3MoeExperts (bf16 weights, uniform top-k
# routing) minus what was allocated before it, less the (T, H) output that the module returns (moex writes into
# the caller's output, and `moex bench`'s ws MiB counts only its workspace pool). Needs torch with CUDA and
# transformers; nothing of moex.
"""Usage: python3 bench/hf_workspace.py [--shapes qwen3-30b-a3b,deepseek-v3] [--tokens 1,64,4096]
                                    [--impls grouped_mm,batched_mm] [--json FILE]
Prints one row per (shape, T, implementation): the peak extra MiB of the call, and the same without the output."""
import argparse
import json

import torch
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

from python_bench import model_shapes  # common/shapes.h read as python_bench reads it (bench/ is on sys.path)


def measure(module, impl, x, ids, w):
    """Peak MiB allocated by one call above what was allocated before it, and the output's MiB."""
    module.config._experts_implementation = impl
    module(x, ids, w)  # warm-up: lazy workspaces and kernels are not the call's
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = module(x, ids, w)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    return peak / 2**20, out.numel() * out.element_size() / 2**20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qwen3-30b-a3b,deepseek-v3")
    ap.add_argument("--tokens", default="1,64,4096")
    ap.add_argument("--impls", default="grouped_mm,batched_mm")
    ap.add_argument("--max-batched-gb", type=float, default=40.0,
                    help="skip batched_mm past this many GB of per-token weight copies")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    shapes = {name: (H, I, E, k) for name, H, I, E, k in model_shapes()}
    rows = []
    print(f"{'shape':<16} {'T':>6} {'impl':<12} {'peak MiB':>10} {'- output':>10}")
    for name in args.shapes.split(","):
        H, I, E, k = shapes[name]
        cfg = Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=k)
        with torch.device("meta"):  # no host copy of the weights; bf16 on the card directly
            module = Qwen3MoeExperts(cfg).to(torch.bfloat16)
        module = module.to_empty(device="cuda").eval()
        with torch.no_grad():
            for p in module.parameters():
                p.normal_(0, 0.02)
        for T in (int(t) for t in args.tokens.split(",")):
            gen = torch.Generator().manual_seed(T)
            x = torch.randn(T, H, generator=gen).to(torch.bfloat16).cuda()
            ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]).cuda()
            w = torch.softmax(torch.randn(T, k, generator=gen), -1).to(torch.bfloat16).cuda()
            for impl in args.impls.split(","):
                row = dict(shape=name, T=T, impl=impl)
                if impl == "batched_mm" and T * k * 3 * H * I * 2 / 1e9 > args.max_batched_gb:
                    row["skip"] = f"copies {T * k * 3 * H * I * 2 / 1e9:.0f} GB of expert weights"
                else:
                    try:
                        with torch.inference_mode():
                            peak, out = measure(module, impl, x, ids, w)
                        row.update(peak_mib=round(peak, 1), workspace_mib=round(peak - out, 1))
                    except torch.OutOfMemoryError as e:
                        row["skip"] = f"out of memory: {str(e).splitlines()[0][:80]}"
                    torch.cuda.empty_cache()
                rows.append(row)
                if "skip" in row:
                    print(f"{name:<16} {T:>6} {impl:<12} skipped: {row['skip']}")
                else:
                    print(f"{name:<16} {T:>6} {impl:<12} {row['peak_mib']:>10.1f} {row['workspace_mib']:>10.1f}")
        del module
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
