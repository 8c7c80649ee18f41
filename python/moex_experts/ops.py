"""The experts call on torch tensors: one torch custom op, ``moex::experts``, so that torch.compile(fullgraph=True)
sees each call as a single node and CUDA graphs capture it (moex's batched_mm and grouped_mm never synchronise the
host; their scratch comes from moex's stream-ordered pool, which graph capture records as graph memory nodes).

Dtype rule (what autocast gets, too): the activations follow the expert weights, as transformers' grouped_mm does
since its PR #47933: ``hidden_states`` is cast to the weights' dtype for the call and the output comes back in
``hidden_states``' dtype; routing weights that are neither float32 nor that dtype become float32. Quantized weights
(FP8, FP4 codes) leave the activations in their own dtype (bf16, f16 or f32; any other becomes f32).

Training: the op's registered autograd calls a second custom op, ``moex::experts_backward`` (with a fake
implementation, so torch.compile traces forward and backward without graph breaks), which recomputes h (and gate/up)
from the saved inputs (x, routing, weights; no (S, H) expert outputs are kept) and returns the gradients of
hidden_states, top_k_weights, both projections and their biases. Where the backend's CUDA forward can keep its gate/up
pre-activation ((T*k, N) values in the activation dtype, what transformers' autograd and SonicMoE keep too;
``_moex.saves_for_backward``), training calls ``moex::experts_saving`` instead, whose backward reads it rather than
recomputing the up projection (MOEX_SAVE=0: keep nothing). The CPU eager, batched_mm and grouped_mm share one
deterministic backward, and so do batched_mm and grouped_mm on CUDA (on torch's current stream, no host sync;
BACKENDS_WITH_BACKWARD and the per-device lists come from the registry); a backward on a device or backend without
one (eager on CUDA) or through quantized weights raises ``NotImplementedError`` naming the backends that have one.
"""

import os
from typing import List, Optional, Tuple

import torch

from . import _moex

_FLOAT_TYPES = (torch.float32, torch.bfloat16, torch.float16)


# torch's C-level exporter (what torch.utils.dlpack.to_dlpack calls, a third of its cost): a capsule never
# synchronises streams, so the call runs on the stream it is given, as torch's own kernels do.
_to_dlpack = getattr(torch._C, "_to_dlpack", torch.utils.dlpack.to_dlpack)


def _dlpack(t):
    return None if t is None else _to_dlpack(t)


# The current stream's handle as an int, without building a torch.cuda.Stream (what inductor's generated code calls).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _cuda_stream(t: torch.Tensor) -> int:
    return _raw_stream(t.device.index) if _raw_stream else torch.cuda.current_stream(t.device).cuda_stream


_NO_SCALES = (None,) * 6
_NO_QUANT = ("none", 128, 128, "", *_NO_SCALES)
_FP4_CONTAINERS = tuple(t for t in (torch.uint8, torch.int8, getattr(torch, "float4_e2m1fn_x2", None)) if t is not None)
_FP8 = torch.float8_e4m3fn
_E4M3_SCALES = (torch.float8_e4m3fn,)


# torch >= 2.10 describes a tensor to C through DLPack's exchange API (type(t).__dlpack_c_exchange_api__): the
# bindings then read every tensor in place and allocate the output through torch, with no capsule per tensor and no
# torch.empty from Python (a third of the Python layer's cost at T = 1 on the CPU). Older torch: capsules.
_EXCHANGE = hasattr(torch.Tensor, "__dlpack_c_exchange_api__") and hasattr(_moex, "experts_tensors")


def _run(backend, x, ids, w, gate_up, down, gate_up_bias, down_bias, layout, quant=_NO_QUANT) -> torch.Tensor:
    if x.is_cuda and x.device.index != torch.cuda.current_device():
        with torch.cuda.device(x.device):
            return _run(backend, x, ids, w, gate_up, down, gate_up_bias, down_bias, layout, quant)
    if _EXCHANGE:
        if quant is _NO_QUANT:  # the bindings' defaults: weights in the activation dtype
            return _moex.experts_tensors(backend, x, ids, w, gate_up, down, gate_up_bias, down_bias, *layout)
        return _moex.experts_tensors(backend, x, ids, w, gate_up, down, gate_up_bias, down_bias, *layout, 0, *quant)
    # empty_like is half the cost of torch.empty(shape, dtype=, device=) and gives the (T, H) row-major output for
    # the (T, H) row-major x that moex takes (any other x is refused by moex's validation, before it reads out).
    out = torch.empty_like(x) if x.dim() == 2 else x.new_empty((0, 0))
    if x.dim() == 2 and x.shape[0] == 0:
        return out
    stream = _cuda_stream(x) if x.is_cuda else 0
    ub = None if gate_up_bias is None else _to_dlpack(gate_up_bias)
    db = None if down_bias is None else _to_dlpack(down_bias)
    if quant is _NO_QUANT:
        _moex.experts(backend, _to_dlpack(x), _to_dlpack(ids), _to_dlpack(w), _to_dlpack(gate_up), _to_dlpack(down),
                      ub, db, _to_dlpack(out), *layout, stream)
    else:
        fmt, block_n, block_k, scheme, s0, s1, s2, s3, s4, s5 = quant
        _moex.experts(backend, _to_dlpack(x), _to_dlpack(ids), _to_dlpack(w), _to_dlpack(gate_up), _to_dlpack(down),
                      ub, db, _to_dlpack(out), *layout, stream, 0, fmt, block_n, block_k, scheme, _dlpack(s0),
                      _dlpack(s1), _dlpack(s2), _dlpack(s3), _dlpack(s4), _dlpack(s5))
    return out


@torch.library.custom_op("moex::experts", mutates_args=())
def experts_op(hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
               gate_up_proj: torch.Tensor, down_proj: torch.Tensor, gate_up_bias: Optional[torch.Tensor],
               down_bias: Optional[torch.Tensor], backend: str, has_gate: bool, is_transposed: bool,
               is_concatenated: bool, activation: str, gate: str, swiglu_alpha: float, swiglu_limit: float,
               quant: str = "none", block_n: int = 128, block_k: int = 128, activation_scheme: str = "",
               gate_up_scale_inv: Optional[torch.Tensor] = None, down_scale_inv: Optional[torch.Tensor] = None,
               gate_up_global_scale: Optional[torch.Tensor] = None, down_global_scale: Optional[torch.Tensor] = None,
               gate_up_activation_scale: Optional[torch.Tensor] = None,
               down_activation_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """out (T, H) = sum_j top_k_weights[t, j] * f_{top_k_index[t, j]}(hidden_states[t]) through moex backend `backend`
    (quantized weights: `quant` and the scale companions, as moex_experts.experts takes them)."""
    layout = (has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit)
    q = (quant, block_n, block_k, activation_scheme, gate_up_scale_inv, down_scale_inv, gate_up_global_scale,
         down_global_scale, gate_up_activation_scale, down_activation_scale)
    return _run(backend, hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias,
                layout, q)


@experts_op.register_fake
def _(hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, backend, has_gate,
      is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit, *quant):
    return hidden_states.new_empty((hidden_states.shape[0], hidden_states.shape[1]))


# The backends with a backward on some device, from the registry (each entry of _moex.backends() says per device).
BACKENDS_WITH_BACKWARD = tuple(b["name"] for b in _moex.backends() if any(b.get("has_backward", {}).values()))


def _backward_devices(backend: str):
    if backend == "auto":  # "auto" runs batched_mm or grouped_mm, which share one backward
        backend = "grouped_mm"
    for b in _moex.backends():
        if b["name"] == backend:
            return [d for d, ok in b.get("has_backward", {}).items() if ok]
    return []


def _backward_names(device: str) -> str:
    names = [b["name"] for b in _moex.backends() if b.get("has_backward", {}).get(device)]
    return ", ".join(names) or "none yet"


@torch.library.custom_op("moex::experts_backward", mutates_args=())
def experts_backward_op(grad_out: torch.Tensor, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                        top_k_weights: torch.Tensor, gate_up_proj: torch.Tensor, down_proj: torch.Tensor,
                        gate_up_bias: Optional[torch.Tensor], down_bias: Optional[torch.Tensor], backend: str,
                        has_gate: bool, is_transposed: bool, is_concatenated: bool, activation: str, gate: str,
                        swiglu_alpha: float, swiglu_limit: float, saved_gate_up: Optional[torch.Tensor] = None,
                        saved_slot_row: Optional[torch.Tensor] = None) -> List[torch.Tensor]:
    """The gradients of moex::experts for grad_out (T, H): [hidden_states, top_k_weights, gate_up_proj, down_proj,
    gate_up_bias, down_bias], each in its input's shape and dtype ((0,) for an absent bias). h is recomputed from the
    inputs, and so is gate/up unless saved_gate_up / saved_slot_row hold what moex::experts_saving kept."""
    layout = (has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit)
    saved = (saved_gate_up, saved_slot_row)
    if hidden_states.is_cuda and hidden_states.device.index != torch.cuda.current_device():
        with torch.cuda.device(hidden_states.device):
            return _run_backward(grad_out, hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj,
                                 gate_up_bias, down_bias, backend, layout, saved)
    return _run_backward(grad_out, hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias,
                         down_bias, backend, layout, saved)


def _run_backward(grad_out, hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias,
                  down_bias, backend, layout, saved) -> List[torch.Tensor]:
    grads = [torch.empty_like(t, memory_format=torch.contiguous_format)
             for t in (hidden_states, top_k_weights, gate_up_proj, down_proj)]
    bias_grads = [torch.empty_like(b, memory_format=torch.contiguous_format) if b is not None
                  else hidden_states.new_empty((0,)) for b in (gate_up_bias, down_bias)]
    grads += bias_grads
    ub = None if gate_up_bias is None else _to_dlpack(gate_up_bias)
    db = None if down_bias is None else _to_dlpack(down_bias)
    gub = None if gate_up_bias is None else _to_dlpack(bias_grads[0])
    gdb = None if down_bias is None else _to_dlpack(bias_grads[1])
    stream = _cuda_stream(hidden_states) if hidden_states.is_cuda else 0
    _moex.experts_backward(backend, _to_dlpack(hidden_states), _to_dlpack(top_k_index), _to_dlpack(top_k_weights),
                           _to_dlpack(gate_up_proj), _to_dlpack(down_proj), ub, db, _to_dlpack(grad_out.contiguous()),
                           _to_dlpack(grads[0]), _to_dlpack(grads[1]), _to_dlpack(grads[2]), _to_dlpack(grads[3]), gub,
                           gdb, *layout, 0, stream, _dlpack(saved[0]), _dlpack(saved[1]))
    return grads


@experts_backward_op.register_fake
def _(grad_out, hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, *args,
      **kwargs):
    grads = [torch.empty_like(t, memory_format=torch.contiguous_format)
             for t in (hidden_states, top_k_weights, gate_up_proj, down_proj)]
    return grads + [torch.empty_like(b, memory_format=torch.contiguous_format) if b is not None
                    else hidden_states.new_empty((0,)) for b in (gate_up_bias, down_bias)]


def _backward(ctx, grad, *saved_grads):
    device = ctx.device
    if ctx.quant != "none":
        raise NotImplementedError(f"moex has no backward pass yet through quantized ({ctx.quant}) expert weights: "
                                  "FP8 / FP4 codes have no gradient (dequantize them to train)")
    if device not in _backward_devices(ctx.backend):
        raise NotImplementedError(f"moex backend `{ctx.backend}` has no backward pass on {device} yet; backends with "
                                  f"one there: {_backward_names(device)} (on cpu: {_backward_names('cpu')}; or train "
                                  "with transformers' own grouped_mm)")
    x, ids, w, gate_up, down, gate_up_bias, down_bias, *kept = ctx.saved_tensors
    saved_gate_up, saved_slot_row = kept if kept else (None, None)
    dx, dw, dup, ddown, dub, ddb = experts_backward_op(grad, x, ids, w, gate_up, down, gate_up_bias, down_bias,
                                                       ctx.backend, *ctx.layout, saved_gate_up=saved_gate_up,
                                                       saved_slot_row=saved_slot_row)
    return (dx, None, dw, dup, ddown, dub if gate_up_bias is not None else None,
            ddb if down_bias is not None else None) + (None,) * (ctx.n_inputs - 7)


def _setup_context(ctx, inputs, output):
    ctx.backend = inputs[7]
    ctx.layout = tuple(inputs[8:15])
    ctx.quant = inputs[15] if len(inputs) > 15 else "none"
    ctx.device = inputs[0].device.type
    ctx.n_inputs = len(inputs)
    if isinstance(output, tuple):  # moex::experts_saving: (out, saved_gate_up, saved_slot_row)
        ctx.mark_non_differentiable(output[1], output[2])
        ctx.save_for_backward(*inputs[:7], output[1], output[2])
    else:
        ctx.save_for_backward(*inputs[:7])


torch.library.register_autograd("moex::experts", _backward, setup_context=_setup_context)


def _saving_outputs(x, ids, gate_up, layout):
    """The output (T, H) and the kept state's buffers: gate/up pre-activation (T*k, N) in x's dtype, rows (T*k,)."""
    has_gate, is_transposed = layout[0], layout[1]
    n = gate_up.shape[2] if is_transposed else gate_up.shape[1]
    s = x.shape[0] * ids.shape[1]
    return (x.new_empty((x.shape[0], x.shape[1])), x.new_empty((s, n)),
            torch.empty((s,), dtype=torch.int32, device=x.device))


@torch.library.custom_op("moex::experts_saving", mutates_args=())
def experts_saving_op(hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                      gate_up_proj: torch.Tensor, down_proj: torch.Tensor, gate_up_bias: Optional[torch.Tensor],
                      down_bias: Optional[torch.Tensor], backend: str, has_gate: bool, is_transposed: bool,
                      is_concatenated: bool, activation: str, gate: str, swiglu_alpha: float,
                      swiglu_limit: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """moex::experts for training where the backend keeps its gate/up pre-activation (_moex.saves_for_backward):
    (out (T, H), saved_gate_up (T*k, N) in hidden_states' dtype, saved_slot_row (T*k,) int32); the registered backward
    reads the last two instead of recomputing the up projection."""
    layout = (has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit)
    x = hidden_states
    with torch.cuda.device(x.device):
        out, kept, rows = _saving_outputs(x, top_k_index, gate_up_proj, layout)
        if x.shape[0] > 0:
            _moex.experts_saving(backend, _to_dlpack(x), _to_dlpack(top_k_index), _to_dlpack(top_k_weights),
                                 _to_dlpack(gate_up_proj), _to_dlpack(down_proj), _dlpack(gate_up_bias),
                                 _dlpack(down_bias), _to_dlpack(out), _to_dlpack(kept), _to_dlpack(rows), *layout,
                                 _cuda_stream(x))
    return out, kept, rows


@experts_saving_op.register_fake
def _(hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, backend, has_gate,
      is_transposed, *layout):
    return _saving_outputs(hidden_states, top_k_index, gate_up_proj, (has_gate, is_transposed))


torch.library.register_autograd("moex::experts_saving", _backward, setup_context=_setup_context)


_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _saves(backend, x, ids, w, gate_up, gate_up_bias, down_bias, layout) -> bool:
    """Whether training this call keeps the backend's gate/up pre-activation (the C++ decision, from shapes only)."""
    if not x.is_cuda or os.environ.get("MOEX_SAVE", "1") == "0" or gate_up.dtype != x.dtype:
        return False
    T = x.shape[0]
    if not isinstance(T, int):  # a symbolic T (torch.compile's dynamic shapes): the check does not depend on it
        if backend == "auto":   # below 2^30 / k rows, but "auto" picks by it
            return False
        T = 4096
    has_gate, is_transposed = layout[0], layout[1]
    n = int(gate_up.shape[2] if is_transposed else gate_up.shape[1])
    dtype, w_dtype = _DTYPE_NAMES.get(x.dtype), _DTYPE_NAMES.get(w.dtype)
    if dtype is None or w_dtype is None:
        return False
    return _save_refusal(backend, T, int(x.shape[1]), n // 2 if has_gate else n, int(gate_up.shape[0]),
                         int(ids.shape[1]), dtype, w_dtype, ids.dtype == torch.int64, gate_up_bias is not None,
                         down_bias is not None, tuple(layout), x.device.index or 0) is None


# Constant for a given call shape: torch.compile evaluates it once while tracing (nanobind functions cannot be traced)
# and keeps the answer in the graph.
@torch.compiler.assume_constant_result
def _save_refusal(backend, T, H, I, E, k, dtype, w_dtype, ids_i64, has_up_bias, has_down_bias, layout, device):
    key = (backend, T, H, I, E, k, dtype, w_dtype, ids_i64, has_up_bias, has_down_bias, layout, device)
    if key not in _SAVE_REFUSALS:
        _SAVE_REFUSALS[key] = _moex.saves_for_backward(backend, T, H, I, E, k, dtype, w_dtype, ids_i64, has_up_bias,
                                                       has_down_bias, *layout, device_index=device)
    return _SAVE_REFUSALS[key]


_SAVE_REFUSALS = {}


def _quant_format(weight: torch.Tensor, scale_inv: Optional[torch.Tensor]) -> str:
    """The format quantized weights of this dtype (and scale dtype) are in; "none" for weights in a float dtype."""
    if weight.dtype == _FP8:
        return "fp8"
    if weight.dtype in _FP4_CONTAINERS:
        return "nvfp4" if scale_inv is not None and scale_inv.dtype in _E4M3_SCALES else "mxfp4"
    return "none"


def experts(hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
            gate_up_proj: torch.Tensor, down_proj: torch.Tensor, gate_up_bias: Optional[torch.Tensor] = None,
            down_bias: Optional[torch.Tensor] = None, *, backend: str = "auto", has_gate: bool = True,
            is_transposed: bool = False, is_concatenated: bool = True, activation: str = "silu",
            gate: str = "default", swiglu_alpha: float = 1.702, swiglu_limit: float = 7.0,
            quant: Optional[str] = None, gate_up_scale_inv: Optional[torch.Tensor] = None,
            down_scale_inv: Optional[torch.Tensor] = None, block_size=(128, 128),
            activation_scheme: Optional[str] = None, gate_up_activation_scale: Optional[torch.Tensor] = None,
            down_activation_scale: Optional[torch.Tensor] = None, gate_up_global_scale: Optional[torch.Tensor] = None,
            down_global_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One experts call of the Hugging Face contract on torch tensors (CPU or CUDA, any strides moex takes).

    hidden_states (T, H); top_k_index (T, k) int32/int64, ids outside [0, E) add exactly zero; top_k_weights (T, k);
    gate_up_proj (E, 2I, H) ([gate | up] rows, or interleaved when is_concatenated=False; (E, H, 2I) transposed; the
    up projection (E, I, H) when has_gate=False); down_proj (E, H, I) ((E, I, H) transposed); biases (E, 2I) / (E, H).
    activation: silu | gelu | gelu_pytorch_tanh | relu; gate: default (act(gate) * up) | gpt_oss (clamped SwiGLU with
    swiglu_alpha / swiglu_limit). backend: a moex backend name, or "auto" (the decode kernel for a few rows per
    expert, grouped GEMMs for many). Returns (T, H) in hidden_states' dtype.

    Quantized weights (never transposed; transformers' FP8Experts layout): quant "fp8" | "mxfp4" | "nvfp4", or None
    for the one the weights' dtype names (float8_e4m3fn: fp8; uint8 / int8 / float4_e2m1fn_x2 FP4 codes, two per
    byte along K: mxfp4, nvfp4 when the scales are float8_e4m3fn), with each projection's scale_inv (the up one in
    gate_up_scale_inv also when has_gate=False): fp8 (E, max(N / block_n, 2 for gate_up), K / block_k) float32 or
    float8_e8m0fnu for block_size (block_n, block_k), (E, 1, 1) for block_size None (per-tensor); mxfp4 (E, N, K / 32)
    ue8m0 (float8_e8m0fnu or uint8); nvfp4 (E, N, K / 16) e4m3 plus *_global_scale (E,) float32. activation_scheme:
    None = dynamic for fp8 (each (row, block_k group) of a GEMM input to e4m3 with scale amax / 448), none for FP4
    (weight-only); "static" takes *_activation_scale (E,) float32. The activations keep their dtype.
    """
    fmt = quant if quant is not None else _quant_format(gate_up_proj, gate_up_scale_inv)
    scales = (gate_up_scale_inv, down_scale_inv, gate_up_global_scale, down_global_scale, gate_up_activation_scale,
              down_activation_scale)
    if fmt == "none":
        given = activation_scheme is not None or scales != _NO_SCALES
        q = ("none", 128, 128, activation_scheme or "", *scales) if given else _NO_QUANT  # the bindings refuse them
    else:
        block_n, block_k = (0, 0) if block_size is None else (int(block_size[0]), int(block_size[1]))
        q = (fmt, block_n, block_k, activation_scheme or "", *scales)
    layout = (has_gate, is_transposed, is_concatenated, activation, gate, float(swiglu_alpha), float(swiglu_limit))
    return call(backend, hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias,
                layout, q)


def call(backend, hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, layout,
         quant=_NO_QUANT) -> torch.Tensor:
    """experts() with its arguments resolved (what moex_experts.transformers calls on every forward): layout =
    (has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit) with float alpha and
    limit; quant = (format, block_n, block_k, activation_scheme, gate_up_scale_inv, down_scale_inv,
    gate_up_global_scale, down_global_scale, gate_up_activation_scale, down_activation_scale), _NO_QUANT for weights
    in the activation dtype."""
    dtype = hidden_states.dtype
    if quant[0] == "none":
        wd = gate_up_proj.dtype
        x = hidden_states if dtype == wd or wd not in _FLOAT_TYPES else hidden_states.to(wd)  # codes without a
        # format are not cast to: moex's message then says what is missing
    else:
        x = hidden_states if dtype in _FLOAT_TYPES else hidden_states.float()
    w = top_k_weights if top_k_weights.dtype is torch.float32 or top_k_weights.dtype is x.dtype else \
        top_k_weights.float()
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, w, gate_up_proj, down_proj, gate_up_bias, down_bias, *quant[4:]))
    if torch.compiler.is_compiling() or needs_grad:
        # The custom op: one node for torch.compile, and a backward that says it is missing. Training keeps the
        # pre-activation where the backend can (moex::experts_saving).
        if needs_grad and quant[0] == "none" and _saves(backend, x, top_k_index, w, gate_up_proj, gate_up_bias,
                                                        down_bias, layout):
            out = experts_saving_op(x, top_k_index, w, gate_up_proj, down_proj, gate_up_bias, down_bias, backend,
                                    *layout)[0]
        else:
            out = experts_op(x, top_k_index, w, gate_up_proj, down_proj, gate_up_bias, down_bias, backend, *layout,
                             *quant)
    else:  # eager inference: the same call without the op dispatcher's cost (~100 µs on a slow core)
        out = _run(backend, x, top_k_index, w, gate_up_proj, down_proj, gate_up_bias, down_bias, layout, quant)
    return out if out.dtype is dtype else out.to(dtype)
