"""moex: the experts part of Mixture-of-Experts models through interchangeable C++/CUDA backends.

    import moex_experts
    moex_experts.backends()                      # every registered backend and where it can run
    out = moex_experts.experts(x, ids, w, gate_up_proj, down_proj, backend="grouped_mm")   # torch tensors
    model = moex_experts.Model.from_pretrained(path, device="cuda", experts_implementation="grouped_mm")
    import moex_experts.transformers             # moex_<name> and "moex" in transformers' ExpertsInterface

The torch-facing pieces (experts, the moex::experts custom op) import torch on first use; the registry and the
model API need no torch.
"""

from ._moex import GenerationResult, Model, backends, register_backend, why_not, with_cuda

__all__ = ["GenerationResult", "Model", "backends", "experts", "register_backend", "why_not", "with_cuda"]
__version__ = "0.1.0"


def __getattr__(name):  # the torch-facing names import torch on first use, then stay module attributes
    if name == "experts":
        from .ops import experts

        globals()["experts"] = experts
        return experts
    raise AttributeError(f"module 'moex_experts' has no attribute '{name}'")
