# Writes a random checkpoint with qwen3-30b-a3b layer shapes and a few layers for the generation benchmarks: bf16,
# per-expert tensors, Qwen3-30B-A3B's config.json spelling, shards + index, and the qwen3_moe fixture's small tokenizer
# (the config keeps vocab 151936). Needs only torch and safetensors, so it runs on the GPU machine as is.
"""Usage:
  python3 scripts/make_bench_checkpoint.py --out /tmp/qwen3-bench [--layers 4] [--device cuda] [--seed 0]
  python3 scripts/make_bench_checkpoint.py --out /tmp/qwen3-tiny --layers 1 --tiny     # small shapes, smoke tests
--device cuda draws the weights on the GPU (faster). A model vocabulary may exceed its tokenizer's, as here: greedy
ids past the tokenizer's have no text.
"""
import argparse
import json
import os
import shutil
import time

import torch
from safetensors.torch import save_file

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEFAULT_TOKENIZER_DIR = os.path.join(REPO, "tests", "data", "models", "qwen3_moe")

QWEN3_30B_A3B = dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                     num_experts_per_tok=8, moe_intermediate_size=768, intermediate_size=6144, vocab_size=151936)
TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
            num_experts_per_tok=2, moe_intermediate_size=32, intermediate_size=128, vocab_size=512)
WEIGHT_STD = 0.02
NORM_STD = 0.1  # RMSNorm weights 1 + noise


def config_json(shapes, layers, eos_id):
    """The spelling of Qwen3-30B-A3B's config.json (written by transformers 4.51), with this checkpoint's sizes."""
    return dict(architectures=["Qwen3MoeForCausalLM"], attention_bias=False, attention_dropout=0.0, bos_token_id=None,
                decoder_sparse_step=1, eos_token_id=eos_id, head_dim=shapes["head_dim"], hidden_act="silu",
                hidden_size=shapes["hidden_size"], initializer_range=0.02,
                intermediate_size=shapes["intermediate_size"], max_position_embeddings=40960,
                max_window_layers=layers, mlp_only_layers=[], model_type="qwen3_moe",
                moe_intermediate_size=shapes["moe_intermediate_size"], norm_topk_prob=True,
                num_attention_heads=shapes["num_attention_heads"], num_experts=shapes["num_experts"],
                num_experts_per_tok=shapes["num_experts_per_tok"], num_hidden_layers=layers,
                num_key_value_heads=shapes["num_key_value_heads"], output_router_logits=False, rms_norm_eps=1e-6,
                rope_scaling=None, rope_theta=1000000.0, router_aux_loss_coef=0.001, sliding_window=None,
                tie_word_embeddings=False, torch_dtype="bfloat16", transformers_version="4.51.0", use_cache=True,
                use_sliding_window=False, vocab_size=shapes["vocab_size"])


def tensor_specs(s, layers):
    """(name, shape, kind) in checkpoint order; kind is "linear" or "norm"."""
    H, D, I = s["hidden_size"], s["head_dim"], s["moe_intermediate_size"]
    q, kv = s["num_attention_heads"] * D, s["num_key_value_heads"] * D
    yield "model.embed_tokens.weight", (s["vocab_size"], H), "linear"
    for layer in range(layers):
        p = f"model.layers.{layer}."
        yield p + "input_layernorm.weight", (H,), "norm"
        yield p + "self_attn.q_proj.weight", (q, H), "linear"
        yield p + "self_attn.k_proj.weight", (kv, H), "linear"
        yield p + "self_attn.v_proj.weight", (kv, H), "linear"
        yield p + "self_attn.o_proj.weight", (H, q), "linear"
        yield p + "self_attn.q_norm.weight", (D,), "norm"
        yield p + "self_attn.k_norm.weight", (D,), "norm"
        yield p + "post_attention_layernorm.weight", (H,), "norm"
        yield p + "mlp.gate.weight", (s["num_experts"], H), "linear"
        for e in range(s["num_experts"]):
            yield p + f"mlp.experts.{e}.gate_proj.weight", (I, H), "linear"
            yield p + f"mlp.experts.{e}.up_proj.weight", (I, H), "linear"
            yield p + f"mlp.experts.{e}.down_proj.weight", (H, I), "linear"
    yield "model.norm.weight", (H,), "norm"
    yield "lm_head.weight", (s["vocab_size"], H), "linear"


def random_tensor(shape, kind, gen, device):
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    x = x.mul_(NORM_STD).add_(1.0) if kind == "norm" else x.mul_(WEIGHT_STD)
    return x.to(torch.bfloat16).cpu()


def write_shards(out, specs, device, seed, shard_bytes):
    """Draws every tensor in order and writes model-0000i-of-0000n.safetensors files of at most shard_bytes each
    (one file without an index when everything fits)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    shards, current, current_bytes, total = [], {}, 0, 0
    tmp_names = []

    def flush():
        nonlocal current, current_bytes
        if current:
            name = f"shard-{len(tmp_names):05d}.tmp"
            save_file(current, os.path.join(out, name), metadata={"format": "pt"})
            tmp_names.append(name)
            shards.append(list(current))
            current, current_bytes = {}, 0

    for name, shape, kind in specs:
        t = random_tensor(shape, kind, gen, device)
        size = t.numel() * t.element_size()
        if current and current_bytes + size > shard_bytes:
            flush()
        current[name] = t
        current_bytes += size
        total += size
    flush()
    if len(tmp_names) == 1:
        os.replace(os.path.join(out, tmp_names[0]), os.path.join(out, "model.safetensors"))
        return 1, total
    weight_map = {}
    for i, (tmp, names) in enumerate(zip(tmp_names, shards)):
        final = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        os.replace(os.path.join(out, tmp), os.path.join(out, final))
        weight_map.update({n: final for n in names})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return len(shards), total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="checkpoint directory (replaced)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--device", default="cpu", help="where the random weights are drawn (cpu, cuda)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true", help="small shapes (hidden 64, 8 experts) for smoke tests")
    ap.add_argument("--shard-size-mb", type=int, default=4096)
    ap.add_argument("--tokenizer-dir", default=DEFAULT_TOKENIZER_DIR, help="where tokenizer.json is copied from")
    args = ap.parse_args()
    if args.layers < 1:
        raise SystemExit("--layers must be >= 1")
    tok_path = os.path.join(args.tokenizer_dir, "tokenizer.json")
    if not os.path.isfile(tok_path):
        raise SystemExit(f"{tok_path}: not found (run tests/data/make_parity_fixtures.py, or pass --tokenizer-dir)")
    eos_id = next(t["id"] for t in json.load(open(tok_path))["added_tokens"] if t["content"] == "<|endoftext|>")
    shapes = TINY if args.tiny else QWEN3_30B_A3B

    start = time.time()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    n_shards, total = write_shards(args.out, tensor_specs(shapes, args.layers), args.device, args.seed,
                                   args.shard_size_mb << 20)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config_json(shapes, args.layers, eos_id), f, indent=2, sort_keys=True)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": eos_id, "pad_token_id": eos_id, "transformers_version": "4.51.0"}, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(args.tokenizer_dir, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(args.out, name))
    print(f"{args.out}: {args.layers} layers, {total / 2**30:.2f} GiB in {n_shards} file(s), "
          f"{time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
