# Times Hugging Face transformers' own experts backends (eager, batched_mm, grouped_mm) on the CPU with the same
# shapes, token counts, routing distribution and E reduction as `moex bench`, and prints a table or JSON lines.
# `--combine moex.jsonl hf.jsonl` merges both tools' JSON lines into one markdown table (for bench/RESULTS.md).
"""Usage:
  python bench/hf_cpu_bench.py [--shapes ...] [--tokens 1,8,64] [--backends eager,batched_mm,grouped_mm]
                               (moex_grouped_mm etc.: moex's backends through the same transformers module)
                               [--dtype bf16] [--threads N] [--reps 5] [--json] [--backward]
  --backward times torch's autograd backward of each call instead (every gradient: x, the routing weights, both
  projections; dO random), after an untimed forward that keeps its activations: moex bench --backward's rows beside
  it also recompute the forward, so torch's figure leaves out work that moex's includes.
  python bench/hf_cpu_bench.py --combine moex.jsonl hf.jsonl
Install: python -m venv .venv-hf && .venv-hf/bin/pip install -r bench/requirements-hf.txt
"""
import argparse
import json
import os
import platform
import re
import statistics
import sys
import time

# The one shape table lives in common/shapes.h; read it rather than copy it, so the two benchmarks cannot drift.
SHAPES_H = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common", "shapes.h")
DEFAULT_TOKENS = [1, 8, 64, 512, 1024, 4096]
KEEP_SETS_OVER_LLC = 4  # as bench/cases.cpp: all weight sets together >= 4x the last-level cache
# (module, experts class, config class, config kwargs builder) per shape name
MODELS = {
    "qwen1.5-moe-a2.7b": ("qwen2_moe", "Qwen2MoeExperts", "Qwen2MoeConfig",
                          lambda H, I, E, k: dict(hidden_size=H, moe_intermediate_size=I, num_experts=E,
                                                  num_experts_per_tok=k)),
    "qwen3-30b-a3b": ("qwen3_moe", "Qwen3MoeExperts", "Qwen3MoeConfig",
                      lambda H, I, E, k: dict(hidden_size=H, moe_intermediate_size=I, num_experts=E,
                                              num_experts_per_tok=k)),
    "mixtral-8x7b": ("mixtral", "MixtralExperts", "MixtralConfig",
                     lambda H, I, E, k: dict(hidden_size=H, intermediate_size=I, num_local_experts=E,
                                             num_experts_per_tok=k)),
    "deepseek-v3": ("deepseek_v3", "DeepseekV3Experts", "DeepseekV3Config",
                    lambda H, I, E, k: dict(hidden_size=H, moe_intermediate_size=I, n_routed_experts=E,
                                            num_experts_per_tok=k)),
}


def read_shapes():
    text = open(SHAPES_H).read()
    block = text[text.index("kModelShapes"):]
    block = block[:block.index("}};")]
    rows = re.findall(r'\{"([^"]+)",\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+)\}', block)
    return {r[0]: tuple(int(v) for v in r[1:]) for r in rows}


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def llc_bytes():
    best = 0
    for i in range(8):
        d = f"/sys/devices/system/cpu/cpu0/cache/index{i}/"
        try:
            kind, size = open(d + "type").read().strip(), open(d + "size").read().strip()
        except OSError:
            continue
        if kind != "Instruction":
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
            best = max(best, int(size.rstrip("KMG")) * mult)
    return best or 32 << 20


def plan(name, H, I, E, k, dsize, max_bytes, llc):
    """The same E reduction and set rotation as bench/cases.cpp plan_shape()."""
    per_expert = 3 * H * I * dsize
    e, note = E, ""
    if per_expert * E > max_bytes:
        e = 1
        while e * 2 <= E and per_expert * e * 2 <= max_bytes:
            e *= 2
        if e < k or per_expert * e > max_bytes:
            raise SystemExit(f"hf_cpu_bench: error: {name}: even k = {k} experts exceed --max-weight-gb")
        note = f"{name} E {E}→{e}: the full weight set exceeds --max-weight-gb; routing is uniform over the {e} kept"
    sets = max(1, -(-KEEP_SETS_OVER_LLC * llc // (per_expert * e)))
    sets = min(sets, max(1, max_bytes // (per_expert * e)))
    return e, sets, note


def build_experts(torch, name, H, I, E, k, dtype, impl, seed, grad=False):
    import importlib
    mod_name, cls_name, cfg_name, kwargs = MODELS[name]
    transformers = importlib.import_module("transformers")
    config = getattr(transformers, cfg_name)(**kwargs(H, I, E, k))
    config._experts_implementation = impl
    cls = getattr(importlib.import_module(f"transformers.models.{mod_name}.modeling_{mod_name}"), cls_name)
    with torch.device("meta"):
        experts = cls(config)
    g = torch.Generator().manual_seed(seed)
    for pname in ("gate_up_proj", "down_proj"):
        shape = getattr(experts, pname).shape
        w = torch.empty(shape, dtype=dtype).normal_(0.0, 0.02, generator=g)
        setattr(experts, pname, torch.nn.Parameter(w, requires_grad=grad))
    return experts.train() if grad else experts.eval()


def routing(torch, T, E, k, dtype, g):
    """k distinct experts per token, uniform over subsets; softmax-normalised weights in the activation dtype."""
    idx = torch.rand(T, E, generator=g).topk(k, dim=1).indices  # (T, k) int64
    w = torch.softmax(torch.randn(T, k, generator=g), dim=1).to(dtype)
    return idx, w


def time_case(call, warmup, reps, case_seconds):
    """call(r) runs repetition r; returns (µs per timed repetition, their r, whether the warm-up is the sample)."""
    def once(r):  # call(r) may time its own part and return it (µs)
        t0 = time.perf_counter()
        own = call(r)
        return own if own is not None else (time.perf_counter() - t0) * 1e6

    warm = 0.0
    for r in range(warmup):
        warm = once(r)
    if warmup and warm * 1e-6 > case_seconds:  # one call is already over budget: it is the one sample
        return [warm], [warmup - 1], True
    n = reps if not warm else max(1, min(reps, int(case_seconds * 1e6 / warm)))
    picks = list(range(warmup, warmup + n))
    return [once(r) for r in picks], picks, False


def run(args):
    import torch
    import transformers
    torch.set_num_threads(args.threads or os.cpu_count())
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    dsize = torch.tensor([], dtype=dtype).element_size()
    shapes = read_shapes()
    names = args.shapes.split(",") if args.shapes else list(shapes)
    for n in names:
        if n not in shapes or n not in MODELS:
            raise SystemExit(f"hf_cpu_bench: error: unknown shape `{n}`; valid: {', '.join(shapes)}")
    tokens = [int(t) for t in args.tokens.split(",")]
    backends = args.backends.split(",")
    if any(b.startswith("moex") for b in backends):  # moex's backends inside transformers' own module (training
        import moex_experts.transformers  # noqa: F401  # through torch autograd, fresh gradients each call)
    llc = llc_bytes()
    emit = (lambda o: print(json.dumps(o), flush=True)) if args.json else None
    head = {"kind": "machine", "impl": "transformers", "cpu": cpu_model(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads(), "dtype": str(dtype).replace("torch.", ""),
            "command": " ".join(sys.argv)}
    if emit:
        emit(head)
    else:
        print(f"transformers {head['transformers']} experts backends, torch {head['torch']}, "
              f"{head['threads']} threads, {head['dtype']}")
        print(f"{'shape':<18} {'T':>5} {'backend':<11} {'µs':>12} {'GFLOP/s':>8} {'GB/s':>7} {'E_touch':>7}  reps")
    max_bytes = int(args.max_weight_gb * (1 << 30))
    for name in names:
        H, I, E_model, k = shapes[name]
        E, sets, note = plan(name, H, I, E_model, k, dsize, max_bytes, llc)
        if note:
            emit({"kind": "note", "text": note}) if emit else print("note: " + note)
        # One module per weight set; the backend is read from config._experts_implementation at each call.
        sets_ = [build_experts(torch, name, H, I, E, k, dtype, backends[0], args.seed + s, args.backward)
                 for s in range(sets)]
        for T in tokens:
            g = torch.Generator().manual_seed(args.seed * 1000003 + T)
            x = torch.randn(T, H, generator=g).to(dtype)
            routings = [routing(torch, T, E, k, dtype, g) for _ in range(args.warmup + args.reps)]
            for b in backends:
                temp = T * k * 3 * H * I * dsize  # batched_mm gathers one weight copy per (token, slot)
                if b == "batched_mm" and temp > args.max_temp_gb * (1 << 30):
                    reason = (f"batched_mm would allocate {temp / 1e9:.1f} GB (expert weights duplicated per "
                              f"(token, slot)), over --max-temp-gb {args.max_temp_gb}")
                    row = {"kind": "skip", "impl": "transformers", "shape": name, "T": T, "backend": b,
                           "reason": reason}
                    emit(row) if emit else print(f"{name:<18} {T:>5} {b:<11} skipped: {reason}")
                    continue
                for m in sets_:
                    m.config._experts_implementation = b

                def call(r):  # weight set and routing both rotate with the repetition, as in moex bench
                    sets_[r % sets](x, routings[r][0], routings[r][1])

                def call_backward(r):  # the forward untimed, then the backward alone
                    m = sets_[r % sets]
                    m.gate_up_proj.grad = m.down_proj.grad = None
                    xx = x.detach().requires_grad_(True)
                    ww = routings[r][1].detach().requires_grad_(True)
                    out = m(xx, routings[r][0], ww)
                    t0 = time.perf_counter()
                    out.backward(dout)
                    return (time.perf_counter() - t0) * 1e6

                try:
                    if args.backward:
                        dout = torch.randn(T, H, generator=g).to(dtype)
                        us, picks, warm_only = time_case(call_backward, args.warmup, args.reps, args.case_seconds)
                    else:
                        with torch.inference_mode():
                            us, picks, warm_only = time_case(call, args.warmup, args.reps, args.case_seconds)
                except (RuntimeError, MemoryError) as e:
                    row = {"kind": "error", "impl": "transformers", "shape": name, "T": T, "backend": b,
                           "reason": str(e).splitlines()[0]}
                    emit(row) if emit else print(f"{name:<18} {T:>5} {b:<11} ERROR: {row['reason']}")
                    continue
                med = statistics.median(us)
                touched = statistics.mean(len(torch.unique(routings[r][0])) for r in picks)
                gflop = (12.0 if args.backward else 6.0) * T * k * H * I * 1e-9
                gbytes = dsize * 3.0 * H * I * touched * 1e-9
                if args.backward:  # as moex bench --backward counts: weights read twice, every gradient written
                    gbytes = dsize * (3.0 * H * I * (2 * touched + E) + 3.0 * T * H) * 1e-9
                row = {"kind": "result", "impl": "transformers", "shape": name, "H": H, "I": I, "E": E,
                       "E_model": E_model, "k": k, "T": T, "backend": b + ("+bwd" if args.backward else ""),
                       "backward": args.backward, "dtype": head["dtype"],
                       "threads": head["threads"], "us": med, "min_us": min(us), "reps": len(us),
                       "warmup_only": warm_only, "e_touched": touched, "gflop": gflop, "gbytes": gbytes,
                       "gflops": gflop / (med * 1e-6), "gbps": gbytes / (med * 1e-6)}
                if emit:
                    emit(row)
                else:
                    shown = name if E == E_model else f"{name}/E{E}"
                    reps = "1 (warm-up)" if warm_only else str(len(us))
                    print(f"{shown:<18} {T:>5} {row['backend']:<11} {med:>12.1f} {row['gflops']:>8.1f} {row['gbps']:>7.2f} "
                          f"{touched:>7.1f}  {reps}", flush=True)
        del sets_


def combine(paths):
    """One markdown table: per (shape, T), moex's backends and transformers' backends side by side."""
    rows, floor = {}, None
    for p in paths:
        for line in open(p):
            line = line.strip()
            if not line.startswith("{"):
                continue
            o = json.loads(line)
            if o.get("kind") == "floor":
                floor = o
            if o.get("kind") not in ("result", "skip", "error"):
                continue
            key = (o["shape"], o["T"])
            backend = o["backend"]  # moex bench's JSON says backward apart; hf rows carry "+bwd" in the name
            if o.get("backward") and not backend.endswith("+bwd"):
                backend += "+bwd"
            label = f"{o.get('impl', 'moex')} {backend}"
            cell = f"{o['us']:.0f}" if o["kind"] == "result" else ("skip" if o["kind"] == "skip" else "error")
            rows.setdefault(key, {})[label] = (cell, o)
    order = ["eager", "batched_mm", "grouped_mm"]  # then any other backend, by name
    labels = sorted({label for r in rows.values() for label in r},
                    key=lambda s: (not s.startswith("moex"), order.index(s.split()[1]) if s.split()[1] in order else 9,
                                   s))
    print("| shape | T | " + " | ".join(labels) + " | floor µs | best moex ÷ best HF | best moex ÷ llama.cpp |")
    print("|---|---|" + "---|" * (len(labels) + 3))
    for (shape, T), r in rows.items():
        cells = [r.get(label, ("—", None))[0] for label in labels]
        res = [o for _, o in r.values() if o.get("kind") == "result"]
        moex = [o["us"] for o in res if o.get("impl", "moex") == "moex"]
        hf = [o["us"] for o in res if o.get("impl") == "transformers"]
        ggml = [o for o in res if o.get("impl") == "llama.cpp"]  # measured in the run (bench/peers/ggml.sh)
        fl = next((o["floor_us"] for o in res if "floor_us" in o), None)
        ratio = f"{min(moex) / min(hf):.2f}" if moex and hf else "—"
        xl = "—"
        if ggml and moex:
            best = min(ggml, key=lambda o: o["us"])
            xl = f"{min(moex) / best['us']:.2f} ({best['dtype']})"
        fl_text = f"{fl:.0f}" if fl else "—"
        print(f"| {shape} | {T} | " + " | ".join(cells) + f" | {fl_text} | {ratio} | {xl} |")
    if floor:
        print(f"\nfloor: read {floor['read_gbps']:.1f} GB/s, GEMM {floor['gemm_gflops']:.1f} GFLOP/s "
              f"({floor['gemm_best']})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="")
    ap.add_argument("--tokens", default=",".join(map(str, DEFAULT_TOKENS)))
    ap.add_argument("--backends", default="eager,batched_mm,grouped_mm")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--case-seconds", type=float, default=10.0)
    ap.add_argument("--max-weight-gb", type=float, default=6.0)
    ap.add_argument("--max-temp-gb", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--backward", action="store_true", help="time the autograd backward instead (see above)")
    ap.add_argument("--combine", nargs="+", metavar="JSONL")
    args = ap.parse_args()
    if args.combine:
        return combine(args.combine)
    if args.reps < 1 or args.warmup < 0:
        raise SystemExit("hf_cpu_bench: error: --reps must be >= 1 and --warmup >= 0")
    run(args)


if __name__ == "__main__":
    main()
