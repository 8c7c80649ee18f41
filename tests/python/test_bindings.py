# The bindings against the float64 reference on fresh random data: every backend that can run here, every dtype and
# layout, int32/int64 ids with sentinels, strided views; bad inputs raise Python exceptions with moex's message.
import pytest
import torch

import moex_experts
from reference import experts_reference

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}
LAYOUTS = {
    "stacked_silu": dict(),
    "interleaved_transposed_bias_gelu": dict(is_concatenated=False, is_transposed=True, bias=True, activation="gelu"),
    "ungated_relu": dict(has_gate=False, activation="relu"),
    "gptoss": dict(is_concatenated=False, is_transposed=True, bias=True, gate="gpt_oss", swiglu_limit=1.0),
    "bias_gelu_tanh": dict(bias=True, activation="gelu_pytorch_tanh"),
}
BACKENDS = ["eager", "batched_mm", "grouped_mm", "auto", "deepgemm", "sonicmoe"]


def make_problem(T, H, I, E, k, dtype, device, gen, *, has_gate=True, is_transposed=False, bias=False,
                 ids_dtype=torch.int64, weights_f32=True, **gate):
    N = 2 * I if has_gate else I

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(device)

    x = rnd(T, H)
    up = rnd(E, H, N, scale=H ** -0.5) if is_transposed else rnd(E, N, H, scale=H ** -0.5)
    down = rnd(E, I, H, scale=I ** -0.5) if is_transposed else rnd(E, H, I, scale=I ** -0.5)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]).to(ids_dtype).to(device)
    w = torch.rand(T, k, generator=gen).to(torch.float32 if weights_f32 else dtype).to(device)
    up_bias = rnd(E, N, scale=0.5) if bias else None
    down_bias = rnd(E, H, scale=0.5) if bias else None
    flags = dict(has_gate=has_gate, is_transposed=is_transposed, **gate)
    return (x, ids, w, up, down, up_bias, down_bias), flags


def check(out, ref, dtype, what):
    assert out.shape == ref.shape, what
    assert torch.isfinite(out).all(), what
    err = (out.double().cpu() - ref).abs().max().item()
    rms = ref.pow(2).mean().sqrt().item()
    assert err <= TOL[dtype] * max(rms, 1e-3) * 4, f"{what}: max error {err:.3g} at rms {rms:.3g}"


def run_or_skip(args, flags, backend):
    try:
        return moex_experts.experts(*args, backend=backend, **flags)
    except NotImplementedError as e:  # a refusal of this backend (e.g. deepgemm on f32, anything CUDA-only on cpu)
        pytest.skip(str(e))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_backend_matches_reference(backend, dtype, layout, device, gen):
    spec = dict(LAYOUTS[layout])
    bias = spec.pop("bias", False)
    args, flags = make_problem(13, 64, 40, 6, 3, dtype, device, gen, bias=bias,
                               ids_dtype=torch.int32 if dtype == torch.float16 else torch.int64,
                               weights_f32=dtype != torch.bfloat16, **spec)
    ref = experts_reference(*args, **flags)
    out = run_or_skip(args, flags, backend)
    assert out.dtype == dtype and out.device.type == device
    check(out, ref, dtype, f"{backend} {layout}")


@pytest.mark.parametrize("backend", ["eager", "batched_mm", "grouped_mm"])
def test_sentinels_and_strided_views(backend, device, gen):
    (x, ids, w, up, down, _, _), flags = make_problem(9, 48, 24, 5, 2, torch.float32, device, gen)
    ids[0, 1] = 5  # == E: a sentinel (transformers' EP masking), adds nothing
    ids[3, 0] = 1 << 40
    out = run_or_skip((x, ids, w, up, down, None, None), flags, backend)
    check(out, experts_reference(x, ids, w, up, down, **flags), torch.float32, backend)
    # The C++ contract takes row-major tensors only: a strided view is refused with its message, not copied.
    x_wide = torch.randn(9, 96, generator=gen).to(device)
    with pytest.raises(ValueError, match="hidden_states must be contiguous"):
        moex_experts.experts(x_wide[:, :48], ids, w, up, down, backend=backend)


def test_ep_style_inputs(device, gen):
    # transformers 5.23's AllToAllEP: (N, 1) local ids and weights of ones, one dummy row for an empty rank.
    (x, ids, w, up, down, _, _), flags = make_problem(7, 32, 16, 4, 1, torch.bfloat16, device, gen)
    w = torch.ones(7, 1, dtype=torch.bfloat16, device=device)
    out = moex_experts.experts(x, ids, w, up, down, backend="grouped_mm")
    check(out, experts_reference(x, ids, w, up, down), torch.bfloat16, "(N, 1) ids")
    one = moex_experts.experts(x[:1], ids[:1], w[:1], up, down, backend="grouped_mm")
    assert one.shape == (1, 32)


def test_empty_and_dtype_rule(device, gen):
    (x, ids, w, up, down, _, _), flags = make_problem(4, 32, 16, 4, 2, torch.bfloat16, device, gen)
    empty = moex_experts.experts(x[:0], ids[:0], w[:0], up, down)
    assert empty.shape == (0, 32)
    # f32 activations with bf16 weights (autocast's situation): cast in, the output in the activations' dtype
    out = moex_experts.experts(x.float(), ids, w, up, down, backend="grouped_mm")
    assert out.dtype == torch.float32
    check(out.to(torch.bfloat16), experts_reference(x, ids, w, up, down), torch.bfloat16, "cast in")


def test_bad_inputs_raise_with_the_cpp_message(gen):
    (x, ids, w, up, down, _, _), _ = make_problem(4, 32, 16, 4, 2, torch.float32, "cpu", gen)
    with pytest.raises(ValueError, match=r"expected .* = \(E, 2I, H\)"):
        moex_experts.experts(x, ids, w, up, down[:, :, :8])
    with pytest.raises(ValueError, match="top_k_index"):
        moex_experts.experts(x, ids.float(), w, up, down)
    with pytest.raises(ValueError, match="top_k_weights"):
        moex_experts.experts(x, ids, w[:, :1], up, down)
    with pytest.raises(LookupError, match="not a valid experts implementation"):
        moex_experts.experts(x, ids, w, up, down, backend="no_such_backend")
    with pytest.raises(ValueError, match="unknown activation"):
        moex_experts.experts(x, ids, w, up, down, activation="tanh")
    with pytest.raises(NotImplementedError, match="CUDA only"):
        moex_experts.experts(x, ids, w, up, down, backend="deepgemm")
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="device|cuda|cpu"):
            moex_experts.experts(x.cuda(), ids, w, up, down)


def test_registry_and_a_python_backend(gen):
    names = [b["name"] for b in moex_experts.backends()]
    assert names[:6] == ["eager", "batched_mm", "grouped_mm", "deepgemm", "deepgemm_megamoe", "sonicmoe"]
    assert moex_experts.why_not("grouped_mm", "cpu") is None
    assert "CUDA only" in moex_experts.why_not("sonicmoe", "cpu")
    assert next(b for b in moex_experts.backends() if b["name"] == "deepgemm_megamoe")["load_time_only"]

    calls = []

    def twice_grouped(x, ids, w, up, down, up_bias, down_bias, out, layout, stream):
        calls.append(layout["activation"])
        out.copy_(2 * moex_experts.experts(x, ids, w, up, down, backend="grouped_mm"))

    moex_experts.register_backend("test_twice_mm", twice_grouped, ["cpu"], "2 x grouped_mm")
    (x, ids, w, up, down, _, _), flags = make_problem(5, 32, 16, 4, 2, torch.float32, "cpu", gen)
    out = moex_experts.experts(x, ids, w, up, down, backend="test_twice_mm")
    check(out, 2 * experts_reference(x, ids, w, up, down), torch.float32, "python backend")
    assert calls == ["silu"]
    assert "test_twice_mm" in [b["name"] for b in moex_experts.backends()]


def test_capsule_path_matches_the_exchange_api_path(monkeypatch, gen):
    # torch >= 2.10 hands tensors to the bindings through DLPack's C exchange API; older torch goes through capsules.
    import moex_experts.ops as ops
    from moex_experts import _moex

    (x, ids, w, up, down, up_bias, down_bias), flags = make_problem(6, 32, 16, 4, 2, torch.float32, "cpu", gen,
                                                                    bias=True)
    exchange = moex_experts.experts(x, ids, w, up, down, up_bias, down_bias, backend="grouped_mm", **flags)
    monkeypatch.setattr(ops, "_EXCHANGE", False)
    capsules = moex_experts.experts(x, ids, w, up, down, up_bias, down_bias, backend="grouped_mm", **flags)
    assert torch.equal(exchange, capsules)
    assert moex_experts.experts(x[:0], ids[:0], w[:0], up, down).shape == (0, 32)
    with pytest.raises(ValueError, match="gate_up_proj: numpy.ndarray has no DLPack C exchange API"):
        _moex.experts_tensors("eager", x, ids, w, up.numpy(), down, None, None)
