"""moex's backends inside transformers' own ExpertsInterface.

    import moex_experts.transformers          # registers moex_<name> for every moex backend, and "moex"
    model = AutoModelForCausalLM.from_pretrained(path, experts_implementation="moex_grouped_mm")
    model.set_experts_implementation({"text_config": "moex", "": "moex_batched_mm"})

"moex" picks moex's fastest kernel for each call (the decode kernel for a few rows per expert, grouped GEMMs for
many); transformers' own decode switch rewrites only the exact string "grouped_mm", so "moex" makes that choice
itself, per call. Every layout flag the decorator sets on the experts module is honoured (is_transposed,
is_concatenated, has_gate, has_bias), GPT-OSS's clamped SwiGLU gate (alpha and limit from the module, which reads
them from the config in 5.23 and hard-codes them in 5.17) runs as moex's gpt_oss gate, and expert-parallel inputs
((N, 1) local ids, sentinel ids >= E) need nothing special. What moex cannot run is refused with NotImplementedError
naming the module: a post-expert norm (5.23's has_post_expert_norm), any other custom _apply_gate, an activation
outside silu / gelu / gelu tanh / relu, and Mega MoE's process_group. An eager call reads a module's layout on its
first call and keeps it (weights are read on every call).

Quantized experts: the same names (moex_<name> for every moex backend that takes a quantized format, and "moex") go
into transformers' FP8ExpertsInterface (transformers.integrations.finegrained_fp8), which FineGrainedFP8Config's
FP8Experts modules dispatch through. Their float8_e4m3fn weights with float32 or ue8m0 block scales (block_size, or
per-tensor when it is None), activation_scheme dynamic (e4m3 per (row, block_k) group, scale amax / 448) or static
(gate_up_proj_activation_scale / down_proj_activation_scale), and FP4 experts (expert_dtype="fp4": int8-packed e2m1
with ue8m0 scales per 32, run as moex's mxfp4) become one quantized moex call. FP8Experts' own gate is honoured as far
as moex runs it: act(gate) * up, and the clamped SwiGLU of config.swiglu_alpha / swiglu_limit as moex's gpt_oss gate;
the softcapped gate (mlp_gate_softcap) and the clamp without alpha are refused with NotImplementedError naming the
module, as are FP4 weights with float32 scales and static activation scales on FP4 weights. moex runs FP4 weights
weight-only: the activations stay in their dtype where transformers' DeepGEMM path quantizes them to e4m3 per 32.
Without transformers' finegrained_fp8 module (older releases) only ExpertsInterface gets the names.
"""

import math

import torch
from transformers.integrations import moe as _hf_moe

try:
    from transformers.integrations import finegrained_fp8 as _hf_fp8
except ImportError:  # a transformers without FineGrainedFP8: the quantized names are not registered
    _hf_fp8 = None

from . import _moex
from .ops import call as _call

# transformers.activations classes (5.17 and 5.23) and torch's, by name -> moex activation
_ACTIVATIONS = {
    "SiLUActivation": "silu", "SiLU": "silu", "GELUActivation": "gelu", "GELUTanh": "gelu_pytorch_tanh",
    "PytorchGELUTanh": "gelu_pytorch_tanh", "NewGELUActivation": "gelu_pytorch_tanh", "ReLU": "relu",
}
_CONFIG_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_pytorch_tanh",
                       "gelu_new": "gelu_pytorch_tanh", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}
_GPT_OSS_GATES = ("GptOssExperts._apply_gate",)
_DEFAULT_GATE = ("default", 1.702, 7.0)  # (gate, swiglu_alpha, swiglu_limit); alpha and limit unused by it


def _activation(module) -> str:
    act = getattr(module, "act_fn", None)
    if act is not None:
        name = type(act).__name__
        if name == "GELU":  # torch.nn.GELU
            return "gelu_pytorch_tanh" if getattr(act, "approximate", "none") == "tanh" else "gelu"
        if name in _ACTIVATIONS:
            return _ACTIVATIONS[name]
        raise NotImplementedError(f"moex: {type(module).__name__}.act_fn is {name}; moex runs silu, gelu, "
                                  "gelu_pytorch_tanh and relu gates")
    config = getattr(module, "config", None)
    for field in ("hidden_act", "hidden_activation", "mlp_hidden_act"):
        value = getattr(config, field, None)
        if isinstance(value, str):
            if value in _CONFIG_ACTIVATIONS:
                return _CONFIG_ACTIVATIONS[value]
            raise NotImplementedError(f"moex: {type(module).__name__} uses config.{field}={value!r}; moex runs "
                                      "silu, gelu, gelu_pytorch_tanh and relu")
    raise NotImplementedError(f"moex: cannot tell the activation of {type(module).__name__} (no act_fn, no "
                              "config.hidden_act)")


@torch.compiler.assume_constant_result
def _gate_kind(cls) -> str:
    """"default", "gpt_oss", or the qualified name of a custom _apply_gate. Dynamo runs this once per class, eagerly,
    and keeps the answer as a constant: torch 2.11's tracing of a function's __qualname__ returns the descriptor."""
    apply_gate = getattr(cls, "_apply_gate", None)
    if apply_gate is None or apply_gate is getattr(_hf_moe, "_default_apply_gate", None):
        return "default"
    qualname = getattr(apply_gate, "__qualname__", repr(apply_gate))
    return "gpt_oss" if qualname in _GPT_OSS_GATES else qualname


def _gate(module):
    """(gate, alpha, limit) for the module's gate, or NotImplementedError."""
    kind = _gate_kind(type(module))
    if kind == "default":
        return _DEFAULT_GATE
    if kind == "gpt_oss":
        return "gpt_oss", float(getattr(module, "alpha", 1.702)), float(getattr(module, "limit", 7.0))
    raise NotImplementedError(f"moex: {type(module).__name__} has its own _apply_gate ({kind}); moex runs "
                              "act(gate) * up and GPT-OSS's clamped SwiGLU only")


def _gate_layout(module, gate_of):
    """(has_gate, activation, gate, alpha, limit, the up projection's attribute name) of an experts module whose gate
    gate_of reads, or NotImplementedError for a post-expert norm (both module kinds)."""
    if getattr(module, "has_post_expert_norm", False):
        raise NotImplementedError(f"moex: {type(module).__name__} applies a norm after each expert "
                                  "(has_post_expert_norm); moex's backends do not")
    has_gate = getattr(module, "has_gate", True)
    gate, alpha, limit = gate_of(module) if has_gate else _DEFAULT_GATE
    activation = "silu" if gate == "gpt_oss" else _activation(module)
    return has_gate, activation, gate, alpha, limit, ("gate_up_proj" if has_gate else "up_proj")


def _layout(module):
    """The module as moex's call takes it: ((up, up_bias, down_bias) attribute names, the bias ones None without
    biases; (has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit)), or
    NotImplementedError for what moex cannot run."""
    has_gate, activation, gate, alpha, limit, up = _gate_layout(module, _gate)
    biases = (up + "_bias", "down_proj_bias") if getattr(module, "has_bias", False) else (None, None)
    return (up, *biases), (has_gate, getattr(module, "is_transposed", False), getattr(module, "is_concatenated", True),
                           activation, gate, float(alpha), float(limit))


# Eager calls read a module's layout once (it comes from the class decorator and the config, fixed after loading)
# and keep it in the module's __dict__ under read's key (a dict lookup, where a WeakKeyDictionary builds a weakref per
# call); under torch.compile it is read while tracing, and a cache write there would be a side effect for dynamo.
def _cached(module, key, read):
    d = module.__dict__
    layout = d.get(key)
    if layout is None:
        layout = d[key] = read(module)
    return layout


def _tensor(module, params, name):
    """Eagerly from the module's _parameters dict (a twentieth of nn.Module.__getattr__'s cost), which stays the way to
    buffers and plain attributes."""
    t = params.get(name)
    return t if t is not None else getattr(module, name)


def experts_forward(module, hidden_states, top_k_index, top_k_weights, backend: str, **kwargs) -> torch.Tensor:
    """What a moex_<backend> entry of ExpertsInterface runs: the module's weights and flags into one moex call."""
    if kwargs and kwargs.get("process_group") is not None:
        raise NotImplementedError("moex: Mega MoE's process_group (expert-parallel fused kernel) is not supported")
    if torch.compiler.is_compiling():
        (up, up_bias, down_bias), layout = _layout(module)
        up, down = getattr(module, up), module.down_proj
        up_bias = None if up_bias is None else getattr(module, up_bias)
        down_bias = None if down_bias is None else getattr(module, down_bias)
    else:  # _cached and _tensor, written out: this is every eager call's path
        cached = module.__dict__.get("_moex_layout")
        if cached is None:
            cached = module.__dict__["_moex_layout"] = _layout(module)
        (up, up_bias, down_bias), layout = cached
        params = module._parameters
        name, up, down = up, params.get(up), params.get("down_proj")
        if up is None or down is None:
            up, down = getattr(module, name), module.down_proj
        if up_bias is not None:
            up_bias, down_bias = _tensor(module, params, up_bias), _tensor(module, params, down_bias)
    return _call(backend, hidden_states, top_k_index, top_k_weights, up, down, up_bias, down_bias, layout)


# ---- FineGrainedFP8's FP8Experts ----------------------------------------------------------------------------------

_FP4_CONTAINERS = tuple(t for t in (torch.int8, torch.uint8, getattr(torch, "float4_e2m1fn_x2", None)) if t)
_UE8M0 = getattr(torch, "float8_e8m0fnu", None)


@torch.compiler.assume_constant_result
def _fp8_own_gate(cls) -> bool:
    """Whether cls gates with FP8Experts._apply_gate (a constant per class under torch.compile, as _gate_kind)."""
    return getattr(cls, "_apply_gate", None) is getattr(_hf_fp8.FP8Experts, "_apply_gate", None)


def _fp8_gate(module):
    """(gate, alpha, limit) for FP8Experts._apply_gate on this module's attributes, or NotImplementedError."""
    name = type(module).__name__
    if not _fp8_own_gate(type(module)):
        raise NotImplementedError(f"moex: {name} has its own _apply_gate; moex runs FP8Experts' gate only")
    if getattr(module, "gate_softcap", None) is not None:
        raise NotImplementedError(f"moex: {name} uses a softcapped gate (config.mlp_gate_softcap); moex runs act(gate) "
                                  "* up and GPT-OSS's clamped SwiGLU only")
    alpha, limit = getattr(module, "swiglu_alpha", None), getattr(module, "limit", None)
    if alpha is not None:  # (clamp(up, +-limit) + 1) * g * sigmoid(alpha g), g = min(gate, limit)
        return "gpt_oss", float(alpha), math.inf if limit is None else float(limit)
    if limit is not None:
        raise NotImplementedError(f"moex: {name} clamps gate and up to swiglu_limit={limit} before act(gate) * up "
                                  "(config.swiglu_limit without swiglu_alpha); moex's gates do not")
    return _DEFAULT_GATE


def _fp8_layout(module):
    """An FP8Experts module as one moex call takes it: ((weight, scale, activation-scale) attribute names for up and
    down, None where absent), layout (as _layout's) and (quant, block_n, block_k, activation_scheme), or
    NotImplementedError naming the module for what moex cannot run."""
    name = type(module).__name__
    if getattr(module, "has_bias", False):
        raise NotImplementedError(f"moex: {name} has biases; FP8Experts takes none")
    has_gate, activation, gate, alpha, limit, up = _gate_layout(module, _fp8_gate)
    weight, scale = getattr(module, up), getattr(module, up + "_scale_inv")
    scheme = getattr(module, "activation_scheme", "dynamic")
    block = None
    if weight.dtype == torch.float8_e4m3fn:
        quant, block = "fp8", getattr(module, "block_size", None)
        block = (0, 0) if block is None else (int(block[0]), int(block[1]))
    elif weight.dtype in _FP4_CONTAINERS:
        if scale.dtype not in (_UE8M0, torch.uint8):
            raise NotImplementedError(f"moex: {name} holds FP4 weights with {scale.dtype} scales; moex's FP4 weights "
                                      "(mxfp4) take ue8m0 scales (scale_fmt='ue8m0')")
        if scheme == "static":
            raise NotImplementedError(f"moex: {name} has FP4 weights with activation_scheme='static'; moex runs FP4 "
                                      "weights weight-only")
        quant, scheme = "mxfp4", "none"
    else:  # weights left in a float dtype: no scales
        quant, scheme = "none", None
    names = (up, "down_proj")
    if quant != "none":
        names += (up + "_scale_inv", "down_proj_scale_inv")
        if scheme == "static":
            up_act = "gate_up_proj_activation_scale"  # FP8Experts' name also for up_proj
            names += (up_act if hasattr(module, up_act) else "up_proj_activation_scale", "down_proj_activation_scale")
    layout = (has_gate, False, True, activation, gate, float(alpha), float(limit))
    return names, layout, (quant, *(block or (0, 0)), scheme or "")


def _per_tensor_up_scale(module, scale):
    """FP8Experts keeps two rows of per-tensor gate_up scales (one per half, `min_sf_out=2`); moex takes one."""
    if scale.shape[1] == 1:
        return scale
    if scale.shape[1] == 2 and torch.equal(scale[:, 0], scale[:, 1]):
        return scale[:, :1].contiguous()
    raise NotImplementedError(f"moex: {type(module).__name__} has per-tensor weights with a gate_up scale of shape "
                              f"{tuple(scale.shape)} (separate gate and up scales); moex takes one scale per expert")


def fp8_experts_forward(module, hidden_states, top_k_index, top_k_weights, backend: str, **kwargs) -> torch.Tensor:
    """What a moex_<backend> entry of FP8ExpertsInterface runs: an FP8Experts module's codes, scales and gate into
    one quantized moex call."""
    if kwargs and kwargs.get("process_group") is not None:
        raise NotImplementedError("moex: Mega MoE's process_group (expert-parallel fused kernel) is not supported")
    if torch.compiler.is_compiling():
        names, layout, (quant, block_n, block_k, scheme) = _fp8_layout(module)
        tensors = [getattr(module, n) for n in names]
    else:
        names, layout, (quant, block_n, block_k, scheme) = _cached(module, "_moex_fp8_layout", _fp8_layout)
        params = module._parameters
        tensors = [_tensor(module, params, n) for n in names]
    up, down = tensors[0], tensors[1]
    if quant == "none":
        return _call(backend, hidden_states, top_k_index, top_k_weights, up, down, None, None, layout)
    up_scale, down_scale = tensors[2], tensors[3]
    up_act, down_act = (tensors[4], tensors[5]) if len(tensors) > 4 else (None, None)
    if quant == "fp8":
        if up_scale.dtype == torch.uint8:  # ue8m0 bytes as a checkpoint stores them
            up_scale, down_scale = up_scale.view(_UE8M0), down_scale.view(_UE8M0)
        if block_n == 0 and layout[0]:
            up_scale = _per_tensor_up_scale(module, up_scale)
    return _call(backend, hidden_states, top_k_index, top_k_weights, up, down, None, None, layout,
                 (quant, block_n, block_k, scheme, up_scale, down_scale, None, None, up_act, down_act))


# ---- registration --------------------------------------------------------------------------------------------------

def _entry(backend: str, forward_fn=experts_forward, kind: str = "experts"):
    def forward(self, hidden_states, top_k_index, top_k_weights, **kwargs):
        return forward_fn(self, hidden_states, top_k_index, top_k_weights, backend, **kwargs)

    forward.__name__ = forward.__qualname__ = f"moex_{backend}_{kind}_forward"
    return forward


def register(backend: str, name: str = None) -> str:
    """Registers moex backend `backend` in transformers' ExpertsInterface as `name` (default moex_<backend>)."""
    name = name or f"moex_{backend}"
    _hf_moe.ExpertsInterface.register(name, _entry(backend))
    return name


def register_fp8(backend: str, name: str = None) -> str:
    """Registers moex backend `backend` in transformers' FP8ExpertsInterface (FineGrainedFP8's FP8Experts modules) as
    `name` (default moex_<backend>)."""
    if _hf_fp8 is None:
        raise ImportError("moex: this transformers has no integrations.finegrained_fp8 (FP8ExpertsInterface)")
    name = name or f"moex_{backend}"
    _hf_fp8.FP8ExpertsInterface.register(name, _entry(backend, fp8_experts_forward, "fp8_experts"))
    return name


def registered_names():
    """The names this module registered in ExpertsInterface, in registration order."""
    return list(_REGISTERED)


def registered_fp8_names():
    """The names this module registered in FP8ExpertsInterface: the backends with a quantized format on some device,
    and "moex"; empty without transformers' finegrained_fp8."""
    return list(_REGISTERED_FP8)


def _takes_quantized(info) -> bool:
    return any(info.get("quant_formats", {}).values())


_REGISTERED = [register(b["name"]) for b in _moex.backends()]
_REGISTERED.append(register("auto", "moex"))
_REGISTERED_FP8 = []
if _hf_fp8 is not None and hasattr(_hf_fp8, "FP8ExpertsInterface"):
    _REGISTERED_FP8 = [register_fp8(b["name"]) for b in _moex.backends() if _takes_quantized(b)]
    if _REGISTERED_FP8:
        _REGISTERED_FP8.append(register_fp8("auto", "moex"))
