#!/usr/bin/env python3
"""How far bf16 experts backwards land from the float64 gradient, in units of the CUDA backward test's bf16 bound.

The bound (tests/backward_reference.cpp `close`): |got - ref| <= 1.2e-2 * rms(ref) + 8e-3 * |ref| per element. This
script prints max |got - ref| / bound for each gradient of a gated SiLU experts call with the tests' statistics
(x ~ N(0, 1), W_up ~ N(0, 1/H), W_down ~ N(0, 1/I), routing weights ~ N(0, 0.25), dO ~ U(-1, 1)), for:
  torch_bf16    torch autograd in bf16 of transformers' grouped_mm math (per-expert bf16 matmuls, the activation, the
                weighting and the per-token sum in bf16): the precision PyTorch users train with;
  moex_simt     float64 math with the forward's h rounded to bf16 and each gradient rounded once to bf16 (the f32 SIMT
                backward, up to its f32 accumulation);
  moex_tc       moex_simt plus the two bf16 intermediates the tensor-core backward stores (cuda/backward/backward_sm90.cu):
                dA (the gate_up output's gradient, which dx and d gate_up_proj are built from) and w * h (which
                d down_proj is built from).
A ratio above 1 fails the bound. The "+slack" rows use the bound tests/test_backward_cuda.cpp gives the tensor-core
path: the plain one plus 2^-8 of the sum of |products| each gradient element sums (one bf16 rounding of a factor
moves a product by at most 2^-8 of it, bf16's unit roundoff). --gate gptoss: the tests' clamped SwiGLU (limit 1). CPU only; run with the Python package's environment (scripts/test_python.sh):
  ~/.cache/moex/venv/bin/python bench/backward_precision.py [--seeds 4]
"""
import argparse

import torch

ATOL, RTOL = 1.2e-2, 8e-3
SHAPES = {  # (T, H, I, E, k): the two bf16 cases the CUDA tests run, and a larger one with qwen3's k and I / H
    "test_tc_shapes": (700, 256, 72, 9, 2),
    "test_larger_shapes": (300, 136, 72, 5, 2),
    "qwen3_like": (512, 1024, 192, 32, 8),
}
bf16 = torch.bfloat16


def problem(T, H, I, E, k, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, sc: (torch.randn(*s, generator=g, dtype=torch.float64) * sc).to(bf16).double()
    x, wu, wd = r(T, H, sc=1.0), r(E, 2 * I, H, sc=H ** -0.5), r(E, H, I, sc=I ** -0.5)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
    w = (torch.randn(T, k, generator=g, dtype=torch.float64) * 0.5).float().double()
    dout = (torch.rand(T, H, generator=g, dtype=torch.float64) * 2 - 1).to(bf16).double()
    return x, wu, wd, ids, w, dout


def bf(t):
    return t.to(bf16).double()


GATE = "silu"  # or "gptoss": the tests' clamped SwiGLU with limit 1 (--gate)
LIMIT, ALPHA = 1.0, 1.702


def gate64(g, u):
    """h and its derivatives by the gate and the up value (tests/backward_reference.cpp gate64)."""
    if GATE == "gptoss":
        gc, uc = g.clamp(max=LIMIT), u.clamp(-LIMIT, LIMIT)
        s = torch.sigmoid(ALPHA * gc)
        dg = torch.where(g <= LIMIT, (uc + 1) * s * (1 + ALPHA * gc * (1 - s)), 0.0)
        return (uc + 1) * gc * s, dg, torch.where(u.abs() <= LIMIT, gc * s, 0.0)
    s = torch.sigmoid(g)
    return g * s * u, u * s * (1 + g * (1 - s)), g * s


def experts64(x, wu, wd, ids, w, dout, round_da, round_wh):
    """float64 forward + hand-written backward; h rounded to bf16 as every backend stores it, optional bf16 dA / w*h."""
    T, H = x.shape
    I = wd.shape[2]
    gx, gw, gwu, gwd = torch.zeros_like(x), torch.zeros_like(w), torch.zeros_like(wu), torch.zeros_like(wd)
    mags = [torch.zeros_like(x), torch.zeros_like(w), torch.zeros_like(wu), torch.zeros_like(wd)]
    for e in range(wu.shape[0]):
        t, j = (ids == e).nonzero(as_tuple=True)
        if t.numel() == 0:
            continue
        xe, we, de = x[t], w[t, j][:, None], dout[t]
        a = xe @ wu[e].T
        h, dgate_dh, dup_dh = gate64(a[:, :I], a[:, I:])
        h = bf(h)
        y = h @ wd[e].T
        gw[t, j] = (de * y).sum(1)
        wh = bf(we * h) if round_wh else we * h
        gwd[e] = de.T @ wh
        mags[3][e] = de.abs().T @ (we * h).abs()
        dh = (we * de) @ wd[e]
        da = torch.cat([dh * dgate_dh, dh * dup_dh], 1)
        if round_da:
            da = bf(da)
        gwu[e] = da.T @ xe
        gx.index_add_(0, t, da @ wu[e])
        mags[2][e] = da.abs().T @ xe.abs()
        mags[0].index_add_(0, t, da.abs() @ wu[e].abs())
    return (gx, gw, gwu, gwd), mags


def torch_bf16(x, wu, wd, ids, w, dout):
    """transformers' grouped_mm math under torch autograd, everything in bf16."""
    leaves = [v.to(bf16).requires_grad_() for v in (x, wu, wd, w)]
    xb, wub, wdb, wb = leaves
    I = wd.shape[2]
    T, k = ids.shape
    out = torch.zeros(T * k, x.shape[1], dtype=bf16)
    flat = ids.reshape(-1)
    rows = torch.arange(T).repeat_interleave(k)
    for e in range(wu.shape[0]):
        s = (flat == e).nonzero(as_tuple=True)[0]
        if s.numel() == 0:
            continue
        a = xb[rows[s]] @ wub[e].T
        if GATE == "gptoss":
            g = a[:, :I].clamp(max=LIMIT)
            h = (a[:, I:].clamp(-LIMIT, LIMIT) + 1) * g * torch.sigmoid(ALPHA * g)
        else:
            h = torch.nn.functional.silu(a[:, :I]) * a[:, I:]
        out = out.index_copy(0, s, (h @ wdb[e].T) * wb.reshape(-1)[s, None])
    (out.view(T, k, -1).sum(1) * dout.to(bf16)).sum().backward()
    return [v.grad.double() for v in (xb, wb, wub, wdb)]  # the order experts64 returns


def ratio(got, ref, mag=None):
    """max |got - ref| / bound; with mag, the bound gets the CUDA test's slack for bf16 intermediates, 2^-8 mag."""
    bound = ATOL * ref.pow(2).mean().sqrt() + RTOL * ref.abs() + (0 if mag is None else 2.0**-8 * mag)
    return ((got - ref).abs() / bound).max().item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--gate", choices=["silu", "gptoss"], default="silu")
    args = ap.parse_args()
    global GATE
    GATE = args.gate
    torch.set_num_threads(max(1, torch.get_num_threads()))
    names = ["dx", "dw", "d gate_up_proj", "d down_proj"]
    print(f"{GATE}: max |got - ref| / bound over {args.seeds} seeds (bound: {ATOL} * rms + {RTOL} * |ref|; above 1 fails)")
    print("+slack: against the CUDA test's bound for a path with bf16 intermediates, the plain bound + 2^-8 of the sum")
    print("of the magnitudes of the products each element sums (dw has no slack)")
    print(f"{'shape':20} {'path':16} " + " ".join(f"{n:>15}" for n in names))
    for shape, dims in SHAPES.items():
        worst = {}
        for seed in range(args.seeds):
            p = problem(*dims, seed)
            ref, mags = experts64(*p, round_da=False, round_wh=False)
            runs = {
                "torch_bf16": torch_bf16(*p),
                "moex_simt": [bf(g) for g in ref],
                "moex_tc": [bf(g) for g in experts64(*p, round_da=True, round_wh=True)[0]],
            }
            for path, grads in runs.items():
                for key, m in ((path, [None] * 4), (path + "+slack", mags)):
                    if key == "moex_simt+slack":
                        continue
                    r = [ratio(g, f, mm if i != 1 else None) for i, (g, f, mm) in enumerate(zip(grads, ref, m))]
                    worst[key] = [max(a, b) for a, b in zip(worst.get(key, r), r)]
        for path, r in worst.items():
            print(f"{shape:20} {path:16} " + " ".join(f"{v:15.2f}" for v in r))


if __name__ == "__main__":
    main()
