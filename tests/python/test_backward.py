# Training through moex: the gradients of moex::experts (every layout, f32 and bf16, each CPU backend; on CUDA also
# f16, batched_mm and grouped_mm, which share one backward there) against autograd of the float64 torch reference; torch.compile(fullgraph=True) of a forward + backward; a tiny Qwen3-MoE
# whose loss and gradients follow transformers' own grouped_mm for a few optimizer steps; the refusals.
import copy

import pytest
import torch

import moex_experts
from moex_experts import _moex
import moex_experts.ops as ops
from reference import experts_reference
from conftest import cuda_ready
from test_bindings import make_problem

pytest.importorskip("transformers")
import moex_experts.transformers  # noqa: E402,F401
from transformers import AutoModelForCausalLM, Qwen3MoeConfig  # noqa: E402

LAYOUTS = [dict(), dict(is_concatenated=False), dict(has_gate=False, activation="gelu"),
           dict(is_transposed=True, bias=True, activation="gelu_pytorch_tanh"),
           dict(is_concatenated=False, is_transposed=True, activation="relu"),
           dict(gate="gpt_oss", swiglu_alpha=1.702, swiglu_limit=1.0, bias=True),
           dict(has_gate=False, is_transposed=True, bias=True, activation="relu")]
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-2}
needs_cuda = pytest.mark.skipif(not cuda_ready(), reason="needs a CUDA device and a CUDA build of moex")


def reference_grads(args, flags, grad_out):
    """Gradients of sum(grad_out * out) by autograd of the float64 reference."""
    args = [None if t is None else t.detach().cpu() for t in args]
    leaves = [None if t is None or not t.is_floating_point() else t.double().requires_grad_(True) for t in args]
    ref_args = [leaf if leaf is not None else t for leaf, t in zip(leaves, args)]
    out = experts_reference(*ref_args, **flags)
    (out * grad_out.cpu().double()).sum().backward()
    return [None if leaf is None else leaf.grad for leaf in leaves]


def close(got, ref, dtype, what):
    assert got.shape == ref.shape, what
    assert torch.isfinite(got).all(), what
    err = (got.double().cpu() - ref).abs().max().item()
    rms = ref.pow(2).mean().sqrt().item()
    assert err <= TOL[dtype] * max(rms, 1e-3) * 4, f"{what}: max error {err:.3g} at rms {rms:.3g}"


def check_grads(backend, layout, dtype, device, gen):
    spec = dict(LAYOUTS[layout])
    bias = spec.pop("bias", False)
    args, flags = make_problem(11, 24, 16, 5, 3, dtype, device, gen, bias=bias, weights_f32=layout % 2 == 0,
                               **spec)
    ids = args[1]
    ids[0, 1] = 5  # sentinels: no contribution, zero gradient for their weight
    ids[3, 0] = 1000
    leaves = [t if t is None or not t.is_floating_point() else t.detach().requires_grad_(True) for t in args]
    out = moex_experts.experts(*leaves, backend=backend, **flags)
    grad_out = torch.randn(out.shape, generator=gen).to(dtype).to(device)
    out.backward(grad_out)
    want = reference_grads(args, flags, grad_out)
    for name, leaf, ref in zip(("x", "ids", "w", "up", "down", "up_bias", "down_bias"), leaves, want):
        if ref is not None:
            close(leaf.grad, ref, dtype, name)
    assert leaves[2].grad[0, 1] == 0 and leaves[2].grad[3, 0] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
@pytest.mark.parametrize("backend", ["eager", "batched_mm", "grouped_mm", "auto"])
def test_grads_match_float64_autograd(backend, layout, dtype, gen):
    check_grads(backend, layout, dtype, "cpu", gen)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
@pytest.mark.parametrize("backend", ["eager", "batched_mm", "grouped_mm", "auto"])
def test_cuda_grads_match_float64_autograd(backend, layout, dtype, gen):
    check_grads(backend, layout, dtype, "cuda", gen)


@needs_cuda
def test_cuda_backward_is_deterministic_and_follows_the_stream(gen):
    (x, ids, w, up, down, ub, db), flags = make_problem(300, 64, 48, 6, 3, torch.bfloat16, "cuda", gen, bias=True)

    def grads():
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, up, down, ub, db)]
        x_, w_, up_, down_, ub_, db_ = leaves
        out = moex_experts.experts(x_, ids, w_, up_, down_, ub_, db_, backend="grouped_mm", **flags)
        out.backward(torch.ones_like(out))
        return [leaf.grad for leaf in leaves]

    first = grads()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # moex runs on torch's current stream
        second = grads()
    torch.cuda.current_stream().wait_stream(side)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@needs_cuda
def test_cuda_backend_without_backward_says_which_have_one(gen):
    def copy_of_eager(x, ids, w, up, down, ub, db, out, layout, stream):
        out.copy_(moex_experts.experts(x, ids, w, up, down, backend="eager"))

    moex_experts.register_backend("py_no_backward_cuda", copy_of_eager, ["cuda"])
    (x, ids, w, up, down, _, _), _ = make_problem(4, 32, 16, 4, 2, torch.float32, "cuda", gen)
    x.requires_grad_(True)
    out = moex_experts.experts(x, ids, w, up, down, backend="py_no_backward_cuda")
    with pytest.raises(NotImplementedError, match="`py_no_backward_cuda` has no backward pass on cuda yet; backends "
                                                  "with one there: eager, batched_mm, grouped_mm, sonicmoe"):
        out.sum().backward()


def test_backends_with_backward_from_the_registry():
    assert ops.BACKENDS_WITH_BACKWARD == ("eager", "batched_mm", "grouped_mm", "sonicmoe")
    info = {b["name"]: b["has_backward"] for b in moex_experts.backends()}
    assert info["grouped_mm"] == {"cpu": True, "cuda": True}
    assert info["batched_mm"] == {"cpu": True, "cuda": True}
    assert info["eager"] == {"cpu": True, "cuda": True}
    assert info["sonicmoe"] == {"cpu": False, "cuda": True}


def test_a_backend_without_backward_says_which_have_one(gen):
    def copy_of_eager(x, ids, w, up, down, ub, db, out, layout, stream):
        out.copy_(moex_experts.experts(x, ids, w, up, down, backend="eager"))

    moex_experts.register_backend("py_no_backward", copy_of_eager)
    (x, ids, w, up, down, _, _), _ = make_problem(4, 32, 16, 4, 2, torch.float32, "cpu", gen)
    x.requires_grad_(True)
    out = moex_experts.experts(x, ids, w, up, down, backend="py_no_backward")
    with pytest.raises(NotImplementedError, match="`py_no_backward` has no backward pass on cpu yet; backends with "
                                                  "one there: eager, batched_mm, grouped_mm"):
        out.sum().backward()


@needs_cuda
@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_cuda_training_keeps_the_preactivation_and_gives_the_recomputed_bits(layout, gen, monkeypatch):
    """Where grouped_mm's CUDA forward keeps its gate/up pre-activation (moex::experts_saving; bf16 on Hopper), the
    gradients are the bits of the backward that recomputes it (MOEX_SAVE=0), eager and under torch.compile."""
    spec = dict(LAYOUTS[layout])
    bias = spec.pop("bias", False)
    args, flags = make_problem(300, 64, 48, 6, 3, torch.bfloat16, "cuda", gen, bias=bias, **spec)
    x, ids, w, up, down, ub, db = args
    ids[0, 1] = 6
    layout_flags = (flags.get("has_gate", True), flags.get("is_transposed", False),
                    flags.get("is_concatenated", True), flags.get("activation", "silu"), flags.get("gate", "default"),
                    float(flags.get("swiglu_alpha", 1.702)), float(flags.get("swiglu_limit", 7.0)))
    if not moex_experts.ops._saves("grouped_mm", x, ids, w, up, ub, db, layout_flags):
        pytest.skip("grouped_mm keeps nothing for this call here (" + str(_moex.saves_for_backward(
            "grouped_mm", 300, 64, 48, 6, 3, "bfloat16", str(w.dtype)[6:], False, ub is not None, db is not None,
            *layout_flags)) + ")")

    def step(x, w, up, down, ub, db):
        out = moex_experts.experts(x, ids, w, up, down, ub, db, backend="grouped_mm", **flags)
        return (out.float() * out.float()).sum()

    def grads(fn):
        leaves = [None if t is None else t.detach().clone().requires_grad_(True) for t in (x, w, up, down, ub, db)]
        fn(*leaves).backward()
        return [None if leaf is None else leaf.grad for leaf in leaves]

    kept = grads(step)
    monkeypatch.setenv("MOEX_SAVE", "0")
    recomputed = grads(step)
    monkeypatch.delenv("MOEX_SAVE")
    torch._dynamo.reset()
    compiled = grads(torch.compile(step, fullgraph=True))
    for a, b, c in zip(kept, recomputed, compiled):
        if a is not None:
            assert torch.equal(a, b) and torch.equal(a, c)


def test_which_forwards_keep_the_preactivation():
    """saves_for_backward answers from shapes alone and says why not: only grouped_mm and sonicmoe keep it, on CUDA."""
    ask = lambda backend, dtype="bfloat16": _moex.saves_for_backward(backend, 300, 64, 48, 6, 3, dtype, "float32",
                                                                     False, False, False)
    assert "only grouped_mm's pipeline keeps" in ask("batched_mm")
    assert "only grouped_mm's pipeline keeps" in ask("eager")
    if not cuda_ready():
        assert "CUDA" in ask("grouped_mm") or "cuda" in ask("grouped_mm")
    assert ask("grouped_mm", "float32") is not None  # the f32 backward recomputes
    (x, ids, w, up, _, _, _), _ = make_problem(4, 32, 16, 4, 2, torch.bfloat16, "cpu", torch.Generator())
    assert not ops._saves("grouped_mm", x, ids, w, up, None, None, (True, False, True, "silu", "default", 1.702, 7.0))


def test_no_tokens(gen):
    (x, ids, w, up, down, _, _), _ = make_problem(1, 32, 16, 4, 2, torch.float32, "cpu", gen)
    x, ids, w = x[:0], ids[:0], w[:0]
    up.requires_grad_(True)
    moex_experts.experts(x, ids, w, up, down, backend="grouped_mm").sum().backward()
    assert torch.equal(up.grad, torch.zeros_like(up))


def test_compiled_forward_and_backward_without_graph_breaks(gen):
    (x, ids, w, up, down, ub, db), flags = make_problem(9, 32, 16, 4, 2, torch.float32, "cpu", gen, bias=True)

    def step(x, w, up, down, ub, db):
        out = moex_experts.experts(x, ids, w, up, down, ub, db, backend="grouped_mm", **flags)
        return (out * out).sum()

    def grads(fn):
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, up, down, ub, db)]
        fn(*leaves).backward()
        return [leaf.grad for leaf in leaves]

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)  # a graph break would raise
    for got, want in zip(grads(compiled), grads(step)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def tiny_qwen3(implementation):
    torch.manual_seed(0)
    config = Qwen3MoeConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            num_hidden_layers=2, vocab_size=128, max_position_embeddings=64, moe_intermediate_size=32,
                            intermediate_size=96, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # well-scaled random weights (from_config leaves some at zero)
        for p in model.parameters():
            p.normal_(0, 0.05, generator=torch.Generator().manual_seed(p.numel()))
    model.set_experts_implementation(implementation)
    return model


def test_tiny_qwen3_moe_trains_like_transformers_grouped_mm():
    ours, theirs = tiny_qwen3("moex_grouped_mm"), tiny_qwen3("grouped_mm")
    theirs.load_state_dict(copy.deepcopy(ours.state_dict()))
    ids = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(3))
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (ours, theirs)]
    for step in range(4):
        losses = []
        for model, opt in zip((ours, theirs), opts):
            opt.zero_grad()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6, msg=f"loss at step {step}")
        for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
            assert a.grad is not None, name
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-6, msg=f"{name} at step {step}")
        for opt in opts:
            opt.step()
    assert losses[0] < tiny_qwen3("moex_grouped_mm")(input_ids=ids, labels=ids).loss  # it learned something
