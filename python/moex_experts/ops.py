"""The experts call on torch tensors: one torch custom op, ``moex::experts``, so that torch.compile(fullgraph=True)
sees each call as a single node and CUDA graphs capture it (moex's batched_mm and grouped_mm never synchronise the
host; their scratch comes from moex's stream-ordered pool, which graph capture records as graph memory nodes).

Dtype rule (what autocast gets, too): the activations follow the expert weights, as transformers' grouped_mm does
since its PR #47933: ``hidden_states`` is cast to the weights' dtype for the call and the output comes back in
``hidden_states``' dtype; routing weights that are neither float32 nor that dtype become float32.

No moex backend has a backward pass yet: the forward runs whatever requires grad (an eval forward outside
torch.no_grad() works), and a backward through it raises ``NotImplementedError`` naming the backend and the backends
that have one.
"""

from typing import Optional

import torch

from . import _moex

_FLOAT_TYPES = (torch.float32, torch.bfloat16, torch.float16)
BACKENDS_WITH_BACKWARD = ()  # none yet (issue #14 adds them); the error message names them


# torch's C-level exporter (what torch.utils.dlpack.to_dlpack calls, a third of its cost): a capsule never
# synchronises streams, so the call runs on the stream it is given, as torch's own kernels do.
_to_dlpack = getattr(torch._C, "_to_dlpack", torch.utils.dlpack.to_dlpack)


def _dlpack(t):
    return None if t is None else _to_dlpack(t)


# The current stream's handle as an int, without building a torch.cuda.Stream (what inductor's generated code calls).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream_of(t: torch.Tensor) -> int:
    if not t.is_cuda:
        return 0
    return _raw_stream(t.device.index) if _raw_stream else torch.cuda.current_stream(t.device).cuda_stream


def _run(backend, x, ids, w, gate_up, down, gate_up_bias, down_bias, layout) -> torch.Tensor:
    out = torch.empty((x.shape[0], x.shape[1]), dtype=x.dtype, device=x.device)
    if x.shape[0] == 0:
        return out
    if x.is_cuda and x.device.index != torch.cuda.current_device():
        with torch.cuda.device(x.device):
            return _run(backend, x, ids, w, gate_up, down, gate_up_bias, down_bias, layout)
    _moex.experts(backend, _dlpack(x), _dlpack(ids), _dlpack(w), _dlpack(gate_up), _dlpack(down),
                  _dlpack(gate_up_bias), _dlpack(down_bias), _dlpack(out), *layout, _stream_of(x))
    return out


@torch.library.custom_op("moex::experts", mutates_args=())
def experts_op(hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
               gate_up_proj: torch.Tensor, down_proj: torch.Tensor, gate_up_bias: Optional[torch.Tensor],
               down_bias: Optional[torch.Tensor], backend: str, has_gate: bool, is_transposed: bool,
               is_concatenated: bool, activation: str, gate: str, swiglu_alpha: float,
               swiglu_limit: float) -> torch.Tensor:
    """out (T, H) = sum_j top_k_weights[t, j] * f_{top_k_index[t, j]}(hidden_states[t]) through moex backend `backend`."""
    layout = (has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit)
    return _run(backend, hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias,
                layout)


@experts_op.register_fake
def _(hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, backend, has_gate,
      is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit):
    return hidden_states.new_empty((hidden_states.shape[0], hidden_states.shape[1]))


def _no_backward(ctx, grad):
    raise NotImplementedError(f"moex backend `{ctx.backend}` has no backward pass yet; backends with one: "
                              f"{', '.join(BACKENDS_WITH_BACKWARD) or 'none yet'} (train with transformers' own "
                              "grouped_mm, or run moex under torch.no_grad())")


def _setup_context(ctx, inputs, output):
    ctx.backend = inputs[7]


torch.library.register_autograd("moex::experts", _no_backward, setup_context=_setup_context)


def experts(hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
            gate_up_proj: torch.Tensor, down_proj: torch.Tensor, gate_up_bias: Optional[torch.Tensor] = None,
            down_bias: Optional[torch.Tensor] = None, *, backend: str = "auto", has_gate: bool = True,
            is_transposed: bool = False, is_concatenated: bool = True, activation: str = "silu",
            gate: str = "default", swiglu_alpha: float = 1.702, swiglu_limit: float = 7.0) -> torch.Tensor:
    """One experts call of the Hugging Face contract on torch tensors (CPU or CUDA, any strides moex takes).

    hidden_states (T, H); top_k_index (T, k) int32/int64, ids outside [0, E) add exactly zero; top_k_weights (T, k);
    gate_up_proj (E, 2I, H) ([gate | up] rows, or interleaved when is_concatenated=False; (E, H, 2I) transposed; the
    up projection (E, I, H) when has_gate=False); down_proj (E, H, I) ((E, I, H) transposed); biases (E, 2I) / (E, H).
    activation: silu | gelu | gelu_pytorch_tanh | relu; gate: default (act(gate) * up) | gpt_oss (clamped SwiGLU with
    swiglu_alpha / swiglu_limit). backend: a moex backend name, or "auto" (the decode kernel for a few rows per
    expert, grouped GEMMs for many). Returns (T, H) in hidden_states' dtype.
    """
    dtype = hidden_states.dtype
    x = hidden_states if dtype == gate_up_proj.dtype else hidden_states.to(gate_up_proj.dtype)
    w = top_k_weights if top_k_weights.dtype in (torch.float32, x.dtype) else top_k_weights.float()
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, w, gate_up_proj, down_proj, gate_up_bias, down_bias))):
        # The custom op: one node for torch.compile, and a backward that says it is missing.
        out = experts_op(x, top_k_index, w, gate_up_proj, down_proj, gate_up_bias, down_bias, backend, has_gate,
                         is_transposed, is_concatenated, activation, gate, float(swiglu_alpha), float(swiglu_limit))
    else:  # eager inference: the same call without the op dispatcher's cost (~100 µs on a slow core)
        layout = (has_gate, is_transposed, is_concatenated, activation, gate, float(swiglu_alpha), float(swiglu_limit))
        out = _run(backend, x, top_k_index, w, gate_up_proj, down_proj, gate_up_bias, down_bias, layout)
    return out if out.dtype == dtype else out.to(dtype)
