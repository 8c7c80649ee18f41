# moex inside transformers: the experts modules of six model families built from their configs match transformers'
# eager with every moex backend registered in ExpertsInterface; whole tiny random models generate the greedy tokens
# of transformers' grouped_mm with moex_grouped_mm, moex_batched_mm and moex; switching at run time; a per-sub-config
# map on a composite model; clear refusals.
import pytest
import torch

transformers = pytest.importorskip("transformers")
import moex_experts.transformers as moex_hf  # noqa: E402  (registers the moex names)
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS  # noqa: E402

SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=2,
             vocab_size=128, max_position_embeddings=256)


def qwen3():
    from transformers import Qwen3MoeConfig
    return Qwen3MoeConfig(**SMALL, moe_intermediate_size=32, intermediate_size=96, num_experts=8,
                          num_experts_per_tok=2, norm_topk_prob=True)


def qwen2():
    from transformers import Qwen2MoeConfig
    return Qwen2MoeConfig(**{k: v for k, v in SMALL.items() if k != "head_dim"}, moe_intermediate_size=32,
                          intermediate_size=96, shared_expert_intermediate_size=48, num_experts=8,
                          num_experts_per_tok=2)


def mixtral():
    from transformers import MixtralConfig
    return MixtralConfig(**SMALL, intermediate_size=48, num_local_experts=4, num_experts_per_tok=2)


def olmoe():
    from transformers import OlmoeConfig
    return OlmoeConfig(**{k: v for k, v in SMALL.items() if k != "head_dim"}, intermediate_size=32, num_experts=8,
                       num_experts_per_tok=2)


def gpt_oss():
    from transformers import GptOssConfig
    return GptOssConfig(**SMALL, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                        layer_types=["sliding_attention", "full_attention"], sliding_window=64, swiglu_limit=1.5)


def deepseek_v3():
    from transformers import DeepseekV3Config
    return DeepseekV3Config(**{k: v for k, v in SMALL.items() if k not in ("head_dim",)}, moe_intermediate_size=32,
                            intermediate_size=96, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                            n_group=2, topk_group=1, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=32,
                            qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)


FAMILIES = {"qwen3_moe": qwen3, "qwen2_moe": qwen2, "mixtral": mixtral, "olmoe": olmoe, "gpt_oss": gpt_oss,
            "deepseek_v3": deepseek_v3}
MOEX_NAMES = [n for n in moex_hf.registered_names() if n not in ("moex_deepgemm_megamoe",)]


def experts_module(model):
    return next(m for m in model.modules() if hasattr(m, "gate_up_proj") and hasattr(m, "is_transposed"))


def tiny_model(family, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    config = FAMILIES[family]()
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    with torch.no_grad():  # random but well-scaled weights (from_config leaves some at zero)
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.5 / p.shape[-1] ** 0.5 if "gate_up" not in name else 0.1)
            elif "bias" in name:
                p.normal_(0, 0.05)
    return model


def routed_inputs(module, T, gen, dtype):
    E = module.gate_up_proj.shape[0]
    H = module.down_proj.shape[2] if module.is_transposed else module.down_proj.shape[1]  # (E, H, I) or (E, I, H)
    x = torch.randn(T, H, generator=gen).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=gen)[:2] for _ in range(T)])
    w = torch.softmax(torch.randn(T, 2, generator=gen), -1)
    return x, ids, w


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("name", MOEX_NAMES)
def test_experts_module_matches_eager(family, name, device):
    module = experts_module(tiny_model(family).to(device))
    gen = torch.Generator().manual_seed(7)
    x, ids, w = (t.to(device) for t in routed_inputs(module, 11, gen, torch.float32))
    with torch.no_grad():
        module.config._experts_implementation = "eager"
        ref = module(x, ids, w)
        module.config._experts_implementation = name
        try:
            out = module(x, ids, w)
        except NotImplementedError as e:  # a CUDA-only backend on the CPU, or a refusal with its reason
            pytest.skip(str(e))
    torch.testing.assert_close(out, ref, rtol=2e-5, atol=2e-5)


@pytest.fixture
def moex_calls(monkeypatch):
    """The backends moex ran, call by call (a spy on the one function every moex_* entry goes through)."""
    calls = []
    real = moex_hf._call

    def spy(backend, *args):
        calls.append(backend)
        return real(backend, *args)

    monkeypatch.setattr(moex_hf, "_call", spy)
    return calls


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3"])
def test_generate_same_greedy_tokens(family, moex_calls, device):
    model = tiny_model(family).to(device)
    prompt = torch.tensor([[3, 14, 15, 92, 65, 35]], device=device)
    outputs = {}
    for impl in ["grouped_mm", "moex_grouped_mm", "moex_batched_mm", "moex"]:
        model.set_experts_implementation(impl)
        moex_calls.clear()
        with torch.no_grad():
            outputs[impl] = model.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0).tolist()
        assert model.get_experts_implementation()[""] == impl
        assert bool(moex_calls) == impl.startswith("moex"), impl  # moex ran exactly when asked for
    for impl, tokens in outputs.items():
        assert tokens == outputs["grouped_mm"], impl


def test_per_sub_config_map_on_a_composite_model(moex_calls):
    vl = pytest.importorskip("transformers.models.qwen3_vl_moe")
    Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration = vl.Qwen3VLMoeConfig, vl.Qwen3VLMoeForConditionalGeneration

    torch.manual_seed(0)
    text = dict(SMALL, moe_intermediate_size=32, intermediate_size=96, num_experts=8, num_experts_per_tok=2,
                rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0})
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
                  spatial_merge_size=2, temporal_patch_size=1, deepstack_visual_indexes=[0])
    model = Qwen3VLMoeForConditionalGeneration(Qwen3VLMoeConfig(text_config=text, vision_config=vision)).eval()
    prompt = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        ref = model.generate(prompt, max_new_tokens=6, do_sample=False).tolist()
        model.set_experts_implementation({"text_config": "moex_grouped_mm", "vision_config": "eager"})
        impl = model.get_experts_implementation()
        assert impl["text_config"] == "moex_grouped_mm" and impl["vision_config"] == "eager"
        assert experts_module(model.model.language_model).config._experts_implementation == "moex_grouped_mm"
        assert model.generate(prompt, max_new_tokens=6, do_sample=False).tolist() == ref
    assert moex_calls and set(moex_calls) == {"grouped_mm"}


def test_from_pretrained_with_a_moex_name(tmp_path):
    model = tiny_model("qwen3_moe")
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, experts_implementation="moex_grouped_mm")
    assert loaded.get_experts_implementation()[""] == "moex_grouped_mm"
    assert experts_module(loaded).config._experts_implementation == "moex_grouped_mm"
    prompt = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        a = loaded.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
        loaded.set_experts_implementation("eager")
        b = loaded.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert a.tolist() == b.tolist()


def test_refusals_name_the_module():
    module = experts_module(tiny_model("qwen3_moe"))
    gen = torch.Generator().manual_seed(1)
    x, ids, w = routed_inputs(module, 4, gen, torch.float32)
    module.config._experts_implementation = "moex_grouped_mm"
    module.has_post_expert_norm = True
    with pytest.raises(NotImplementedError, match="Qwen3MoeExperts applies a norm after each expert"):
        module(x, ids, w)
    module.has_post_expert_norm = False
    type(module)._apply_gate, saved = (lambda self, g: g[..., : g.shape[-1] // 2]), type(module)._apply_gate
    try:
        with pytest.raises(NotImplementedError, match="has its own _apply_gate"):
            module(x, ids, w)
    finally:
        type(module)._apply_gate = saved
    assert "moex" in ALL_EXPERTS_FUNCTIONS and "moex_batched_mm" in ALL_EXPERTS_FUNCTIONS


@pytest.mark.parametrize("family", ["qwen3_moe", "gpt_oss"])
def test_compiled_experts_module_has_no_graph_break(family):
    module = experts_module(tiny_model(family))
    gen = torch.Generator().manual_seed(3)
    x, ids, w = routed_inputs(module, 9, gen, torch.float32)
    module.config._experts_implementation = "moex"
    with torch.no_grad():
        explanation = torch._dynamo.explain(module)(x, ids, w)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        compiled = torch.compile(module, fullgraph=True)
        torch.testing.assert_close(compiled(x, ids, w), module(x, ids, w), rtol=1e-5, atol=1e-5)
