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
"""

import weakref

import torch
from transformers.integrations import moe as _hf_moe

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


def _entry(backend: str):
    def forward(self, hidden_states, top_k_index, top_k_weights, **kwargs):
        return experts_forward(self, hidden_states, top_k_index, top_k_weights, backend, **kwargs)

    forward.__name__ = forward.__qualname__ = f"moex_{backend}_experts_forward"
    return forward


def register(backend: str, name: str = None) -> str:
    """Registers moex backend `backend` in transformers' ExpertsInterface as `name` (default moex_<backend>)."""
    name = name or f"moex_{backend}"
    _hf_moe.ExpertsInterface.register(name, _entry(backend))
    return name


def registered_names():
    """The names this module registered, in registration order."""
    return list(_REGISTERED)


_REGISTERED = [register(b["name"]) for b in _moex.backends()]
_REGISTERED.append(register("auto", "moex"))
