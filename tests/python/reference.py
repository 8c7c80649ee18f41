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


def gated(g, v, activation, gate, swiglu_alpha, swiglu_limit):
    """h from the gate and up halves: act(g) * v, or GPT-OSS's clamped SwiGLU."""
    if gate == "gpt_oss":
        g = g.clamp(max=swiglu_limit)
        v = v.clamp(-swiglu_limit, swiglu_limit)
        return (v + 1) * g * torch.sigmoid(swiglu_alpha * g)
    return act(activation, g) * v


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
                h = gated(g, v, activation, gate, swiglu_alpha, swiglu_limit)
            else:
                h = act(activation, u)
            Wd = down[e].T if is_transposed else down[e]  # (H, I)
            y = Wd @ h
            if down_bias is not None:
                y = y + down_bias[e]
            out[t] += w[t, j] * y
    return out


# ---- quantized experts (moex/quant.h): exact dequantization in float64, activation quantization in f32 ----

FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def _scale_values(s):
    """A scale companion as float64: float32, ue8m0 (float8_e8m0fnu, or uint8 bytes read as 2^(b - 127)), e4m3."""
    if s.dtype == torch.uint8:
        return torch.pow(2.0, s.double() - 127)
    return s.double()


def unpack_fp4(codes):
    """(..., K / 2) bytes of two e2m1 codes (low nibble = even k) as float64 (..., K)."""
    b = codes.contiguous().view(torch.uint8).long()
    lut = torch.tensor(FP4_VALUES, dtype=torch.float64)
    return torch.stack([lut[b & 15], lut[b >> 4]], dim=-1).reshape(*b.shape[:-1], 2 * b.shape[-1])


def dequantize(w, scale_inv, quant, block_size=None, global_scale=None):
    """Weights (E, N, K) of one quantized projection in float64, exactly."""
    w, s = w.cpu(), _scale_values(scale_inv.cpu())
    if quant == "fp8":
        codes = w.double()
        E, N, K = codes.shape
        if block_size is None:  # per-tensor: one scale per expert
            return codes * s.reshape(E, -1)[:, :1, None]
        bn, bk = block_size
        rows = torch.arange(N) // bn
        cols = torch.arange(K) // bk
        return codes * s[:, rows][:, :, cols]
    codes = unpack_fp4(w)
    E, N, K = codes.shape
    group = 32 if quant == "mxfp4" else 16
    out = codes * s.repeat_interleave(group, dim=-1)
    if quant == "nvfp4":
        out = out * global_scale.cpu().double()[:, None, None]
    return out


def quantize_activations(x, scheme, group, static_scale=None):
    """moex/quant.h's activation quantization of rows x (R, K) (float64 values rounded to f32 first): dynamic, each
    `group` of a row to the e4m3 codes of x * min(448 / amax, FLT_MAX) (moex/quant.h dynamic_inverse), scaled back by
    the f32 amax / 448; static, x / scale clamped to +-448; then back in f32."""
    x = x.float()
    if scheme == "static":
        q = (x / static_scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return (q.float() * static_scale).double()
    R, K = x.shape
    g = x.reshape(R, K // group, group)
    amax = g.abs().amax(dim=-1, keepdim=True)
    s = amax / 448.0
    # torch.full_like(...) / amax: a scalar over a tensor is computed as reciprocal times 448 (two roundings)
    inv = torch.where(amax > 0, (torch.full_like(amax, 448.0) / amax).clamp(max=torch.finfo(torch.float32).max),
                      torch.ones_like(amax))
    q = (g * inv).to(torch.float8_e4m3fn)
    return torch.where(amax > 0, q.float() * s, g).reshape(R, K).double()


def quantized_experts_reference(x, ids, w, up, down, *, quant, up_scale_inv, down_scale_inv, block_size=None,
                                activation_scheme=None, up_activation_scale=None, down_activation_scale=None,
                                up_global_scale=None, down_global_scale=None, has_gate=True, activation="silu",
                                gate="default", swiglu_alpha=1.702, swiglu_limit=7.0):
    """The float64 reference of a quantized experts call: the weights dequantized exactly, each GEMM input quantized
    as moex/quant.h says (activation_scheme None: dynamic for fp8, none for FP4). The hidden activations are rounded
    to x's dtype when it is 16-bit, as the backends hold them (tests/reference.cpp's round_hidden_to)."""
    hidden_dtype = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else None
    scheme = activation_scheme or ("dynamic" if quant == "fp8" else "none")
    Wu = dequantize(up, up_scale_inv, quant, block_size, up_global_scale)  # (E, N, H)
    Wd = dequantize(down, down_scale_inv, quant, block_size, down_global_scale)  # (E, H, I)
    x, w, ids = x.double().cpu(), w.double().cpu(), ids.cpu()
    E, T, k = Wu.shape[0], ids.shape[0], ids.shape[1]
    out = torch.zeros(T, x.shape[1], dtype=torch.float64)
    for e in range(E):
        t, j = (ids == e).nonzero(as_tuple=True)
        if t.numel() == 0:
            continue
        xe = x[t]
        if scheme != "none":
            group = block_size[1] if block_size is not None else xe.shape[1]
            scale = None if up_activation_scale is None else up_activation_scale.cpu().float()[e]
            xe = quantize_activations(xe, scheme, group, scale)
        u = xe @ Wu[e].T
        if has_gate:
            h = gated(*u.chunk(2, dim=-1), activation, gate, swiglu_alpha, swiglu_limit)
        else:
            h = act(activation, u)
        if hidden_dtype is not None:
            h = h.to(hidden_dtype).double()
        if scheme != "none":
            group = block_size[1] if block_size is not None else h.shape[1]
            scale = None if down_activation_scale is None else down_activation_scale.cpu().float()[e]
            h = quantize_activations(h, scheme, group, scale)
        out.index_add_(0, t, w[t, j, None] * (h @ Wd[e].T))
    return out


def _e2m1_codes(v):
    """Nearest e2m1 code of each value (ties to the lower magnitude: any code is a valid test weight)."""
    lut = torch.tensor(FP4_VALUES[:8], dtype=torch.float32)
    mag = (v.abs().unsqueeze(-1) - lut).abs().argmin(dim=-1)
    return (mag | torch.where(v < 0, 8, 0)).to(torch.uint8)


def _pack_fp4(codes):
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).contiguous()


def quantize(w, quant, block_size=(128, 128), scale_fmt="float", min_scale_rows=1):
    """Float weights (E, N, K) quantized the way transformers writes them (torch ops, independent of moex's
    quantizer): fp8 per block amax / 448 (ue8m0: rounded up to a power of two), mxfp4 per 32 along K 2^ceil(log2(amax
    / 6)), nvfp4 per 16 an e4m3 scale under a per-expert global amax / (448 * 6). Returns (codes, scale_inv,
    global_scale); FP4 codes are uint8, two per byte."""
    w = w.float().cpu()
    E, N, K = w.shape
    if quant == "fp8":
        bn, bk = (N, K) if block_size is None else block_size
        blocks = w.reshape(E, N // bn, bn, K // bk, bk)
        amax = blocks.abs().amax(dim=(2, 4))
        s = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
        if scale_fmt == "ue8m0":
            s = torch.exp2(torch.ceil(torch.log2(s)))
        q = (blocks / s[:, :, None, :, None]).clamp(-448, 448).reshape(E, N, K).to(torch.float8_e4m3fn)
        if block_size is not None and s.shape[1] < min_scale_rows:  # FP8Experts' row per gate_up half
            s = torch.cat([s, torch.ones(E, min_scale_rows - s.shape[1], s.shape[2])], dim=1)
        s = s.to(torch.float8_e8m0fnu) if scale_fmt == "ue8m0" else s.contiguous()
        return q, s, None
    group = 32 if quant == "mxfp4" else 16
    g = w.reshape(E, N, K // group, group)
    amax = g.abs().amax(dim=-1)
    if quant == "mxfp4":
        s = torch.where(amax > 0, torch.exp2(torch.ceil(torch.log2(amax / 6.0))), torch.ones_like(amax))
        codes = _e2m1_codes(g / s[..., None]).reshape(E, N, K)
        return _pack_fp4(codes), s.to(torch.float8_e8m0fnu), None
    glob = w.abs().reshape(E, -1).amax(dim=-1) / (448.0 * 6.0)
    glob = torch.where(glob > 0, glob, torch.ones_like(glob))
    s = (amax / (6.0 * glob[:, None, None])).to(torch.float8_e4m3fn)
    s = torch.where(s.float() == 0, torch.full_like(s.float(), 2.0 ** -9), s.float()).to(torch.float8_e4m3fn)
    codes = _e2m1_codes(g / (s.float() * glob[:, None, None])[..., None]).reshape(E, N, K)
    return _pack_fp4(codes), s, glob.float().contiguous()
