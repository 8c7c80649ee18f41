# Pre-quantized FP8 checkpoints as the hub ships them (quantization_config fp8, F8_E4M3 linears with block
# `weight_scale_inv` in float32 or ue8m0): moex's runtime dequantizes them on load and generates the greedy tokens of
# transformers loading the same folder with dequantize=True (the CPU path of FineGrainedFP8Config).
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' FP8 quantizer requires it
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, FineGrainedFP8Config  # noqa: E402

import moex_experts  # noqa: E402
from test_transformers import tiny_model  # noqa: E402

BLOCK = 16
PROMPT = [3, 14, 15, 92, 65, 35]


def quantize_block(w, scale_fmt):
    """FineGrainedFP8's weight quantization: per BLOCK x BLOCK block, scale_inv = amax / 448 (ue8m0: rounded up to
    a power of two), q = e4m3(w / scale_inv)."""
    n, k = w.shape
    blocks = w.float().reshape(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    s = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    if scale_fmt == "ue8m0":
        s = torch.exp2(torch.ceil(torch.log2(s)))
    q = (blocks / s[:, None, :, None]).reshape(n, k).to(torch.float8_e4m3fn)
    return q, (s.to(torch.float8_e8m0fnu) if scale_fmt == "ue8m0" else s.float().contiguous())


def write_fp8_checkpoint(path, family, scale_fmt):
    tiny_model(family).save_pretrained(path)
    tensors = {}
    for name, w in load_file(path / "model.safetensors").items():
        if name.endswith("_proj.weight"):  # attention, MLP and expert linears; router, norms, embeddings stay
            tensors[name], tensors[name + "_scale_inv"] = quantize_block(w, scale_fmt)
        else:
            tensors[name] = w
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK],
                                     "activation_scheme": "dynamic", "scale_fmt": scale_fmt}
    (path / "config.json").write_text(json.dumps(config, indent=2))


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
@pytest.mark.parametrize("scale_fmt", ["float", "ue8m0"])
def test_fp8_checkpoint_generates_transformers_tokens(tmp_path, family, scale_fmt):
    write_fp8_checkpoint(tmp_path, family, scale_fmt)
    config = FineGrainedFP8Config(weight_block_size=(BLOCK, BLOCK), dequantize=True, scale_fmt=scale_fmt)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, quantization_config=config,
                                              device_map="cpu").eval()
    with torch.no_grad():
        want = hf.generate(torch.tensor([PROMPT]), max_new_tokens=10, do_sample=False, pad_token_id=0)[0, 6:]
    model = moex_experts.Model.from_pretrained(str(tmp_path), dtype="float32")
    got = model.generate(PROMPT, max_new_tokens=10, stop_on_eos=False).new_ids
    assert got == want.tolist()


def test_fp8_checkpoint_errors_name_the_tensor(tmp_path):
    write_fp8_checkpoint(tmp_path, "qwen3_moe", "float")
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["model.layers.1.self_attn.o_proj.weight_scale_inv"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(Exception, match="model.layers.1.self_attn.o_proj.weight_scale_inv` not found"):
        moex_experts.Model.from_pretrained(str(tmp_path))
