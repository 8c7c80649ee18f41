# moex inside transformers' FP8ExpertsInterface: FineGrainedFP8's FP8Experts modules (qwen3_moe, deepseek_v3 and a
# GPT-OSS-style clamped SwiGLU config; FP8 blocks with float32 and ue8m0 scales, per-tensor, static activation scales,
# FP4 experts) through every moex name against the float64 reference that dequantizes exactly and quantizes the
# activations as moex/quant.h says; a whole tiny FP8 model generating through moex; refusals naming the module.
# transformers' own FP8 experts need the Triton / DeepGEMM hub kernels: they are compared on CUDA only, when loadable.
import inspect

import pytest
import torch

transformers = pytest.importorskip("transformers")
fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8")
import moex_experts.transformers as moex_hf  # noqa: E402  (registers the moex names)
from reference import dequantize, quantize, quantized_experts_reference  # noqa: E402
from test_transformers import FAMILIES, experts_module, tiny_model  # noqa: E402
from transformers.integrations.moe import use_experts_implementation  # noqa: E402

FP8_NAMES = moex_hf.registered_fp8_names()
FP4_EXPERTS = "expert_dtype" in inspect.signature(fp8.FP8Experts.__init__).parameters
SCHEMES = {
    "b16_float": dict(block_size=(16, 16)),
    "b32_ue8m0": dict(block_size=(32, 32), scale_fmt="ue8m0"),
    "per_tensor": dict(block_size=None),
    "static": dict(block_size=(16, 16), activation_scheme="static"),
    "fp4_ue8m0": dict(expert_dtype="fp4", scale_fmt="ue8m0"),
}


def gpt_oss_like():
    """A config FP8Experts reads a GPT-OSS clamped SwiGLU from (swiglu_alpha / swiglu_limit); FP8Experts has no
    biases, so GPT-OSS itself cannot be FP8-converted in transformers 5.23."""
    config = FAMILIES["qwen3_moe"]()
    config.swiglu_alpha, config.swiglu_limit = 1.702, 1.5
    return config


CONFIGS = {"qwen3_moe": FAMILIES["qwen3_moe"], "deepseek_v3": FAMILIES["deepseek_v3"], "gpt_oss_like": gpt_oss_like}


def fp8_experts(config, *, block_size=(16, 16), activation_scheme="dynamic", scale_fmt="float", expert_dtype="fp8",
                has_gate=True, gen=None, weights=None):
    """An FP8Experts module as FineGrainedFP8's replace_with_fp8_linear builds it (a subclass, so that the decorator
    leaves transformers' own class alone), its codes and scales from random float weights, or from `weights`
    (gate_up (E, 2I, H), down (E, H, I)), quantized by the test's torch quantizer."""
    cls = use_experts_implementation(type("FP8Experts", (fp8.FP8Experts,), {}),
                                     experts_interface=fp8.ALL_FP8_EXPERTS_FUNCTIONS, has_gate=has_gate)
    kinds = {}
    if expert_dtype != "fp8":  # FP4 experts came with transformers 5.23; 5.17's FP8Experts has no expert_dtype
        if not FP4_EXPERTS:
            pytest.skip(f"transformers {transformers.__version__}'s FP8Experts has no expert_dtype (FP4 experts)")
        kinds["expert_dtype"] = expert_dtype
    module = cls(config, block_size=block_size, activation_scheme=activation_scheme, scale_fmt=scale_fmt,
                 has_gate=has_gate, **kinds)
    E, H, I = module.num_experts, module.hidden_dim, module.intermediate_dim
    if weights is None:
        N = 2 * I if has_gate else I
        weights = (torch.randn(E, N, H, generator=gen) * H ** -0.5, torch.randn(E, H, I, generator=gen) * I ** -0.5)
    quant = "mxfp4" if expert_dtype == "fp4" else "fp8"
    up_name = "gate_up_proj" if has_gate else "up_proj"
    with torch.no_grad():
        for name, w in ((up_name, weights[0]), ("down_proj", weights[1])):
            codes, scale, _ = quantize(w, quant, block_size, scale_fmt, 2 if name == "gate_up_proj" else 1)
            param, sparam = getattr(module, name), getattr(module, name + "_scale_inv")
            param.copy_(codes.view(param.dtype))
            if sparam.shape != scale.shape:  # per-tensor gate_up: FP8Experts keeps a row per half
                scale = scale.expand(sparam.shape)
            sparam.copy_(scale)
        if activation_scheme == "static":
            module.gate_up_proj_activation_scale.copy_(torch.rand(E, generator=gen) * 0.02 + 0.005)
            module.down_proj_activation_scale.copy_(torch.rand(E, generator=gen) * 0.004 + 0.001)
    return module.eval()


def module_reference(module, x, ids, w):
    """The float64 reference of an FP8Experts module's call (FP8Experts._apply_gate's gates)."""
    has_gate = module.has_gate
    quant = "mxfp4" if module.down_proj.dtype == torch.int8 else "fp8"
    scheme = "none" if quant == "mxfp4" else module.activation_scheme
    gate = dict(gate="gpt_oss", swiglu_alpha=module.swiglu_alpha, swiglu_limit=module.limit) \
        if module.swiglu_alpha is not None else {}
    up = module.gate_up_proj if has_gate else module.up_proj
    up_s = module.gate_up_proj_scale_inv if has_gate else module.up_proj_scale_inv
    static = scheme == "static"
    return quantized_experts_reference(
        x, ids, w, up.detach(), module.down_proj.detach(), quant=quant, up_scale_inv=up_s.detach(),
        down_scale_inv=module.down_proj_scale_inv.detach(), block_size=module.block_size if quant == "fp8" else None,
        activation_scheme=scheme,
        up_activation_scale=module.gate_up_proj_activation_scale.detach() if static else None,
        down_activation_scale=module.down_proj_activation_scale.detach() if static else None, has_gate=has_gate,
        activation="silu", **gate)


def routed(module, T, gen, dtype=torch.float32):
    E, H = module.num_experts, module.hidden_dim
    x = torch.randn(T, H, generator=gen).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=gen)[:2] for _ in range(T)])
    w = torch.softmax(torch.randn(T, 2, generator=gen), -1)
    return x, ids, w


def check(out, ref, tol, what):
    err = (out.double().cpu() - ref).abs()
    rms = ref.pow(2).mean().sqrt().item()
    assert torch.isfinite(out).all() and (err <= tol * (rms + ref.abs())).all(), \
        f"{what}: max error {err.max().item():.3g} at rms {rms:.3g}"


def test_names_are_registered():
    assert {"moex", "moex_grouped_mm", "moex_batched_mm", "moex_eager"} <= set(FP8_NAMES)
    for name in FP8_NAMES:
        assert name in fp8.ALL_FP8_EXPERTS_FUNCTIONS
        assert name in moex_hf.registered_names()  # the same names as for experts in the activation dtype


@pytest.mark.parametrize("family", list(CONFIGS))
@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.parametrize("name", FP8_NAMES)
def test_fp8_experts_match_reference(family, scheme, name, device):
    gen = torch.Generator().manual_seed(11)
    module = fp8_experts(CONFIGS[family](), gen=gen, **SCHEMES[scheme]).to(device)
    x, ids, w = routed(module, 13, gen)
    ref = module_reference(module, x, ids, w)
    module.config._experts_implementation = name
    with torch.no_grad():
        try:
            out = module(x.to(device), ids.to(device), w.to(device))
        except NotImplementedError as e:  # moex takes no quantized weights on this device (CUDA today)
            pytest.skip(str(e))
    assert out.dtype == torch.float32 and out.shape == x.shape
    check(out, ref, 2e-5 if scheme.startswith("fp4") else 2e-3, f"{family} {scheme} {name}")


@pytest.mark.parametrize("T", [1, 40])
def test_bf16_activations_and_ungated_experts(T, device):
    gen = torch.Generator().manual_seed(5)
    config = FAMILIES["qwen3_moe"]()
    for has_gate in (True, False):
        module = fp8_experts(config, has_gate=has_gate, gen=gen).to(device)
        x, ids, w = routed(module, T, gen, torch.bfloat16)
        ref = module_reference(module, x, ids, w)
        module.config._experts_implementation = "moex"
        with torch.no_grad():
            try:
                out = module(x.to(device), ids.to(device), w.to(device))
            except NotImplementedError as e:
                pytest.skip(str(e))
        assert out.dtype == torch.bfloat16
        check(out, ref, 2e-2, f"has_gate={has_gate}")


def test_refusals_name_the_module():
    gen = torch.Generator().manual_seed(2)
    config = FAMILIES["qwen3_moe"]()

    def call(module):
        module.config._experts_implementation = "moex_grouped_mm"
        x, ids, w = routed(module, 3, gen)
        with torch.no_grad():
            return module(x, ids, w)

    softcap = fp8_experts(config, gen=gen)
    softcap.gate_softcap, softcap.up_softcap = 30.0, 30.0
    with pytest.raises(NotImplementedError, match="FP8Experts uses a softcapped gate"):
        call(softcap)
    clamp = fp8_experts(config, gen=gen)
    clamp.limit = clamp.swiglu_limit = 7.0
    with pytest.raises(NotImplementedError, match="FP8Experts clamps gate and up to swiglu_limit=7.0"):
        call(clamp)
    if FP4_EXPERTS:
        with pytest.raises(NotImplementedError, match="FP8Experts holds FP4 weights with torch.float32 scales"):
            call(fp8_experts(config, expert_dtype="fp4", scale_fmt="float", gen=gen))
        with pytest.raises(NotImplementedError, match="FP4 weights with activation_scheme='static'"):
            call(fp8_experts(config, expert_dtype="fp4", scale_fmt="ue8m0", activation_scheme="static", gen=gen))
    halves = fp8_experts(config, block_size=None, gen=gen)
    with torch.no_grad():
        halves.gate_up_proj_scale_inv[:, 1] *= 2
    with pytest.raises(NotImplementedError, match="separate gate and up scales"):
        call(halves)
    own_gate = fp8_experts(config, gen=gen)
    type(own_gate)._apply_gate = lambda self, g: g[..., : g.shape[-1] // 2]
    with pytest.raises(NotImplementedError, match="FP8Experts has its own _apply_gate"):
        call(own_gate)
    with pytest.raises(NotImplementedError, match="process_group"):
        moex_hf.fp8_experts_forward(fp8_experts(config, gen=gen), *routed(softcap, 2, gen), "grouped_mm",
                                    process_group=object())


def test_no_backward_through_fp8_experts():
    gen = torch.Generator().manual_seed(4)
    module = fp8_experts(FAMILIES["qwen3_moe"](), gen=gen)  # its f32 scales are parameters that require grad
    module.config._experts_implementation = "moex"
    out = module(*routed(module, 3, gen))
    with pytest.raises(NotImplementedError, match="no backward pass yet"):
        out.sum().backward()


def fp8_model(family, scale_fmt="float", seed=0):
    """A tiny random model and its twin whose experts are FP8Experts holding the model's expert weights quantized
    (16 x 16 blocks, dynamic activations); the first model's experts then hold the dequantized values, what
    transformers' dequantize=True loads from the same codes."""
    model, twin = tiny_model(family, seed=seed), tiny_model(family, seed=seed)
    for (name, experts), (_, twin_experts) in zip(list(model.named_modules()), list(twin.named_modules())):
        if not (hasattr(experts, "gate_up_proj") and hasattr(experts, "is_transposed")):
            continue
        module = fp8_experts(twin_experts.config, block_size=(16, 16), scale_fmt=scale_fmt,
                             weights=(experts.gate_up_proj.detach(), experts.down_proj.detach()))
        twin.set_submodule(name, module)
        with torch.no_grad():
            for proj in ("gate_up_proj", "down_proj"):
                getattr(experts, proj).copy_(dequantize(getattr(module, proj), getattr(module, proj + "_scale_inv"),
                                                        "fp8", (16, 16)).float())
    return model, twin


def torch_fp8_forward(module, x, ids, w, **kwargs):
    """The test's FP8 experts in torch (the float64 reference), registered beside moex's names."""
    return module_reference(module, x, ids, w).to(x.dtype)


@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3"])
def test_fp8_model_generates_through_moex(family, monkeypatch):
    monkeypatch.setitem(fp8.FP8ExpertsInterface._global_mapping, "test_torch_fp8", torch_fp8_forward)
    dequantized, model = fp8_model(family, scale_fmt="ue8m0" if family == "deepseek_v3" else "float")
    assert any(isinstance(m, fp8.FP8Experts) for m in model.modules())
    prompt = torch.tensor([[3, 14, 15, 92, 65, 35]])
    tokens, logits = {}, {}
    with torch.no_grad():
        for impl in ["test_torch_fp8", "moex_grouped_mm", "moex_batched_mm", "moex"]:
            model.set_experts_implementation(impl)
            assert experts_module(model).config._experts_implementation == impl
            tokens[impl] = model.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0).tolist()
            logits[impl] = model(prompt).logits
        plain = dequantized(prompt).logits
    for impl in tokens:
        assert tokens[impl] == tokens["test_torch_fp8"], impl
        torch.testing.assert_close(logits[impl], logits["test_torch_fp8"], rtol=2e-3, atol=2e-3)
    # Against the dequantized weights (no activation quantization): FP8 activation noise, no more.
    err = (logits["moex"] - plain).abs().max().item()
    assert err < 0.1 * plain.abs().max().item(), err


def transformers_fp8_kernels():
    try:
        fp8.load_finegrained_fp8_kernel()
        return True
    except Exception:
        return False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="transformers' FP8 experts need CUDA (Triton kernels)")
@pytest.mark.parametrize("name", ["moex_grouped_mm", "moex_batched_mm", "moex"])
def test_matches_transformers_fp8_on_cuda(name):
    if not transformers_fp8_kernels():
        pytest.skip("transformers' finegrained-fp8 kernel is not loadable here (kernels package / hub)")
    gen = torch.Generator().manual_seed(9)
    config = FAMILIES["qwen3_moe"]()
    config.hidden_size, config.moe_intermediate_size = 256, 128  # DeepSeek's 128 x 128 blocks
    module = fp8_experts(config, block_size=(128, 128), gen=gen).cuda()
    x, ids, w = (t.cuda() for t in routed(module, 17, gen, torch.bfloat16))
    with torch.no_grad():
        module.config._experts_implementation = "grouped_mm"
        want = module(x, ids, w)
        module.config._experts_implementation = name
        try:
            got = module(x, ids, w)
        except NotImplementedError as e:
            pytest.skip(str(e))
    torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("scheme", ["b16_float", "fp4_ue8m0"])
def test_compiled_fp8_experts_have_no_graph_break(scheme):
    gen = torch.Generator().manual_seed(3)
    module = fp8_experts(FAMILIES["qwen3_moe"](), gen=gen, **SCHEMES[scheme])
    x, ids, w = routed(module, 9, gen)
    module.config._experts_implementation = "moex"
    with torch.no_grad():
        explanation = torch._dynamo.explain(module)(x, ids, w)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        compiled = torch.compile(module, fullgraph=True)
        torch.testing.assert_close(compiled(x, ids, w), module(x, ids, w), rtol=1e-5, atol=1e-5)
