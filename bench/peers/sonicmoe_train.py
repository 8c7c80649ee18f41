#!/usr/bin/env python3
"""SonicMoE's training step on the GPU: forward and backward time, TFLOP/s and the activation memory one layer keeps
for its backward (issue #14 item 5), one JSON line per (shape, T), for bench/cuda_side_by_side.py's table beside
`moex bench --device cuda --backward` on the same shapes.

SonicMoE (the PyPI sonic-moe, installed by bench/cuda_side_by_side.sh --steps stage,install into $PEERS/site) is
called as transformers' integration calls it: `moe_general_routing_inputs` with bf16 (E, 2I, H) / (E, H, I) weights
seen as (2I, H, E) / (H, I, E), SwiGLU, stacked gate/up (concat_layout), float32 routing scores, training mode
(is_inference_mode_enabled=False). Routing: k distinct experts per token, uniform, softmax weights.
  forward   6·T·k·H·I FLOPs, backward 12·T·k·H·I (dX, dW of both projections; recompute not counted), as moex counts.
  act MiB   memory allocated after the forward minus before it, less the (T, H) output: what the layer keeps for its
            backward (SonicMoE's published 0.60 GiB on its 7B config at T = 24576).
Usage: PYTHONPATH=$PEERS/site python3 bench/peers/sonicmoe_train.py [--shapes sonicmoe-coarse,...] [--tokens ...]
       [--iters 10] [--budget-s 400] [--out FILE]
"""
import argparse
import json
import os
import site
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from python_bench import model_shapes  # noqa: E402 - common/shapes.h read as python_bench reads it

# name: (H, I, E, k, default T): kModelShapes and kPeerShapes of common/shapes.h; SonicMoE's configurations at the T
# it publishes them at, the models at 16384.
PUBLISHED_T = {"sonicmoe-coarse": 32768, "sonicmoe-7b": 24576}
SHAPES = {name: (H, I, E, k, PUBLISHED_T.get(name, 16384))
          for table in ("kModelShapes", "kPeerShapes") for name, H, I, E, k in model_shapes(table)}


def emit(row, out):
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="sonicmoe-coarse,sonicmoe-7b")
    ap.add_argument("--tokens", default="", help="token counts for every shape (default: each shape's own T)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=None, help="start no new (shape, T) after this many seconds")
    ap.add_argument("--out", default=None, help="append the JSON lines to this file")
    args = ap.parse_args()
    t_start = time.time()
    for entry in filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        site.addsitedir(entry)  # nvidia_cutlass_dsl.pth: Python reads .pth files only in site directories

    import torch

    points = [(name, T) for name in filter(None, args.shapes.split(","))
              for T in ([int(t) for t in args.tokens.split(",") if t] or [SHAPES[name][4]])]
    try:
        from sonicmoe.enums import ActivationType
        from sonicmoe.functional import moe_general_routing_inputs
    except Exception as ex:  # noqa: BLE001 - the table says why SonicMoE has no numbers
        for name, T in points:
            emit({"kind": "skipped", "impl": "sonicmoe-train", "shape": name, "T": T,
                  "reason": f"import sonicmoe: {ex!r}"[:400]}, args.out)
        return 0
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)

    def timed(fn):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        r = fn()
        e.record()
        e.synchronize()
        return r, s.elapsed_time(e) * 1e3  # µs

    status = 0
    for name, T in points:
        H, I, E, k, _ = SHAPES[name]
        row = {"kind": "bench", "impl": "sonicmoe-train", "shape": name, "H": H, "I": I, "E": E, "k": k, "T": T}
        if args.budget_s is not None and time.time() - t_start > args.budget_s:
            emit({**row, "kind": "skipped", "reason": "budget"}, args.out)
            continue
        try:
            W1 = (torch.randn(E, 2 * I, H, device=dev, dtype=torch.bfloat16, generator=gen) * H**-0.5)
            W2 = (torch.randn(E, H, I, device=dev, dtype=torch.bfloat16, generator=gen) * I**-0.5)
            W1.requires_grad_(), W2.requires_grad_()
            x = torch.randn(T, H, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_()
            ids = torch.rand(T, E, device=dev, generator=gen).topk(k, dim=1).indices.to(torch.int32)
            logits = torch.randn(T, k, device=dev, generator=gen).softmax(1).requires_grad_()
            dout = torch.randn(T, H, device=dev, dtype=torch.bfloat16, generator=gen)
            token_idx = torch.arange(T, device=dev, dtype=torch.int32).repeat_interleave(k)
            expert_idx = ids.reshape(-1)

            def forward():
                out, _ = moe_general_routing_inputs(
                    x, logits.reshape(-1), token_idx, expert_idx, W1.permute(1, 2, 0), None,
                    W2.permute(1, 2, 0), None, E, torch.cuda.current_stream().cuda_stream,
                    ActivationType.SWIGLU, is_inference_mode_enabled=False, concat_layout=True)
                return out

            def step():
                for t in (x, W1, W2, logits):
                    t.grad = None
                out, f_us = timed(forward)
                _, b_us = timed(lambda: out.backward(dout))
                return f_us, b_us

            t0 = time.time()
            step()  # the first call autotunes quack's GEMMs for this shape
            torch.cuda.synchronize()
            row["first_call_s"] = round(time.time() - t0, 2)
            step()
            times = [step() for _ in range(args.iters)]
            for t in (x, W1, W2, logits):
                t.grad = None
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            out = forward()
            torch.cuda.synchronize()
            kept = torch.cuda.memory_allocated() - before - out.numel() * out.element_size()
            del out
            f_us = statistics.median(t[0] for t in times)
            b_us = statistics.median(t[1] for t in times)
            flops = 6.0 * T * k * H * I
            row.update(fwd_us=round(f_us, 1), bwd_us=round(b_us, 1), fwd_tflops=round(flops / f_us / 1e6, 1),
                       bwd_tflops=round(2 * flops / b_us / 1e6, 1), act_mib=round(kept / 2**20, 1),
                       iters=args.iters)
        except Exception as ex:  # noqa: BLE001 - one failing point is a row, not the end of the run
            row.update(kind="error", error=repr(ex)[:600], trace=traceback.format_exc()[-1500:])
            status = 1
        emit(row, args.out)
        W1 = W2 = x = None
        torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main())
