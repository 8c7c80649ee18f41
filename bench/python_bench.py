# One experts call through transformers, every backend side by side in one process: transformers' eager / batched_mm
# / grouped_mm (plain, under CUDA graphs for T <= 64, and with --compile under torch.compile in the modes the seed
# lists for each) against every moex backend registered by
# moex_experts.transformers, on the routed-expert shapes of common/shapes.h; plus the same moex kernel called
# straight through the bindings (no transformers, no torch op), so the Python layer's cost is measured.
"""Usage: python3 bench/python_bench.py [--device cuda|cpu] [--shapes NAME,...] [--tokens 1,8,64,...]
                                     [--reps 20] [--json FILE] [--compile [--compile-by-T]] [--peers-only]
       python3 bench/python_bench.py --overhead [--device cpu|cuda] [--overhead-rounds 200]

Each row: median µs of `module(hidden_states, top_k_index, top_k_weights)` of a Qwen3MoeExperts module built with
the shape's (H, I, E) and bf16 random weights N(0, 0.02), uniform random top-k routing rotated over 8 sets (CUDA
events on CUDA, wall clock on the CPU), outputs checked against moex grouped_mm. `direct_<name>` is moex's kernel
through moex_experts._moex with nothing else (no transformers, no torch op, no output allocation): the difference to
moex_<name> is the Python layer; `moex bench` in the same call gives the C++ time. --peers-only: transformers' rows
alone (outputs then checked against its grouped_mm; the moex package need not be installed).
transformers' batched_mm copies every routed expert's weights and is skipped past --max-batched-gb of copies.
--compile adds `<impl>+compile` rows: torch.compile(module, fullgraph=True) of transformers' grouped_mm and
batched_mm and of "moex", in the seed's modes (grouped_mm: default and max-autotune-no-cudagraphs; batched_mm and
moex: default and reduce-overhead; on the CPU the default mode only). Compilation is not timed. --compile-by-T: the
issue #12 table's modes instead: max-autotune-no-cudagraphs for grouped_mm at T >= 4096, reduce-overhead for
grouped_mm and batched_mm at T <= 64, none in between.
--overhead measures the Python layer alone instead, at T = 1 on a tiny shape (H 64, I 32, E 8, k 2, float32, one
process): the thread CPU time of `module(x, ids, w)` with moex_batched_mm, with a no-op implementation registered
in ExpertsInterface (transformers' own dispatch: nn.Module call, decorator, interface lookup) and of the direct
bindings (capsules into a given output, and torch tensors with the output allocated; the cheaper counts; one moex
thread in all; the module's call reaches it through a Python lambda, ~0.1 µs counted as
ours), each the minimum over --overhead-rounds alternating batches of 1000 calls (robust to other work on the
machine); ours = moex - no-op - direct. The same with the C++ call replaced by a Python no-op ("stubbed") leaves
only Python: ours = moex - no-op there.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

import torch
import transformers
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

try:  # --peers-only runs transformers' backends without the moex package (bench/cuda_side_by_side.sh)
    import moex_experts
    import moex_experts.transformers as moex_hf
    from moex_experts import _moex
except ImportError:
    moex_experts = moex_hf = _moex = None

SHAPES_H = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common", "shapes.h")


def model_shapes(table_name="kModelShapes"):
    """(name, H, I, E, k) of kModelShapes (or another table of common/shapes.h), read from the one shape file."""
    text = open(SHAPES_H).read()
    start = text.index(table_name)
    table = text[start:text.index("}};", start)]
    return [(m[0], int(m[1]), int(m[2]), int(m[3]), int(m[4]))
            for m in re.findall(r'\{"([^"]+)", (\d+), (\d+), (\d+), (\d+)\}', table)]


def timer(device, reps, warmup):
    def run(fn):
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            if device == "cuda":
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop) * 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(times)
    return run


def routing_sets(T, E, k, device, n=8):
    gen = torch.Generator().manual_seed(T)
    sets = []
    for _ in range(n):
        ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]).to(device)
        w = torch.softmax(torch.randn(T, k, generator=gen), -1).to(torch.bfloat16).to(device)
        sets.append((ids, w))
    return sets


def rotating(sets, fn):
    """A call of fn(ids, w) that takes the next of the routing sets each time, from the first."""
    cycle = {"i": 0}

    def call():
        ids, w = sets[cycle["i"] % len(sets)]
        cycle["i"] += 1
        return fn(ids, w)

    return call


def batched_copies_skip(args, T, k, H, I):
    """Why transformers' batched_mm is skipped at this size (its per-token weight copies), or None."""
    copies_gb = T * k * 3 * H * I * 2 / 1e9
    return f"copies {copies_gb:.1f} GB of expert weights" if copies_gb > args.max_batched_gb else None


def skip_text(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def bench_shape(args, name, H, I, E, k, rows):
    device = args.device
    cfg = Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=k)
    module = Qwen3MoeExperts(cfg).to(device=device, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.02)
    run = timer(device, args.reps, args.warmup)
    moex = not args.peers_only
    impls = ["grouped_mm", "batched_mm", "eager"] + (moex_hf.registered_names() if moex else [])
    impls = [i for i in impls if i not in ("moex_deepgemm_megamoe",)]
    for T in args.tokens:
        x = torch.randn(T, H, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).to(device)
        sets = routing_sets(T, E, k, device)
        with torch.inference_mode():
            module.config._experts_implementation = "moex_grouped_mm" if moex else "grouped_mm"
            ref = module(x, *sets[0])
            for impl in impls:
                row = dict(shape=name, T=T, impl=impl, device=device)
                too_big = batched_copies_skip(args, T, k, H, I) if impl == "batched_mm" else None
                if too_big:
                    row["skip"] = too_big
                elif impl == "eager" and T > 4096 and device == "cpu":
                    row["skip"] = "too slow on the CPU"
                else:
                    module.config._experts_implementation = impl
                    try:
                        out = module(x, *sets[0])
                        row["max_diff"] = float((out.float() - ref.float()).abs().max())
                        row["us"] = run(rotating(sets, lambda ids, w: module(x, ids, w)))
                    except (NotImplementedError, RuntimeError, ValueError) as e:
                        row["skip"] = skip_text(e)
                emit(args, rows, row)
            if moex:
                direct(args, module, x, sets, name, T, rows, run)
            if device == "cuda" and T <= 64:
                graphs(args, module, x, sets, name, T, rows, run)
            if args.compile:
                compiled(args, module, x, sets, name, T, k, H, I, rows, run)
        torch.cuda.empty_cache() if device == "cuda" else None


def direct(args, module, x, sets, name, T, rows, run):
    """moex's batched_mm and grouped_mm straight through the bindings: the least Python a call can cost (a DLPack
    capsule is consumed by the call that takes it, so each call makes its own)."""
    dl = torch._C._to_dlpack
    out = torch.empty_like(x)
    stream = torch.cuda.current_stream().cuda_stream if args.device == "cuda" else 0
    up, down = module.gate_up_proj, module.down_proj
    for backend in ("batched_mm", "grouped_mm"):
        call = rotating(sets, lambda ids, w: _moex.experts(backend, dl(x), dl(ids), dl(w), dl(up), dl(down), None,
                                                           None, dl(out), stream=stream))
        emit(args, rows, dict(shape=name, T=T, impl=f"direct_{backend}", device=args.device, us=run(call)))


def graphs(args, module, x, sets, name, T, rows, run):
    """Eight calls (one per routing set) captured in one CUDA graph, replay time / 8."""
    impls = ("batched_mm", "grouped_mm") + (() if args.peers_only else ("moex_batched_mm", "moex_grouped_mm", "moex"))
    for impl in impls:
        module.config._experts_implementation = impl
        try:
            for ids, w in sets:  # warm-up outside capture (lazy initialisation)
                module(x, ids, w)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for ids, w in sets:
                    module(x, ids, w)
            us = run(graph.replay) / len(sets)
            emit(args, rows, dict(shape=name, T=T, impl=f"{impl}+graph", device=args.device, us=us))
        except (RuntimeError, NotImplementedError) as e:
            emit(args, rows, dict(shape=name, T=T, impl=f"{impl}+graph", device=args.device, skip=skip_text(e)))


# The modes the seed's compile table lists per implementation (its "all" narrowed to the two that differ).
COMPILE_MODES = {"grouped_mm": (None, "max-autotune-no-cudagraphs"), "batched_mm": (None, "reduce-overhead"),
                 "moex": (None, "reduce-overhead")}
MODE_TAGS = {None: "compile", "max-autotune-no-cudagraphs": "autotune", "reduce-overhead": "compile-ro"}


def compile_modes(args, T):
    """{implementation: modes} to compile at T: the seed's table, or with --compile-by-T issue #12's (CUDA)."""
    if args.compile_by_t and args.device == "cuda":
        if T >= 4096:
            return {"grouped_mm": ("max-autotune-no-cudagraphs",)}
        if T <= 64:
            return {"grouped_mm": ("reduce-overhead",), "batched_mm": ("reduce-overhead",)}
        return {}
    modes = dict(COMPILE_MODES)
    if args.peers_only:
        modes.pop("moex")
    return modes


def compiled(args, module, x, sets, name, T, k, H, I, rows, run):
    """torch.compile(module, fullgraph=True) per implementation and mode; the routing sets share one shape, so one
    compilation serves all eight."""
    for impl, modes in compile_modes(args, T).items():
        for mode in modes if args.device == "cuda" else (None,):
            row = dict(shape=name, T=T, impl=f"{impl}+{MODE_TAGS[mode]}", device=args.device)
            too_big = batched_copies_skip(args, T, k, H, I) if impl == "batched_mm" else None
            if too_big:
                emit(args, rows, dict(row, skip=too_big))
                continue
            module.config._experts_implementation = impl
            torch._dynamo.reset()
            try:
                fn = torch.compile(module, fullgraph=True, mode=mode)
                for ids, w in sets:
                    fn(x, ids, w)
                row["us"] = run(rotating(sets, lambda ids, w: fn(x, ids, w)))
            except Exception as e:  # noqa: BLE001 - a backend the compiler refuses is a row, not the end of the run
                row["skip"] = skip_text(e)
            emit(args, rows, row)
    torch._dynamo.reset()


def emit(args, rows, row):
    rows.append(row)
    line = json.dumps(row)
    print(line, flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(line + "\n")


def table(rows):
    """One line per (shape, T): each implementation's µs, and moex's best over transformers' best."""
    keys = sorted({(r["shape"], r["T"]) for r in rows}, key=lambda s: (s[0], s[1]))
    impls = []
    for r in rows:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    print(f"{'shape':<18} {'T':>6} " + " ".join(f"{i[:16]:>16}" for i in impls) + "  moex÷hf", file=sys.stderr)
    for shape, T in keys:
        got = {r["impl"]: r.get("us") for r in rows if r["shape"] == shape and r["T"] == T}
        hf = [v for i, v in got.items() if v and not i.startswith(("moex", "direct"))]
        mx = [v for i, v in got.items() if v and i.startswith("moex")]
        ratio = f"{min(hf) / min(mx):.2f}x" if hf and mx else "-"
        cells = " ".join(f"{got[i]:>16.1f}" if got.get(i) else f"{'-':>16}" for i in impls)
        print(f"{shape:<18} {T:>6} {cells}  {ratio}", file=sys.stderr)


def overhead(args):
    """The Python layer's cost per call (see --overhead above), as JSON rows and a short table."""
    from transformers.integrations.moe import ExpertsInterface

    import moex_experts.ops as ops

    torch.set_grad_enabled(False)
    device = args.device
    gen = torch.Generator().manual_seed(0)
    module, noop = (Qwen3MoeExperts(Qwen3MoeConfig(hidden_size=64, moe_intermediate_size=32, num_experts=8,
                                                   num_experts_per_tok=2)).to(device) for _ in range(2))
    for m in (module, noop):
        for p in m.parameters():
            p.data.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    x = torch.randn(1, 64, generator=gen).to(device)
    ids, w = torch.tensor([[1, 5]], device=device), torch.tensor([[0.75, 0.25]], device=device)
    out = torch.empty_like(x)
    up, down = module.gate_up_proj, module.down_proj
    dl = torch._C._to_dlpack
    stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else 0
    ExpertsInterface.register("bench_noop", lambda self, x, ids, w, **kwargs: x)
    module.config._experts_implementation = "moex_batched_mm"
    noop.config._experts_implementation = "bench_noop"
    real, real_tensors = _moex.experts, getattr(_moex, "experts_tensors", None)

    class Stub:  # moex_experts._moex with the experts calls Python no-ops (the tensors one returns x as its output)
        experts = staticmethod(lambda *a, **k: None)
        experts_tensors = staticmethod(lambda *a, **k: a[1])

    class OneThread:  # the real calls on one moex thread (a pool's wake-ups would depend on the time between calls)
        experts = staticmethod(lambda *a: real(*a, 1))  # after the stream: num_threads
        experts_tensors = staticmethod(lambda *a: real_tensors(*a, 1))  # after the layout: num_threads

    calls = {
        "moex_batched_mm": lambda: module(x, ids, w),
        "noop": lambda: noop(x, ids, w),
        "direct": lambda: real("batched_mm", dl(x), dl(ids), dl(w), dl(up), dl(down), None, None, dl(out),
                               stream=stream, num_threads=1),
    }
    if real_tensors is not None:  # torch tensors straight in, the output allocated by the bindings
        layout = (True, False, True, "silu", "default", 1.702, 7.0)  # what moex_experts passes for this module
        calls["direct_tensors"] = lambda: real_tensors("batched_mm", x, ids, w, up, down, None, None, *layout, 1)
    for mode in ("real", "stubbed"):
        ops._moex = OneThread() if mode == "real" else Stub()
        best = {name: float("inf") for name in calls}
        for fn in calls.values():
            fn()
        for _ in range(args.overhead_rounds):
            for name, fn in calls.items():
                t0 = time.thread_time_ns()
                for _ in range(1000):
                    fn()
                best[name] = min(best[name], (time.thread_time_ns() - t0) / 1e6)  # µs per call
        ops._moex = _moex
        direct = min(v for k, v in best.items() if k.startswith("direct"))  # the cheapest direct call
        ours = best["moex_batched_mm"] - best["noop"] - (direct if mode == "real" else 0.0)
        print(json.dumps(dict(kind="overhead", mode=mode, device=device, **{f"{k}_us": round(v, 3)
                                                                            for k, v in best.items()},
                              ours_us=round(ours, 3))), flush=True)
        tensors = f" / tensors {best['direct_tensors']:6.2f}" if "direct_tensors" in best else ""
        print(f"{mode:8s} module+moex {best['moex_batched_mm']:6.2f} us  transformers no-op {best['noop']:6.2f} us  "
              f"direct binding {best['direct']:6.2f}{tensors} us  -> Python layer (ours) {ours:6.2f} us",
              file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shapes", help="comma-separated names of common/shapes.h (default: all)")
    ap.add_argument("--tokens", default=None, help="default CUDA 1,8,64,512,4096,16384; CPU 1,8,64,512,1024")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-batched-gb", type=float, default=20.0)
    ap.add_argument("--json", help="append JSON lines to this file")
    ap.add_argument("--compile", action="store_true", help="add torch.compile rows (see above)")
    ap.add_argument("--compile-by-T", dest="compile_by_t", action="store_true",
                    help="with --compile: issue #12's modes per T (see above)")
    ap.add_argument("--peers-only", action="store_true", help="transformers' backends only (no moex package needed)")
    ap.add_argument("--overhead", action="store_true", help="measure the Python layer alone (see above)")
    ap.add_argument("--overhead-rounds", type=int, default=200)
    args = ap.parse_args()
    if moex_experts is None and not args.peers_only:
        ap.error("the moex_experts package is not importable: install it (pip install .) or pass --peers-only")
    if args.peers_only and args.overhead:
        ap.error("--overhead measures moex's Python layer: it does not go with --peers-only")
    args.tokens = [int(t) for t in (args.tokens or ("1,8,64,512,4096,16384" if args.device == "cuda"
                                                   else "1,8,64,512,1024")).split(",")]
    transformers.logging.set_verbosity_error()
    wanted = set(args.shapes.split(",")) if args.shapes else None
    print(json.dumps(dict(kind="machine", device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                          torch=torch.__version__, transformers=transformers.__version__,
                          moex_backends=moex_hf.registered_names() if not args.peers_only else [])), flush=True)
    if args.overhead:
        return overhead(args)
    rows = []
    for name, H, I, E, k in model_shapes():
        if wanted is None or name in wanted:
            bench_shape(args, name, H, I, E, k, rows)
    table(rows)


if __name__ == "__main__":
    main()
