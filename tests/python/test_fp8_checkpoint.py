# Pre-quantized checkpoints as the hub ships them, made by transformers' own FP8 quantizer (FineGrainedFP8's
# Fp8Quantize: F8_E4M3 linears with block `weight_scale_inv` in float32 or ue8m0) and FineGrainedFP8's FP4 experts
# (expert_dtype fp4: int8 e2m1 pairs with ue8m0 scales per 32, written here: transformers quantizes FP4 only on a GPU).
# transformers loads the folder with dequantize=True (its CPU path); moex with dequantize=True generates its greedy
# tokens, and so do moex's resident MXFP4 experts; resident FP8 experts give its logits to a few percent.
import json
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' FP8 quantizer requires it
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, FineGrainedFP8Config  # noqa: E402
from transformers.integrations.finegrained_fp8 import Fp8Quantize  # noqa: E402

import moex_experts  # noqa: E402
from test_transformers import tiny_model  # noqa: E402

BLOCK = 16
PROMPT = [3, 14, 15, 92, 65, 35]
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def quantize_fp4(w):
    """MXFP4 as FineGrainedFP8's FP4 experts hold it: per 32 along K a ue8m0 scale 2^ceil(log2(amax / 6)), codes
    e2m1 round-to-nearest of w / scale, two per int8 byte, the low nibble the even k."""
    n, k = w.shape
    g = w.float().reshape(n, k // 32, 32)
    amax = g.abs().amax(-1, keepdim=True)
    e = torch.where(amax > 0, torch.ceil(torch.log2(amax / 6.0)), torch.zeros_like(amax)).clamp(-127, 127)
    x = g / torch.exp2(e)
    mag = (x.abs().unsqueeze(-1) - E2M1).abs().argmin(-1)  # nearest magnitude (ties to the lower, even code)
    code = (mag | torch.where(x < 0, 8, 0)).to(torch.uint8).reshape(n, k)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).view(torch.int8)
    return packed, (e.squeeze(-1) + 127).to(torch.uint8)


def write_checkpoint(path, family, scale_fmt, expert_dtype="fp8"):
    tiny_model(family).save_pretrained(path)
    config = {"quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK], "activation_scheme": "dynamic",
              "scale_fmt": scale_fmt, "expert_dtype": expert_dtype}
    quantizer = Fp8Quantize(SimpleNamespace(quantization_config=FineGrainedFP8Config(
        weight_block_size=(BLOCK, BLOCK), scale_fmt=scale_fmt)))
    tensors = {}
    for name, w in load_file(path / "model.safetensors").items():
        if not name.endswith("_proj.weight"):  # router, norms, embeddings stay
            tensors[name] = w
        elif expert_dtype == "fp4" and ".experts." in name:
            tensors[name], tensors[name + "_scale_inv"] = quantize_fp4(w)
        else:  # attention, MLP and expert linears through transformers' own quantizer
            tensors.update(quantizer._quantize_one(name, w))
    save_file({k: v.contiguous() for k, v in tensors.items()}, path / "model.safetensors", metadata={"format": "pt"})
    full = json.loads((path / "config.json").read_text())
    full["quantization_config"] = config
    (path / "config.json").write_text(json.dumps(full, indent=2))


def transformers_run(path, scale_fmt):
    """transformers' dequantize=True model: its greedy tokens and the prompt's last logits."""
    config = FineGrainedFP8Config(weight_block_size=(BLOCK, BLOCK), dequantize=True, scale_fmt=scale_fmt)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, quantization_config=config,
                                              device_map="cpu").eval()
    with torch.no_grad():
        tokens = hf.generate(torch.tensor([PROMPT]), max_new_tokens=10, do_sample=False, pad_token_id=0)[0, 6:]
        return tokens.tolist(), hf(torch.tensor([PROMPT])).logits[0, -1]


def moex_tokens(path, dequantize):
    model = moex_experts.Model.from_pretrained(str(path), dtype="float32", dequantize=dequantize)
    return model.generate(PROMPT, max_new_tokens=10, stop_on_eos=False).new_ids


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
@pytest.mark.parametrize("scale_fmt", ["float", "ue8m0"])
def test_fp8_checkpoint_generates_transformers_tokens(tmp_path, family, scale_fmt):
    write_checkpoint(tmp_path, family, scale_fmt)
    want, logits = transformers_run(tmp_path, scale_fmt)
    assert moex_tokens(tmp_path, dequantize=True) == want
    # Resident FP8 experts quantize their activations per token and 128-group (activation_scheme dynamic, what
    # transformers' FP8 kernels do on a GPU), which its dequantized CPU model does not: the logits of these tiny
    # random models (|logit| ~ 1, near-uniform over 128 ids) agree to a few percent, too little for equal argmaxes.
    resident = moex_experts.Model.from_pretrained(str(tmp_path), dtype="float32")
    got = torch.tensor(resident.forward(PROMPT))
    assert (got - logits).abs().max() < 0.08 * logits.abs().max()


@pytest.mark.parametrize("scale_fmt", ["float", "ue8m0"])
def test_fp4_experts_checkpoint_generates_transformers_tokens(tmp_path, scale_fmt):
    write_checkpoint(tmp_path, "qwen3_moe", scale_fmt, expert_dtype="fp4")
    want, _ = transformers_run(tmp_path, scale_fmt)
    assert moex_tokens(tmp_path, dequantize=False) == want  # MXFP4 experts resident, weight-only
    assert moex_tokens(tmp_path, dequantize=True) == want


def test_fp8_checkpoint_errors_name_the_tensor(tmp_path):
    write_checkpoint(tmp_path, "qwen3_moe", "float")
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["model.layers.1.self_attn.o_proj.weight_scale_inv"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(LookupError, match="model.layers.1.self_attn.o_proj.weight_scale_inv` not found"):
        moex_experts.Model.from_pretrained(str(tmp_path))
