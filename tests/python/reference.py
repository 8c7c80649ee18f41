# The float64 reference of one experts call on torch tensors (the Hugging Face contract), for the package tests.
import torch


def act(name, x):
    if name == "silu":
        return torch.nn.functional.silu(x)
    if name == "gelu":
        return torch.nn.functional.gelu(x)
    if name == "gelu_pytorch_tanh":
        return torch.nn.functional.gelu(x, approximate="tanh")
    return torch.relu(x)


def experts_reference(x, ids, w, up, down, up_bias=None, down_bias=None, *, has_gate=True, is_transposed=False,
                      is_concatenated=True, activation="silu", gate="default", swiglu_alpha=1.702, swiglu_limit=7.0):
    """out[t] = sum_j w[t, j] * f_e(x[t]) in float64; ids outside [0, E) add nothing."""
    x, w, up, down = x.double().cpu(), w.double().cpu(), up.double().cpu(), down.double().cpu()
    up_bias = None if up_bias is None else up_bias.double().cpu()
    down_bias = None if down_bias is None else down_bias.double().cpu()
    ids = ids.cpu()
    E = up.shape[0]
    T, k = ids.shape
    out = torch.zeros(T, x.shape[1], dtype=torch.float64)
    for t in range(T):
        for j in range(k):
            e = int(ids[t, j])
            if e < 0 or e >= E:
                continue
            Wu = up[e].T if is_transposed else up[e]  # (N, H)
            u = Wu @ x[t]
            if up_bias is not None:
                u = u + up_bias[e]
            if has_gate:
                g, v = (u.chunk(2) if is_concatenated else (u[0::2], u[1::2]))
                if gate == "gpt_oss":
                    g = g.clamp(max=swiglu_limit)
                    v = v.clamp(-swiglu_limit, swiglu_limit)
                    h = (v + 1) * g * torch.sigmoid(swiglu_alpha * g)
                else:
                    h = act(activation, g) * v
            else:
                h = act(activation, u)
            Wd = down[e].T if is_transposed else down[e]  # (H, I)
            y = Wd @ h
            if down_bias is not None:
                y = y + down_bias[e]
            out[t] += w[t, j] * y
    return out
