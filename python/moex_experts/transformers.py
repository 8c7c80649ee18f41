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

import weakref

import torch
from transformers.integrations import moe as _hf_moe

try:
    from transformers.integrations import finegrained_fp8 as _hf_fp8
except ImportError:  # a transformers without FineGrainedFP8: the quantized names are not registered
    _hf_fp8 = None

from . import _moex
from .ops import experts as _experts

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


def _layout(module):
    """The module's layout as moex's call takes it: (has_gate, is_transposed, is_concatenated, has_bias, activation,
    gate, swiglu_alpha, swiglu_limit), or NotImplementedError for what moex cannot run."""
    if getattr(module, "has_post_expert_norm", False):
        raise NotImplementedError(f"moex: {type(module).__name__} applies a norm after each expert "
                                  "(has_post_expert_norm); moex's backends do not")
    has_gate = getattr(module, "has_gate", True)
    gate, alpha, limit = _gate(module) if has_gate else _DEFAULT_GATE
    activation = "silu" if gate == "gpt_oss" else _activation(module)
    return (has_gate, getattr(module, "is_transposed", False), getattr(module, "is_concatenated", True),
            getattr(module, "has_bias", False), activation, gate, alpha, limit)


# Eager calls read a module's layout once (it comes from the class decorator and the config, fixed after loading);
# under torch.compile it is read while tracing, and a cache write there would be a side effect for dynamo to guard.
_LAYOUTS = weakref.WeakKeyDictionary()


def experts_forward(module, hidden_states, top_k_index, top_k_weights, backend: str, **kwargs) -> torch.Tensor:
    """What a moex_<backend> entry of ExpertsInterface runs: the module's weights and flags into one moex call."""
    if kwargs.get("process_group") is not None:
        raise NotImplementedError("moex: Mega MoE's process_group (expert-parallel fused kernel) is not supported")
    if torch.compiler.is_compiling():
        layout = _layout(module)
    else:
        layout = _LAYOUTS.get(module)
        if layout is None:
            layout = _LAYOUTS[module] = _layout(module)
    has_gate, is_transposed, is_concatenated, has_bias, activation, gate, alpha, limit = layout
    up = module.gate_up_proj if has_gate else module.up_proj
    up_bias = down_bias = None
    if has_bias:
        up_bias = module.gate_up_proj_bias if has_gate else module.up_proj_bias
        down_bias = module.down_proj_bias
    return _experts(hidden_states, top_k_index, top_k_weights, up, module.down_proj, up_bias, down_bias,
                    backend=backend, has_gate=has_gate, is_transposed=is_transposed, is_concatenated=is_concatenated,
                    activation=activation, gate=gate, swiglu_alpha=alpha, swiglu_limit=limit)


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
    """An FP8Experts module as one moex call takes it: (has_gate, activation, gate, alpha, limit, quant, block_size,
    activation_scheme), or NotImplementedError naming the module for what moex cannot run."""
    name = type(module).__name__
    if getattr(module, "has_bias", False):
        raise NotImplementedError(f"moex: {name} has biases; FP8Experts takes none")
    if getattr(module, "has_post_expert_norm", False):
        raise NotImplementedError(f"moex: {name} applies a norm after each expert (has_post_expert_norm); moex's "
                                  "backends do not")
    has_gate = getattr(module, "has_gate", True)
    gate, alpha, limit = _fp8_gate(module) if has_gate else _DEFAULT_GATE
    activation = "silu" if gate == "gpt_oss" else _activation(module)
    weight = module.gate_up_proj if has_gate else module.up_proj
    scale = module.gate_up_proj_scale_inv if has_gate else module.up_proj_scale_inv
    scheme = getattr(module, "activation_scheme", "dynamic")
    if weight.dtype == torch.float8_e4m3fn:
        quant, block = "fp8", getattr(module, "block_size", None)
        block = None if block is None else (int(block[0]), int(block[1]))
    elif weight.dtype in _FP4_CONTAINERS:
        if scale.dtype not in (_UE8M0, torch.uint8):
            raise NotImplementedError(f"moex: {name} holds FP4 weights with {scale.dtype} scales; moex's FP4 weights "
                                      "(mxfp4) take ue8m0 scales (scale_fmt='ue8m0')")
        if scheme == "static":
            raise NotImplementedError(f"moex: {name} has FP4 weights with activation_scheme='static'; moex runs FP4 "
                                      "weights weight-only")
        quant, block, scheme = "mxfp4", None, "none"
    else:  # weights left in a float dtype: no scales
        quant, block, scheme = "none", None, None
    return has_gate, activation, gate, alpha, limit, quant, block, scheme


def _per_tensor_up_scale(module, scale):
    """FP8Experts keeps two rows of per-tensor gate_up scales (one per half, `min_sf_out=2`); moex takes one."""
    if scale.shape[1] == 1:
        return scale
    if scale.shape[1] == 2 and torch.equal(scale[:, 0], scale[:, 1]):
        return scale[:, :1].contiguous()
    raise NotImplementedError(f"moex: {type(module).__name__} has per-tensor weights with a gate_up scale of shape "
                              f"{tuple(scale.shape)} (separate gate and up scales); moex takes one scale per expert")


_FP8_LAYOUTS = weakref.WeakKeyDictionary()


def fp8_experts_forward(module, hidden_states, top_k_index, top_k_weights, backend: str, **kwargs) -> torch.Tensor:
    """What a moex_<backend> entry of FP8ExpertsInterface runs: an FP8Experts module's codes, scales and gate into
    one quantized moex call."""
    if kwargs.get("process_group") is not None:
        raise NotImplementedError("moex: Mega MoE's process_group (expert-parallel fused kernel) is not supported")
    if torch.compiler.is_compiling():
        layout = _fp8_layout(module)
    else:
        layout = _FP8_LAYOUTS.get(module)
        if layout is None:
            layout = _FP8_LAYOUTS[module] = _fp8_layout(module)
    has_gate, activation, gate, alpha, limit, quant, block, scheme = layout
    up = module.gate_up_proj if has_gate else module.up_proj
    if quant == "none":
        return _experts(hidden_states, top_k_index, top_k_weights, up, module.down_proj, backend=backend,
                        has_gate=has_gate, activation=activation, gate=gate, swiglu_alpha=alpha, swiglu_limit=limit)
    up_scale = module.gate_up_proj_scale_inv if has_gate else module.up_proj_scale_inv
    down_scale = module.down_proj_scale_inv
    if quant == "fp8":
        if up_scale.dtype == torch.uint8:  # ue8m0 bytes as a checkpoint stores them
            up_scale, down_scale = up_scale.view(_UE8M0), down_scale.view(_UE8M0)
        if block is None and has_gate:
            up_scale = _per_tensor_up_scale(module, up_scale)
    up_act = down_act = None
    if scheme == "static":
        up_act = getattr(module, "gate_up_proj_activation_scale", None)
        if up_act is None:
            up_act = getattr(module, "up_proj_activation_scale", None)
        down_act = getattr(module, "down_proj_activation_scale", None)
    return _experts(hidden_states, top_k_index, top_k_weights, up, module.down_proj, backend=backend,
                    has_gate=has_gate, activation=activation, gate=gate, swiglu_alpha=alpha, swiglu_limit=limit,
                    quant=quant, gate_up_scale_inv=up_scale, down_scale_inv=down_scale, block_size=block,
                    activation_scheme=scheme, gate_up_activation_scale=up_act, down_activation_scale=down_act)


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
