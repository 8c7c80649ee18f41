# Quantized experts through the bindings (moex_experts.experts with scales): FP8 blocks (float32 and ue8m0 scales),
# per-tensor FP8, dynamic and static activation scales, MXFP4, NVFP4, FP4 codes in every byte container, against the
# float64 reference that dequantizes exactly; bad inputs raise Python exceptions with the C++ message.
import pytest
import torch

import moex_experts
from reference import quantize, quantized_experts_reference

# Quantized activations: the reference rounds each GEMM input to e4m3 from its float64 value, moex from its f32 one,
# so a value within an ulp of an e4m3 rounding midpoint may land one e4m3 step away (tests/test_support.cpp's
# tolerance_for says the same); FP8 quantization error itself is ~3e-2 rms, 15x above this.
TOL = {torch.float32: 2e-3, torch.bfloat16: 2e-2}
WEIGHT_ONLY_TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}  # activations as they are: the dtype's rounding only
SCHEMES = {
    "fp8_b32": dict(quant="fp8", block_size=(32, 32)),
    "fp8_b16_ue8m0": dict(quant="fp8", block_size=(16, 16), scale_fmt="ue8m0"),
    "fp8_per_tensor": dict(quant="fp8", block_size=None),
    "fp8_static": dict(quant="fp8", block_size=(32, 32), activation_scheme="static"),
    "fp8_weight_only": dict(quant="fp8", block_size=(32, 32), activation_scheme="none"),
    "mxfp4": dict(quant="mxfp4"),
    "mxfp4_uint8_scales": dict(quant="mxfp4", scale_view=torch.uint8),
    "mxfp4_int8_codes": dict(quant="mxfp4", code_view=torch.int8),
    "mxfp4_float4_codes": dict(quant="mxfp4", code_view=getattr(torch, "float4_e2m1fn_x2", torch.int8)),
    "nvfp4": dict(quant="nvfp4"),
}
LAYOUTS = {
    "silu": dict(),
    "ungated_gelu": dict(has_gate=False, activation="gelu"),
    "gpt_oss": dict(gate="gpt_oss", swiglu_alpha=1.702, swiglu_limit=1.5),
}
BACKENDS = ["eager", "batched_mm", "grouped_mm", "auto"]


def quantized_problem(T, H, I, E, k, scheme, layout, dtype, device, gen, edit_ids=None):
    """Random float experts quantized by the test's torch quantizer: the args and kwargs of moex_experts.experts on
    `device`, and the float64 reference (after edit_ids(ids), if given, changed the routing)."""
    spec = dict(SCHEMES[scheme])
    code_view, scale_view = spec.pop("code_view", None), spec.pop("scale_view", None)
    quant, block = spec["quant"], spec.get("block_size")
    has_gate = layout.get("has_gate", True)
    N = 2 * I if has_gate else I
    up_f = torch.randn(E, N, H, generator=gen) * H ** -0.5
    down_f = torch.randn(E, H, I, generator=gen) * I ** -0.5
    up, up_s, up_g = quantize(up_f, quant, block, spec.get("scale_fmt", "float"), 2 if has_gate else 1)
    down, down_s, down_g = quantize(down_f, quant, block, spec.get("scale_fmt", "float"))
    if code_view is not None:
        up, down = up.view(code_view), down.view(code_view)
    if scale_view is not None:
        up_s, down_s = up_s.view(scale_view), down_s.view(scale_view)
    x = torch.randn(T, H, generator=gen).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    if edit_ids is not None:
        edit_ids(ids)
    w = torch.rand(T, k, generator=gen)
    q = dict(quant=quant, block_size=block, activation_scheme=spec.get("activation_scheme"))
    if q["activation_scheme"] == "static":
        q["gate_up_activation_scale"] = torch.rand(E, generator=gen) * 0.02 + 0.005
        q["down_activation_scale"] = torch.rand(E, generator=gen) * 0.002 + 0.0005
    on = {key: (v.to(device) if torch.is_tensor(v) else v) for key, v in q.items()}
    tensors = dict(gate_up_scale_inv=up_s, down_scale_inv=down_s, gate_up_global_scale=up_g,
                   down_global_scale=down_g)
    on.update({key: None if v is None else v.to(device) for key, v in tensors.items()})
    ref = quantized_experts_reference(
        x, ids, w, up, down, quant=quant, up_scale_inv=up_s, down_scale_inv=down_s, block_size=block,
        activation_scheme=q["activation_scheme"], up_activation_scale=q.get("gate_up_activation_scale"),
        down_activation_scale=q.get("down_activation_scale"), up_global_scale=up_g, down_global_scale=down_g,
        **layout)
    args = tuple(t.to(device) for t in (x, ids, w, up, down))
    return args, dict(on, **layout), ref


def check(out, ref, dtype, what, weight_only=False):
    assert out.shape == ref.shape, what
    assert torch.isfinite(out).all(), what
    err = (out.double().cpu() - ref).abs()
    rms = ref.pow(2).mean().sqrt().item()
    bound = (WEIGHT_ONLY_TOL if weight_only else TOL)[dtype] * (rms + ref.abs())
    assert (err <= bound).all(), f"{what}: max error {err.max().item():.3g} at rms {rms:.3g}"


def run_or_skip(args, kwargs, backend):
    try:
        return moex_experts.experts(*args, backend=backend, **kwargs)
    except NotImplementedError as e:  # e.g. a backend that takes no quantized weights on this device (CUDA today)
        pytest.skip(str(e))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("T", [1, 37])
def test_quantized_matches_reference(backend, scheme, layout, T, device, gen):
    args, kwargs, ref = quantized_problem(T, 64, 32, 4, 2, scheme, LAYOUTS[layout], torch.float32, device, gen)
    out = run_or_skip(args, kwargs, backend)
    assert out.dtype == torch.float32 and out.device.type == device
    weight_only = kwargs["quant"] != "fp8" or kwargs["activation_scheme"] == "none"
    check(out, ref, torch.float32, f"{backend} {scheme} {layout} T={T}", weight_only)


@pytest.mark.parametrize("scheme", ["fp8_b32", "mxfp4", "nvfp4"])
def test_bf16_activations_and_inferred_format(scheme, device, gen):
    args, kwargs, ref = quantized_problem(20, 64, 32, 4, 2, scheme, {}, torch.bfloat16, device, gen)
    del kwargs["quant"]  # the weights' dtype (and the scales' for FP4) names the format
    out = run_or_skip(args, kwargs, "grouped_mm")
    assert out.dtype == torch.bfloat16
    check(out, ref, torch.bfloat16, scheme)
    # f64 activations become f32 (the weights' dtype cannot be the activations' one)
    x64 = args[0].double()
    out64 = run_or_skip((x64,) + args[1:], kwargs, "grouped_mm")
    assert out64.dtype == torch.float64


def test_sentinels_and_empty(device, gen):
    def sentinels(ids):
        ids[0, 1] = 4  # == E: adds nothing
        ids[3, 0] = 1 << 40

    args, kwargs, ref = quantized_problem(9, 64, 32, 4, 2, "fp8_b32", {}, torch.float32, device, gen, sentinels)
    for backend in ("eager", "batched_mm", "grouped_mm"):
        check(run_or_skip(args, kwargs, backend), ref, torch.float32, backend)
    x, ids, w, up, down = args
    assert moex_experts.experts(x[:0], ids[:0], w[:0], up, down, **kwargs).shape == (0, 64)


def test_bad_quantized_inputs_raise_with_the_cpp_message(gen):
    (x, ids, w, up, down), kw, _ = quantized_problem(4, 64, 32, 4, 2, "fp8_b32", {}, torch.float32, "cpu", gen)

    def call(**changes):
        return moex_experts.experts(x, ids, w, changes.pop("up", up), changes.pop("down", down),
                                    backend="grouped_mm", **dict(kw, **changes))

    with pytest.raises(ValueError, match=r"gate_up_proj_scale_inv has shape \(4, 2, 1\), expected \(4, 2, 2\)"):
        call(gate_up_scale_inv=kw["gate_up_scale_inv"][:, :, :1].contiguous())
    with pytest.raises(ValueError, match="down_proj_scale_inv is missing"):
        call(down_scale_inv=None)
    with pytest.raises(ValueError, match="expected float32 or float8_e8m0fnu"):
        call(gate_up_scale_inv=kw["gate_up_scale_inv"].to(torch.float8_e8m0fnu).view(torch.uint8))
    with pytest.raises(ValueError, match="block 48; use a weight_block_size that divides it"):
        call(block_size=(48, 48))
    with pytest.raises(ValueError, match="down_proj_activation_scale is missing"):
        call(activation_scheme="static", gate_up_activation_scale=torch.ones(4))
    with pytest.raises(ValueError, match="activation_scale is given but activation_scheme is dynamic"):
        call(down_activation_scale=torch.ones(4))
    with pytest.raises(ValueError, match="unknown activation_scheme `per_token`"):
        call(activation_scheme="per_token")
    with pytest.raises(ValueError, match="unknown quant `int4`"):
        call(quant="int4")
    with pytest.raises(ValueError, match="gate_up_proj has dtype float32, expected float8_e4m3fn"):
        call(up=up.float())
    with pytest.raises(ValueError, match="gate_up_proj_scale_inv is given but quant is none"):
        moex_experts.experts(x, ids, w, up.float(), down.float(), quant="none",
                             gate_up_scale_inv=kw["gate_up_scale_inv"])
    with pytest.raises(ValueError, match="has dtype float8_e4m3fn but the problem is not quantized"):
        moex_experts.experts(x, ids, w, up, down.float(), quant="none")

    (x, ids, w, up4, down4), kw4, _ = quantized_problem(4, 64, 32, 4, 2, "mxfp4", {}, torch.float32, "cpu", gen)
    with pytest.raises(ValueError, match="expected float8_e8m0fnu or uint8 \\(mxfp4 scales are ue8m0 bytes\\)"):
        moex_experts.experts(x, ids, w, up4, down4, **dict(kw4, gate_up_scale_inv=kw4["gate_up_scale_inv"].float()))
    with pytest.raises(ValueError, match="activation_scheme dynamic is an FP8 scheme"):
        moex_experts.experts(x, ids, w, up4, down4, **dict(kw4, activation_scheme="dynamic"))
    with pytest.raises(ValueError, match="up_proj: unsupported element type int8"):
        moex_experts.experts(x, ids, w, up4.view(torch.int8)[:, :32], down4, has_gate=False, quant="fp8",
                             gate_up_scale_inv=torch.ones(4, 1, 2), down_scale_inv=torch.ones(4, 2, 1),
                             block_size=(32, 32))
    with pytest.raises(ValueError, match="down_proj_global_scale is missing"):
        moex_experts.experts(x, ids, w, up4, down4, quant="nvfp4",
                             gate_up_scale_inv=torch.ones(4, 64, 4).to(torch.float8_e4m3fn),
                             down_scale_inv=torch.ones(4, 64, 2).to(torch.float8_e4m3fn),
                             gate_up_global_scale=torch.ones(4))


def test_python_backend_takes_quantized_problems(gen):
    (x, ids, w, up, down), kw, ref = quantized_problem(5, 64, 32, 4, 2, "fp8_static", {}, torch.float32, "cpu", gen)
    seen = []

    def through_grouped(x, ids, w, up, down, up_bias, down_bias, out, layout, stream):
        seen.append((layout["quant"], layout["block_n"], layout["activation_scheme"], up.dtype,
                     layout["gate_up_scale_inv"].shape, layout["down_activation_scale"].shape))
        out.copy_(moex_experts.experts(
            x, ids, w, up, down, backend="grouped_mm", quant="fp8", block_size=(layout["block_n"], layout["block_k"]),
            activation_scheme=layout["activation_scheme"], gate_up_scale_inv=layout["gate_up_scale_inv"],
            down_scale_inv=layout["down_scale_inv"], gate_up_activation_scale=layout["gate_up_activation_scale"],
            down_activation_scale=layout["down_activation_scale"]))

    moex_experts.register_backend("test_quant_py", through_grouped, ["cpu"], "grouped_mm from Python", ["fp8_block"])
    info = next(b for b in moex_experts.backends() if b["name"] == "test_quant_py")
    assert info["quant_formats"] == {"cpu": ["fp8_block"], "cuda": ["fp8_block"]}
    check(moex_experts.experts(x, ids, w, up, down, backend="test_quant_py", **kw), ref, torch.float32, "python")
    assert seen == [("fp8_block", 32, "static", torch.float8_e4m3fn, (4, 2, 2), (4,))]
    moex_experts.register_backend("test_plain_py", through_grouped, ["cpu"])
    with pytest.raises(NotImplementedError, match="does not take quantized \\(fp8_block\\) experts on cpu"):
        moex_experts.experts(x, ids, w, up, down, backend="test_plain_py", **kw)


def test_registry_lists_quant_formats():
    info = {b["name"]: b["quant_formats"] for b in moex_experts.backends()}
    for name in ("eager", "batched_mm", "grouped_mm"):
        assert info[name]["cpu"] == ["fp8_block", "mxfp4", "nvfp4"], name
    assert set(info["sonicmoe"]) == {"cpu", "cuda"}


def test_no_backward_through_quantized(gen):
    (x, ids, w, up, down), kw, _ = quantized_problem(4, 64, 32, 4, 2, "fp8_b32", {}, torch.float32, "cpu", gen)
    x.requires_grad_(True)
    out = moex_experts.experts(x, ids, w, up, down, **kw)  # through the custom op
    with pytest.raises(NotImplementedError, match="no backward pass yet"):
        out.sum().backward()


def test_quantized_through_capsules(monkeypatch, gen):
    import moex_experts.ops as ops

    default = ops._EXCHANGE
    for scheme in ("fp8_static", "nvfp4"):
        args, kwargs, ref = quantized_problem(7, 64, 32, 4, 2, scheme, {}, torch.float32, "cpu", gen)
        exchange = moex_experts.experts(*args, backend="grouped_mm", **kwargs)
        monkeypatch.setattr(ops, "_EXCHANGE", False)
        assert torch.equal(moex_experts.experts(*args, backend="grouped_mm", **kwargs), exchange), scheme
        monkeypatch.setattr(ops, "_EXCHANGE", default)
